"""config.json that disagrees with the weights or the built model is refused: every field that changes
what the model computes (shapes, RoPE in both of transformers' layouts, norm eps, tied embeddings,
attention window) is an error; only the context length warns."""

import json

import pytest
import torch
from ckpt_tiny_hf import write_hf_folder

from ftune.checkpointing import HFCheckpointer, meta_model
from ftune.checkpointing.hf_config_check import check_against_model
from ftune.models import model_from_hf_config
from ftune.models.gemma3 import gemma3

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
    with caplog.at_level("WARNING"):  # the context length is a limit, not a computation: a warning
        meta_model(folder, {**MODEL, "max_seq_len": 32}, dtype=torch.float32)
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder / 'config.json'} disagrees with the model built from the config's model section: "
        "max_position_embeddings is 64 there, 32 in the model."
    ]
    with pytest.raises(
        ValueError, match=r"num_attention_heads is 4 there, 8 in the model \(model\.num_heads\)"
    ):
        meta_model(folder, {**MODEL, "num_heads": 8, "num_kv_heads": 4}, dtype=torch.float32)


def _old_layout(folder):
    """Rewrite a transformers-5 config.json (`rope_parameters`) as transformers 4 wrote it."""
    config = json.loads((folder / "config.json").read_text())
    rope = config.pop("rope_parameters")
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    config.update(
        rope_theta=rope["rope_theta"], rope_scaling=None if scaling["rope_type"] == "default" else scaling
    )
    (folder / "config.json").write_text(json.dumps(config))


def test_rope_base_differing_in_the_transformers_5_layout_is_an_error(tmp_path):
    folder = write_hf_folder(tmp_path / "hf", "smollm2")  # save_pretrained of the installed transformers
    written = json.loads((folder / "config.json").read_text())
    if "rope_parameters" not in written:
        pytest.skip("the installed transformers writes the old layout")
    assert "rope_theta" not in written and written["rope_parameters"]["rope_theta"] == 10000.0
    with pytest.raises(
        ValueError,
        match=rf"^'{tmp_path}/hf/config\.json' disagrees with the model built from the config's model section: "
        r"rms_norm_eps is 1e-05 there, 1e-06 in the model \(model\.norm_eps\); "
        r"rope_parameters\.rope_theta is 10000\.0 there, 500000\.0 in the model \(model\.rope_base\)\. Each changes what the model "
        r"computes.*Set each model argument named in parentheses to config\.json's value, or leave the "
        r"model section out of the config \(`~model` on the command line\).*Fix config\.json",
    ):
        meta_model(folder, {**MODEL, "rope_base": 500000.0, "norm_eps": 1e-6}, dtype=torch.float32)


def test_rope_base_differing_in_the_old_layout_is_an_error(tmp_path):
    folder = write_hf_folder(tmp_path / "hf", "smollm2")
    _old_layout(folder)
    assert meta_model(folder, MODEL, dtype=torch.float32) is not None  # agreeing: silent
    with pytest.raises(
        ValueError,
        match=r"config\.json' disagrees with the model built from the config's model section: tie_word_embeddings "
        r"is True there, False in the model \(model\.tie_word_embeddings\); rope_theta is 10000\.0 there, "
        r"500000\.0 in the model \(model\.rope_base\)\. ",
    ):
        meta_model(
            folder, {**MODEL, "rope_base": 500000.0, "tie_word_embeddings": False}, dtype=torch.float32
        )


def _llama3_scaled(**changes):
    """A transformers-5 config.json of a tiny Llama 3.1 (llama3 RoPE scaling), with `changes`."""
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}  # fmt: skip
    config = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "rope_parameters": rope}  # fmt: skip
    return {**config, **changes}


def test_rope_scaling_in_both_layouts(tmp_path):
    config = _llama3_scaled()
    _, model = model_from_hf_config(config, device="meta")  # llama3_1
    path = tmp_path / "config.json"
    check_against_model(config, path, model)  # agreeing: silent
    rope = config["rope_parameters"]
    old = {**config, "rope_theta": rope["rope_theta"], "rope_scaling": {**rope, "rope_theta": None}}
    check_against_model({k: v for k, v in old.items() if k != "rope_parameters"}, path, model)
    with pytest.raises(
        ValueError, match=r"rope_parameters\.factor is 32\.0 there, 8\.0 in the model \(model: scale_factor"
    ):
        check_against_model(_llama3_scaled(rope_parameters={**rope, "factor": 32.0}), path, model)
    with pytest.raises(ValueError, match=r"rope_scaling\.factor is 32\.0 there, 8\.0 in the model"):
        check_against_model(
            {**old, "rope_parameters": None, "rope_scaling": {**rope, "factor": 32.0}}, path, model
        )
    plain = {"rope_type": "default", "rope_theta": 500000.0}
    with pytest.raises(
        ValueError, match=r"rope_parameters\.rope_type is 'default' there, 'llama3' in the model"
    ):
        check_against_model(_llama3_scaled(rope_parameters=plain), path, model)
    with pytest.raises(ValueError, match=r"rope_scaling \(none\) is 'default' there, 'llama3' in the model"):
        check_against_model({**old, "rope_parameters": None, "rope_scaling": None}, path, model)
    # Both layouts in one file, saying two things: which one a reader takes is not ours to guess.
    with pytest.raises(
        ValueError,
        match=r"config\.json states rope_theta is 10000\.0 and rope_parameters\.rope_theta is 500000\.0, "
        r"which contradict each other",
    ):
        check_against_model({**config, "rope_theta": 10000.0}, path, model)


