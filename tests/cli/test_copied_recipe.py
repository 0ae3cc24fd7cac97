"""A copied recipe is the user's to change: its own settings, its own training step, strict key reads.

Each test copies a shipped training recipe with `ftune cp`, edits it as a user would, and runs it
with `ftune run` on the tiny checkpoint (the CLI's own entry point, in this process: a subprocess
would add seconds of imports per run; tests/cli/test_cli.py covers the subprocess launch).
"""

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ftune.cli.main import main as ftune
from ftune.cli.validate import validate
from ftune.config import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "assets"))
from tiny_checkpoint import make_tiny_checkpoint, tiny_overrides  # noqa: E402

SETTINGS_LINE = "SETTINGS = training.LoRASettings  # [lora]\n"
MY_SETTINGS = """from dataclasses import dataclass


@dataclass
class MySettings(training.LoRASettings):
    loss_scale: float = config.setting(1.0, "multiply every micro-batch's loss by this")


SETTINGS = MySettings
"""
BACKWARD = "step_loss.scaled(loss_on(batch)).backward()"
FORWARD_LOSS = "return training.token_loss(loss_fn, model, hidden, batch)  # [sft] + an MoE's balancing loss"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")


def run(*args: str) -> None:
    """`ftune run <args>`, raising SystemExit(1) on a user error as the command does."""
    assert ftune(["run", *args]) == 0


def copy_and_edit(path: Path, recipe: str, *edits: tuple[str, str]) -> Path:
    assert ftune(["cp", recipe, str(path)]) == 0
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)
    return path


def test_a_copy_adds_a_setting_that_validate_help_and_run_see(tiny, tmp_path, capsys):
    mine = copy_and_edit(
        tmp_path / "my_lora.py",
        "lora_finetune_single_device",
        (SETTINGS_LINE, MY_SETTINGS),
        (BACKWARD, f"(s.loss_scale * {BACKWARD.removesuffix('.backward()')}).backward()"),
    )
    assert validate("smollm2/135M_lora", ["loss_scale=0.5"], str(mine)) == "my_lora"
    with pytest.raises(ConfigError, match="loss_scale: unknown key"):
        validate("smollm2/135M_lora", ["loss_scale=0.5"])  # the shipped recipe has no such key
    with pytest.raises(ConfigError, match=r"loss_scale: expected float, got 'high'"):
        validate("smollm2/135M_lora", ["loss_scale=high"], str(mine))

    capsys.readouterr()
    run(str(mine), "--help")
    help_text = capsys.readouterr().out
    assert "loss_scale: float" in help_text and "multiply every micro-batch's loss" in help_text

    def adapters_after(scale: str) -> dict[str, torch.Tensor]:
        out = tmp_path / f"out_{scale}"
        overrides = tiny_overrides(tiny, tmp_path / "demo", out)
        run(str(mine), "--config", "smollm2/135M_lora", *overrides, "max_steps=2", scale)
        return load_file(str(out / "step_2" / "adapter_model.safetensors"))

    # B starts at zero and AdamW moves it only through its gradient: the new setting decides.
    scaled_off = adapters_after("loss_scale=0.0")
    trained = adapters_after("loss_scale=1.0")
    b_keys = [k for k in trained if "lora_B" in k]
    assert b_keys and all(torch.count_nonzero(scaled_off[k]) == 0 for k in b_keys)
    assert all(torch.count_nonzero(trained[k]) > 0 for k in b_keys)


def test_an_edited_training_step_changes_the_run(tiny, tmp_path):
    mine = copy_and_edit(
        tmp_path / "my_full.py",
        "full_finetune_single_device",
        (BACKWARD, f"(0.0 * {BACKWARD.removesuffix('.backward()')}).backward()  # my change"),
    )
    out = tmp_path / "out"
    sgd = ["optimizer=torch.optim.SGD", "optimizer.lr=0.1", "optimizer.weight_decay=0.0"]
    run(
        str(mine),
        "--config",
        "smollm2/135M_full",
        *tiny_overrides(tiny, tmp_path / "d", out),
        "max_steps=2",
        *sgd,
    )
    before, after = (
        load_file(str(tiny / "model.safetensors")),
        load_file(str(out / "step_2" / "model.safetensors")),
    )
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)

    shipped = tmp_path / "shipped"
    run(
        "full_finetune_single_device", "--config", "smollm2/135M_full",
        *tiny_overrides(tiny, tmp_path / "d", shipped), "max_steps=2", *sgd,
    )  # fmt: skip
    moved = load_file(str(shipped / "step_2" / "model.safetensors"))
    assert any(not torch.equal(before[k], moved[k]) for k in before)


def test_an_edited_forward_changes_training_and_validation_alike(tiny, tmp_path):
    """The step and validation call the recipe's own loss_on: editing it edits both (no library
    forward behind validation's back)."""

    def val_losses(recipe: str, out: Path) -> list[float]:
        run(
            recipe, "--config", "smollm2/135M_full", *tiny_overrides(tiny, tmp_path / "d", out),
            "max_steps=2", "run_val_every_n_steps=1", "max_val_batches=1", "save_every_n_steps=null",
        )  # fmt: skip
        rows = [
            json.loads(line)
            for f in sorted((out / "logs").glob("*.jsonl"))
            for line in f.read_text().splitlines()
        ]
        train, val = (
            [r["loss"] for r in rows if "loss" in r],
            [r["val_loss"] for r in rows if "val_loss" in r],
        )
        assert len(train) == len(val) == 2
        return train, val

    mine = copy_and_edit(
        tmp_path / "my_forward.py",
        "full_finetune_single_device",
        (
            FORWARD_LOSS,
            FORWARD_LOSS.replace(", hidden,", ", 0.0 * hidden,"),
        ),  # every logit 0: loss log(vocab)
    )
    shipped_train, shipped_val = val_losses("full_finetune_single_device", tmp_path / "shipped")
    train, val = val_losses(str(mine), tmp_path / "mine")
    vocab = load_file(str(tiny / "model.safetensors"))["model.embed_tokens.weight"].shape[0]
    assert train == pytest.approx([math.log(vocab)] * 2, rel=1e-5)
    assert val == pytest.approx([math.log(vocab)] * 2, rel=1e-5)
    assert all(abs(a - math.log(vocab)) > 1e-3 for a in shipped_train + shipped_val)


def test_a_misspelt_key_read_by_a_copy_fails_with_did_you_mean(tiny, tmp_path, capsys, monkeypatch):
    mine = copy_and_edit(
        tmp_path / "my_typo.py",
        "lora_finetune_single_device",
        ("config.instantiate(cfg.dataset_val, tokenizer)", "config.instantiate(cfg.dataset_vall, tokenizer)"),
    )
    monkeypatch.delenv("FTUNE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        run(
            str(mine), "--config", "smollm2/135M_lora", *tiny_overrides(tiny, tmp_path / "d", tmp_path / "o"),
            "max_steps=1", "~dataset_val",
        )  # fmt: skip
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "Traceback" not in err, err
    assert "dataset_vall: read by the recipe but not declared" in err
    assert "Did you mean 'dataset_val'?" in err
