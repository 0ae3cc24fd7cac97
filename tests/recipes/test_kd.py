"""The knowledge-distillation recipe end to end on the tiny checkpoints (student: tiny_checkpoint, teacher:
tiny_teacher, wider, same tokenizer). Its registry features are checked in test_features_single_device.py
and test_mutation.py (resume among them), world size 2 in test_distributed.py."""

import json
import shutil
from pathlib import Path

import pytest
from features import losses
from safetensors.torch import load_file

RECIPE, CONFIG = "knowledge_distillation_single_device", "smollm2/360M_to_135M_kd"
GOLDENS = json.loads((Path(__file__).parent / "goldens" / "single_device.json").read_text())


def test_golden_losses(run_recipe, request):
    """The default mix (kd_ratio 0.5); test_distributed.py compares world size 2 with these losses."""
    logs, _ = run_recipe(RECIPE, CONFIG, "max_steps=4")
    path = Path(__file__).parent / "goldens" / "single_device.json"
    goldens = json.loads(path.read_text())
    if request.config.getoption("--update-goldens"):
        goldens[RECIPE] = losses(logs)
        path.write_text(json.dumps(goldens, indent=2) + "\n")
    assert RECIPE in goldens, "no golden losses yet: run pytest tests/recipes/test_kd.py --update-goldens"
    assert losses(logs) == pytest.approx(goldens[RECIPE], rel=1e-5, abs=1e-6)


def test_kd_ratio_0_is_the_full_finetune(run_recipe):
    """With kd_ratio 0 the loss is the student's cross-entropy: the SFT recipe's golden losses, step for step."""
    logs, _ = run_recipe(RECIPE, CONFIG, "max_steps=4", "loss.kd_ratio=0.0")
    assert losses(logs) == pytest.approx(GOLDENS["full_finetune_single_device"], rel=1e-5, abs=1e-6)


def test_lora_student_resumes_exactly_and_a_merged_teacher_is_used(run_recipe, tiny_checkpoint, tmp_path):
    """A `peft` section makes a LoRA student (adapters only train and are saved; resume is exact); its
    step folder then serves as `teacher_adapter_dir` of a teacher built from the student's own checkpoint."""
    lora = ("max_steps=3", "shuffle=true", "lr_scheduler.num_warmup_steps=0")
    straight, a = run_recipe(RECIPE, f"{CONFIG}_lora", *lora, output_dir=tmp_path / "a")
    first, b = run_recipe(RECIPE, f"{CONFIG}_lora", *lora, "save_every_n_steps=2", output_dir=tmp_path / "b")
    shutil.rmtree(b / "step_3")  # the interruption: everything after step 2 is gone
    (b / "logs").rename(tmp_path / "first_logs")
    second, _ = run_recipe(
        RECIPE, f"{CONFIG}_lora", *lora, "checkpointer.resume_from_checkpoint=auto", output_dir=b
    )
    assert losses(first)[:2] + losses(second) == losses(straight)
    wa, wb = (
        load_file(str(a / "step_3" / "adapter_model.safetensors")),
        load_file(str(b / "step_3" / "adapter_model.safetensors")),
    )
    assert wa.keys() == wb.keys() and all("lora_" in k for k in wa)
    assert all((wa[k] == wb[k]).all() for k in wa)

    # Teacher == student (the same checkpoint, sized from its config.json): the KL is 0. With the
    # LoRA run's adapter merged into it, the teacher differs and the KL does not vanish.
    same = (
        "~teacher_model",
        f"teacher_checkpointer.checkpoint_dir={tiny_checkpoint}",
        f"teacher_tokenizer.path={tiny_checkpoint}",
        "loss.kd_ratio=1.0",
        "max_steps=1",
    )
    plain, _ = run_recipe(RECIPE, CONFIG, *same, output_dir=tmp_path / "same")
    merged, _ = run_recipe(
        RECIPE, CONFIG, *same, f"teacher_adapter_dir={a / 'step_3'}", output_dir=tmp_path / "m"
    )
    assert abs(losses(plain)[0]) < 1e-6, losses(plain)
    assert losses(merged)[0] > 1e-4, losses(merged)
