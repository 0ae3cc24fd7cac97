"""Gemma 3's vision path (Gemma3ForConditionalGeneration) against transformers 5.24: the SigLIP
tower, the projector, image features in the text embeddings, and the attention over image tokens
(both ways within an image, windowed in local layers), with and without the KV cache; converters
both ways; the published sizes."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_gemma3_image_text
from ftune_tiny_vlm import IMAGE_TOKEN, SIGLIP_TINY, layout, max_diff, pixels, tiny_gemma3_vlm
from safetensors.torch import load_file, save_file

from ftune.models._hf_config import builder_kwargs
from ftune.models.gemma3 import gemma3
from ftune.models.gemma3._vision import (
    gemma3_image_text,
    gemma3_vision_4b,
    gemma3_vision_12b,
    gemma3_vision_27b,
)
from ftune.models.gemma3._vision_convert import VISION_CONVERTER
from ftune.modules.masks import document_causal_mask
from ftune.modules.vision import ImageTextModel

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TOKENS = 16  # per image
# Row 0: one image; row 1: two (the batch holds 3 images, in order); 62 + 44 text tokens.
ROWS = [
    [("text", 9), ("image", 1), ("text", 53)],
    [("text", 5), ("image", 1), ("text", 7), ("image", 1), ("text", 32)],
]


def ftune_of(hf: torch.nn.Module) -> ImageTextModel:
    """The ftune model with `hf`'s weights (through the converter)."""
    cfg = hf.config
    text = builder_kwargs(cfg.text_config.to_dict(), "gemma3")
    v = cfg.vision_config
    model = gemma3_image_text(
        decoder=gemma3(**text),
        image_size=v.image_size,
        patch_size=v.patch_size,
        vision_embed_dim=v.hidden_size,
        vision_num_layers=v.num_hidden_layers,
        vision_num_heads=v.num_attention_heads,
        vision_intermediate_dim=v.intermediate_size,
        vision_norm_eps=v.layer_norm_eps,
        tokens_per_image=cfg.mm_tokens_per_image,
        image_token_id=cfg.image_token_index,
    )
    model.load_state_dict(VISION_CONVERTER.hf_to_ftune(hf.state_dict()))
    return model.eval()


@pytest.fixture(scope="module")
def pair() -> tuple[torch.nn.Module, ImageTextModel]:
    hf = tiny_gemma3_vlm()
    return hf, ftune_of(hf)


def _hf_logits(hf: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(input_ids=tokens, pixel_values=images, token_type_ids=(tokens == IMAGE_TOKEN).long()).logits


def test_siglip_tower_matches_transformers(pair) -> None:
    hf, model = pair
    images = pixels(3, SIGLIP_TINY["image_size"], seed=1)
    with torch.no_grad():
        expected = hf.model.vision_tower(pixel_values=images).last_hidden_state
        assert max_diff(model.vision_encoder(images), expected) <= 1e-5
        projected = hf.model.get_image_features(images).pooler_output
        assert max_diff(model.image_features(images), projected) <= 1e-5


def test_batch_with_different_image_counts_matches_transformers(pair) -> None:
    hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=2), pixels(3, SIGLIP_TINY["image_size"], seed=3)
    with torch.no_grad():
        got = model(tokens, images)
    assert max_diff(got, _hf_logits(hf, tokens, images)) <= 1e-4


def test_image_attention_is_bidirectional_and_matters(pair) -> None:
    # Guards the parity test against passing vacuously: transformers' logits at the image tokens
    # change without the bidirectional term (token_type_ids), and ftune's without it differ too.
    hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=2), pixels(3, SIGLIP_TINY["image_size"], seed=3)
    with torch.no_grad():
        causal = hf(input_ids=tokens, pixel_values=images).logits
        model.bidirectional_images = False
        try:
            assert max_diff(model(tokens, images), causal) <= 1e-4
        finally:
            model.bidirectional_images = True
    assert max_diff(causal, _hf_logits(hf, tokens, images)) > 1e-3


def test_kv_cache_prefill_with_images_then_decode(pair) -> None:
    # Prefill both rows up to past their last image, then decode one token at a time: every step
    # equals transformers' logits on the whole sequence.
    hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=4), pixels(3, SIGLIP_TINY["image_size"], seed=5)
    expected = _hf_logits(hf, tokens, images)
    prefill, s = 50, tokens.shape[1]
    with torch.no_grad():
        model.setup_caches(batch_size=2, max_seq_len=s + 4)
        try:
            first = model(tokens[:, :prefill], images, input_pos=torch.arange(prefill)[None])
            steps = [
                model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))
                for i in range(prefill, s)  # 30 decoding steps
            ]
        finally:
            model.delete_caches()
    got = torch.cat([first, *steps], dim=1)
    assert max_diff(got, expected) <= 1e-4


def test_long_sequence_through_cpu_block_attention(pair) -> None:
    # 200 tokens >= 2 query blocks: the CPU path that skips masked (query, key) blocks, here with a
    # mask that is not causal (an image's tokens see later tokens of the same image).
    hf, model = pair
    rows = [
        [("text", 70), ("image", 1), ("text", 112)],
        [("text", 30), ("image", 1), ("text", 60), ("image", 1), ("text", 74)],
    ]
    tokens, images = layout(rows, TOKENS, seed=8), pixels(3, SIGLIP_TINY["image_size"], seed=9)
    with torch.no_grad():
        assert max_diff(model(tokens, images), _hf_logits(hf, tokens, images)) <= 1e-4


