"""Gemma 3 image-text checkpoints (Gemma3ForConditionalGeneration, as 4B/12B/27B ship): ftune loads
their text decoder from both weight layouts, with transformers' logits on text-only input, and
saves a text-only Gemma3ForCausalLM folder (and PEFT adapters for it) that transformers and peft load."""

import json
import logging
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_gemma3_image_text
from safetensors.torch import load_file, save_file

from ftune.checkpointing import HFCheckpointer, load_hf, meta_model
from ftune.models import builder_kwargs, family_from_hf_config, model_from_hf_config
from ftune.models.gemma3 import gemma3_4b
from ftune.models.gemma3._image_text import TEXT_CONFIG_DEFAULTS, omitted_text_keys, text_decoder_key
from ftune.peft import apply_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.")


# Small forwards: one thread (tests/conftest.py `one_thread`).
pytestmark = pytest.mark.usefixtures("one_thread")


def _v5_key(key: str) -> str:
    """transformers 5's own module names for a key save_pretrained writes in the v4 layout."""
    if key.startswith("language_model.model."):
        return "model.language_model." + key.removeprefix("language_model.model.")
    if key.startswith("language_model.lm_head."):
        return key.removeprefix("language_model.")
    return "model." + key  # vision_tower.*, multi_modal_projector.*


@pytest.fixture(scope="module")
def image_text(tmp_path_factory) -> tuple[torch.nn.Module, dict[str, Path]]:
    """A seeded tiny Gemma3ForConditionalGeneration and two folders of it: `v4` as save_pretrained
    writes it (language_model.model.*), `v5` in transformers 5's names (model.language_model.*),
    sharded so that the second shard holds only the vision tower and projector."""
    root = tmp_path_factory.mktemp("gemma3_image_text")
    model = build_tiny_gemma3_image_text()
    model.save_pretrained(root / "v4")
    v4 = load_file(root / "v4" / "model.safetensors")
    assert any(k.startswith("language_model.model.") for k in v4)  # what transformers 5.24 writes

    v5_dir = root / "v5"
    v5_dir.mkdir()
    (v5_dir / "config.json").write_text((root / "v4" / "config.json").read_text())
    shards = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    for key, tensor in v4.items():
        shard = 2 if key.startswith(VISION_PREFIXES) else 1
        shards[f"model-0000{shard}-of-00002.safetensors"][_v5_key(key)] = tensor
    for name, tensors in shards.items():
        save_file(tensors, v5_dir / name)
    weight_map = {k: name for name, tensors in shards.items() for k in tensors}
    (v5_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return model, {"v4": root / "v4", "v5": v5_dir}


def _tokens(seed: int) -> torch.Tensor:
    return torch.randint(0, 120, (2, 20), generator=torch.Generator().manual_seed(seed))  # no image tokens


def _skipped(folder: Path) -> tuple[int, int]:
    """(tensors, parameters) of the vision tower and projector in `folder`."""
    weights = {}
    for file in folder.glob("*.safetensors"):
        weights.update(load_file(file))
    vision = [t for k, t in weights.items() if text_decoder_key(k) is None]
    return len(vision), sum(t.numel() for t in vision)


@pytest.mark.parametrize("layout", ["v4", "v5"])
def test_ftune_loads_the_text_decoder_with_transformers_logits(image_text, layout, caplog) -> None:
    model, folders = image_text
    theirs = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        folders[layout], dtype=torch.float32
    ).eval()
    with caplog.at_level(logging.INFO, logger="ftune.checkpointing.hf"):
        ours = load_hf(folders[layout]).eval()
    tokens = _tokens(0)
    with torch.no_grad():
        reference = model(input_ids=tokens).logits
        assert torch.equal(theirs(input_ids=tokens).logits, reference)  # the folder holds the model
        assert (ours(tokens) - reference).abs().max() <= 1e-4
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    tensors, params = _skipped(folders[layout])
    assert tensors > 0
    assert lines == [
        f"{folders[layout]} is a Gemma 3 image-text checkpoint (Gemma3ForConditionalGeneration): loading its "
        f"text decoder; skipped the vision tower and the multi-modal projector ({tensors} tensors, {params:,} "
        "parameters)"
    ]


