"""LoRA on Qwen3-MoE: attention linears and the stacked experts; merged weights, gradients,
activation checkpointing, and PEFT loading the adapters onto transformers' model."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import save_file

from ftune.checkpointing import load_hf
from ftune.models.qwen3_moe import qwen3_moe_tiny
from ftune.models.smollm2 import smollm2
from ftune.peft import adapter_state_dict, apply_lora, peft_adapter_config, to_peft, trainable_params
from ftune.peft.moe_lora import (
    LoRAGroupedExperts,
    expert_adapter_state_dict,
    from_peft_experts,
    to_peft_experts,
)
from ftune.training import apply_activation_checkpointing

pytestmark = pytest.mark.usefixtures("one_thread")
TARGETS = ["q_proj", "v_proj", "experts"]


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, 128, shape, generator=torch.Generator().manual_seed(seed))


def _randomise_adapters(model: torch.nn.Module, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_b." in name:  # B starts at zero: give the update a value to check
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def _lora_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = qwen3_moe_tiny()
    swapped = apply_lora(model, targets=TARGETS, rank=4, alpha=8.0)
    assert "layers.1.mlp.experts" in swapped and "layers.0.attn.q_proj" in swapped
    return model


def test_adapters_start_as_a_no_op_and_only_they_train() -> None:
    torch.manual_seed(0)
    base = qwen3_moe_tiny()
    tokens = _tokens((2, 40), seed=1)
    with torch.no_grad():
        before = base(tokens)
    apply_lora(base, targets=TARGETS, rank=4, alpha=8.0)
    with torch.no_grad():
        assert torch.equal(base(tokens), before)
    names = {n for n, p in base.named_parameters() if p.requires_grad}
    assert "layers.0.mlp.experts.lora.gate_up_proj.lora_a.weight" in names
    assert "layers.0.mlp.experts.lora.down_proj.lora_b.weight" in names
    assert all(".lora_" in n for n in names) and len(names) == 2 * 2 * (2 + 2)
    experts = base.layers[0].mlp.experts
    assert experts.lora.gate_up_proj.lora_a.weight.shape == (8, 4, 64)
    assert experts.lora.gate_up_proj.lora_b.weight.shape == (8, 64, 4)  # 2 * hidden_dim
    assert experts.lora.down_proj.lora_a.weight.shape == (8, 4, 32)


def test_forward_equals_the_merged_weights() -> None:
    model = _lora_model()
    _randomise_adapters(model)
    tokens = _tokens((2, 40), seed=2)
    with torch.no_grad():
        got = model(tokens)
        for layer in model.layers:
            experts = layer.mlp.experts
            merged = {name: experts.merged_weight(name) for name in ("gate_up_proj", "down_proj")}
            experts.adapter_enabled = False
            experts.gate_up_proj.copy_(merged["gate_up_proj"])
            experts.down_proj.copy_(merged["down_proj"])
            for proj in ("q_proj", "v_proj"):
                linear = getattr(layer.attn, proj)
                linear.weight.copy_(linear.merged_weight())
                linear.adapter_enabled = False
        assert (model(tokens) - got).abs().max().item() <= 1e-5
        enabled = model(tokens)  # adapters off: the merged base alone gives the adapted logits
    assert (enabled - got).abs().max().item() <= 1e-5


def _grads(model: torch.nn.Module, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 128), tokens[:, 1:].reshape(-1))
    (loss + model.aux_loss_coef * model.aux_loss()).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_expert_adapter_gradients_and_activation_checkpointing() -> None:
    tokens = _tokens((2, 40), seed=3)
    plain, checkpointed = _lora_model(), _lora_model()
    _randomise_adapters(plain)
    _randomise_adapters(checkpointed)
    assert apply_activation_checkpointing(checkpointed) == 2
    a, b = _grads(plain.train(), tokens), _grads(checkpointed.train(), tokens)
    assert a.keys() == b.keys() == {n for n, p in plain.named_parameters() if p.requires_grad}
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=0, atol=1e-6), name
    assert a["layers.0.mlp.experts.lora.down_proj.lora_a.weight"].abs().sum() > 0
    assert len(trainable_params(plain)) == len(a)


def test_peft_loads_the_adapters_onto_transformers(tmp_path: Path) -> None:
    # The adapter ftune trains, written in PEFT's layout, computes the same logits in
    # transformers + peft (target_parameters on the fused expert weights of transformers 5).
    import peft

    hf = build_tiny_hf("qwen3_moe")
    hf.save_pretrained(tmp_path / "base")
    model = load_hf(tmp_path / "base").eval()
    apply_lora(model, targets=TARGETS, rank=4, alpha=8.0)
    _randomise_adapters(model)
    state = model.state_dict()
    tensors = to_peft(adapter_state_dict(model), "qwen3_moe")
    experts = expert_adapter_state_dict(model)
    assert experts.keys() == {k for k in state if ".experts.lora." in k} and len(experts) == 2 * 2 * 2
    tensors.update(to_peft_experts(experts))
    back = from_peft_experts({k: v for k, v in tensors.items() if ".mlp.experts." in k}, num_experts=8)
    assert back.keys() == experts.keys() and all(torch.equal(back[k], experts[k]) for k in back)
    config = peft_adapter_config(to_peft(adapter_state_dict(model), "qwen3_moe"), rank=4, alpha=8.0)
    config["target_parameters"] = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    (tmp_path / "adapter").mkdir()
    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, tmp_path / "adapter" / "adapter_model.safetensors"
    )
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(config))

    loaded = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    expected_keys = set(peft.get_peft_model_state_dict(loaded))
    assert expected_keys == set(tensors)  # every tensor has its place, none is missing
    tokens = _tokens((2, 40), seed=4)
    with torch.no_grad():
        expected = loaded(tokens).logits
        got = model(tokens)
    assert (got - expected).abs().max().item() <= 1e-4
    with torch.no_grad(), loaded.disable_adapter():
        plain = loaded(tokens).logits
    assert (plain - expected).abs().max().item() > 1e-2  # the adapters change the logits


def test_experts_target_errors() -> None:
    torch.manual_seed(0)
    dense = smollm2(
        vocab_size=64,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=16,
        intermediate_dim=24,
        max_seq_len=32,
    )
    with pytest.raises(ValueError, match="target 'experts' matches no mixture-of-experts layer"):
        apply_lora(dense, targets=["q_proj", "experts"], rank=2, alpha=4.0)
    assert type(dense.layers[0].attn.q_proj) is torch.nn.Linear  # nothing swapped
    with pytest.raises(ValueError, match="target 'experts' takes LoRA or QLoRA, not DoRA"):
        apply_lora(qwen3_moe_tiny(), targets=["experts"], rank=2, alpha=4.0, use_dora=True)
    model = qwen3_moe_tiny()
    apply_lora(model, targets=["experts"], rank=2, alpha=4.0)
    assert isinstance(model.layers[0].mlp.experts, LoRAGroupedExperts)
    with pytest.raises(KeyError, match="is not a PEFT expert-adapter key"):
        from_peft_experts({"base_model.model.lm_head.lora_A.weight": torch.zeros(1)}, num_experts=8)
    with pytest.raises(KeyError, match="is not an expert-adapter key"):
        to_peft_experts({"layers.0.attn.q_proj.lora_a.weight": torch.zeros(1)})


def test_adapters_disabled_switches_the_expert_adapters_off_too() -> None:
    """The reference pass of DPO and GRPO with adapters (`adapters_disabled`) runs the frozen base,
    experts included."""
    from ftune.peft.disable import adapters_disabled

    torch.manual_seed(0)
    base = qwen3_moe_tiny()
    tokens = _tokens((2, 24), seed=3)
    with torch.no_grad():
        want = base(tokens)
    apply_lora(base, targets=["experts"], rank=4, alpha=8.0)  # the experts' adapters alone
    _randomise_adapters(base)
    with torch.no_grad():
        assert not torch.allclose(base(tokens), want)
        with adapters_disabled(base) as n:
            assert n == 2  # the two layers' expert adapters
            assert torch.equal(base(tokens), want)
        assert not torch.allclose(base(tokens), want)  # back on after the block
