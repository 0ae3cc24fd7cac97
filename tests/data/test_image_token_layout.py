"""The prompt's token layout with images against transformers' Gemma3Processor, Idefics3Processor and
MllamaProcessor, as token ids: one tiny byte-level BPE tokenizer (tokenizer.json with every family's
image tokens) is read by transformers and by ftune's HFTokenizer. Also the dataset's layout (the
conversation tokenized with placeholders, each replaced by its image's tokens) against the processor
run on the rendered conversation."""

from pathlib import Path

import pytest
import torch
import transformers
from ftune_tests_vision_assets import drawn_images, png_bytes, vlm_tokenizer_folder
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from ftune.data import (
    CROSS_ENTROPY_IGNORE_IDX,
    Gemma3ImageTransform,
    Idefics3ImageTransform,
    LlavaImageTransform,
    MllamaImageTransform,
    images_by_sample,
    padded_collate_vision,
)
from ftune.data.image_messages import (
    ImageMessagesTransform,
    expand_placeholders,
)
from ftune.data.image_ops import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from ftune.data.mllama_image import cross_attention_mask
from ftune.datasets import MultimodalSFTDataset
from ftune.tokenizers import HFTokenizer

IMAGES = drawn_images()
HALF = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}


def _family(name: str, folder: Path):
    """(ftune transform, transformers processor, ftune tokenizer) of a family at a tiny size."""
    path = vlm_tokenizer_folder(folder / name, name)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(path))
    if name == "gemma3":
        ours = Gemma3ImageTransform(image_size=16, image_seq_length=5)
        image_processor = Gemma3ImageProcessorPil(size={"height": 16, "width": 16}, **HALF)
        processor = transformers.Gemma3Processor(image_processor, hf_tok, image_seq_length=5)
    elif name == "idefics3":
        ours = Idefics3ImageTransform(longest_edge=48, tile_size=16, image_seq_len=3)
        image_processor = Idefics3ImageProcessorPil(
            size={"longest_edge": 48}, max_image_size={"longest_edge": 16}, resample=1, **HALF
        )
        processor = transformers.Idefics3Processor(image_processor, hf_tok, image_seq_len=3)
    elif name == "llava":
        ours = LlavaImageTransform(image_size=16, patch_size=8)
        image_processor = SiglipImageProcessorPil(size={"height": 16, "width": 16})
        processor = transformers.LlavaProcessor(
            image_processor, hf_tok, patch_size=8, vision_feature_select_strategy="full"
        )
    else:
        ours = MllamaImageTransform(tile_size=8, max_image_tiles=4)
        image_processor = MllamaImageProcessorPil(
            size={"height": 8, "width": 8},
            max_image_tiles=4,
            image_mean=list(OPENAI_CLIP_MEAN),
            image_std=list(OPENAI_CLIP_STD),
        )
        processor = transformers.MllamaProcessor(image_processor, hf_tok)
    return ours, processor, HFTokenizer(path)


PROMPTS = [
    ("Describe this. {img} What colour is the disc?", [9]),
    ("{img}{img} How many shapes are there?", [10, 19]),
    ("Two:\n{img} and {img}\n\nthe end", [21, 0]),
    ("{img}", [22]),
    ("No image here.", []),
]


@pytest.mark.parametrize("family", ["gemma3", "idefics3", "mllama", "llava"])
def test_prompt_token_ids_equal_the_processor(family, tmp_path):
    ours, processor, tokenizer = _family(family, tmp_path)
    for template, picks in PROMPTS:
        images = [IMAGES[i] for i in picks]
        prompt = "<s>" + template.format(
            img=ours.placeholder
        )  # the BOS written: Mllama's processor adds none then
        want = processor(text=[prompt], images=[images] if images else None, return_tensors="pt")
        inputs = [ours(image) for image in images]
        text = expand_placeholders(prompt, ours.placeholder, [x.text for x in inputs])
        got = tokenizer.encode(text, add_bos=False, add_eos=False)
        assert got == want["input_ids"][0].tolist(), (family, template)
        if images:
            pixels = torch.cat([x.pixel_values for x in inputs])
            assert torch.equal(pixels, want["pixel_values"].reshape(pixels.shape))
        if family == "mllama" and images:
            num_tiles = [int(m.sum()) for x in inputs for m in x.extra["aspect_ratio_mask"]]
            mask = cross_attention_mask(got, tokenizer.token_to_id("<|image|>"), num_tiles, 4)
            assert torch.equal(mask, want["cross_attention_mask"][0])


