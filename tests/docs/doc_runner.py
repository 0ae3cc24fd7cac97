"""Runs the docs' blocks in a workspace of tiny stand-ins and tallies what happened to each command.

The workspace has HOME and FTUNE_HOME of its own: `$FTUNE_HOME/models/SmolLM2-135M-Instruct` is the
tiny seeded checkpoint of tests/assets, and the output folders the docs name (`output/...`,
`runs/...`) are made by running the recipes for one step on it. A bash block runs in real bash,
with `ftune` on PATH replaced by a recorder; each recorded `ftune` command is then run in this
process: `ls`, `cp`, `cat`, `validate`, `plot`, `convert` and `--help` for real, `ftune run`
validated (config, recipe settings and overrides) and, once per recipe and config, run for one
step on the tiny model (a distributed recipe as a world of one, since the recipe is the same file).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from doc_blocks import NEEDS, Block, script

from ftune import registry
from ftune.cli.main import main as ftune_main
from ftune.cli.run import split_args
from ftune.cli.validate import validate
from ftune.config import load_config
from ftune.config.run_config import default_config, parse_recipe_args

GGUF = "SmolLM2-135M-Instruct.Q8_0.gguf"  # a tiny llama GGUF under the name docs/checkpoints.md uses
# `ftune` and marked commands are bash functions that append one line a call to $FTUNE_DOCS_LOG:
# mark, working directory, argv, each field ended by \x1f (no process started, so the blocks run fast).
PRELUDE = r"""set -eo pipefail
__ftune_docs_record() { { printf '%s\x1f' "$1" "$PWD" "${@:2}"; printf '\n'; } >> "$FTUNE_DOCS_LOG"; }
__ftune_docs_marked() { __ftune_docs_record "$@"; }
ftune() { __ftune_docs_record "" ftune "$@"; }
"""


REPORTS: list[str] = []  # summaries of this session's docs runs, printed at the end (conftest.py)


class Workspace:
    def __init__(self, root: Path, tiny_sizes: dict, tiny_overrides) -> None:
        self.root = root
        self.home = root / "home"
        self.ftune_home = self.home / ".cache" / "ftune"
        self.model = self.ftune_home / "models" / "SmolLM2-135M-Instruct"
        self.data = self.ftune_home / "data" / "demo"
        self.shared = root / "shared"  # output/ and runs/ of every block
        self.tiny_sizes, self.tiny_overrides = tiny_sizes, tiny_overrides
        self.tally: Counter[str] = Counter()
        self.ran: set[tuple[str, str]] = set()
        self.timings: list[tuple[float, str]] = []

    @property
    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return {
            **{k: v for k, v in os.environ.items() if k not in ("FTUNE_DEBUG", "RANK", "WORLD_SIZE")},
            "HOME": str(self.home),
            "FTUNE_HOME": str(self.ftune_home),
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "HF_TOKEN": "hf_docs_test_token",
            # matplotlib's font cache stays where it is (under the real HOME it is built already)
            "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR", str(Path.home() / ".cache" / "matplotlib")),
        }

    def setup(self) -> None:
        for name in ("output", "runs"):
            (self.shared / name).mkdir(parents=True)

    def block_dir(self, block: Block, index: int) -> Path:
        folder = self.root / "blocks" / f"{index:03d}_{Path(block.file).stem}"
        folder.mkdir(parents=True)
        for name in ("output", "runs", GGUF):
            (folder / name).symlink_to(self.shared / name)
        return folder

    # --- bash ---------------------------------------------------------------------------------------

    def run_bash(self, block: Block, index: int) -> None:
        cwd = self.block_dir(block, index)
        log = cwd / "commands.jsonl"
        body = script(block).removeprefix("set -eo pipefail\n")
        done = subprocess.run(
            ["bash", "-c", PRELUDE + body],
            cwd=cwd,
            env={**self.env, "FTUNE_DOCS_LOG": str(log)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{block.where}: the block failed in bash:\n{done.stdout}{done.stderr}"
        records = [line.split("\x1f")[:-1] for line in log.read_text().splitlines()] if log.exists() else []
        for mark, where, *argv in records:
            self.command(block, argv, mark or None, Path(where))

    def command(self, block: Block, argv: list[str], mark: str | None, cwd: Path) -> None:
        start = time.perf_counter()
        self._command(block, argv, mark, cwd)
        self.timings.append((time.perf_counter() - start, f"{block.where}: {shlex.join(argv)[:90]}"))

    def _command(self, block: Block, argv: list[str], mark: str | None, cwd: Path) -> None:
        where = f"{block.where}: {shlex.join(argv)}"
        if argv[:1] == ["srun"]:
            argv = argv[1:]
        if argv[:1] != ["ftune"]:
            assert mark, f"{where}: only `ftune` commands are recorded unmarked"
            self.tally[f"not run (needs {mark})"] += 1
            return
        sub = argv[1] if len(argv) > 1 else "--help"
        if sub == "run":
            self.ftune_run(where, argv[2:], mark, cwd)
        elif mark:
            self.tally[f"not run (needs {mark})"] += 1
        else:
            assert sub != "download", f"{where}: downloads need `# needs: network` in the doc"
            code, out = self.in_process(argv[1:], cwd)
            assert code == 0, f"{where}: exit code {code}\n{out}"
            self.tally[f"ran: ftune {sub}"] += 1

    def in_process(self, args: list[str], cwd: Path) -> tuple[int, str]:
        stream = io.StringIO()
        with chdir_env(cwd, self.env), contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            try:
                code = ftune_main(args)
            except SystemExit as e:
                code = int(e.code or 0)
        return code, stream.getvalue()

    # --- ftune run ----------------------------------------------------------------------------------

    def ftune_run(self, where: str, args: list[str], mark: str | None, cwd: Path) -> None:
        launcher, name, rest = split_args(args)
        assert name is not None, f"{where}: no recipe"
        recipe = registry.RECIPES.get(name)
        path = (cwd / name) if recipe is None else None
        assert recipe is not None or (name.endswith(".py") and path.is_file()), f"{where}: no recipe {name!r}"
        if launcher:
            from torch.distributed.run import get_args_parser

            get_args_parser().parse_args([*launcher, "recipe.py"])  # torchrun accepts the options
            assert recipe is None or recipe.distributed, f"{where}: {name} runs on one device only"
        config, overrides = parse_recipe_args(rest)  # as `ftune run` reads them
        config = config if config is not None else default_config(name)
        assert config is not None, f"{where}: a copied recipe needs --config"
        recipe_name = recipe.name if recipe else Path(name).stem
        with chdir_env(cwd, self.env):
            validate(config, overrides, recipe_name if recipe_name in registry.RECIPES else None, files=False)
        # A different dataset builder is a different run (docs/data.md), and so is a model sized by its
        # checkpoint's config.json (docs/checkpoints.md); other overrides are not.
        key = (recipe_name, config, *[o for o in overrides if o.startswith("dataset._component_=")])
        key += ("~model",) if sized_by_checkpoint(overrides) else ()
        if recipe is None:  # `ftune cp` copies: one run shows that a copy runs on its own
            key = ("a copied recipe",)
        if mark:
            self.tally[f"validated, not run (needs {mark})"] += 1
        elif key in self.ran:
            self.tally["validated (the same recipe and config already ran)"] += 1
        elif reason := self.not_runnable(config, overrides, cwd):
            self.tally[f"validated, not run ({reason})"] += 1
        else:
            self.run_tiny(recipe_name, path, config, overrides, cwd)
            self.ran.add(key)
            self.tally["validated and run on the tiny model"] += 1

    def not_runnable(self, config: str, overrides: list[str], cwd: Path) -> str | None:
        """Why the command cannot run on the tiny model, or None: no tiny stand-in, or an input it lacks."""
        if not config.startswith("smollm2/") and config not in (
            "eval",
            "generation",
            "quantization",
            "dist_check",
        ):
            return "no tiny stand-in for this model"
        for arg in overrides:
            key, _, value = arg.partition("=")
            if key in ("output_dir", "output_file"):
                continue
            for item in value.strip("[]").split(","):
                looks_like_a_file = "/" in item or re.search(r"\.(raw|txt|jsonl?|gguf|pt)$", item)
                if looks_like_a_file and not (cwd / item).exists():
                    return "its input is the output of a longer run"
        return None

    def run_tiny(self, recipe: str, path: Path | None, config: str, overrides: list[str], cwd: Path) -> None:
        tiny = [
            "model=ftune.models.smollm2.smollm2",
            *[f"model.{k}={v}" for k, v in self.tiny_sizes.items()],
            "device=cpu",
            "dtype=fp32",
        ]
        if config.startswith("smollm2/"):
            first = self.tiny_overrides(self.model, self.data, cwd / "output" / "tiny_run")
            for section in ("dataset", "dataset_val"):  # the command brings its own data
                if any(o.startswith((f"{section}._component_=", f"~{section}")) for o in overrides):
                    first = [o for o in first if not o.startswith(f"{section}.")]
            last = [*tiny, "max_steps=1", "save_every_n_steps=null", "tokenizer.max_seq_len=64"]
            if (registry.method_of(config) or "").startswith("kd"):  # the tiny model teaches itself
                last += [
                    "teacher_model=ftune.models.smollm2.smollm2",
                    *[f"teacher_model.{k}={v}" for k, v in self.tiny_sizes.items()],
                    "teacher_model.max_seq_len=512",
                    f"teacher_checkpointer.checkpoint_dir={self.model}",
                    f"teacher_tokenizer.path={self.model}",
                ]
        elif config == "eval":
            first, last = [], [*tiny[-2:], "limit=4", "batch_size=4", "max_seq_len=64"]
        elif config == "generation":
            first, last = [], [*tiny[-2:], "max_new_tokens=4"]
        elif config == "dist_check":
            first, last = [], []
        else:
            first, last = [], tiny[-2:]
        if sized_by_checkpoint(overrides):  # the folder's config.json sizes the model, as documented
            first, last = without_model(first), [*without_model(last), "tokenizer.max_seq_len=256"]
        file = path or registry.RECIPES[recipe].file
        spec = importlib.util.spec_from_file_location(f"docs_recipe_{recipe}", file)
        module = importlib.util.module_from_spec(spec)
        stream = io.StringIO()
        with chdir_env(cwd, self.env), contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            cfg = load_config(config, [*first, *overrides, *last])  # ${ftune_home:} reads FTUNE_HOME
            spec.loader.exec_module(module)
            try:
                module.main(cfg)
            except BaseException as e:
                raise AssertionError(
                    f"{recipe} --config {config} {overrides} failed on the tiny model: {e!r}\n"
                    f"{stream.getvalue()[-3000:]}"
                ) from e


def sized_by_checkpoint(overrides: list[str]) -> bool:
    """Whether a command leaves the model section out (`~model`, `model=null`)."""
    return any(o in ("~model", "model=null") for o in overrides)


def without_model(overrides: list[str]) -> list[str]:
    return [o for o in overrides if not o.startswith(("model=", "model."))]


@contextlib.contextmanager
def chdir_env(cwd: Path, env: dict[str, str]):
    """cwd and environment of a docs command, restored afterwards (a distributed recipe sets RANK etc.)."""
    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def make_outputs(ws: Workspace, load_recipe) -> None:
    """The output folders the docs name, from one-step runs of the recipes on the tiny model."""
    shared = ws.shared
    for recipe, config, out in [
        ("lora_finetune_single_device", "smollm2/135M_lora", "output/smollm2_135M_lora"),
        ("full_finetune_single_device", "smollm2/135M_full", "output/smollm2_135M_full"),
    ]:
        overrides = [
            *ws.tiny_overrides(ws.model, ws.data, shared / out),
            "max_steps=1",
            "model=ftune.models.smollm2.smollm2",
            *[f"model.{k}={v}" for k, v in ws.tiny_sizes.items()],
        ]
        with chdir_env(shared, ws.env), contextlib.redirect_stdout(io.StringIO()):
            load_recipe(recipe).main(load_config(config, overrides))
        shutil.copytree(shared / out / "step_1", shared / out / "step_100")
        ws.ran.add((recipe, config))  # this was the one-step run of the docs' commands for it
    shutil.copytree(
        shared / "output/smollm2_135M_full/step_1", shared / "output/smollm2_135M_qat_full/step_100"
    )
    shutil.copytree(shared / "output/smollm2_135M_lora/step_1", shared / "runs/lora/step_400")
    shutil.copytree(shared / "output/smollm2_135M_lora", shared / "output/quickstart/lora")  # with its logs
    shutil.copytree(shared / "output/smollm2_135M_lora/step_1", shared / "output/quickstart/lora/step_60")
    shutil.copytree(shared / "output/smollm2_135M_full/step_1", shared / "runs/full/step_400")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpointing"))
    from tiny_gguf import Q, write_tiny_gguf

    # The PPO config's reward and value model: the demo reward model run's last step (a seeded score head).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
    import torch
    from ppo_parity_inputs import make_tiny_reward_model

    rm = make_tiny_reward_model(ws.root / "tiny_rm", ws.model, torch.Generator().manual_seed(1))
    shutil.copytree(rm, shared / "output/smollm2_135M_demo_full_rm/step_60")

    write_tiny_gguf(shared / GGUF, qtype=Q.Q8_0)
    make_gemma3_image_text(ws)
    from tiny_vlm_gguf import tiny_vlm_folder  # a SmolVLM fine-tune for the image-text GGUF export

    tiny_vlm_folder(shared / "runs/smolvlm_full/step_400", "smolvlm")
    quantize = [f"checkpointer.checkpoint_dir={ws.model}", "output_dir=output/quantized", "device=cpu"]
    with chdir_env(shared, ws.env), contextlib.redirect_stdout(io.StringIO()):
        load_recipe("quantize").main(load_config("quantization", quantize))
    ws.ran.add(("quantize", "quantization"))


def make_gemma3_image_text(ws: Workspace) -> None:
    """A tiny image-text Gemma 3 folder as `$FTUNE_HOME/models/gemma-3-4b-it`, and a LoRA step folder
    saved from it, `runs/gemma3_lora/step_400` (docs/checkpoints.md's Gemma 3 4B/12B/27B section)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from ftune_tiny_hf import build_tiny_gemma3_image_text

    from ftune.checkpointing import HFCheckpointer, load_hf
    from ftune.peft import apply_lora

    folder = ws.ftune_home / "models" / "gemma-3-4b-it"
    build_tiny_gemma3_image_text().save_pretrained(folder)
    model = load_hf(folder)
    apply_lora(model, targets=["q_proj", "v_proj"], rank=4, alpha=8.0)
    settings = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "use_dora": False}
    HFCheckpointer(folder, ws.shared / "runs/gemma3_lora").save(
        400, model.state_dict(), adapter_config=settings
    )
    # The positions the real google/gemma-3-4b-it states: the docs' commands ask for its sequence
    # lengths (tokenizer.max_seq_len 2048), which ftune checks against config.json before a run.
    config_json = folder / "config.json"
    stated = json.loads(config_json.read_text())
    stated["text_config"]["max_position_embeddings"] = 131072
    config_json.write_text(json.dumps(stated, indent=2))


def summary(ws: Workspace, blocks: list[Block]) -> str:
    langs = Counter(b.lang for b in blocks)
    lines = [f"docs test: {len(blocks)} fenced blocks ({', '.join(f'{n} {k}' for k, n in langs.items())})"]
    lines += [f"  {n:3d} {what}" for what, n in sorted(ws.tally.items())]
    lines += ["slowest commands:"] + [
        f"  {s:5.1f} s  {what}" for s, what in sorted(ws.timings, reverse=True)[:8]
    ]
    unknown = {re.sub(r".*needs ", "", k).rstrip(")") for k in ws.tally if "needs" in k} - set(NEEDS)
    assert not unknown, unknown
    return "\n".join(lines)
