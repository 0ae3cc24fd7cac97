"""Refusals that need only the config, the arguments or a folder listing come before torch (issue 37, item 6).

Each command runs in a fresh interpreter (`ftune.cli.main.main`, as the `ftune` entry point calls it)
and must fail with its message while ``torch`` (and, for `export`, ``gguf``) is still not imported:
the proxy for "refused in well under 2 s", which no test times. What each message says in full is
pinned by the bad-input catalogue (tests/recipes/bad_inputs_records.py).
"""

import json
import subprocess
import sys

import pytest
import torch

from ftune import registry

SCRIPT = """
import sys, contextlib, io
from ftune.cli.main import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    rc = main({argv!r})
assert rc == 1, (rc, err.getvalue())
assert {expected!r} in err.getvalue(), err.getvalue()
assert 'Traceback' not in err.getvalue(), err.getvalue()
late = [m for m in ('torch', 'gguf', 'datasets') if m in sys.modules]
assert not late, f'imported before the refusal: {{late}}'
"""

GRPO = ["run", "lora_grpo_single_device"]
SFT = ["run", "lora_finetune_single_device"]
GGUF = ["export", "gguf"]

CASES = {
    "grpo-epsilon": ([*GRPO, "loss.epsilon=-1"], "loss.epsilon: epsilon must be in (0, 1)"),
    "grpo-epsilon-high": ([*GRPO, "loss.epsilon_high=0"], "loss.epsilon_high: epsilon_high must be > 0"),
    "grpo-beta": ([*GRPO, "loss.beta=-1"], "loss.beta: beta must be >= 0"),
    "grpo-loss-type": ([*GRPO, "loss.loss_type=nope"], "loss.loss_type: loss_type must be one of"),
    "grpo-dr-grpo-null": (
        [*GRPO, "loss.loss_type=dr_grpo"],
        "loss.max_completion_length: max_completion_length is Dr. GRPO's constant",
    ),
    "grpo-time-limit": ([*GRPO, "rewards.time_limit_s=-1"], "rewards.time_limit_s: must be a finite number"),
    "grpo-weights-names": (
        [*GRPO, "rewards.weights={right: 1.0}"],
        "rewards.weights: give one weight per reward, named as in rewards ['correct']",
    ),
    "grpo-weights-zero": ([*GRPO, "rewards.weights.correct=0"], "rewards.weights: all zero"),
    "grpo-reward-regex": (
        [*GRPO, "rewards.rewards.correct={_component_: ftune.rewards.RegexMatch, pattern: '(a'}"],
        "rewards.rewards.correct: RegexMatch: pattern '(a' is not a valid regular expression",
    ),
    "validate-grpo-reward-tolerance": (
        [
            "validate",
            "smollm2/135M_lora_grpo",
            "rewards.rewards.correct={_component_: ftune.rewards.NumericAnswer, field: answer, tolerance: -1}",
        ],
        "rewards.rewards.correct: NumericAnswer: tolerance must be a finite number >= 0, got -1.",
    ),
    "grpo-sft-dataset": (
        [*GRPO, "~dataset", "dataset._component_=ftune.datasets.alpaca_dataset"],
        "alpaca_dataset gives supervised examples, and lora_grpo_single_device samples completions",
    ),
    "sft-prompt-dataset": (
        [*SFT, "~dataset", "dataset._component_=ftune.datasets.prompt_dataset"],
        "prompt_dataset gives prompts for online RL",
    ),
    "sft-resumes-grpo": (
        [*SFT, "checkpointer.output_dir={tmp}/grpo", "checkpointer.resume_from_checkpoint=auto"],
        "is a step folder of an online RL run (written by lora_grpo_single_device), and "
        "lora_finetune_single_device is a supervised recipe",
    ),
    "grpo-resumes-sft": (
        [*GRPO, "checkpointer.output_dir={tmp}/sft", "checkpointer.resume_from_checkpoint=auto"],
        "is a step folder of a supervised run (written by lora_finetune_single_device), and "
        "lora_grpo_single_device is an online RL recipe",
    ),
    "checkpoint-dir-missing": (
        [*SFT, "checkpointer.checkpoint_dir={tmp}/nowhere"],
        "checkpointer.checkpoint_dir: checkpoint folder '{tmp}/nowhere' does not exist",
    ),
    "data-file-empty": (
        [
            *SFT,
            "~dataset",
            "dataset._component_=ftune.datasets.instruct_dataset",
            "dataset.source={tmp}/empty.jsonl",
        ],
        "{tmp}/empty.jsonl is empty",
    ),
    "kto-one-label": (
        [
            "run",
            "lora_dpo_single_device",
            "~dataset",
            "dataset._component_=ftune.datasets.kto_dataset",
            "dataset.source={tmp}/kto.jsonl",
        ],
        "3 desirable (true) and 0 undesirable (false) record(s); KTO needs both kinds",
    ),
    "kto-batch-of-one": (
        ["run", "lora_dpo_single_device", "--config", "smollm2/135M_lora_kto", "batch_size=1"],
        "batch_size: 1 with a KTO dataset (set on the command line); KTO estimates its KL term",
    ),
    "output-dir-is-file": ([*SFT, "output_dir={tmp}/notes.txt"], "output_dir: '{tmp}/notes.txt'"),
    "log-dir-below-file": (
        [*SFT, "metric_logger.log_dir={tmp}/notes.txt/logs"],
        "metric_logger.log_dir: '{tmp}/notes.txt/logs'",
    ),
    "export-type": (
        [*GGUF, "{tmp}/model", "{tmp}/m.gguf", "--type", "iq4_xs"],
        "--type 'iq4_xs' is not a GGUF type",
    ),
    "export-suffix": ([*GGUF, "{tmp}/model", "{tmp}/m.bin", "--type", "q8_0"], "does not end in .gguf"),
    "export-model-missing": (
        [*GGUF, "{tmp}/nowhere", "{tmp}/m.gguf", "--type", "q8_0"],
        "model folder '{tmp}/nowhere' does not exist",
    ),
    "export-model-no-config": (
        [*GGUF, "{tmp}/sft", "{tmp}/m.gguf", "--type", "q8_0"],
        "model folder '{tmp}/sft' holds no config.json",
    ),
    "export-model-is-adapter": (
        [*GGUF, "{tmp}/sft/step_2", "{tmp}/m.gguf", "--type", "q8_0"],
        "holds a LoRA/DoRA adapter, not a whole model",
    ),
    "export-adapter-empty": (
        [*GGUF, "{tmp}/model", "{tmp}/m.gguf", "--type", "q8_0", "--adapter", "{tmp}/sft"],
        "--adapter '{tmp}/sft' holds no adapter_model.safetensors",
    ),
    "export-output-exists": ([*GGUF, "{tmp}/model", "{tmp}/old.gguf", "--type", "q8_0"], "already exists"),
    "export-output-in-model": (
        [*GGUF, "{tmp}/model", "{tmp}/model/m.gguf", "--type", "q8_0"],
        "is inside the model folder",
    ),
    "export-parent-missing": (
        [*GGUF, "{tmp}/model", "{tmp}/new/m.gguf", "--type", "q8_0"],
        "the folder {tmp}/new does not exist",
    ),
    "export-parent-is-file": (
        [*GGUF, "{tmp}/model", "{tmp}/notes.txt/m.gguf", "--type", "q8_0"],
        "{tmp}/notes.txt is a file, not a folder",
    ),
    "export-llava-no-mmproj": (
        [*GGUF, "{tmp}/llava", "{tmp}/m.gguf", "--type", "f16"],
        "'{tmp}/llava/config.json' describes a 'llava' image-text model, which has no llama.cpp projector",
    ),
}


