import pytest
import torch
from conftest import ALL_TARGETS
from torch import nn

from ftune.checkpointing.adapter import merged_state_dict
from ftune.peft import LoRALinear, adapter_state_dict, apply_lora


@pytest.mark.parametrize("use_dora", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_merge_gives_adapted_logits(toy_model, tokens, perturb, use_dora: bool, tied: bool) -> None:
    # The state-dict merge (checkpointers, inference) loaded into a plain model computes what the
    # adapted model computes, and each merged weight is the layer's own merged_weight().
    model = toy_model(tied=tied)
    targets = [t for t in ALL_TARGETS if not (tied and t == "output")]
    apply_lora(model, targets=targets, rank=4, alpha=8.0, use_dora=use_dora)
    perturb(model)
    adapted = model(tokens)
    assert (adapted - toy_model(tied=tied)(tokens)).abs().max() > 1e-2  # the adapters do something
    state = merged_state_dict(model.state_dict(), {"alpha": 8.0})
    for fqn, layer in ((f, m) for f, m in model.named_modules() if isinstance(m, LoRALinear)):
        assert torch.equal(state[f"{fqn}.weight"], layer.merged_weight()), fqn
    plain = toy_model(tied=tied, seed=3)
    assert set(state) == set(plain.state_dict())
    plain.load_state_dict(state)
    assert type(plain.layers[0].attn.k_proj) is nn.Linear and plain.layers[0].attn.k_proj.bias is not None
    torch.testing.assert_close(plain(tokens), adapted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("use_dora", [False, True])
def test_merged_state_dict_is_base_format_and_does_not_mutate(
    toy_model, tokens, perturb, use_dora: bool
) -> None:
    model = toy_model()
    apply_lora(model, targets=["q_proj", "k_proj", "up_proj", "output"], rank=4, alpha=8.0, use_dora=use_dora)
    perturb(model)
    adapted = model(tokens)
    adapters_before = {k: v.clone() for k, v in adapter_state_dict(model).items()}
    state = merged_state_dict(model.state_dict(), {"alpha": 8.0})
    fresh = toy_model(seed=3)
    assert list(state) == list(fresh.state_dict())
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh(tokens), adapted, rtol=1e-5, atol=1e-5)
    # The adapted model is untouched: still adapted, same adapter values, same logits.
    assert isinstance(model.layers[0].attn.q_proj, LoRALinear)
    after = adapter_state_dict(model)
    assert after.keys() == adapters_before.keys()
    assert all(torch.equal(after[k], adapters_before[k]) for k in after)
    assert torch.equal(model(tokens), adapted)


def test_adapter_state_dict_has_only_adapter_keys(toy_model) -> None:
    model = toy_model()
    apply_lora(model, targets=["q_proj", "output"], rank=4, alpha=8.0, use_dora=True)
    state = adapter_state_dict(model)
    assert sorted(state) == sorted(
        [
            f"layers.{i}.attn.q_proj.{s}"
            for i in range(2)
            for s in ("lora_a.weight", "lora_b.weight", "magnitude")
        ]
        + ["output.lora_a.weight", "output.lora_b.weight", "output.magnitude"]
    )
    assert state["output.magnitude"].shape == (96,) and not state["output.magnitude"].requires_grad
    lora = toy_model()
    apply_lora(lora, targets=["v_proj"], rank=2, alpha=2.0)
    assert sorted(adapter_state_dict(lora)) == sorted(
        f"layers.{i}.attn.v_proj.lora_{ab}.weight" for i in range(2) for ab in "ab"
    )
    assert adapter_state_dict(toy_model()) == {}
