"""Llama 3.2 Vision (MllamaForConditionalGeneration) against transformers 5.24 on a tiny random model:
the tiled encoder, the cross-attention decoder, batches with different image counts, the KV cache
with the image keys/values cached once; converters both ways; the published parameter counts."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import max_diff, randomise
from PIL import Image
from safetensors.torch import load_file, save_file

from ftune.data import MllamaImageTransform, padded_collate_vision
from ftune.models.llama3_2_vision import (
    CONVERTER,
    llama3_2_vision_11b,
    llama3_2_vision_90b,
    llama3_2_vision_tiny,
)

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

IMAGE_TOKEN, TILES = 64, 4
# (width, height) of each image: 1, 2 (wide), 4 (2 x 2) and 2 (tall) tiles of 8 px.
SIZES = [(8, 8), (16, 7), (20, 20), (5, 14)]


def tiny_hf(seed: int = 0) -> torch.nn.Module:
    """MllamaForConditionalGeneration with the sizes of `llama3_2_vision_tiny`, every weight random."""
    config = transformers.MllamaConfig(
        vision_config=dict(
            hidden_size=16,
            num_hidden_layers=4,
            num_global_layers=2,
            attention_heads=2,
            intermediate_size=24,
            vision_output_dim=48,
            image_size=8,
            patch_size=4,
            max_num_tiles=TILES,
            intermediate_layers_indices=[1, 3],
        ),
        text_config=dict(
            vocab_size=64,
            hidden_size=32,
            num_hidden_layers=5,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=48,
            cross_attention_layers=[1, 3],
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=500_000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
            max_position_embeddings=256,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=3,
        ),
        image_token_index=IMAGE_TOKEN,
    )
    return randomise(transformers.MllamaForConditionalGeneration(config), seed)


@pytest.fixture(scope="module")
def pair():
    hf = tiny_hf()
    model = llama3_2_vision_tiny()
    model.load_state_dict(CONVERTER.hf_to_ftune(hf.state_dict()))
    return hf, model.eval()


def drawn(width: int, height: int, seed: int) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.frombytes(
        "RGB",
        (width, height),
        torch.randint(0, 256, (height, width, 3), generator=g, dtype=torch.uint8).numpy().tobytes(),
    )


def batch(rows: list[list[tuple[str, int]]], seed: int) -> dict[str, torch.Tensor]:
    """ftune's collated batch: each row ("text", n) random tokens and ("image", k) the image SIZES[k]
    (one `<|image|>` token), pixels from `MllamaImageTransform`, the cross-attention mask per row."""
    g = torch.Generator().manual_seed(seed)
    transform = MllamaImageTransform(tile_size=8, max_image_tiles=TILES)
    items = []
    for row in rows:
        tokens, images = [], []
        for kind, n in row:
            if kind == "text":
                tokens += torch.randint(4, 60, (n,), generator=g).tolist()
            else:
                tokens.append(IMAGE_TOKEN)
                images.append(transform(drawn(*SIZES[n], seed=seed + n)))
        item = {"tokens": tokens, "labels": tokens, "images": images}
        item.update(transform.sample_inputs(tokens, images, IMAGE_TOKEN) if images else {})
        if not images:
            item["cross_attention_mask"] = torch.zeros(len(tokens), 0, TILES, dtype=torch.long)
        items.append(item)
    return padded_collate_vision(items, pad_id=0)


def hf_inputs(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch as transformers takes it: images grouped per row, a missing image all zeros with
    aspect ratio id 0 and its first tile marked (as MllamaImageProcessor pads)."""
    rows, m = b["tokens"].shape[0], b["cross_attention_mask"].shape[2]
    pixels = torch.zeros(rows, m, *b["pixel_values"].shape[1:])
    ids = torch.zeros(rows, m, dtype=torch.long)
    tile_mask = torch.zeros(rows, m, TILES, dtype=torch.long)
    tile_mask[:, :, 0] = 1
    seen = [0] * rows
    for i, row in enumerate(b["image_sample"].tolist()):
        pixels[row, seen[row]] = b["pixel_values"][i]
        ids[row, seen[row]] = b["aspect_ratio_ids"][i]
        tile_mask[row, seen[row]] = b["aspect_ratio_mask"][i]
        seen[row] += 1
    return {
        "input_ids": b["tokens"],
        "pixel_values": pixels,
        "aspect_ratio_ids": ids,
        "aspect_ratio_mask": tile_mask,
        "cross_attention_mask": b["cross_attention_mask"],
    }


