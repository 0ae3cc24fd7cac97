"""Greedy generation with images (`ftune.generation.generate`, the KV cache) against transformers'
`generate` on tiny random models of every image-text family: Gemma 3, Idefics3 (SmolVLM), LLaVA and
Llama 3.2 Vision (cross-attention). ftune loads each model from the folder transformers saved, as the
generate recipe does, and both sides read the same pixels, made by ftune's image transform of the
family (equal to transformers' processor: tests/data); the new tokens are equal, token for token."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_vlm import IMAGE_TOKEN, SIGLIP_TINY, layout, tiny_gemma3_vlm, tiny_idefics3, tiny_llava
from test_llama3_2_vision import ONE_TWO, batch, drawn, hf_inputs, tiny_hf

from ftune.checkpointing import load_hf
from ftune.data import Gemma3ImageTransform, Idefics3ImageTransform, LlavaImageTransform
from ftune.generation import generate, generate_batch

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

NEW_TOKENS = 10
SIZE = SIGLIP_TINY["image_size"]
# Two images of different sizes and shapes, resized by the family's transform to the encoder's side.
IMAGES = [drawn(70, 40, seed=1), drawn(33, 56, seed=2)]

FAMILIES = {  # HF model, ftune transform, image tokens an image
    "gemma3": (tiny_gemma3_vlm, Gemma3ImageTransform(image_size=SIZE, image_seq_length=16), 16),
    "idefics3": (
        tiny_idefics3,
        Idefics3ImageTransform(longest_edge=SIZE, tile_size=SIZE, image_seq_len=16, do_image_splitting=False),
        16,
    ),
    "llava": (tiny_llava, LlavaImageTransform(image_size=SIZE, patch_size=SIGLIP_TINY["patch_size"]), 64),
}


def _saved_and_loaded(hf: torch.nn.Module, folder: Path) -> torch.nn.Module:
    hf.save_pretrained(folder)
    return load_hf(folder, image_text=True).eval()


def _hf_generate(hf: torch.nn.Module, **inputs: torch.Tensor) -> list[int]:
    hf.generation_config.eos_token_id = None  # no stop token on either side: every step compared
    mask = torch.ones_like(inputs["input_ids"])  # else generate masks every id equal to pad_token_id
    with torch.no_grad():
        out = hf.generate(
            **inputs, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )
    return out[0, inputs["input_ids"].shape[1] :].tolist()


# Gemma 3's takes ~10 s here (transformers' generate of it): under -m slow.
@pytest.mark.parametrize("family", [pytest.param("gemma3", marks=pytest.mark.slow), "idefics3", "llava"])
def test_greedy_generation_with_images_matches_transformers(family: str, tmp_path: Path) -> None:
    build, transform, per_image = FAMILIES[family]
    hf = build()
    model = _saved_and_loaded(hf, tmp_path / family)
    pixels = torch.cat([transform(image).pixel_values for image in IMAGES])  # (2, 3, SIZE, SIZE)
    tokens = layout([[("text", 5), ("image", 1), ("text", 3), ("image", 1), ("text", 6)]], per_image, seed=3)
    inputs = {"input_ids": tokens, "pixel_values": pixels[None] if family == "idefics3" else pixels}
    if family == "gemma3":  # which tokens are an image's (their attention both ways)
        inputs["token_type_ids"] = (tokens == IMAGE_TOKEN).long()
    expected = _hf_generate(hf, **inputs)
    got = generate(model, tokens[0], max_new_tokens=NEW_TOKENS, pixel_values=pixels)
    assert len(got) == NEW_TOKENS >= 8
    assert got == expected
    # the images reach the answer: other pixels give another one (guards against a vacuous pass)
    assert generate(model, tokens[0], max_new_tokens=NEW_TOKENS, pixel_values=-pixels) != got


def test_llama3_2_vision_greedy_generation_with_images_matches_transformers(tmp_path: Path) -> None:
    hf = tiny_hf()
    model = _saved_and_loaded(hf, tmp_path / "mllama")
    b = batch([ONE_TWO[1]], seed=1)  # one prompt, two images: 4 and 2 tiles
    image_inputs = {k: b[k] for k in ("aspect_ratio_ids", "aspect_ratio_mask", "cross_attention_mask")}
    expected = _hf_generate(hf, **hf_inputs(b))
    got = generate(
        model,
        b["tokens"][0],
        max_new_tokens=NEW_TOKENS,
        pixel_values=b["pixel_values"],
        image_inputs=image_inputs,
    )
    assert len(got) == NEW_TOKENS >= 8
    assert got == expected
    other = generate(
        model,
        b["tokens"][0],
        max_new_tokens=NEW_TOKENS,
        pixel_values=-b["pixel_values"],
        image_inputs=image_inputs,
    )
    assert other != got


def test_llama3_2_vision_batch_generates_what_each_prompt_does_alone(tmp_path: Path) -> None:
    # Right-padded rows of different lengths: each new token reads its own row's tiles. (Rows with
    # different image counts differ from alone, in transformers too: a token that reads no tile attends
    # to every image slot of its row, the padding one included.)
    model = _saved_and_loaded(tiny_hf(), tmp_path / "mllama")
    b = batch([ONE_TWO[1], ONE_TWO[1]], seed=2)
    keys = ("aspect_ratio_ids", "aspect_ratio_mask", "cross_attention_mask", "image_sample")
    together = generate_batch(
        model,
        [b["tokens"][0][:-4], b["tokens"][1]],  # row 0 shorter: its padding reads its last token's tiles
        max_new_tokens=NEW_TOKENS,
        pixel_values=b["pixel_values"],
        image_inputs={k: b[k] for k in keys},
    )
    for row, tokens in enumerate([b["tokens"][0][:-4], b["tokens"][1]]):
        mine = b["image_sample"] == row
        inputs = {k: b[k][mine] for k in keys[:2]}
        inputs["cross_attention_mask"] = b["cross_attention_mask"][
            row : row + 1, : len(tokens), : int(mine.sum())
        ]
        alone = generate(
            model,
            tokens,
            max_new_tokens=NEW_TOKENS,
            pixel_values=b["pixel_values"][mine],
            image_inputs=inputs,
        )
        assert together[row] == alone, row


def test_image_inputs_without_pixels_is_an_error(tmp_path: Path) -> None:
    model = _saved_and_loaded(tiny_hf(), tmp_path / "mllama")
    b = batch([ONE_TWO[0]], seed=1)
    with pytest.raises(
        ValueError, match=r"image_inputs \(\['cross_attention_mask'\]\) were given without pixel_values"
    ):
        generate(
            model,
            b["tokens"][0],
            max_new_tokens=2,
            image_inputs={"cross_attention_mask": b["cross_attention_mask"]},
        )
