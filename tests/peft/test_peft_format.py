import pytest
import torch

from ftune.peft import from_peft, peft_adapter_config, to_peft

ADAPTER = {
    "layers.0.attn.q_proj.lora_a.weight": torch.zeros(2, 8),
    "layers.0.attn.q_proj.lora_b.weight": torch.zeros(16, 2),
    "layers.0.attn.q_proj.magnitude": torch.ones(16),
    "layers.11.mlp.down_proj.lora_a.weight": torch.zeros(2, 8),
    "output.lora_b.weight": torch.zeros(32, 2),
}
PEFT = {
    "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
    "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
    "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
    "base_model.model.model.layers.11.mlp.down_proj.lora_A.weight",
    "base_model.model.lm_head.lora_B.weight",
}


@pytest.mark.parametrize("family", ["llama3", "qwen2_5", "smollm2"])
def test_keys_map_both_ways_and_share_tensors(family: str) -> None:
    peft_sd = to_peft(ADAPTER, family)
    assert set(peft_sd) == PEFT
    assert peft_sd["base_model.model.lm_head.lora_B.weight"] is ADAPTER["output.lora_b.weight"]
    back = from_peft(peft_sd, family)
    assert list(back) == list(ADAPTER)
    assert all(back[k] is ADAPTER[k] for k in ADAPTER)


def test_non_adapter_key_is_rejected() -> None:
    with pytest.raises(KeyError, match=r"'layers.0.attn.q_proj.weight' is not a ftune LoRA/DoRA adapter key"):
        to_peft({"layers.0.attn.q_proj.weight": torch.zeros(1)}, "llama3")
    with pytest.raises(
        KeyError, match=r"is not a PEFT LoRA/DoRA adapter key; accepted patterns: <module>.lora_A"
    ):
        from_peft({"base_model.model.model.embed_tokens.lora_embedding_A": torch.zeros(1)}, "llama3")


def test_missing_prefix_is_rejected() -> None:
    with pytest.raises(
        KeyError, match=r"expected the prefix 'base_model.model.' that PeftModel.save_pretrained"
    ):
        from_peft({"model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(1)}, "llama3")


def test_peft_base_layer_weight_is_rejected() -> None:
    with pytest.raises(KeyError, match=r"is a full base-model weight.*save_embedding_layers=False"):
        from_peft({"base_model.model.lm_head.base_layer.weight": torch.zeros(1)}, "llama3")


def test_unknown_family_is_rejected() -> None:
    with pytest.raises(KeyError, match=r"No HF converter for model family 'gpt2'; known families: \["):
        to_peft(ADAPTER, "gpt2")


def test_unknown_module_is_rejected_by_the_converter() -> None:
    with pytest.raises(KeyError, match=r"unknown key 'layers.0.attn.qkv.weight'"):
        to_peft({"layers.0.attn.qkv.lora_a.weight": torch.zeros(1)}, "llama3")


def test_adapter_config() -> None:
    peft_sd = to_peft(ADAPTER, "llama3")
    config = peft_adapter_config(
        peft_sd, rank=2, alpha=4.0, dropout=0.05, use_dora=True, base_model_name_or_path="b"
    )
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert config["target_modules"] == ["down_proj", "lm_head", "q_proj"]
    assert config["r"] == 2 and config["lora_alpha"] == 4.0 and config["lora_dropout"] == 0.05
    assert config["use_dora"] is True
    assert config["bias"] == "none" and config["fan_in_fan_out"] is False
    assert config["base_model_name_or_path"] == "b"
    peft = pytest.importorskip("peft")
    loaded = peft.LoraConfig(**{k: v for k, v in config.items() if k != "peft_type"})
    assert (
        loaded.r == 2 and loaded.use_dora and set(loaded.target_modules) == {"down_proj", "lm_head", "q_proj"}
    )


def test_adapter_config_checks_use_dora() -> None:
    lora_only = to_peft({k: v for k, v in ADAPTER.items() if "magnitude" not in k}, "llama3")
    with pytest.raises(
        ValueError, match=r"use_dora=True but the adapter has no lora_magnitude_vector tensors"
    ):
        peft_adapter_config(lora_only, rank=2, alpha=4.0, use_dora=True)
    with pytest.raises(ValueError, match=r"use_dora=False but the adapter has lora_magnitude_vector tensors"):
        peft_adapter_config(to_peft(ADAPTER, "llama3"), rank=2, alpha=4.0)
