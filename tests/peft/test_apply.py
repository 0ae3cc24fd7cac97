import inspect

import pytest
import torch
from conftest import ALL_TARGETS
from torch import nn

from ftune.peft import DoRALinear, LoRALinear, adapter_state_dict, apply_lora, trainable_params


@pytest.mark.parametrize("use_dora", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_logits_unchanged_right_after_swap(toy_model, tokens, use_dora: bool, tied: bool) -> None:
    model = toy_model(tied=tied)
    before = model(tokens)
    targets = [t for t in ALL_TARGETS if not (tied and t == "output")]
    swapped = apply_lora(model, targets=targets, rank=4, alpha=8.0, use_dora=use_dora)
    assert len(swapped) == 2 * 7 + (0 if tied else 1)
    assert "layers.1.mlp.down_proj" in swapped and ("output" in swapped) != tied
    layer_type = DoRALinear if use_dora else LoRALinear
    assert all(type(model.get_submodule(fqn)) is layer_type for fqn in swapped)
    torch.testing.assert_close(model(tokens), before, rtol=1e-6, atol=1e-6)


def test_only_adapters_train_and_frozen_base_gets_no_grad(toy_model, tokens, perturb) -> None:
    model = toy_model()
    apply_lora(model, targets=["q_proj", "v_proj", "down_proj"], rank=2, alpha=4.0, use_dora=True)
    perturb(model)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names == set(adapter_state_dict(model))
    assert len(names) == 2 * 3 * 3  # 2 layers x 3 targets x (lora_a, lora_b, magnitude)
    assert [id(p) for p in trainable_params(model)] == [id(p) for p in model.parameters() if p.requires_grad]
    model(tokens).logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert p.grad is None, name


def test_base_checkpoint_loads_unchanged(toy_model, tokens) -> None:
    reference = toy_model(seed=7)
    model = toy_model(seed=0)
    apply_lora(model, targets=["q_proj", "k_proj", "gate_proj", "output"], rank=4, alpha=8.0, use_dora=True)
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert result.unexpected_keys == []
    assert set(result.missing_keys) == set(adapter_state_dict(model))
    # DoRA magnitudes follow the loaded weights, so the fresh adapter is still a no-op.
    torch.testing.assert_close(model(tokens), reference(tokens), rtol=1e-5, atol=1e-5)


def test_unmatched_target_names_the_linears_and_leaves_model_untouched(toy_model) -> None:
    model = toy_model()
    with pytest.raises(
        ValueError, match=r"targets \['qproj'\] match no nn.Linear in ToyDecoder; its nn.Linear names"
    ) as e:
        apply_lora(model, targets=["q_proj", "qproj"], rank=4, alpha=8.0)
    assert "'down_proj', 'gate_proj', 'k_proj', 'o_proj', 'output', 'q_proj', 'up_proj', 'v_proj'" in str(
        e.value
    )
    assert "Fix peft.targets in the config" in str(e.value)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())


def test_output_target_on_tied_model_explains_tying(toy_model) -> None:
    with pytest.raises(
        ValueError, match=r"ties its output projection to tok_embeddings, so it has no `output` Linear"
    ):
        apply_lora(toy_model(tied=True), targets=["output"], rank=4, alpha=8.0)


def test_second_apply_says_already_adapted(toy_model) -> None:
    model = toy_model()
    apply_lora(model, targets=["q_proj"], rank=4, alpha=8.0)
    with pytest.raises(ValueError, match=r"Already adapted \(apply_lora runs once per model\): \['q_proj'\]"):
        apply_lora(model, targets=["q_proj"], rank=4, alpha=8.0)


@pytest.mark.parametrize("targets", ["q_proj", []])
def test_targets_must_be_a_nonempty_list(toy_model, targets) -> None:
    with pytest.raises(ValueError, match=r"targets must be a non-empty list of linear names, got"):
        apply_lora(toy_model(), targets=targets, rank=4, alpha=8.0)


def test_usable_as_config_component(toy_model) -> None:
    # YAML: peft: {_component_: ftune.peft.apply_lora, targets: [q_proj, v_proj], rank: 8, alpha: 16}
    params = inspect.signature(apply_lora).parameters
    assert [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD] == ["model"]
    required = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    assert required == ["targets", "rank", "alpha"]
    model = toy_model()
    node = {"targets": ["q_proj", "v_proj"], "rank": 8, "alpha": 16}
    assert apply_lora(model, **node) == [
        f"layers.{i}.attn.{n}" for i in range(2) for n in ("q_proj", "v_proj")
    ]
    assert model.layers[0].attn.q_proj.scale == 2.0


def test_untargeted_linears_stay_plain_and_frozen(toy_model) -> None:
    model = toy_model()
    apply_lora(model, targets=["v_proj"], rank=2, alpha=2.0, dropout=0.1)
    assert type(model.layers[0].attn.q_proj) is nn.Linear
    assert not model.layers[0].attn.q_proj.weight.requires_grad
    assert not model.tok_embeddings.weight.requires_grad
    assert model.layers[0].attn.v_proj.dropout.p == 0.1


@pytest.mark.parametrize("training", [False, True])
def test_swapped_layers_keep_the_training_mode(toy_model, training: bool) -> None:
    model = toy_model().train(training)
    apply_lora(model, targets=["q_proj"], rank=2, alpha=2.0, dropout=0.5)
    layer = model.layers[0].attn.q_proj
    assert layer.training is training and layer.dropout.training is training
