"""Family detection from config.json, building from it, and loading HF folders."""

import json
import logging
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf

from ftune.checkpointing import load_hf
from ftune.models import family_from_hf_config, model_from_hf_config

BASE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
)
SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)


@pytest.mark.parametrize(
    ("config", "family"),
    [
        (dict(model_type="llama", rope_theta=10_000.0), "llama2"),
        (dict(model_type="llama", rope_theta=500_000.0), "llama3"),
        (dict(model_type="llama", rope_parameters=dict(rope_type="default", rope_theta=500_000.0)), "llama3"),
        (
            dict(model_type="llama", rope_theta=500_000.0, rope_scaling=dict(rope_type="llama3", **SCALING)),
            "llama3_1",
        ),
        (dict(model_type="llama", rope_theta=5e5, rope_scaling=dict(type="llama3", **SCALING)), "llama3_1"),
        (
            dict(model_type="llama", rope_parameters=dict(rope_type="llama3", rope_theta=5e5, **SCALING)),
            "llama3_1",
        ),
        (
            dict(
                model_type="llama", tie_word_embeddings=True, rope_scaling=dict(rope_type="llama3", **SCALING)
            ),
            "llama3_2",
        ),
        (dict(model_type="llama", rope_theta=100_000.0, tie_word_embeddings=True), "smollm2"),
        (dict(architectures=["Qwen2ForCausalLM"], rope_theta=1e6), "qwen2_5"),
        (dict(model_type="mistral"), "mistral"),
    ],
)
def test_family_from_hf_config(config: dict, family: str) -> None:
    assert family_from_hf_config({**BASE, **config}) == family
    built_family, model = model_from_hf_config({**BASE, **config}, device="meta")
    assert built_family == family
    assert (model.output is None) == config.get("tie_word_embeddings", False)


def test_model_from_hf_config_uses_every_size() -> None:
    config = dict(
        BASE,
        model_type="llama",
        head_dim=16,  # != hidden_size / heads = 8
        rope_theta=500_000.0,
        rope_scaling=dict(rope_type="llama3", **SCALING),
        max_position_embeddings=4096,
    )
    family, model = model_from_hf_config(config, dtype=torch.bfloat16, device="meta")
    assert family == "llama3_1" and model.max_seq_len == 4096
    attn = model.layers[0].attn
    assert attn.q_proj.weight.shape == (4 * 16, 32) and attn.k_proj.weight.shape == (2 * 16, 32)
    assert attn.q_proj.weight.dtype == torch.bfloat16 and attn.q_proj.weight.is_meta
    assert attn.rope.base == 500_000.0 and attn.rope.scaling.original_max_seq_len == 64
    assert model.norm.eps == 1e-5 and len(model.layers) == 2
    assert torch.get_default_dtype() == torch.float32  # restored


def test_unsupported_configs_raise() -> None:
    with pytest.raises(
        ValueError, match=r"Unsupported architecture: config.json has model_type='gpt2'.*ftune supports"
    ):
        model_from_hf_config({**BASE, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(ValueError, match=r"Unsupported RoPE scaling: config.json has rope_type='yarn'"):
        model_from_hf_config(
            {**BASE, "model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
        )
    with pytest.raises(ValueError, match=r"config.json is missing 'intermediate_size'"):
        model_from_hf_config(
            {k: v for k, v in BASE.items() if k != "intermediate_size"} | {"model_type": "llama"}
        )
    with pytest.raises(ValueError, match=r"Unsupported config.json hidden_act='gelu'"):
        model_from_hf_config({**BASE, "model_type": "llama", "hidden_act": "gelu"})
    with pytest.raises(
        ValueError, match=r"Unsupported config.json attention_bias=true for model_type 'llama'"
    ):
        model_from_hf_config({**BASE, "model_type": "llama", "attention_bias": True})
    with pytest.raises(ValueError, match=r"rope scaling of type 'llama3' is missing 'low_freq_factor'"):
        model_from_hf_config(
            {**BASE, "model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
        )
    with pytest.raises(
        ValueError, match=r"llama2\(\): num_heads \(4\) must be a multiple of num_kv_heads \(3\)"
    ):
        model_from_hf_config({**BASE, "model_type": "llama", "num_key_value_heads": 3})


def test_sliding_window_is_modelled_for_mistral_and_reported_elsewhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        _, mistral = model_from_hf_config(
            {**BASE, "model_type": "mistral", "sliding_window": 16}, device="meta"
        )
        _, off = model_from_hf_config(
            {**BASE, "model_type": "mistral", "sliding_window": 16, "use_sliding_window": False},
            device="meta",
        )
    assert {layer.attn.sliding_window for layer in mistral.layers} == {16}
    assert {layer.attn.sliding_window for layer in off.layers} == {None}
    assert "sliding_window" not in caplog.text
    with caplog.at_level(logging.WARNING):
        model_from_hf_config(
            {**BASE, "model_type": "qwen2", "sliding_window": 16, "use_sliding_window": True}, device="meta"
        )
    assert "sliding_window=16" in caplog.text


def test_sharded_checkpoint_with_head_dim_loads_in_bf16(tmp_path: Path) -> None:
    hf = build_tiny_hf("llama3", head_dim=32)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2

    model = load_hf(tmp_path)
    tokens = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(tokens) - hf(tokens).logits).abs().max() <= 1e-4
    assert not any(p.is_meta for p in model.parameters())
    with torch.no_grad():  # weights assigned from the mmap are ordinary, writable tensors
        model.norm.weight.add_(1.0)

    bf16 = load_hf(tmp_path, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    assert torch.equal(bf16.layers[1].mlp.up_proj.weight, hf.model.layers[1].mlp.up_proj.weight.bfloat16())


def test_load_hf_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"config.json' is missing, so the model family is unknown"):
        load_hf(tmp_path)
    hf = build_tiny_hf("smollm2")
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())

    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    # config.json that disagrees with the weights next to it is refused before anything is built
    with pytest.raises(
        ValueError,
        match=r"config.json' disagrees with the weights next to it: num_hidden_layers is 3 there, 2",
    ):
        load_hf(tmp_path)

    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 100}))
    with pytest.raises(
        ValueError,
        match=r"config.json' disagrees with the weights next to it: intermediate_size is 100 there, 96 in",
    ):
        load_hf(tmp_path)

    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"no Hugging Face weights in .* the folder holds \['config.json'"
    ):
        load_hf(tmp_path)
