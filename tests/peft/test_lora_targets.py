"""Every LoRA target must name a module of the model: checked on the meta device, as `ftune validate` does."""

from __future__ import annotations

import pytest
import torch

from ftune.models.qwen3_moe import qwen3_moe
from ftune.models.smollm2 import smollm2
from ftune.peft import apply_lora
from ftune.peft.apply import target_problem

MOE = dict(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=32, intermediate_dim=48)
MOE |= dict(moe_intermediate_dim=16, num_experts=4, top_k=2, head_dim=16, max_seq_len=64)
DENSE = dict(
    vocab_size=64,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    embed_dim=32,
    intermediate_dim=48,
    max_seq_len=64,
)


def _meta(builder, sizes):
    with torch.device("meta"):
        return builder(**sizes)


def test_a_misspelt_target_on_an_moe_model_is_named_with_the_models_linears():
    problem = target_problem(_meta(qwen3_moe, MOE), ["q_proj", "v_proj", "expert"])
    assert problem == (
        "apply_lora: targets ['expert'] match no nn.Linear in MoETransformerDecoder; its nn.Linear names are "
        "['k_proj', 'o_proj', 'output', 'q_proj', 'v_proj'] and it has mixture-of-experts layers (target "
        "'experts'). Fix peft.targets in the config."
    )
    assert target_problem(_meta(qwen3_moe, MOE), ["q_proj", "v_proj", "experts"]) is None


def test_experts_on_a_dense_model_and_apply_lora_say_the_same():
    model = _meta(smollm2, DENSE)
    problem = target_problem(model, ["q_proj", "experts"])
    assert problem.startswith("apply_lora: target 'experts' matches no mixture-of-experts layer")
    with pytest.raises(ValueError, match=r"targets \['qproj'\] match no nn.Linear in TransformerDecoder"):
        apply_lora(smollm2(**DENSE), targets=["qproj"], rank=2, alpha=4)
    assert target_problem(model, ["q_proj", "gate_proj", "down_proj"]) is None
