"""Qwen3-MoE conversion and sizes: HF's per-expert files and transformers 5's fused in-memory layout,
errors on incomplete or doubled experts, config.json readers, active parameter counts."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import load_file

import ftune.models.qwen3_moe as qwen3_moe
from ftune.checkpointing import load_hf
from ftune.models import CONVERTERS, model_from_hf_config

CONV = CONVERTERS["qwen3_moe"]


def test_fused_in_memory_layout_is_a_rename_and_writes_the_files_layout(tmp_path: Path) -> None:
    hf = build_tiny_hf("qwen3_moe")
    hf.save_pretrained(tmp_path)
    live = hf.state_dict()  # transformers 5: mlp.experts.gate_up_proj (E, 2I, H), down_proj (E, H, I)
    ours = CONV.hf_to_ftune(live)
    assert ours["layers.1.mlp.experts.gate_up_proj"] is live["model.layers.1.mlp.experts.gate_up_proj"]
    written = CONV.ftune_to_hf(ours)
    saved = load_file(tmp_path / "model.safetensors")  # what save_pretrained writes: one key per expert
    assert written.keys() == saved.keys()
    for key, value in saved.items():
        assert torch.equal(written[key], value), key
    # Writing hands out views of the stacked tensors, no copies.
    gate_up = ours["layers.0.mlp.experts.gate_up_proj"]
    assert written["model.layers.0.mlp.experts.3.up_proj.weight"].data_ptr() == gate_up[3, 32:].data_ptr()


def test_incomplete_or_doubled_experts_raise(tmp_path: Path) -> None:
    hf = build_tiny_hf("qwen3_moe")
    hf.save_pretrained(tmp_path)
    files = load_file(tmp_path / "model.safetensors")
    missing = {k: v for k, v in files.items() if k != "model.layers.1.mlp.experts.5.up_proj.weight"}
    with pytest.raises(
        KeyError, match=r"layer 1 has experts up to 7 but lacks \['model.layers.1.mlp.experts.5"
    ):
        CONV.hf_to_ftune(missing)
    doubled = {
        **files,
        "model.layers.0.mlp.experts.down_proj": hf.state_dict()["model.layers.0.mlp.experts.down_proj"],
    }
    with pytest.raises(KeyError, match="layer 0 has both per-expert weights"):
        CONV.hf_to_ftune(doubled)
    with pytest.raises(KeyError, match="unknown key 'model.layers.0.mlp.shared_expert.up_proj.weight'"):
        CONV.hf_to_ftune({**files, "model.layers.0.mlp.shared_expert.up_proj.weight": torch.zeros(1)})


def test_config_json_in_both_spellings_builds_the_same_model(tmp_path: Path) -> None:
    config = build_tiny_hf("qwen3_moe", router_aux_loss_coef=0.02).config.to_dict()
    assert config["num_local_experts"] == 8 and "num_experts" not in config  # how transformers 5 writes it
    published = {k: v for k, v in config.items() if k != "num_local_experts"} | {"num_experts": 8}
    for cfg in (config, published):
        family, model = model_from_hf_config(cfg, device="meta")
        assert family == "qwen3_moe" and model.aux_loss_coef == 0.02
        assert model.layers[0].mlp.experts.gate_up_proj.shape == (8, 64, 64)
        assert model.layers[0].mlp.gate.top_k == 2 and model.layers[0].mlp.gate.norm_topk_prob
    with pytest.raises(ValueError, match="missing 'num_experts' / 'num_local_experts'"):
        model_from_hf_config({k: v for k, v in config.items() if k != "num_local_experts"}, device="meta")


def test_mlp_only_layers_keep_a_dense_feed_forward(tmp_path: Path) -> None:
    hf = build_tiny_hf("qwen3_moe", mlp_only_layers=[1])
    hf.save_pretrained(tmp_path)
    model = load_hf(tmp_path)
    assert hasattr(model.layers[1].mlp, "gate_proj") and hasattr(model.layers[0].mlp, "experts")
    tokens = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(tokens) - hf(tokens).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("qwen3_moe_30b_a3b", 30_532_122_624, 3_353_032_704),  # "30.5B, 3.3B activated"
        ("qwen3_moe_235b_a22b", 235_093_634_560, 22_190_763_520),  # "235B, 22B activated"
    ],
)
def test_published_sizes_total_and_active(name: str, total: int, active: int) -> None:
    with torch.device("meta"):
        model = getattr(qwen3_moe, name)()
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    assert sum(p.numel() for p in model.parameters()) == total
    gate = model.layers[0].mlp.gate
    assert (gate.num_experts, gate.top_k) == (128, 8)
    assert total - experts + experts * gate.top_k // gate.num_experts == active


def test_config_json_checked_against_a_built_model(tmp_path: Path) -> None:
    from ftune.checkpointing.hf_config_check import check_against_model

    config = build_tiny_hf("qwen3_moe").config.to_dict()
    check_against_model(config, tmp_path / "config.json", qwen3_moe.qwen3_moe_tiny())  # the same sizes
    with pytest.raises(ValueError, match=r"num_experts_per_tok is 4 there, 2 in the model \(model.top_k\)"):
        check_against_model(
            {**config, "num_experts_per_tok": 4}, tmp_path / "config.json", qwen3_moe.qwen3_moe_tiny()
        )
