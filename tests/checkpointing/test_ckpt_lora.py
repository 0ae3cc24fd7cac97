"""LoRA/DoRA runs: adapter folders in PEFT format (peft loads them), resume, merged full model."""

import json
from pathlib import Path

import pytest
import torch
from ckpt_tiny_hf import assert_same_tensors, ftune_model, write_hf_folder
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer, load_into
from ftune.models import CONVERTERS
from ftune.peft import adapter_layers, adapter_state_dict, apply_lora

TARGETS = ["q_proj", "v_proj", "down_proj", "output"]
SETTINGS = {"rank": 4, "alpha": 8.0, "dropout": 0.0}


def _adapted(src: Path, ckpt: HFCheckpointer, *, use_dora: bool, seed: int = 0) -> torch.nn.Module:
    """Base model from the checkpointer, adapters applied and moved off their zero init ("trained")."""
    model = ftune_model(src)
    apply_lora(model, targets=TARGETS, rank=4, alpha=8.0, use_dora=use_dora)
    load_into(model, ckpt.load())  # fresh run: adapters absent from the checkpoint, allowed
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in adapter_state_dict(model).values():
            value.add_(0.1 * torch.randn(value.shape, generator=g))
    return model


@pytest.mark.parametrize("use_dora", [False, True])
def test_adapter_folder_loads_in_peft_with_ftune_logits(
    tmp_path: Path, tokens: torch.Tensor, use_dora: bool
) -> None:
    import transformers
    from peft import PeftModel

    src = write_hf_folder(tmp_path / "in", "llama3")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    model = _adapted(src, ckpt, use_dora=use_dora)
    with torch.no_grad():
        expected = model(tokens)
    step = ckpt.save(
        3, model.state_dict(), adapter_config={**SETTINGS, "use_dora": use_dora}, recipe_state={"step": 3}
    )

    names = sorted(p.name for p in step.iterdir())
    assert "adapter_model.safetensors" in names and "adapter_config.json" in names
    assert not any(n.startswith("model") for n in names)  # adapter only by default
    config = json.loads((step / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(src.resolve())
    assert (config["r"], config["lora_alpha"], config["use_dora"]) == (4, 8.0, use_dora)
    assert sorted(config["target_modules"]) == ["down_proj", "lm_head", "q_proj", "v_proj"]

    base = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, step).eval()
    with torch.no_grad():
        got = peft_model(tokens).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_lora_resume_gives_base_from_checkpoint_dir_and_adapter_from_step(tmp_path: Path, tokens) -> None:
    src = write_hf_folder(tmp_path / "in", "llama3")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    base = ckpt.load().model
    model = _adapted(src, ckpt, use_dora=True)
    ckpt.save(5, model.state_dict(), adapter_config={**SETTINGS, "use_dora": True}, recipe_state={"step": 5})

    loaded = HFCheckpointer(src, tmp_path / "out", resume_from_checkpoint="auto").load()
    assert loaded.step_dir == tmp_path / "out" / "step_5" and loaded.recipe_state == {"step": 5}
    assert_same_tensors(loaded.model, base)
    assert_same_tensors(loaded.adapter, adapter_state_dict(model))

    resumed = ftune_model(src)
    apply_lora(resumed, targets=TARGETS, rank=4, alpha=8.0, use_dora=True)
    load_into(resumed, loaded)  # strict: base + adapter together cover the model
    assert_same_tensors(resumed.state_dict(), model.state_dict())
    with torch.no_grad():
        assert torch.equal(resumed(tokens), model(tokens))


@pytest.mark.parametrize("use_dora", [False, True])
def test_merged_model_is_written_too_when_asked(tmp_path: Path, tokens: torch.Tensor, use_dora: bool) -> None:
    import transformers

    src = write_hf_folder(tmp_path / "in", "llama3", shards=2)
    ckpt = HFCheckpointer(src, tmp_path / "out", save_adapter_weights_only=False)
    model = _adapted(src, ckpt, use_dora=use_dora)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        expected = model(tokens)
    step = ckpt.save(4, model.state_dict(), adapter_config={**SETTINGS, "use_dora": use_dora})

    assert_same_tensors(model.state_dict(), before)  # the training model is untouched
    assert (step / "adapter_model.safetensors").is_file() and not list(step.glob("model*"))
    merged = step / "merged"
    shards = sorted(p.name for p in merged.glob("model-*.safetensors"))
    assert shards == sorted(p.name for p in src.glob("model-*.safetensors"))
    assert (merged / "model.safetensors.index.json").is_file() and (merged / "tokenizer.json").is_file()
    written = {k: v for name in shards for k, v in load_file(merged / name).items()}
    # Expected: each adapted layer's own merged_weight() in place of its base weight.
    expected_state = {k: v for k, v in model.state_dict().items() if k not in adapter_state_dict(model)}
    expected_state.update({f"{fqn}.weight": m.merged_weight() for fqn, m in adapter_layers(model).items()})
    assert_same_tensors(written, CONVERTERS["llama3"].ftune_to_hf(expected_state))

    # Resuming still uses base + adapter (not the merged weights) ...
    loaded = HFCheckpointer(src, tmp_path / "out", resume_from_checkpoint="auto").load()
    assert_same_tensors(loaded.model, ckpt.load().model)
    # ... and transformers computes the fine-tuned model from the merged folder, and from the step
    # folder itself (base from checkpoint_dir + adapter). Not for DoRA: transformers 5.24's built-in
    # adapter loading drops lora_magnitude_vector, also for adapters PEFT saved itself (peft's
    # PeftModel.from_pretrained loads it right, see the test above).
    for folder in (merged,) if use_dora else (merged, step):
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        with torch.no_grad():
            torch.testing.assert_close(hf(tokens).logits, expected, atol=1e-4, rtol=0)


def test_peft_config_dict_is_accepted_as_is(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    model = ftune_model(src)
    apply_lora(model, targets=["q_proj"], rank=2, alpha=4.0)
    config = {
        "peft_type": "LORA",
        "r": 2,
        "lora_alpha": 4.0,
        "target_modules": ["q_proj"],
        "task_type": "CAUSAL_LM",
    }
    step = ckpt.save(1, model.state_dict(), adapter_config=config)
    assert json.loads((step / "adapter_config.json").read_text()) == {
        **config,
        "base_model_name_or_path": str(src.resolve()),
    }


def test_adapter_config_mismatches_are_errors(tmp_path: Path) -> None:
    src = write_hf_folder(tmp_path / "in", "smollm2")
    ckpt = HFCheckpointer(src, tmp_path / "out")
    model = ftune_model(src)
    with pytest.raises(
        ValueError, match=r"adapter_config was given but model_state holds no adapter tensors"
    ):
        ckpt.save(1, model.state_dict(), adapter_config=SETTINGS)
    apply_lora(model, targets=["q_proj"], rank=2, alpha=4.0)
    with pytest.raises(
        ValueError,
        match=r"model_state holds 4 adapter tensors \(e\.g\. layers\.0\.attn\.q_proj\.lora_a\.weight\) but no adapter_config",
    ):
        ckpt.save(1, model.state_dict())
    with pytest.raises(ValueError, match=r"adapter_config has unknown keys \['rnak'\]"):
        ckpt.save(1, model.state_dict(), adapter_config={"rnak": 2, "alpha": 4.0})