def test_gemma3_with_pan_and_scan_crops_equals_the_processor(tmp_path):
    _, processor, tokenizer = _family("gemma3", tmp_path)
    ours = Gemma3ImageTransform(
        image_size=16, image_seq_length=5, do_pan_and_scan=True, pan_and_scan_min_crop_size=8
    )
    kwargs = {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 8}
    prompt = f"Look: {ours.placeholder} done"
    image = IMAGES[21]  # 1200 x 300: 4 crops
    want = processor(text=[prompt], images=[[image]], return_tensors="pt", **kwargs)
    got = ours(image)
    assert got.pixel_values.shape[0] == 5
    assert torch.equal(got.pixel_values, want["pixel_values"])
    text = expand_placeholders(prompt, ours.placeholder, [got.text])
    assert tokenizer.encode(text, add_bos=False, add_eos=False) == want["input_ids"][0].tolist()


@pytest.mark.parametrize("family", ["gemma3", "idefics3", "mllama", "llava"])
def test_dataset_layout_equals_the_processor_on_the_rendered_conversation(family, tmp_path):
    """The dataset's tokens equal the processor's on the rendered conversation. The tokenizer merges newline
    runs, as Gemma 3's does, so the "\n" after ChatML's role and Gemma 3's "\n\n" before the image are one
    token in both (splicing the image's tokens in place of the placeholder id would split them)."""
    ours, processor, tokenizer = _family(family, tmp_path)
    record = {
        "messages": [
            {"role": "system", "content": "You count shapes."},
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": "How many?"}, {"type": "image"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Two shapes."}]},
        ],
        "images": [png_bytes(IMAGES[9]), png_bytes(IMAGES[10])],
    }
    transform = ImageMessagesTransform(ours.placeholder)
    item = MultimodalSFTDataset([record], tokenizer, transform, ours)[0]
    rendered = tokenizer.render(transform.messages(record))
    want = processor(text=[rendered], images=[[IMAGES[9], IMAGES[10]]], return_tensors="pt")
    expected = want["input_ids"][0].tolist()
    if family == "mllama":  # its processor writes the BOS the text lacks
        expected = expected[1:]
    assert item["tokens"] == [*expected, tokenizer.eos_id]
    image_ids = {
        tokenizer.token_to_id(t) for t in ("<image_soft_token>", "<image>", "<|image|>", "<start_of_image>")
    }
    trained = [t for t, label in zip(item["tokens"], item["labels"]) if label != CROSS_ENTROPY_IGNORE_IDX]
    assert trained and not image_ids & set(trained)
    trained_text = tokenizer.decode(trained)  # the assistant turn as the text path masks it
    assert "Two shapes." in trained_text and "How many" not in trained_text and "count" not in trained_text
    assert len(item["images"]) == 2


def test_mllama_batch_equals_the_processor_batch(tmp_path):
    """Two samples of 1 and 2 images, right-padded: the collate's flat images (with `image_sample`) are the
    processor's (b, max_images, ...) batch without its padding images, and the cross-attention masks equal."""
    ours, processor, tokenizer = _family("mllama", tmp_path)
    texts = ["<|image|>What is it?", "<|image|>and<|image|>: how many?"]
    images = [[IMAGES[21]], [IMAGES[9], IMAGES[22]]]
    want = processor(text=texts, images=images, padding=True, return_tensors="pt")
    items = []
    for ids, attention, sample in zip(want["input_ids"], want["attention_mask"], images):
        tokens = ids[attention.bool()].tolist()
        inputs = [ours(image) for image in sample]
        item = {"tokens": tokens, "labels": tokens, "images": inputs}
        items.append(item | ours.sample_inputs(tokens, inputs, tokenizer.token_to_id("<|image|>")))
    batch = padded_collate_vision(items, pad_id=tokenizer.pad_id)
    assert torch.equal(batch["tokens"], want["input_ids"])
    assert torch.equal(batch["cross_attention_mask"], want["cross_attention_mask"])
    assert batch["image_sample"].tolist() == [0, 1, 1]
    real = [(0, 0), (1, 0), (1, 1)]  # (sample, image) of the processor's non-padding slots
    assert torch.equal(batch["pixel_values"], torch.stack([want["pixel_values"][i, j] for i, j in real]))
    assert batch["aspect_ratio_ids"].tolist() == [int(want["aspect_ratio_ids"][i, j]) for i, j in real]
    assert torch.equal(
        batch["aspect_ratio_mask"], torch.stack([want["aspect_ratio_mask"][i, j] for i, j in real])
    )


def test_idefics3_batch_regrouped_equals_the_processor_batch(tmp_path):
    """Two samples of 2 and 1 images: the flat tiles regrouped by sample are the processor's padded batch."""
    ours, processor, tokenizer = _family("idefics3", tmp_path)
    images = [[IMAGES[21], IMAGES[4]], [IMAGES[10]]]
    want = processor(text=["<image>a<image>", "b<image>"], images=images, padding=True, return_tensors="pt")
    items = [{"tokens": [1], "labels": [1], "images": [ours(image) for image in sample]} for sample in images]
    batch = padded_collate_vision(items, pad_id=tokenizer.pad_id)
    for key in ("pixel_values", "pixel_attention_mask"):
        assert torch.equal(images_by_sample(batch[key], batch["image_sample"], 2), want[key])
