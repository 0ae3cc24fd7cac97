"""Mixtral conversion and sizes: the hub's `block_sparse_moe` per-expert files and transformers 5's
fused in-memory layout, a checkpointer save that transformers loads with the same logits, errors on
incomplete or doubled experts, config.json readers, total and active parameter counts."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import load_file

import ftune.models.mixtral as mixtral
from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.checkpointing.hf_config_check import check_against_model
from ftune.models import CONVERTERS, model_from_hf_config

transformers = pytest.importorskip("transformers")
CONV = CONVERTERS["mixtral"]


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, 128, shape, generator=torch.Generator().manual_seed(seed))


def test_files_layout_and_fused_in_memory_layout(tmp_path: Path) -> None:
    hf = build_tiny_hf("mixtral")
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")  # what save_pretrained writes: Mistral's names
    assert "model.layers.1.block_sparse_moe.experts.7.w3.weight" in saved
    assert "model.layers.1.block_sparse_moe.gate.weight" in saved
    from_files = CONV.hf_to_ftune(saved)
    live = hf.state_dict()  # transformers 5: mlp.gate, mlp.experts.gate_up_proj (E, 2I, H), down_proj
    from_live = CONV.hf_to_ftune(live)
    assert from_live["layers.1.mlp.experts.gate_up_proj"] is live["model.layers.1.mlp.experts.gate_up_proj"]
    assert from_files.keys() == from_live.keys()
    for key in from_files:
        assert torch.equal(from_files[key], from_live[key]), key
    written = CONV.ftune_to_hf(from_files)  # back to the files, bit for bit
    assert written.keys() == saved.keys()
    for key, value in saved.items():
        assert torch.equal(written[key], value), key
    # Writing hands out views of the stacked tensors, no copies: expert 3's up rows (w3).
    gate_up = from_files["layers.0.mlp.experts.gate_up_proj"]
    assert (
        written["model.layers.0.block_sparse_moe.experts.3.w3.weight"].data_ptr()
        == gate_up[3, 32:].data_ptr()
    )


def test_checkpointer_save_loads_in_transformers_with_equal_logits(tmp_path: Path) -> None:
    hf = build_tiny_hf("mixtral")
    hf.save_pretrained(tmp_path / "in")
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == "mixtral"
    # A trained model: change every expert's weights, so that transformers must read ftune's values.
    state = dict(loaded.model)
    gen = torch.Generator().manual_seed(0)
    for key in [k for k in state if ".experts." in k or ".gate." in k]:
        state[key] = state[key] + 0.05 * torch.randn(state[key].shape, generator=gen)
    out = ckpt.save(1, state)
    original = load_file(tmp_path / "in" / "model.safetensors")
    assert load_file(out / "model.safetensors").keys() == original.keys()
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert isinstance(reloaded, transformers.MixtralForCausalLM)
    model = load_hf(out).eval()
    tokens = _tokens((2, 40), seed=1)
    with torch.no_grad():
        theirs, ours = reloaded(tokens).logits, model(tokens)
        assert (theirs - ours).abs().max().item() <= 1e-4
        assert (theirs - hf(tokens).logits).abs().max().item() > 1e-3  # the changed weights arrived


def test_incomplete_or_doubled_experts_raise(tmp_path: Path) -> None:
    hf = build_tiny_hf("mixtral")
    hf.save_pretrained(tmp_path)
    files = load_file(tmp_path / "model.safetensors")
    missing = {k: v for k, v in files.items() if k != "model.layers.1.block_sparse_moe.experts.5.w3.weight"}
    with pytest.raises(
        KeyError,
        match=r"layer 1 has experts up to 7 but lacks \['model.layers.1.block_sparse_moe.experts.5.w3",
    ):
        CONV.hf_to_ftune(missing)
    live = hf.state_dict()
    doubled = {**files, "model.layers.0.mlp.experts.down_proj": live["model.layers.0.mlp.experts.down_proj"]}
    with pytest.raises(KeyError, match="layer 0 has both per-expert weights"):
        CONV.hf_to_ftune(doubled)
    two_gates = {**files, "model.layers.0.mlp.gate.weight": live["model.layers.0.mlp.gate.weight"]}
    with pytest.raises(KeyError, match="both hold layers.0.mlp.gate.weight"):
        CONV.hf_to_ftune(two_gates)
    with pytest.raises(KeyError, match="unknown key 'model.layers.0.mlp.gate_proj.weight'"):
        CONV.hf_to_ftune({**files, "model.layers.0.mlp.gate_proj.weight": torch.zeros(1)})


def test_config_json_readers(tmp_path: Path) -> None:
    config = build_tiny_hf("mixtral", router_aux_loss_coef=0.02, router_jitter_noise=0.1).config.to_dict()
    family, model = model_from_hf_config(config, device="meta")
    assert family == "mixtral" and model.aux_loss_coef == 0.02
    block = model.layers[0].mlp
    assert block.jitter_noise == 0.1 and block.experts.gate_up_proj.shape == (8, 64, 64)
    assert (block.gate.num_experts, block.gate.top_k, block.gate.norm_topk_prob) == (8, 2, True)
    assert model.layers[1].attn.sliding_window == 24
    # The published files: no jitter or aux keys in some releases, `sliding_window: null`, the alias
    # num_experts; missing MoE keys take MixtralConfig's defaults, as transformers reads them.
    sparse = {k: v for k, v in config.items() if k not in ("router_aux_loss_coef", "router_jitter_noise")}
    sparse = {**sparse, "sliding_window": None, "num_experts": 4, "num_local_experts": None}
    _, model = model_from_hf_config(sparse, device="meta")
    assert model.aux_loss_coef == 0.001 and model.layers[0].mlp.jitter_noise == 0.0
    assert model.layers[0].mlp.gate.num_experts == 4 and model.layers[0].attn.sliding_window is None
    with pytest.raises(ValueError, match=r"jitter_noise must be in \[0, 1\), got 1.5"):
        model_from_hf_config({**config, "router_jitter_noise": 1.5}, device="meta")


def test_config_json_checked_against_a_built_model(tmp_path: Path) -> None:
    config = build_tiny_hf("mixtral", sliding_window=None).config.to_dict()
    check_against_model(config, tmp_path / "config.json", mixtral.mixtral_tiny())  # the same sizes
    with pytest.raises(ValueError, match=r"num_experts_per_tok is 4 there, 2 in the model \(model.top_k\)"):
        check_against_model(
            {**config, "num_experts_per_tok": 4}, tmp_path / "config.json", mixtral.mixtral_tiny()
        )
    with pytest.raises(ValueError, match=r"sliding_window is 24 there, None in the model"):
        check_against_model(
            {**config, "sliding_window": 24}, tmp_path / "config.json", mixtral.mixtral_tiny()
        )


@pytest.mark.parametrize(
    ("name", "total", "active", "coef"),
    [
        ("mixtral_8x7b", 46_702_792_704, 12_879_925_248, 0.02),  # "46.7B, 12.9B active"
        ("mixtral_8x22b", 140_630_071_296, 39_161_468_928, 0.001),  # "141B, 39B active"
    ],
)
def test_published_sizes_total_and_active(name: str, total: int, active: int, coef: float) -> None:
    with torch.device("meta"):
        model = getattr(mixtral, name)()
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    assert sum(p.numel() for p in model.parameters()) == total
    gate = model.layers[0].mlp.gate
    assert (gate.num_experts, gate.top_k, gate.norm_topk_prob) == (8, 2, True)
    assert model.layers[0].attn.head_dim == 128 and model.layers[0].attn.num_kv_heads == 8
    assert model.layers[0].attn.rope.base == 1_000_000.0 and model.aux_loss_coef == coef
    assert total - experts + experts * gate.top_k // gate.num_experts == active