def ours(model, b: dict[str, torch.Tensor], **extra) -> torch.Tensor:
    keys = ("aspect_ratio_ids", "aspect_ratio_mask", "image_sample", "cross_attention_mask")
    return model(b["tokens"], b["pixel_values"], **{k: b[k] for k in keys}, **extra)


# Row 0 then row 1; 27 + 27 positions, of which 51 text tokens.
ONE_TWO = [
    [("text", 6), ("image", 1), ("text", 20)],
    [("text", 3), ("image", 2), ("text", 5), ("image", 3), ("text", 17)],
]
ZERO_ONE = [[("text", 27)], [("text", 4), ("image", 0), ("text", 22)]]


@pytest.mark.parametrize("rows", [ONE_TWO, ZERO_ONE], ids=["1-2-images", "0-1-images"])
def test_batch_with_different_image_counts_matches_transformers(pair, rows) -> None:
    hf, model = pair
    b = batch(rows, seed=1)
    assert (b["tokens"] != IMAGE_TOKEN).sum() >= 40
    with torch.no_grad():
        expected = hf(**hf_inputs(b)).logits
        assert max_diff(ours(model, b), expected) <= 1e-4


def test_encoder_matches_transformers(pair) -> None:
    hf, model = pair
    b = batch(ONE_TWO, seed=2)
    h = hf_inputs(b)
    with torch.no_grad():
        expected = hf.model.vision_model(
            h["pixel_values"], h["aspect_ratio_ids"], h["aspect_ratio_mask"]
        ).last_hidden_state
        got = model.vision_encoder(b["pixel_values"], b["aspect_ratio_ids"], b["aspect_ratio_mask"])
    assert max_diff(got, torch.cat([expected[0, :1], expected[1]])) <= 1e-5


@pytest.mark.parametrize("rows", [ONE_TWO, ZERO_ONE], ids=["1-2-images", "0-1-images"])
def test_kv_cache_computes_image_keys_once_then_decodes(pair, rows) -> None:
    hf, model = pair
    b = batch(rows, seed=3)
    with torch.no_grad():
        expected = hf(**hf_inputs(b)).logits
    prefill, s = 12, b["tokens"].shape[1]
    cross_layers = [layer for layer in model.decoder.layers if hasattr(layer, "cross_attn")]
    with torch.no_grad():
        model.setup_caches(batch_size=2, max_seq_len=s + 2)
        try:
            prompt = {
                **b,
                "tokens": b["tokens"][:, :prefill],
                "cross_attention_mask": b["cross_attention_mask"][:, :prefill],
            }
            first = ours(model, prompt, input_pos=torch.arange(prefill)[None])
            cached = [layer.cross_attn.kv_cache.k for layer in cross_layers]
            steps = []
            for i in range(prefill, s):  # each step reads its own row of the mask, as generate passes it
                cam = b["cross_attention_mask"][:, i : i + 1]
                steps.append(
                    model(b["tokens"][:, i : i + 1], cross_attention_mask=cam, input_pos=torch.tensor([[i]]))
                )
            assert all(layer.cross_attn.kv_cache.k is k for layer, k in zip(cross_layers, cached))
        finally:
            model.delete_caches()
    assert max_diff(torch.cat([first, *steps], dim=1), expected) <= 1e-4


def test_decoding_reads_the_prompts_last_row_by_default(pair) -> None:
    # transformers' generate extends the mask with the prompt's last row; so does the model when
    # a decoding step gives none.
    _, model = pair
    b = batch(ONE_TWO, seed=4)
    s = b["tokens"].shape[1]
    with torch.no_grad():
        last = b["cross_attention_mask"][:, -1:]
        b2 = {
            **b,
            "tokens": torch.cat([b["tokens"], b["tokens"][:, :3]], 1),
            "cross_attention_mask": torch.cat([b["cross_attention_mask"], last.expand(-1, 3, -1, -1)], 1),
        }
        expected = ours(model, b2)[:, s:]
        model.setup_caches(batch_size=2, max_seq_len=s + 4)
        try:
            ours(model, b, input_pos=torch.arange(s)[None])
            got = [model(b2["tokens"][:, i : i + 1], input_pos=torch.tensor([[i]])) for i in range(s, s + 3)]
        finally:
            model.delete_caches()
    assert max_diff(torch.cat(got, 1), expected) <= 1e-5


