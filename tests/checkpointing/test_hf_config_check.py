"""config.json that disagrees with the weights or the built model is reported: shapes raise, the rest warn."""

import json

import pytest
import torch
from ckpt_tiny_hf import write_hf_folder

from ftune.checkpointing import HFCheckpointer, meta_model

MODEL = {
    "_component_": "ftune.models.smollm2.smollm2",
    "vocab_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "embed_dim": 32,
    "intermediate_dim": 64,
    "max_seq_len": 64,
    "rope_base": 10000.0,
    "norm_eps": 1e-5,
}


def _edit(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_config_json_layers_disagreeing_with_the_weights_is_an_error(tmp_path):
    folder = write_hf_folder(tmp_path / "hf", "smollm2")
    _edit(folder, num_hidden_layers=3, intermediate_size=48)
    ckpt = HFCheckpointer(folder, tmp_path / "out")
    with pytest.raises(
        ValueError,
        match=r"config\.json' disagrees with the weights next to it: num_hidden_layers is 3 there, 2 in the "
        r"model; intermediate_size is 48 there, 64 in the model\. Fix config\.json",
    ):
        ckpt.load()


def test_config_json_against_the_model_section(tmp_path, caplog):
    folder = write_hf_folder(tmp_path / "hf", "smollm2")
    assert meta_model(folder, MODEL, dtype=torch.float32) is not None  # agreeing: silent
    assert not caplog.records
    _edit(folder, rope_theta=500000.0)
    with caplog.at_level("WARNING"):
        meta_model(folder, MODEL, dtype=torch.float32)
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder / 'config.json'} disagrees with the model built from the config's model section: "
        "rope_theta is 500000.0 there, 10000.0 in the model."
    ]
    with pytest.raises(ValueError, match=r"num_attention_heads is 4 there, 8 in the model"):
        meta_model(folder, {**MODEL, "num_heads": 8, "num_kv_heads": 4}, dtype=torch.float32)


def test_gemma3_rope_theta_is_the_global_layers_base(tmp_path, caplog):
    # Gemma 3's sliding-window layers use rope_local_base_freq (10k); config.json's rope_theta (1M)
    # is the global layers' base, which is what the check must compare (a false warning before).
    from ftune.checkpointing.hf_config_check import check_against_model
    from ftune.models.gemma3 import gemma3

    sizes = dict(vocab_size=64, num_layers=6, num_heads=2, num_kv_heads=1, embed_dim=16, intermediate_dim=32)
    model = gemma3(**sizes, max_seq_len=64, head_dim=8, sliding_window=4, query_pre_attn_scalar=8)
    config = {
        "num_hidden_layers": 6, "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
    }  # fmt: skip
    with caplog.at_level("WARNING"):
        check_against_model(config, tmp_path / "config.json", model)
    assert not caplog.records
    with caplog.at_level("WARNING"):
        check_against_model({**config, "rope_theta": 10_000.0}, tmp_path / "config.json", model)
    assert "rope_theta is 10000.0 there, 1000000.0 in the model" in caplog.records[0].getMessage()