def _step(folder, recipe: str, kind: str) -> None:
    """A LoRA step folder as `snapshot` writes it (kind as recorded: GRPO folders of old say "supervised")."""
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    torch.save({"ftune_recipe": recipe, "ftune_recipe_kind": kind, "step": 2}, folder / "recipe_state.pt")
    (folder / ".complete").write_text(json.dumps({"complete": True}))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fast")
    _step(tmp / "grpo" / "step_2", "lora_grpo_single_device", "supervised")
    _step(tmp / "sft" / "step_2", "lora_finetune_single_device", "supervised")
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text("{}")
    (tmp / "llava").mkdir()
    (tmp / "llava" / "config.json").write_text(json.dumps({"model_type": "llava"}))
    (tmp / "old.gguf").write_bytes(b"GGUF")
    (tmp / "notes.txt").write_text("notes\n")
    (tmp / "empty.jsonl").write_text("")
    (tmp / "kto.jsonl").write_text('{"prompt": "q", "completion": "a", "label": true}\n' * 3)
    return tmp


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_refused_before_torch_is_imported(case, tmp):
    argv, expected = CASES[case]
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    code = SCRIPT.format(argv=argv, expected=expected.replace("{tmp}", str(tmp)))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=registry.recipes_dir().parent
    )
    assert done.returncode == 0, done.stderr
    assert (tmp / "notes.txt").read_text() == "notes\n" and (tmp / "old.gguf").read_bytes() == b"GGUF"