def test_packed_samples_with_images_match_separate_runs(pair) -> None:
    # Two samples packed in one row (positions restart, a document mask): the image term is added to
    # the document mask, and each sample's logits equal transformers' on that sample alone.
    hf, model = pair
    first, second = layout(ROWS[:1], TOKENS, seed=10), layout(ROWS[1:], TOKENS, seed=11)
    images = pixels(3, SIGLIP_TINY["image_size"], seed=12)
    n = first.shape[1]
    tokens = torch.cat([first, second], dim=1)
    input_pos = torch.cat([torch.arange(n), torch.arange(second.shape[1])])[None]
    doc_ids = torch.cat([torch.zeros(n, dtype=torch.long), torch.ones(second.shape[1], dtype=torch.long)])[
        None
    ]
    with torch.no_grad():
        got = model(tokens, images, input_pos=input_pos, mask=document_causal_mask(doc_ids))
    expected = torch.cat([_hf_logits(hf, first, images[:1]), _hf_logits(hf, second, images[1:])], dim=1)
    assert max_diff(got, expected) <= 1e-4


def test_wrong_image_token_count_is_an_error(pair) -> None:
    _, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=2), pixels(2, SIGLIP_TINY["image_size"], seed=3)
    with pytest.raises(
        ValueError, match="hold 48 image tokens .id 127., but 2 images of 16 tokens each need 32"
    ):
        model(tokens, images)


def test_wrong_image_size_is_an_error(pair) -> None:
    _, model = pair
    with pytest.raises(
        ValueError, match=r"pixel_values must have shape \(n_images, 3, 56, 56\), got \(1, 3, 64, 64\)"
    ):
        model.image_features(pixels(1, 64, seed=0))


def test_converters_round_trip_bit_exactly(pair) -> None:
    _, model = pair
    sd = model.state_dict()
    back = VISION_CONVERTER.hf_to_ftune(VISION_CONVERTER.ftune_to_hf(sd))
    assert back.keys() == sd.keys()
    assert all(torch.equal(back[k], sd[k]) for k in sd)


def test_reads_every_layout_and_writes_what_transformers_writes(pair, tmp_path: Path) -> None:
    hf, model = pair
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    ours = VISION_CONVERTER.ftune_to_hf(model.state_dict())
    assert ours.keys() == saved.keys() and all(torch.equal(ours[k], saved[k]) for k in saved)
    google = {k.replace("vision_tower.", "vision_tower.vision_model.", 1): v for k, v in saved.items()}
    for layout_sd in (saved, google, hf.state_dict()):
        got = VISION_CONVERTER.hf_to_ftune(layout_sd)
        assert got.keys() == model.state_dict().keys()
        assert all(torch.equal(got[k], v) for k, v in model.state_dict().items())


def test_transformers_loads_ftunes_save_with_equal_logits(pair, tmp_path: Path) -> None:
    hf, model = pair
    save_file(
        {k: v.contiguous() for k, v in VISION_CONVERTER.ftune_to_hf(model.state_dict()).items()},
        tmp_path / "model.safetensors",
    )
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    loaded = transformers.Gemma3ForConditionalGeneration.from_pretrained(tmp_path).float().eval()
    tokens, images = layout(ROWS, TOKENS, seed=6), pixels(3, SIGLIP_TINY["image_size"], seed=7)
    with torch.no_grad():
        assert max_diff(_hf_logits(loaded, tokens, images), model(tokens, images)) <= 1e-4


def test_unknown_key_and_pooling_head() -> None:
    # SigLIP's pooling head (vision_use_head, on in transformers' default config) is unused: dropped.
    hf = build_tiny_gemma3_image_text()
    sd = VISION_CONVERTER.hf_to_ftune(hf.state_dict())
    assert not any(".head." in k for k in sd) and any(k.startswith("projector.") for k in sd)
    with pytest.raises(KeyError, match="'vision_tower.encoder.layers.0.extra.weight'"):
        VISION_CONVERTER.hf_to_ftune({"vision_tower.encoder.layers.0.extra.weight": torch.zeros(1)})
    with pytest.raises(KeyError, match="'image_newline' is no tensor of this image-text model"):
        VISION_CONVERTER.hf_to_ftune({"image_newline": torch.zeros(1)})


# Safetensors totals of google/gemma-3-{4b,12b,27b}-it: the text decoder, SigLIP So400m (416,866,032)
# and the projector (1152 x width + 1152).
PUBLISHED = {
    gemma3_vision_4b: 4_300_079_472,
    gemma3_vision_12b: 12_187_325_040,
    gemma3_vision_27b: 27_432_406_640,
}


@pytest.mark.parametrize("builder", PUBLISHED, ids=lambda b: b.__name__)
def test_published_parameter_counts(builder) -> None:
    with torch.device("meta"):
        model = builder()
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[builder]
    assert model.tokens_per_image == 256 and model.image_token_id == 262_144
