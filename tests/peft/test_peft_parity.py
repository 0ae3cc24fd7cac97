"""An adapter trained in ftune, saved in PEFT's format, loads with `peft.PeftModel.from_pretrained`
onto the `transformers` base model and gives ftune's logits; and a PEFT adapter loads into ftune."""

import json
from pathlib import Path

import pytest
import torch

from ftune.checkpointing import load_hf
from ftune.models import family_from_hf_config
from ftune.peft import adapter_state_dict, apply_lora, from_peft, peft_adapter_config, to_peft

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
safetensors_torch = pytest.importorskip("safetensors.torch")

_COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
)
# (config class, model class, options): untied llama3, tied smollm2, qwen2 with q/k/v biases.
TINY = {
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=500_000.0, tie_word_embeddings=False)),
    "smollm2": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=100_000.0, tie_word_embeddings=True)),
    "qwen2_5": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1_000_000.0, tie_word_embeddings=False)),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_tiny_hf(family: str, path: Path) -> None:
    config_cls, model_cls, options = TINY[family]
    config = getattr(transformers, config_cls)(**_COMMON, **options)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if name.endswith("norm.weight") else p.normal_(0.0, 0.1)
    model.save_pretrained(path)


def load_hf_base(path: Path) -> torch.nn.Module:
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def adapted_ftune(path: Path, targets: list[str], use_dora: bool) -> torch.nn.Module:
    model = load_hf(path).eval()
    apply_lora(model, targets=targets, rank=4, alpha=8.0, dropout=0.1, use_dora=use_dora)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("lora_a.weight", "lora_b.weight")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif name.endswith("magnitude"):
                p.mul_(1 + 0.05 * torch.randn(p.shape, generator=gen))
    return model


@pytest.mark.parametrize(("family", "use_dora"), [("llama3", False), ("smollm2", True), ("qwen2_5", True)])
def test_ftune_adapter_loads_in_peft(tmp_path: Path, family: str, use_dora: bool) -> None:
    base_dir, adapter_dir = tmp_path / "base", tmp_path / "adapter"
    save_tiny_hf(family, base_dir)
    assert family_from_hf_config(json.loads((base_dir / "config.json").read_text())) == family
    tied = TINY[family][2]["tie_word_embeddings"]
    targets = TARGETS if tied else [*TARGETS, "output"]
    model = adapted_ftune(base_dir, targets, use_dora)

    peft_sd = to_peft(adapter_state_dict(model), family)
    config = peft_adapter_config(
        peft_sd, rank=4, alpha=8.0, dropout=0.1, use_dora=use_dora, base_model_name_or_path=str(base_dir)
    )
    adapter_dir.mkdir()
    safetensors_torch.save_file(peft_sd, adapter_dir / "adapter_model.safetensors")
    (adapter_dir / "adapter_config.json").write_text(json.dumps(config, indent=2))

    theirs = peft.PeftModel.from_pretrained(load_hf_base(base_dir), adapter_dir).eval()
    # Every saved tensor landed in PEFT's model (PEFT only warns about keys it could not place).
    loaded = peft.get_peft_model_state_dict(theirs, save_embedding_layers=False)
    assert loaded.keys() == peft_sd.keys()
    assert all(torch.equal(loaded[k], peft_sd[k]) for k in peft_sd)

    tokens = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, reference = model(tokens), theirs(tokens).logits
        plain = load_hf_base(base_dir)(tokens).logits
    assert (ours - plain).abs().max() > 1e-2  # the adapter changes the logits
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("use_dora", [False, True])
def test_peft_adapter_loads_in_ftune(tmp_path: Path, use_dora: bool) -> None:
    base_dir, adapter_dir = tmp_path / "base", tmp_path / "adapter"
    save_tiny_hf("llama3", base_dir)
    config = peft.LoraConfig(
        r=4, lora_alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj", "lm_head"], use_dora=use_dora
    )
    theirs = peft.get_peft_model(load_hf_base(base_dir), config).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    theirs.save_pretrained(adapter_dir, save_embedding_layers=False)

    model = load_hf(base_dir).eval()
    apply_lora(
        model, targets=["q_proj", "v_proj", "down_proj", "output"], rank=4, alpha=8.0, use_dora=use_dora
    )
    adapter = from_peft(safetensors_torch.load_file(adapter_dir / "adapter_model.safetensors"), "llama3")
    assert adapter.keys() == adapter_state_dict(model).keys()
    model.load_state_dict(adapter, strict=False)
    tokens = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), theirs(tokens).logits, rtol=1e-4, atol=1e-4)
