"""SmolVLM (Idefics3ForConditionalGeneration, and SmolVLM2's SmolVLMForConditionalGeneration) against
transformers 5.24: the SigLIP encoder, the
pixel-shuffle connector, image features in the text embeddings, with and without the KV cache;
converters both ways."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import IMAGE_TOKEN, SIGLIP_TINY, layout, max_diff, pixels, tiny_idefics3
from safetensors.torch import load_file, save_file

from ftune.models._hf_config import builder_kwargs
from ftune.models.smollm2 import smollm2
from ftune.models.smolvlm import CONVERTER, smolvlm
from ftune.modules.vision import ImageTextModel

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TOKENS = 16  # per image: 8 x 8 patches, pixel-shuffled by 2
SIZE = SIGLIP_TINY["image_size"]
# Row 0: one image; row 1: two (the batch holds 3 images, in order); 62 + 44 text tokens.
ROWS = [
    [("text", 9), ("image", 1), ("text", 53)],
    [("text", 5), ("image", 1), ("text", 7), ("image", 1), ("text", 32)],
]


def ftune_of(hf: torch.nn.Module) -> ImageTextModel:
    """The ftune model with `hf`'s weights (through the converter)."""
    cfg, v = hf.config, hf.config.vision_config
    text = {
        **builder_kwargs(cfg.text_config.to_dict(), "smollm2"),
        "tie_word_embeddings": cfg.tie_word_embeddings,
    }
    model = smolvlm(
        decoder=smollm2(**text),
        image_size=v.image_size,
        patch_size=v.patch_size,
        vision_embed_dim=v.hidden_size,
        vision_num_layers=v.num_hidden_layers,
        vision_num_heads=v.num_attention_heads,
        vision_intermediate_dim=v.intermediate_size,
        vision_norm_eps=v.layer_norm_eps,
        scale_factor=cfg.scale_factor,
        image_token_id=cfg.image_token_id,
    )
    model.load_state_dict(CONVERTER.hf_to_ftune(hf.state_dict()))
    return model.eval()


@pytest.fixture(
    scope="module",
    params=[("idefics3", False), ("idefics3", True), ("smolvlm", False)],
    ids=["idefics3-untied", "idefics3-tied", "smolvlm2-untied"],
)
def pair(request) -> tuple[torch.nn.Module, ImageTextModel]:
    kind, tied = request.param
    hf = tiny_idefics3(kind=kind, tie_word_embeddings=tied)
    return hf, ftune_of(hf)


def _hf_logits(
    hf: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor, counts: list[int]
) -> torch.Tensor:
    """transformers' logits; it takes (batch, max images, 3, H, W) with all-zero padding images."""
    padded = torch.zeros(len(counts), max(counts), *images.shape[1:])
    for row, (start, n) in enumerate(zip([0, *torch.tensor(counts).cumsum(0).tolist()], counts)):
        padded[row, :n] = images[start : start + n]
    with torch.no_grad():
        return hf(input_ids=tokens, pixel_values=padded).logits


def test_encoder_and_connector_match_transformers(pair) -> None:
    hf, model = pair
    images = pixels(3, SIZE, seed=1)
    with torch.no_grad():
        expected = hf.model.vision_model(pixel_values=images).last_hidden_state
        assert max_diff(model.vision_encoder(images), expected) <= 1e-5
        assert max_diff(model.image_features(images), hf.model.connector(expected)) <= 1e-5


def test_batch_with_different_image_counts_matches_transformers(pair) -> None:
    hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=2), pixels(3, SIZE, seed=3)
    with torch.no_grad():
        got = model(tokens, images)
    assert (tokens != IMAGE_TOKEN).sum() >= 40
    assert max_diff(got, _hf_logits(hf, tokens, images, [1, 2])) <= 1e-4


def test_kv_cache_prefill_with_images_then_decode(pair) -> None:
    hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=4), pixels(3, SIZE, seed=5)
    expected = _hf_logits(hf, tokens, images, [1, 2])
    prefill, s = 50, tokens.shape[1]
    with torch.no_grad():
        model.setup_caches(batch_size=2, max_seq_len=s + 4)
        try:
            first = model(tokens[:, :prefill], images, input_pos=torch.arange(prefill)[None])
            steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]])) for i in range(prefill, s)]
        finally:
            model.delete_caches()
    assert max_diff(torch.cat([first, *steps], dim=1), expected) <= 1e-4


def test_images_change_the_logits(pair) -> None:
    # Guards the parity tests against passing vacuously: other pixels, other logits after the image.
    _, model = pair
    tokens = layout(ROWS, TOKENS, seed=2)
    with torch.no_grad():
        assert max_diff(model(tokens, pixels(3, SIZE, seed=3)), model(tokens, pixels(3, SIZE, seed=9))) > 1e-3


def test_converters_round_trip_bit_exactly(pair, tmp_path: Path) -> None:
    hf, model = pair
    sd = model.state_dict()
    back = CONVERTER.hf_to_ftune(CONVERTER.ftune_to_hf(sd))
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    ours = CONVERTER.ftune_to_hf(sd)
    assert ours.keys() == saved.keys() and all(torch.equal(ours[k], saved[k]) for k in saved)


def test_transformers_loads_ftunes_save_with_equal_logits(pair, tmp_path: Path) -> None:
    hf, model = pair
    tensors = {k: v.contiguous() for k, v in CONVERTER.ftune_to_hf(model.state_dict()).items()}
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    loaded = type(hf).from_pretrained(tmp_path).float().eval()
    tokens, images = layout(ROWS, TOKENS, seed=6), pixels(3, SIZE, seed=7)
    with torch.no_grad():
        assert max_diff(_hf_logits(loaded, tokens, images, [1, 2]), model(tokens, images)) <= 1e-4


def test_unknown_connector_key_is_an_error() -> None:
    with pytest.raises(KeyError, match="'model.connector.extra.weight' .* no projector key"):
        CONVERTER.hf_to_ftune({"model.connector.extra.weight": torch.zeros(1)})