def test_images_change_the_logits(pair) -> None:
    # Guards the parity tests against passing vacuously.
    _, model = pair
    b = batch(ONE_TWO, seed=5)
    other = {**b, "pixel_values": torch.rand_like(b["pixel_values"])}
    with torch.no_grad():
        assert max_diff(ours(model, b), ours(model, other)) > 1e-3


def test_converters_round_trip_bit_exactly(pair, tmp_path: Path) -> None:
    hf, model = pair
    sd = model.state_dict()
    back = CONVERTER.hf_to_ftune(CONVERTER.ftune_to_hf(sd))
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    written = CONVERTER.ftune_to_hf(sd)
    assert written.keys() == saved.keys() and all(torch.equal(written[k], saved[k]) for k in saved)
    modules = dict(hf.named_parameters())
    assert CONVERTER.ftune_to_peft(sd).keys() == modules.keys()


def test_transformers_loads_ftunes_save_with_equal_logits(pair, tmp_path: Path) -> None:
    hf, model = pair
    save_file(
        {k: v.contiguous() for k, v in CONVERTER.ftune_to_hf(model.state_dict()).items()},
        tmp_path / "model.safetensors",
    )
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    loaded = type(hf).from_pretrained(tmp_path).float().eval()
    b = batch(ONE_TWO, seed=6)
    with torch.no_grad():
        assert max_diff(loaded(**hf_inputs(b)).logits, ours(model, b)) <= 1e-4


def test_unknown_key_is_an_error() -> None:
    with pytest.raises(KeyError, match="'vision_model.extra.weight'"):
        CONVERTER.hf_to_ftune({"vision_model.extra.weight": torch.zeros(1)})


# Parameters of transformers 5.24's MllamaForConditionalGeneration built on the meta device from the
# sizes of the published config.json of meta-llama/Llama-3.2-11B-Vision and -90B-Vision (the hub
# lists them as 10.7B and 88.6B; torchtune 0.6.1's builders have the same sizes).
PUBLISHED = {"11b": 10_670_220_835, "90b": 88_593_355_323}


@pytest.mark.parametrize("size", ["11b", "90b"])
def test_builders_have_the_published_parameter_counts(size) -> None:
    build = {"11b": llama3_2_vision_11b, "90b": llama3_2_vision_90b}[size]
    with torch.device("meta"):
        model = build()
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[size]


def test_builders_freeze_the_parts_torchtune_freezes() -> None:
    # decoder_trainable=False (torchtune's full configs): the decoder's self-attention layers freeze, the
    # fusion parts (cross-attention layers, global transformer, projector) and the encoder train.
    with torch.device("meta"):
        model = llama3_2_vision_11b(decoder_trainable=False)
    grad = {name for name, p in model.named_parameters() if p.requires_grad}
    assert (
        "decoder.layers.3.cross_attn.q_proj.weight" in grad
        and "decoder.layers.4.attn.q_proj.weight" not in grad
    )
    assert "decoder.tok_embeddings.weight" not in grad and "projector.proj.weight" in grad
    assert "vision_encoder.transformer.layers.0.mlp.fc1.weight" in grad
    assert "vision_encoder.global_transformer.layers.0.gate_attn" in grad


def test_config_defaults_are_transformers_and_build_its_model() -> None:
    from ftune.models import image_text_converter, image_text_model_from_hf_config
    from ftune.models.llama3_2_vision._hf_config import TEXT_DEFAULTS, VISION_DEFAULTS

    vision, text = transformers.MllamaVisionConfig().to_dict(), transformers.MllamaTextConfig().to_dict()
    assert {k: vision[k] for k in VISION_DEFAULTS} == VISION_DEFAULTS
    assert {k: text[k] for k in TEXT_DEFAULTS} == TEXT_DEFAULTS
    family, _, model = image_text_model_from_hf_config({"model_type": "mllama"}, device="meta")
    with torch.device("meta"):
        theirs = transformers.MllamaForConditionalGeneration(transformers.MllamaConfig())
    assert family == "llama3_2_vision" and image_text_converter(family, "llama3_1") is CONVERTER
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in theirs.parameters())
