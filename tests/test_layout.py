"""The layout rules of CONTRIBUTING.md that a machine can check: no file over 400 lines, the library never
imports the recipes or the CLI, and one layer order of the library's packages (LAYERS below) with no
import cycle and no import in a function body except optional dependencies."""

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def _git_files(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _tracked(pattern: str) -> list[Path]:
    return [ROOT / line for line in _git_files(pattern) if (ROOT / line).is_file()]


def test_no_python_file_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _tracked("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these files (one concept a file, at most {MAX_LINES} lines): {long}"


def test_the_library_imports_neither_recipes_nor_the_cli():
    bad = []
    for path in _tracked("ftune/*.py"):
        if "/cli/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [
                f"{path.relative_to(ROOT)}: {n}"
                for n in names
                if n.split(".")[:2] in (["ftune", "cli"], ["recipes"])
                or n.startswith(("recipes", "ftune.cli", "ftune._recipes"))
            ]
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# One layer order.
#
# What is counted: every `import x` / `from x import y` statement in every module under ftune/: at
# module level, under `if TYPE_CHECKING:` and inside function bodies alike. A statement names the
# deepest ftune module it spells: `from ftune.models import _hf_keys` names ftune.models._hf_keys,
# `from ftune.models import CONVERTERS` names ftune.models (its __init__.py), `import ftune.models` names
# ftune.models. The parent packages Python initialises on the way (ftune/models/__init__.py before
# ftune.models._hf_keys) are not counted, so a package's __init__ re-exporting its own submodules is no
# cycle; a submodule importing a name from its own package's __init__ is one. Dynamic imports
# (`importlib.import_module` of a config's `_component_`, the CLI's subcommand table) are not statements
# and are not counted.
#
# A module's package is `ftune.<first part>` (ftune.models.gemma3._convert is in ftune.models); a module
# directly under ftune/ would be a package of its own, and `ftune` is ftune/__init__.py.
#
# LAYERS lists the packages lowest first. A module imports only its own package and packages of lower
# layers; packages of one layer never import each other. CONTRIBUTING.md ("The layers") shows this
# order (test_contributing_states_the_layer_order keeps it equal) and says why it is this one.
LAYERS: list[tuple[str, ...]] = [
    ("ftune",),  # the version
    ("ftune.registry",),  # recipes, their configs, tags, the feature matrix and its page (torch-free)
    ("ftune.config",),  # YAML, overrides, instantiate, trust, the Settings machinery (torch-free)
    (
        "ftune.settings",
        "ftune.rewards",
        "ftune.agents",
    ),  # settings classes; RL rewards; environments (torch-free)
    ("ftune.runtime",),  # device, distributed, seed, hardware; torch's and torchao's log filters
    ("ftune.data",),  # messages, transforms, collate, packing, loader
    ("ftune.tokenizers",),
    ("ftune.modules",),  # attention, rope, norms, the decoder
    ("ftune.models",),  # families: builders, converters, HF config -> model
    ("ftune.peft",),
    ("ftune.checkpointing",),  # formats in and out (HF, Meta, native, quantized, GGUF, DCP), model build
    # torchao; records to examples; decoding; the memory plan (a model on the meta device, arithmetic)
    ("ftune.quantization", "ftune.datasets", "ftune.generation", "ftune.planning"),
    ("ftune.training",),  # reads generation: GRPO samples its rollouts on the KV cache
    ("ftune.evaluation",),
    ("ftune.torchtune",),  # the torchtune config converter
    ("ftune.cli",),  # the command line
]

# Imports allowed inside a function body. Optional dependencies (pyproject's extras) are imported where
# they are used, so a user without them runs everything else: name -> extra.
OPTIONAL: dict[str, str] = {
    "lm_eval": "lm-eval",
    "math_verify": "agents",
    "reasoning_gym": "agents",
    "verifiers.v1": "agents",
    "textarena": "agents",
    "ftune.evaluation.lm_eval_model": "lm-eval (the bridge subclasses lm_eval's LM at import)",
    "matplotlib": "plot",
    "torch.utils.tensorboard": "tensorboard",
    "wandb": "wandb",
}
# Hard dependencies imported late in one module, each for a measured start-up cost (2 cores, warm cache):
# (module, imported name) -> why.
LATE: dict[tuple[str, str], str] = {
    ("ftune.config.image_checks", "pyarrow.parquet"): (
        "~0.6 s; only checking the images of a local parquet file before a run needs it, and "
        "`ftune run` imports ftune.config.image_checks for every config"
    ),
    ("ftune.checkpointing.quantized", "torchao.quantization"): (
        "~1.0 s; only reading a quantized checkpoint needs torchao's tensor classes registered, and "
        "every `ftune validate` and non-quantized run imports ftune.checkpointing"
    ),
    ("ftune.checkpointing.recipe_state", "torchao.optim"): (
        "~1.0 s; only loading an optimizer state of torchao's low-precision optimizers needs it"
    ),
    ("ftune.datasets.source", "datasets"): (
        "~0.6 s; only reading records from files or the hub needs it, the demo datasets do not"
    ),
    ("ftune.datasets.source", "datasets.config"): "same as datasets",
    ("ftune.datasets.source", "huggingface_hub.constants"): "switched offline together with datasets.config",
    ("ftune.cli.run", "torch.distributed"): "`ftune run` reports config errors before torch is imported",
    ("ftune.cli.run", "torch.distributed.elastic.multiprocessing.errors"): "same",
    ("ftune.cli.run", "torch.distributed.run"): "same",
    ("ftune.cli.run", "ftune.training.step.optimizer"): (
        "~4.7 s (torch and ftune.training); only a torchrun launch checks what FSDP2 can step, after every "
        "check that needs the config alone"
    ),
    ("ftune.cli.validate", "ftune.training.step.optimizer"): (
        "same; only a distributed recipe's config, after its settings passed"
    ),
    ("ftune.cli.export", "ftune.checkpointing.gguf.export"): (
        "~5-9 s at load 5-8 on 2 cores (torch, gguf, the checkpointers); `ftune export` checks every argument "
        "(type, paths, folder listings) first, so a refusal takes ~0.3 s"
    ),
    ("ftune.cli.export", "ftune.checkpointing.gguf.export_lora"): (
        "the same imports as ftune.checkpointing.gguf.export, for `--adapter-only`"
    ),
    ("ftune.cli.export", "ftune.checkpointing.gguf.imatrix"): "the same, for `export imatrix`",
    ("ftune.cli.export", "ftune.checkpointing.gguf.imatrix_collect"): "the same, for `export imatrix`",
    ("ftune.cli.validate", "ftune.cli.lora_targets"): (
        "~2 s (torch, the model builders); only a config with a peft section has LoRA targets to match "
        "against the model built on the meta device, and a settings problem is reported before it"
    ),
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted((ROOT / "ftune").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[str, bool, int]]:
    """(what the statement names, inside a function body, line) for every import statement of a module.

    An ftune name is resolved to the deepest ftune module it spells; any other name is kept as written.
    """
    tree = ast.parse(path.read_text())
    in_function = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for sub in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for target in dict.fromkeys(names):
            if target.split(".")[0] == "ftune":
                while target not in mods:
                    target = target.rpartition(".")[0]
            found.append((target, id(node) in in_function, node.lineno))
    return found


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    mods = _modules()
    edges = {m: {t for t, _, _ in _imports(m, p, mods) if t in mods and t != m} for m, p in mods.items()}
    return mods, edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_one_layer():
    mods, _ = _graph()
    listed = [p for layer in LAYERS for p in layer]
    assert len(listed) == len(set(listed)), "a package is listed twice in LAYERS"
    packages = {_package(m) for m in mods}
    assert packages == set(listed), (
        f"place these packages in LAYERS: {sorted(packages - set(listed))}; "
        f"remove these, they no longer exist: {sorted(set(listed) - packages)}"
    )


def test_imports_go_down_the_layer_order_only():
    """Module-level, TYPE_CHECKING and function-body imports alike: own package or a lower layer."""
    mods = _modules()
    layer = {p: i for i, names in enumerate(LAYERS) for p in names}
    bad = []
    for m, path in mods.items():
        for target, _, line in _imports(m, path, mods):
            if target in mods and _package(target) != _package(m):
                if layer[_package(target)] >= layer[_package(m)]:
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {m} imports {target}")
    assert not bad, (
        "imports against the layer order (move the code to the layer it belongs to):\n" + "\n".join(bad)
    )


def test_no_import_cycle_between_modules_or_packages():
    """No cycle among ftune modules (as counted at the top of this section), nor among packages."""
    _, edges = _graph()
    assert not _cycles(edges), f"module import cycles: {_cycles(edges)}"
    packages: dict[str, set[str]] = {}
    for a, targets in edges.items():
        packages.setdefault(_package(a), set()).update(
            _package(b) for b in targets if _package(b) != _package(a)
        )
    assert not _cycles(packages), f"package import cycles: {_cycles(packages)}"


def test_function_bodies_import_only_optional_dependencies():
    mods = _modules()
    bad = []
    for m, path in mods.items():
        for target, in_function, line in _imports(m, path, mods):
            if not in_function or (m, target) in LATE:
                continue
            if not any(target == o or target.startswith(o + ".") for o in OPTIONAL):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert not bad, (
        "imports inside function bodies (import at module level; if that makes a cycle, the code is in "
        "the wrong layer; optional dependencies go in OPTIONAL, measured start-up costs in LATE):\n"
        + "\n".join(bad)
    )


def test_late_imports_are_still_late():
    """Every LATE entry still exists: a stale exception would hide the next one."""
    mods = _modules()
    found = {(m, t) for m, p in mods.items() for t, inside, _ in _imports(m, p, mods) if inside}
    assert set(LATE) <= found, f"remove from LATE, no longer imported in a function body: {set(LATE) - found}"


def test_the_layout_checks_catch_what_they_should(tmp_path):
    """The cycle finder and the import reader on small cases (the tests above cannot fail otherwise)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    mods = {"ftune.models": ROOT, "ftune.models._hf_keys": ROOT, "ftune.models.gemma3": ROOT}
    src = tmp_path / "probe.py"
    src.write_text(
        "from ftune.models import _hf_keys, CONVERTERS\nfrom . import gemma3\n"
        "def f():\n    import wandb\n    from .gemma3 import x\n"
    )
    assert _imports("ftune.models.probe", src, mods) == [
        ("ftune.models._hf_keys", False, 1),
        ("ftune.models", False, 1),
        ("ftune.models.gemma3", False, 2),
        ("wandb", True, 4),
        ("ftune.models.gemma3", True, 5),
    ]


def test_contributing_states_the_layer_order():
    """CONTRIBUTING.md shows LAYERS as they are, one layer a line, lowest first."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("<!-- layer order:", 1)[1].split("<!-- end layer order -->", 1)[0]
    shown = block.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert shown == [", ".join(layer) for layer in LAYERS]


def test_contributing_names_every_top_level_folder():
    """CONTRIBUTING.md's "The layout" lists every tracked folder at the top of the checkout (hidden ones
    are tools' settings), and no other."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## The layout", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- `([^`/]+)/`", section, flags=re.M))
    tracked = {line.split("/", 1)[0] for line in _git_files() if "/" in line and not line.startswith(".")}
    assert listed == tracked, (
        f"folders not listed: {sorted(tracked - listed)}; listed, not tracked: {sorted(listed - tracked)}"
    )
