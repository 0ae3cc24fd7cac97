"""Trust by allowlist (issue 37): the bypasses that ran a shell command or deleted a file are refused
before the module they name is imported, and nothing in the trusted packages outside the allowlist's
kinds resolves.

Each bypass runs `ftune validate` and `ftune run` in a fresh interpreter with an audit hook that
records every process start, exec and file removal: a refusal must come with none of them, and
without importing the module the bypass names.
"""

import json
import subprocess
import sys
import textwrap
import types
import warnings

import pytest
import torch
import torchao.optim  # noqa: F401 - its classes are walked too
import torchao.quantization  # noqa: F401

import ftune.checkpointing  # noqa: F401 - loads the packages the walk covers
import ftune.datasets  # noqa: F401
import ftune.models  # noqa: F401
import ftune.rewards  # noqa: F401
import ftune.training  # noqa: F401
from ftune.config import ConfigError, load_config
from ftune.config.allowlist import AREAS, KINDS, describe, in_area, kind_of
from ftune.config.instantiate import resolve
from ftune.config.trust import UntrustedComponentError, _unwrap

# Run in a fresh interpreter: the audit events of the whole command, and whether `watched` got imported.
PROBE = textwrap.dedent(
    """
    import json, sys
    events = []
    WATCH = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.remove",
             "os.unlink", "os.rmdir", "shutil.rmtree", "os.fork")
    def hook(event, args):
        if event in WATCH:
            events.append(event)
    sys.addaudithook(hook)
    from ftune.cli.main import main
    argv, watched = json.loads(sys.argv[1]), sys.argv[2]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    print(json.dumps({"code": code, "events": events, "imported": watched in sys.modules}))
    """
)


def _probe(argv: list[str], watched: str, cwd) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv), watched],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


GRPO = "smollm2/135M_lora_grpo"


