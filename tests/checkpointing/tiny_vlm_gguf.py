"""Tiny seeded image-text checkpoint folders that `ftune export gguf` writes for llama.cpp (a helper
module for tests/checkpointing/test_gguf_export_mmproj*.py and the docs test's SmolVLM folder)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from test_gguf_export import CHATML, GEMMA_TEMPLATE, VOCAB, byte_level_tokenizer, sentencepiece_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import _COMMON, GEMMA3_TINY  # noqa: E402
from ftune_tiny_vlm import SIGLIP_TINY, randomise, tiny_llama_text_config  # noqa: E402

# A non-default normalisation, so that the test sees it travel from preprocessor_config.json.
MEAN, STD = [0.48, 0.46, 0.41], [0.27, 0.26, 0.28]
# Where transformers 5.24 saves the vision tower and projector of Gemma 3 and Idefics3.
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_model.", "model.connector.")
IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
IDEFICS3_TOKENS += [f"<row_{r}_col_{c}>" for r in range(1, 4) for c in range(1, 4)]


def tiny_vlm_folder(folder: Path, kind: str, *, seed: int = 0, window: int = 64) -> Path:
    """A seeded tiny image-text checkpoint folder with a trained tokenizer: `kind` "gemma3" (the tiny
    SigLIP, 16 tokens an image, a 6-layer text decoder in llama.cpp's Gemma 3 layer pattern) or
    "smolvlm" (Idefics3: the tiny SigLIP, pixel shuffle by 2, a SmolLM2 decoder, the tokens SmolVLM's
    processor writes around images). `window`: Gemma 3's sliding window (64: longer than any prompt)."""
    import transformers

    vision = dict(model_type="siglip_vision_model", vision_use_head=False, **SIGLIP_TINY)
    if kind == "gemma3":
        layers = {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
        sizes = {"query_pre_attn_scalar": 16, "vocab_size": VOCAB, "sliding_window": window}
        text = transformers.Gemma3TextConfig(**{**_COMMON, **GEMMA3_TINY, **layers, **sizes}).to_dict()
        ids = dict(boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2, image_token_index=VOCAB - 1)
        config = transformers.Gemma3Config(
            text_config=text, vision_config=vision, mm_tokens_per_image=16, **ids
        )
        model = transformers.Gemma3ForConditionalGeneration(config)
        tok = sentencepiece_tokenizer("gemma")
        names = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
        extra = {"add_bos_token": True, "add_eos_token": False, "chat_template": GEMMA_TEMPLATE}
        size: dict[str, Any] = {"height": SIGLIP_TINY["image_size"], "width": SIGLIP_TINY["image_size"]}
    else:
        tok = byte_level_tokenizer("smollm")
        tok.add_tokens(["\n\n"])  # llama.cpp looks "\n\n" up as one token, as SmolVLM's vocabulary has it
        tok.add_special_tokens(IDEFICS3_TOKENS)
        text = {**tiny_llama_text_config("smollm2"), "vocab_size": VOCAB}
        config = transformers.Idefics3Config(
            text_config=text,
            vision_config=dict(SIGLIP_TINY),
            scale_factor=2,
            image_token_id=tok.token_to_id("<image>"),
        )
        model = transformers.Idefics3ForConditionalGeneration(config)
        names = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        extra = {"add_bos_token": False, "chat_template": CHATML}
        size = {"longest_edge": SIGLIP_TINY["image_size"]}
    randomise(model, seed).save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    config_json = {"tokenizer_class": "PreTrainedTokenizerFast", **names, **extra}
    (folder / "tokenizer_config.json").write_text(json.dumps(config_json))
    pre = {"image_mean": MEAN, "image_std": STD, "size": size}
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    return folder
