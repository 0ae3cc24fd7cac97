"""The single-device recipes end to end on a tiny seeded checkpoint: goldens, resume, every declared feature."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

GOLDENS = Path(__file__).parent / "goldens" / "single_device.json"
RECIPES = {
    "full_finetune_single_device": "smollm2/135M_full",
    "lora_finetune_single_device": "smollm2/135M_lora",
}


def losses(logs):
    return [row["loss"] for row in logs if "loss" in row]


def final_weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    folder = out / f"step_{step}"
    name = (
        "adapter_model.safetensors"
        if (folder / "adapter_model.safetensors").exists()
        else "model.safetensors"
    )
    return load_file(str(folder / name))


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.usefixtures("golden_threads")
def test_golden_losses(recipe, run_recipe, request):
    logs, _ = run_recipe(recipe, RECIPES[recipe], "max_steps=4")
    got = losses(logs)
    goldens = json.loads(GOLDENS.read_text()) if GOLDENS.exists() else {}
    if request.config.getoption("--update-goldens"):
        goldens[recipe] = got
        GOLDENS.parent.mkdir(exist_ok=True)
        GOLDENS.write_text(json.dumps(goldens, indent=2) + "\n")
    assert recipe in goldens, "no golden losses yet: run pytest tests/recipes --update-goldens"
    assert got == pytest.approx(goldens[recipe], rel=1e-5, abs=1e-6)


def test_lora_first_step_loss_equals_full(run_recipe, tmp_path):
    full, _ = run_recipe(
        "full_finetune_single_device",
        RECIPES["full_finetune_single_device"],
        "max_steps=1",
        output_dir=tmp_path / "full",
    )
    lora, _ = run_recipe(
        "lora_finetune_single_device",
        RECIPES["lora_finetune_single_device"],
        "max_steps=1",
        output_dir=tmp_path / "lora",
    )
    assert losses(lora)[0] == losses(full)[0]


# LoRA dropout draws random numbers in every step after the restore point: the resumed run must
# draw exactly what the uninterrupted one drew (the RNG restored where it was saved, and nothing in
# between, such as starting the data loader's iterator, may draw from it).
RESUME_CASES = [(r, ()) for r in RECIPES] + [("lora_finetune_single_device", ("peft.dropout=0.1",))]


@pytest.mark.parametrize("recipe, extra", RESUME_CASES)
def test_resume_is_exact(recipe, extra, run_recipe, tmp_path):
    straight, out_a = run_recipe(
        recipe, RECIPES[recipe], "max_steps=4", "shuffle=true", *extra, output_dir=tmp_path / "a"
    )
    first, out_b = run_recipe(
        recipe, RECIPES[recipe], "max_steps=4", "save_every_n_steps=2", *extra, output_dir=tmp_path / "b"
    )
    # Simulate the interruption: drop everything after step 2, then resume automatically.
    import shutil

    shutil.rmtree(out_b / "step_4")
    (out_b / "logs").rename(tmp_path / "first_logs")
    second, _ = run_recipe(
        recipe,
        RECIPES[recipe],
        "max_steps=4",
        "checkpointer.resume_from_checkpoint=auto",
        *extra,
        output_dir=out_b,
    )
    assert losses(first)[:2] + losses(second) == losses(straight)  # exact on CPU fp32
    a, b = final_weights(out_a, 4), final_weights(out_b, 4)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
