"""Compose your own image-text model (`ftune.models.llava`): any ftune text decoder + SigLIP + an MLP
projector, against transformers 5.24's LlavaForConditionalGeneration with a SigLIP vision config
(here with SmolLM2's and Gemma 3's tiny text decoders), with and without the KV cache; converters
both ways; a SigLIP checkpoint of its own as the encoder's weights."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import SIGLIP_TINY, layout, max_diff, pixels, tiny_llava
from safetensors.torch import load_file, save_file

from ftune.models import COMPONENT_BUILDERS, CONVERTERS
from ftune.models._hf_config import builder_kwargs
from ftune.models.llava import llava, llava_converter, siglip_hf_to_ftune
from ftune.models.smollm2 import smollm2_135m
from ftune.modules.vision import ImageTextModel

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TOKENS = 64  # per image: one a patch (8 x 8)
SIZE = SIGLIP_TINY["image_size"]
# Row 0: one image; row 1: two (3 images in the batch, in order); 128 + 62 text tokens.
ROWS = [
    [("text", 9), ("image", 1), ("text", 119)],
    [("text", 5), ("image", 1), ("text", 7), ("image", 1), ("text", 50)],
]


def ftune_of(hf: torch.nn.Module, family: str) -> ImageTextModel:
    cfg, v = hf.config, hf.config.vision_config
    text = {
        **builder_kwargs(cfg.text_config.to_dict(), family),
        "tie_word_embeddings": cfg.tie_word_embeddings,
    }
    model = llava(
        decoder=COMPONENT_BUILDERS[family](**text),
        image_size=v.image_size,
        patch_size=v.patch_size,
        vision_embed_dim=v.hidden_size,
        vision_num_layers=v.num_hidden_layers,
        vision_num_heads=v.num_attention_heads,
        vision_intermediate_dim=v.intermediate_size,
        vision_norm_eps=v.layer_norm_eps,
        image_token_id=cfg.image_token_index,
        feature_layer=cfg.vision_feature_layer,
        projector_bias=cfg.multimodal_projector_bias,
    )
    model.load_state_dict(llava_converter(CONVERTERS[family]).hf_to_ftune(hf.state_dict()))
    return model.eval()


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def pair(request) -> tuple[str, torch.nn.Module, ImageTextModel]:
    hf = tiny_llava(request.param)
    return request.param, hf, ftune_of(hf, request.param)


def _hf_logits(hf: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(input_ids=tokens, pixel_values=images).logits


def test_batch_with_different_image_counts_matches_transformers(pair) -> None:
    _, hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=2), pixels(3, SIZE, seed=3)
    with torch.no_grad():
        assert max_diff(model(tokens, images), _hf_logits(hf, tokens, images)) <= 1e-4


def test_kv_cache_prefill_with_images_then_decode(pair) -> None:
    _, hf, model = pair
    tokens, images = layout(ROWS, TOKENS, seed=4), pixels(3, SIZE, seed=5)
    expected = _hf_logits(hf, tokens, images)
    prefill, s = 150, tokens.shape[1]
    with torch.no_grad():
        model.setup_caches(batch_size=2, max_seq_len=s + 4)
        try:
            first = model(tokens[:, :prefill], images, input_pos=torch.arange(prefill)[None])
            steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]])) for i in range(prefill, s)]
        finally:
            model.delete_caches()
    assert len(steps) >= 40
    assert max_diff(torch.cat([first, *steps], dim=1), expected) <= 1e-4


@pytest.mark.parametrize("feature_layer", [-2, 1])
def test_other_feature_layers_match_transformers(feature_layer: int) -> None:
    hf = tiny_llava("smollm2", vision_feature_layer=feature_layer)
    model = ftune_of(hf, "smollm2")
    tokens, images = layout(ROWS, TOKENS, seed=6), pixels(3, SIZE, seed=7)
    with torch.no_grad():
        got = model(tokens, images)
        assert max_diff(got, _hf_logits(hf, tokens, images)) <= 1e-4
        model.feature_layer = -1
        assert max_diff(model(tokens, images), got) > 1e-3  # the layer matters


def test_converters_round_trip_bit_exactly_and_write_what_transformers_writes(pair, tmp_path: Path) -> None:
    family, hf, model = pair
    converter, sd = llava_converter(CONVERTERS[family]), model.state_dict()
    back = converter.hf_to_ftune(converter.ftune_to_hf(sd))
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    ours = converter.ftune_to_hf(sd)
    assert ours.keys() == saved.keys() and all(torch.equal(ours[k], saved[k]) for k in saved)


def test_transformers_loads_ftunes_save_with_equal_logits(pair, tmp_path: Path) -> None:
    family, hf, model = pair
    tensors = llava_converter(CONVERTERS[family]).ftune_to_hf(model.state_dict())
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    loaded = transformers.LlavaForConditionalGeneration.from_pretrained(tmp_path).float().eval()
    tokens, images = layout(ROWS, TOKENS, seed=8), pixels(3, SIZE, seed=9)
    with torch.no_grad():
        assert max_diff(_hf_logits(loaded, tokens, images), model(tokens, images)) <= 1e-4


def test_a_siglip_checkpoint_gives_the_encoder(pair) -> None:
    # A SiglipModel (text and vision towers) as published: its vision tower is the encoder's weights.
    _, hf, model = pair
    config = transformers.SiglipConfig(
        vision_config=dict(SIGLIP_TINY),
        text_config=dict(hidden_size=32, num_attention_heads=2, vocab_size=64),
    )
    siglip = transformers.SiglipModel(config).eval()
    sd = siglip_hf_to_ftune(siglip.state_dict())
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(k.startswith(("decoder.", "projector.")) for k in missing)
    images = pixels(2, SIZE, seed=10)
    with torch.no_grad():
        expected = siglip.vision_model(pixel_values=images).last_hidden_state
        assert max_diff(model.vision_encoder(images), expected) <= 1e-5
    with pytest.raises(KeyError, match="'vision_model.encoder.layers.0.extra.weight'"):
        siglip_hf_to_ftune({"vision_model.encoder.layers.0.extra.weight": torch.zeros(1)})


def test_feature_layer_out_of_range_is_an_error() -> None:
    with pytest.raises(
        ValueError, match=r"feature_layer 3 is out of range for 2 encoder layers; give an index in \[-3, 2\]"
    ):
        tiny = COMPONENT_BUILDERS["smollm2"](
            vocab_size=8,
            num_layers=1,
            num_heads=2,
            num_kv_heads=1,
            embed_dim=8,
            intermediate_dim=8,
            max_seq_len=8,
        )
        llava(
            decoder=tiny,
            image_size=SIZE,
            patch_size=7,
            vision_embed_dim=8,
            vision_num_layers=2,
            vision_num_heads=2,
            vision_intermediate_dim=8,
            image_token_id=7,
            feature_layer=3,
        )


def test_smollm2_135m_with_a_siglip_base_encoder() -> None:
    # The small VLM of the docs: SmolLM2-135M's decoder and SigLIP base (patch 16, 224 px: 196 patches),
    # on the meta device. Parameters: 134,515,008 (SmolLM2-135M) + 85,797,120 (the encoder: patch
    # convolution 590,592, positions 150,528, 12 layers of 7,087,872, final norm 1,536) + 775,296 (the
    # projector: 768 x 576 + 576 and 576 x 576 + 576).
    with torch.device("meta"):
        model = llava(
            decoder=smollm2_135m(),
            image_size=224,
            patch_size=16,
            vision_embed_dim=768,
            vision_num_layers=12,
            vision_num_heads=12,
            vision_intermediate_dim=3072,
            image_token_id=0,
        )
    assert model.tokens_per_image == 196
    assert sum(p.numel() for p in model.parameters()) == 134_515_008 + 85_797_120 + 775_296


def test_a_few_steps_fit_one_batch_through_every_part() -> None:
    # Gradients reach the projector and the encoder through the scattered image rows; ten AdamW steps
    # on one batch lower its loss.
    hf = tiny_llava("smollm2")
    model = ftune_of(hf, "smollm2").train()
    tokens, images = layout(ROWS, TOKENS, seed=12), pixels(3, SIZE, seed=13)
    labels = tokens[:, 1:].masked_fill(tokens[:, 1:] == model.image_token_id, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(10):
        logits = model(tokens, images)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        for part in ("projector.linear_1.weight", "vision_encoder.layers.0.self_attn.q_proj.weight"):
            assert model.get_parameter(part).grad.abs().sum() > 0, part
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.9, losses