def test_gemma3_rope_theta_is_the_global_layers_base(tmp_path, caplog):
    # Gemma 3's sliding-window layers use rope_local_base_freq (10k); config.json's rope_theta (1M)
    # is the global layers' base, which is what the check must compare (a false warning before).
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
    with pytest.raises(ValueError, match=r"rope_theta is 10000\.0 there, 1000000\.0 in the model"):
        check_against_model({**config, "rope_theta": 10_000.0}, tmp_path / "config.json", model)
    with pytest.raises(
        ValueError,
        match=r"rope_local_base_freq is 1000\.0 there, 10000\.0 in the model \(model\.local_rope_base\)",
    ):
        check_against_model({**config, "rope_local_base_freq": 1000.0}, tmp_path / "config.json", model)
    # transformers 5: one rope_parameters entry per layer type.
    v5 = {k: v for k, v in config.items() if k not in ("rope_theta", "rope_local_base_freq")}
    v5["rope_parameters"] = {
        "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    check_against_model(
        {**v5, "sliding_window": 4, "query_pre_attn_scalar": 8}, tmp_path / "config.json", model
    )
    assert not caplog.records
    linear_local = {"rope_type": "linear", "rope_theta": 10_000.0, "factor": 8.0}
    with pytest.raises(
        ValueError, match=r"rope_parameters\.sliding_attention\.rope_type is 'linear' there, 'default'"
    ):
        check_against_model(
            {**v5, "rope_parameters": {**v5["rope_parameters"], "sliding_attention": linear_local}},
            tmp_path / "config.json",
            model,
        )
    v5["rope_parameters"]["sliding_attention"]["rope_theta"] = 1000.0
    with pytest.raises(
        ValueError,
        match=r"sliding_window is 8 there, 4 in the model \(model\.sliding_window\); layer_types\[5\] is "
        r"'sliding_attention' there, 'full_attention' in the model \(1 of 6 layers differ; model\.layer_types\); "
        r"rope_parameters\.sliding_attention\.rope_theta is 1000\.0 there, 10000\.0 in the model "
        r"\(model\.local_rope_base\); query_pre_attn_scalar is 16 there, 8\.0 in the model",
    ):
        check_against_model(
            {
                **v5,
                "sliding_window": 8,
                "query_pre_attn_scalar": 16,
                "layer_types": ["sliding_attention"] * 6,
            },
            tmp_path / "config.json",
            model,
        )


# transformers' GGUF loader writes the float32 a GGUF stores, widened: SmolLM2's 1e-05 becomes this.
GGUF_EPS = 9.999999747378752e-06


def test_floats_equal_in_float32_agree_as_the_model_computes_them(tmp_path):
    folder = write_hf_folder(tmp_path / "hf", "smollm2")
    # rms_norm_eps as transformers writes it from the SmolLM2 GGUF; a RoPE base off by less than float32 resolves
    _edit(folder, rms_norm_eps=GGUF_EPS, rope_theta=10000.0004)
    assert meta_model(folder, MODEL, dtype=torch.float32) is not None
    assert meta_model(folder, MODEL, dtype=torch.bfloat16) is not None  # computed in float32 in bf16 too


def test_a_float_that_really_differs_is_still_refused(tmp_path):
    folder = write_hf_folder(tmp_path / "hf", "smollm2")
    _edit(folder, rms_norm_eps=1.0001e-5)  # another float32 (the neighbours are ~1e-12 apart)
    with pytest.raises(
        ValueError,
        match=r"rms_norm_eps is 1\.0001e-05 there, 1e-05 in the model \(model\.norm_eps\)\. .* or leave the "
        r"model section out of the config \(`~model` on the command line\) so that config\.json gives the "
        r"family and sizes\.",
    ):
        meta_model(folder, MODEL, dtype=torch.float32)
