"""Generation with images on the KV cache (`ftune.generation.generate_batch(pixel_values=...)`):
greedy tokens equal transformers' generate() on tiny random Gemma 3, SmolVLM and LLaVA models, for
a batch of two prompts of different lengths with one and two images."""

import pytest
import torch
from ftune_tiny_vlm import (
    IMAGE_TOKEN,
    SIGLIP_TINY,
    layout,
    pixels,
    tiny_gemma3_vlm,
    tiny_idefics3,
    tiny_llava,
)
from safetensors.torch import load_file

from ftune.checkpointing import load_hf
from ftune.generation import generate, generate_batch
from ftune.generation.rollout import rollout

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

NEW = 10
BUILDERS = {"gemma3": tiny_gemma3_vlm, "smolvlm": tiny_idefics3, "llava": tiny_llava}
TOKENS = {"gemma3": 16, "smolvlm": 16, "llava": 64}  # image tokens an image
SIZE = SIGLIP_TINY["image_size"]


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def pair(request, tmp_path_factory) -> tuple[str, torch.nn.Module, torch.nn.Module]:
    """(kind, transformers' model, ftune's loaded from its save_pretrained folder)."""
    kind = request.param
    hf = BUILDERS[kind](seed=0)
    folder = tmp_path_factory.mktemp(kind)
    hf.save_pretrained(folder)
    hf.generation_config.eos_token_id = None  # no stop token in either (Gemma 3's eos is id 1)
    hf.generation_config.pad_token_id = 0
    assert load_file(folder / "model.safetensors")  # written by transformers
    return kind, hf, load_hf(folder, image_text=True).eval()


def _hf_generate(kind: str, hf: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor) -> list[int]:
    """transformers' greedy new tokens for one prompt (1, s) and its images."""
    extra = {}
    if kind == "gemma3":  # its bidirectional image attention needs the image tokens marked
        extra["token_type_ids"] = (tokens == IMAGE_TOKEN).long()
    if kind == "smolvlm":
        images = images[None]  # (batch, images, 3, H, W)
    with torch.no_grad():
        out = hf.generate(
            input_ids=tokens,
            pixel_values=images,
            attention_mask=torch.ones_like(tokens),
            max_new_tokens=NEW,
            do_sample=False,
            **extra,
        )
    return out[0, tokens.shape[1] :].tolist()


def test_greedy_tokens_equal_transformers_for_a_batch_with_different_image_counts(pair) -> None:
    kind, hf, model = pair
    rows = [
        layout([[("text", 7), ("image", 1), ("text", 12)]], TOKENS[kind], seed=1),
        layout([[("text", 3), ("image", 1), ("text", 5), ("image", 1), ("text", 4)]], TOKENS[kind], seed=2),
    ]
    images = pixels(3, SIZE, seed=3)
    per_row = [images[:1], images[1:]]
    expected = [_hf_generate(kind, hf, row, imgs) for row, imgs in zip(rows, per_row)]
    got = generate_batch(model, [r[0] for r in rows], max_new_tokens=NEW, pixel_values=images)
    assert got == expected
    assert [len(e) for e in expected] == [NEW, NEW]
    # One prompt alone: the same tokens as in the batch.
    assert generate(model, rows[1][0], max_new_tokens=NEW, pixel_values=per_row[1]) == expected[1]


def test_pixel_values_for_a_text_model_are_refused(pair) -> None:
    _, _, model = pair
    with pytest.raises(ValueError, match="pixel_values were given, but TransformerDecoder takes no images"):
        generate(model.decoder, [1, 2, 3], max_new_tokens=2, pixel_values=pixels(1, SIZE, seed=0))


def test_rollout_groups_share_one_prefill_with_the_prompts_images(pair) -> None:
    # GRPO's rollout: G rows of each prompt from one prefill of that prompt with its images; greedy,
    # every row of a group is that prompt's generation alone.
    kind, _, model = pair
    prompts = [
        layout([[("text", 2), ("image", 1), ("text", 3), ("image", 1), ("text", 2)]], TOKENS[kind], seed=7)[
            0
        ],
        layout([[("text", 6), ("image", 1), ("text", 5)]], TOKENS[kind], seed=8)[0],
    ]
    images = pixels(3, SIZE, seed=9)
    out = rollout(
        model,
        [p.tolist() for p in prompts],
        group_size=2,
        max_new_tokens=NEW,
        temperature=0.0,
        top_k=None,
        top_p=None,
        stop_ids=[],
        pad_id=0,
        generator=None,
        pixel_values=images,
    )
    alone = [
        generate(model, prompts[0], max_new_tokens=NEW, pixel_values=images[:2]),
        generate(model, prompts[1], max_new_tokens=NEW, pixel_values=images[2:]),
    ]
    assert out.completion_ids.tolist() == [alone[0], alone[0], alone[1], alone[1]]
