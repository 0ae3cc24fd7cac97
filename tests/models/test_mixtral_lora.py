"""LoRA on Mixtral: attention linears and the stacked experts (the MoE modules are Qwen3-MoE's, so
the adapters are too); only adapters train, activation checkpointing changes no gradient, and PEFT
loads the adapters onto transformers' MixtralForCausalLM with ftune's logits."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import save_file

from ftune.checkpointing import load_hf
from ftune.models.mixtral import mixtral_tiny
from ftune.peft import adapter_state_dict, apply_lora, peft_adapter_config, to_peft, trainable_params
from ftune.peft.moe_lora import expert_adapter_state_dict, from_peft_experts, to_peft_experts
from ftune.training import apply_activation_checkpointing

pytestmark = pytest.mark.usefixtures("one_thread")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "experts"]


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
    model = mixtral_tiny()
    swapped = apply_lora(model, targets=TARGETS, rank=4, alpha=8.0)
    assert "layers.1.mlp.experts" in swapped and "layers.0.attn.o_proj" in swapped
    return model


def test_adapters_start_as_a_no_op_and_only_they_train() -> None:
    torch.manual_seed(0)
    base = mixtral_tiny()
    tokens = _tokens((2, 40), seed=1)
    with torch.no_grad():
        before = base(tokens)
    apply_lora(base, targets=TARGETS, rank=4, alpha=8.0)
    with torch.no_grad():
        assert torch.equal(base(tokens), before)
    names = {n for n, p in base.named_parameters() if p.requires_grad}
    assert all(".lora_" in n for n in names) and len(names) == 2 * 2 * (4 + 2)  # layers x (A, B) x targets
    assert "layers.0.mlp.gate.weight" not in names  # the router is not adapted
    experts = base.layers[0].mlp.experts
    assert experts.lora.gate_up_proj.lora_a.weight.shape == (8, 4, 64)
    assert experts.lora.gate_up_proj.lora_b.weight.shape == (8, 64, 4)  # 2 x the expert width 32
    assert experts.lora.down_proj.lora_a.weight.shape == (8, 4, 32)


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
        assert a[name].abs().sum() > 0, name  # every adapter, A and B, gets a gradient
    assert len(trainable_params(plain)) == len(a)


def test_peft_loads_the_adapters_onto_transformers(tmp_path: Path) -> None:
    # The adapter ftune trains, written in PEFT's layout (attention: LoRA modules; experts:
    # target_parameters on transformers 5's fused mlp.experts tensors), gives ftune's logits.
    import peft

    hf = build_tiny_hf("mixtral")
    hf.save_pretrained(tmp_path / "base")
    model = load_hf(tmp_path / "base").eval()
    apply_lora(model, targets=TARGETS, rank=4, alpha=8.0)
    _randomise_adapters(model)
    attention = to_peft(adapter_state_dict(model), "mixtral")
    assert "base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight" in attention
    experts = expert_adapter_state_dict(model)
    assert len(experts) == 2 * 2 * 2  # layers x (gate_up, down) x (A, B)
    tensors = {**attention, **to_peft_experts(experts)}
    back = from_peft_experts({k: v for k, v in tensors.items() if ".mlp.experts." in k}, num_experts=8)
    assert back.keys() == experts.keys() and all(torch.equal(back[k], experts[k]) for k in back)
    config = peft_adapter_config(attention, rank=4, alpha=8.0)
    config["target_parameters"] = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    (tmp_path / "adapter").mkdir()
    save_file(
        {k: v.contiguous() for k, v in tensors.items()}, tmp_path / "adapter" / "adapter_model.safetensors"
    )
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(config))

    loaded = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    assert set(peft.get_peft_model_state_dict(loaded)) == set(tensors)  # every tensor has its place
    tokens = _tokens((2, 40), seed=4)
    with torch.no_grad():
        expected = loaded(tokens).logits
        got = model(tokens)
        with loaded.disable_adapter():
            plain = loaded(tokens).logits
    assert (got - expected).abs().max().item() <= 1e-4
    assert (plain - expected).abs().max().item() > 1e-2  # the adapters change the logits