@pytest.mark.parametrize(
    "overrides",
    [
        # a GRPO reward and a metric logger that are a `subprocess.Popen(shell=True)` inside torch
        ["rewards.rewards.correct={_component_: torch.utils.collect_env.run, command: 'touch {marker}'}"],
        ["metric_logger={_component_: torch.utils.collect_env.run, command: 'touch {marker}'}"],
    ],
    ids=["reward", "metric_logger"],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_subprocess_helper_inside_torch_is_refused_before_its_import(overrides, command, tmp_path):
    marker = tmp_path / "ran"
    overrides = [o.replace("{marker}", str(marker)) for o in overrides]
    argv = ["validate", GRPO, *overrides] if command == "validate" else ["run", "lora_grpo_single_device"]
    if command == "run":
        argv += ["--config", GRPO, *overrides]
    got = _probe(argv, "torch.utils.collect_env", tmp_path)
    assert got["code"] == 1 and not marker.exists(), got
    assert got["events"] == [] and got["imported"] is False, got
    assert "refusing to import 'torch.utils.collect_env.run'" in got["stderr"]
    assert "outside the parts of torch a config may call without --trust" in got["stderr"]
    assert "--trust torch.utils.collect_env" in got["stderr"] and "Traceback" not in got["stderr"]


def test_a_config_that_grants_itself_trust_is_refused_with_the_flag_to_add(tmp_path):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.yaml"
    text = load_config("smollm2/135M_lora").to_yaml()
    config.write_text(f"trusted_modules: [posix]\n{text}")
    for argv in (
        ["validate", str(config), f"model={{_component_: posix.system, command: 'touch {marker}'}}"],
        ["validate", "smollm2/135M_lora", "trusted_modules=[posix]", "model=posix.system"],
        ["run", "lora_finetune_single_device", "--config", str(config), "model=posix.system"],
    ):
        got = _probe(argv, "posix", tmp_path)
        assert got["code"] == 1 and got["events"] == [] and not marker.exists(), (argv, got)
        assert "a config cannot grant itself trust" in got["stderr"] and "`--trust posix`" in got["stderr"]


def test_a_module_file_beside_a_config_trusts_that_file_not_a_module_of_its_name(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("mine")
    (tmp_path / "posix.py").write_text("")  # empty: `posix` still imports the built-in module
    config = tmp_path / "cfg.yaml"
    config.write_text(load_config("smollm2/135M_lora").to_yaml())
    for override in (
        f"model={{_component_: posix.remove, path: {victim}}}",
        "model={_component_: posix.execve, path: /bin/sh, argv: [sh], env: {}}",
    ):
        got = _probe(["validate", str(config), override], "nothing", tmp_path)
        assert got["code"] == 1 and got["events"] == [] and victim.read_text() == "mine", got
        assert "refusing" in got["stderr"] and "posix" in got["stderr"]
    # a real module file there is trusted as that file
    (tmp_path / "my_parts.py").write_text(
        "import torch\n\ndef tiny(**kwargs):\n    return torch.nn.Linear(2, 2)\n"
    )
    (tmp_path / "own.yaml").write_text("thing:\n  _component_: my_parts.tiny\n")
    sys.path.insert(0, str(tmp_path))
    try:
        thing = load_config(tmp_path / "own.yaml").thing  # loading the config trusts its folder's files
        assert resolve(thing["_component_"]).__module__ == "my_parts"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_parts", None)


def _public_callables() -> list[tuple[str, object]]:
    """Every public callable one attribute away from a loaded public module inside the allowlist's areas."""
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, module in sorted(sys.modules.items()):
            if not isinstance(module, types.ModuleType) or not in_area(name):
                continue
            for attr, value in list(vars(module).items()):
                if attr.startswith("_") or isinstance(value, types.ModuleType) or not callable(value):
                    continue
                found.append((f"{name}.{attr}", value))
    return found


def test_every_public_callable_reachable_in_the_allowlist_is_of_an_allowed_kind():
    candidates = _public_callables()
    assert len(candidates) > 2000, len(candidates)
    resolved, refused = [], []
    for path, _ in candidates:
        try:
            obj = resolve(path)
        except UntrustedComponentError:
            refused.append(path)
            continue
        except ImportError:
            continue
        if isinstance(obj, types.ModuleType):
            continue  # a submodule of the same name (ftune.generation.generate): not callable
        resolved.append(path)
        assert kind_of(_unwrap(obj)) is not None, f"{path} resolved but is of no allowed kind"
    # The walk reaches what the allowlist must refuse (writers, process helpers, re-exports) ...
    assert "ftune.checkpointing.write_json" in refused and "ftune.checkpointing.prune" in refused
    assert any(p.startswith("torch.nn.") and p.endswith(".warn") for p in refused)
    # ... and what configs name.
    for path in (
        "torch.optim.AdamW",
        "torch.nn.functional.cross_entropy",
        "ftune.models.smollm2.smollm2_135m",
    ):
        assert path in resolved


def test_the_kinds_are_what_they_say():
    assert kind_of(torch.optim.AdamW) == "optimizer"
    assert kind_of(torch.optim.lr_scheduler.CosineAnnealingLR) == "LR scheduler"
    assert (
        kind_of(torch.nn.CrossEntropyLoss) == kind_of(torch.nn.functional.cross_entropy) == "module or loss"
    )
    assert kind_of(torchao.quantization.Int8WeightOnlyConfig) == "quantization config"
    for obj in (
        torch.load,
        torch.save,
        torch.tanh,
        print,
        subprocess.run,
        torch.nn.functional.has_torch_function,
    ):
        assert kind_of(obj) is None, obj
    assert [k.name for k in KINDS] == [
        "optimizer",
        "LR scheduler",
        "module or loss",
        "quantization config",
        "ftune component",
    ]
    assert not in_area("torch.utils.collect_env.run") and not in_area("ftune.config.load_config")
    assert in_area("torch.optim.SGD") and all(in_area(a) for a in AREAS)


def test_the_docs_list_the_allowlist_as_generated():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    begin, end = "<!-- generated: ftune.config.allowlist.describe() -->\n", "\n<!-- /generated -->"
    assert begin in text and end in text, "docs/config.md lost the allowlist's markers"
    shown = text.split(begin)[1].split(end)[0]
    assert shown == describe(), (
        "docs/config.md: paste ftune.config.allowlist.describe()'s output between the markers"
    )


def test_validate_refuses_what_run_refuses():
    overrides = ["metric_logger={_component_: torch.utils.collect_env.run, command: 'true'}"]
    with pytest.raises(ConfigError, match="outside the parts of torch"):
        load_config(GRPO, overrides)


def test_of_ftune_agents_only_tool_format_is_a_component_function():
    from ftune.agents import sandbox, tool_formats

    # tool_format builds a family's parser; the sandbox's run_python runs code in a process: a config
    # may name the first, never the second (nor any other function of ftune.agents).
    assert kind_of(tool_formats.tool_format) == "ftune component"
    assert kind_of(sandbox.run_python) is None and kind_of(sandbox.runs_as_nobody) is None