@pytest.mark.parametrize("layout", ["v4", "v5"])
def test_full_save_is_a_text_only_folder_that_transformers_loads(
    image_text, layout, tmp_path, caplog
) -> None:
    model, folders = image_text
    ckpt = HFCheckpointer(folders[layout], tmp_path)
    loaded = ckpt.load()
    assert loaded.family == "gemma3"
    with caplog.at_level(logging.INFO, logger="ftune.checkpointing.hf"):
        ckpt.save(2, loaded.model)
        out = ckpt.save(1, loaded.model)
    announced = [r for r in caplog.records if "step folders hold its text decoder" in r.getMessage()]
    assert (
        len(announced) == 1 and "Gemma3ForCausalLM folder" in announced[0].getMessage()
    )  # once, not per save

    config = json.loads((out / "config.json").read_text())
    source = json.loads((folders[layout] / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    assert {k: v for k, v in config.items() if k not in ("model_type", "architectures", "dtype")} == {
        **{k: v for k, v in source["text_config"].items() if k not in ("model_type", "architectures")},
        "tie_word_embeddings": source["tie_word_embeddings"],
    }
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert files == (["model.safetensors"] if layout == "v4" else ["model-00001-of-00002.safetensors"])
    saved = {k: v for f in files for k, v in load_file(out / f).items()}
    original = load_file(folders["v4"] / "model.safetensors")
    text = {new: t for k, t in original.items() if (new := text_decoder_key(k)) is not None}
    assert saved.keys() == text.keys() and all(torch.equal(saved[k], text[k]) for k in text)

    causal = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(causal).__name__ == "Gemma3ForCausalLM"
    tokens = _tokens(1)
    with torch.no_grad():
        reference = model(input_ids=tokens).logits
        assert (causal(tokens).logits - reference).abs().max() <= 1e-4
        assert (load_hf(out)(tokens) - reference).abs().max() <= 1e-4


def test_lora_adapter_loads_in_peft_on_the_text_only_model(image_text, tmp_path) -> None:
    model, folders = image_text
    ckpt = HFCheckpointer(folders["v5"], tmp_path / "runs", save_adapter_weights_only=False)
    base_dir = HFCheckpointer(folders["v5"], tmp_path / "base").save(0, ckpt.load().model)  # text-only base
    ours = load_hf(folders["v5"]).eval()
    apply_lora(ours, targets=TARGETS, rank=4, alpha=8.0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if name.endswith(("lora_a.weight", "lora_b.weight")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    step = ckpt.save(
        1, ours.state_dict(), adapter_config={"rank": 4, "alpha": 8.0, "dropout": 0.0, "use_dora": False}
    )

    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    theirs = peft.PeftModel.from_pretrained(base, step).eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(step / "merged", dtype=torch.float32).eval()
    tokens = _tokens(2)
    with torch.no_grad():
        adapted, plain = ours(tokens), model(input_ids=tokens).logits
        assert (adapted - plain).abs().max() > 1e-2  # the adapter changes the logits
        assert (theirs(tokens).logits - adapted).abs().max() <= 1e-4
        assert (merged(tokens).logits - adapted).abs().max() <= 1e-4


def test_config_disagreements_are_still_reported(image_text, tmp_path) -> None:
    _, folders = image_text
    config = json.loads((folders["v4"] / "config.json").read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").symlink_to(folders["v4"] / "model.safetensors")
    (bad / "config.json").write_text(
        json.dumps({**config, "text_config": {**config["text_config"], "num_hidden_layers": 4}})
    )
    with pytest.raises(
        ValueError,
        match=r"config\.json' disagrees with the weights next to it: num_hidden_layers is 4 there, 3",
    ):
        HFCheckpointer(bad, tmp_path / "out").load()
    section = {
        "_component_": "ftune.models.gemma3.gemma3",
        **builder_kwargs(config, "gemma3"),
        "num_layers": 2,
    }
    section.pop("layer_types")
    with pytest.raises(ValueError, match=r"num_hidden_layers is 3 there, 2 in the model"):
        meta_model(folders["v4"], section, dtype=torch.float32)


def test_published_4b_text_config_takes_transformers_defaults() -> None:
    # google/gemma-3-4b-it's config.json: its text_config names five keys, transformers defaults the rest.
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {"model_type": "siglip_vision_model"},
    }
    defaults = transformers.Gemma3TextConfig()
    assert {k: getattr(defaults, k) for k in TEXT_CONFIG_DEFAULTS} == TEXT_CONFIG_DEFAULTS
    omitted = omitted_text_keys(config)  # what the log line lists
    assert omitted == {
        **{k: v for k, v in TEXT_CONFIG_DEFAULTS.items() if k not in config["text_config"]},
        "rope_theta": defaults.rope_parameters["full_attention"]["rope_theta"],
        "rope_local_base_freq": defaults.rope_parameters["sliding_attention"]["rope_theta"],
        "sliding_window_pattern": 6,
    }
    assert family_from_hf_config(config) == "gemma3"
    _, ours = model_from_hf_config(config, device="meta")
    with torch.device("meta"):
        published = gemma3_4b()
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [
        (k, v.shape) for k, v in published.state_dict().items()
    ]
    assert _settings(ours) == _settings(published)
    theirs = transformers.Gemma3Config(
        **{k: v for k, v in config.items() if k != "architectures"}
    ).text_config
    assert [a.sliding_window for a in _attns(ours)] == [
        theirs.sliding_window if t == "sliding_attention" else None for t in theirs.layer_types
    ]
    assert ours.max_seq_len == theirs.max_position_embeddings and ours.output is None


def _attns(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [layer.attn for layer in model.layers]


def _settings(model: torch.nn.Module) -> list[tuple]:
    return [(a.sliding_window, a.q_multiplier, a.rope.inv_freq.tolist()) for a in _attns(model)] + [
        model.max_seq_len,
        model.output is None,
    ]


def test_unknown_tensor_of_an_image_text_checkpoint_raises() -> None:
    assert text_decoder_key("language_model.model.norm.weight") == "model.norm.weight"
    assert text_decoder_key("model.vision_tower.head.probe") is None
    with pytest.raises(KeyError, match="'audio_tower.x' is not a tensor of a Gemma 3 image-text checkpoint"):
        text_decoder_key("audio_tower.x")
