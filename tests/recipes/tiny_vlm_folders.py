"""Tiny random image-text folders of every image family (transformers' save_pretrained, the test
tokenizer with the image tokens of tests/data/vision_assets.py), each with the overrides that run the
SmolVLM configs on it, and chats with a varying number of Pillow-drawn images (none in some).

    folder, overrides = FAMILIES["gemma3"](path)
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image, ImageDraw

from ftune.tokenizers import HFTokenizer

_ASSETS = "ftune_tests_vision_assets"  # the tokenizer with every family's image tokens (tests/data)
if _ASSETS not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _ASSETS, Path(__file__).parents[1] / "data" / "vision_assets.py"
    )
    sys.modules[_ASSETS] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_ASSETS])
vlm_tokenizer_folder = sys.modules[_ASSETS].vlm_tokenizer_folder

# A SigLIP tower of 16 px images in 4 x 4 patches (16 patches), two layers.
SIGLIP = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2)
LLAMA_TEXT = dict(
    vocab_size=448,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)
COLOURS = [(220, 30, 40), (20, 190, 60), (30, 60, 220), (230, 210, 30)]


def _save(model, tokenizer_dir: Path, folder: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = model.float()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    model.save_pretrained(folder)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, folder / f.name)
    return folder


def _transform(component: str, **kwargs) -> list[str]:
    return [
        "~dataset.image_transform",
        f"dataset.image_transform._component_={component}",
        *(f"dataset.image_transform.{k}={v}" for k, v in kwargs.items()),
    ]


SMOLVLM_TRANSFORM = _transform(
    "ftune.data.Idefics3ImageTransform", longest_edge=32, tile_size=16, image_seq_len=4
)


def smolvlm(path: Path, fit_vocab: bool = False, wide: bool = False, seed: int = 0) -> tuple[Path, list[str]]:
    """Idefics3: 16 px tiles pixel-shuffled by 2 (4 tokens a tile); a 32 px image is 4 tiles + the global one.
    `fit_vocab`: the model's vocabulary is the tokenizer's (no id a sampler could draw that the tokenizer
    cannot decode), else 448 (padded, as published models pad theirs). `wide`: every linear layer's input
    width a multiple of 32 (the QAT configs' int4 weight groups), the encoder's too. `seed`: the weights'."""
    import transformers

    tok = vlm_tokenizer_folder(path / "tok", "idefics3")
    vocab = HFTokenizer(tok).vocab_size if fit_vocab else LLAMA_TEXT["vocab_size"]
    widths = {"hidden_size": 32, "intermediate_size": 64} if wide else {}
    config = transformers.Idefics3Config(
        text_config={**LLAMA_TEXT, "vocab_size": vocab, **({"intermediate_size": 64} if wide else {})},
        vision_config=dict(SIGLIP, image_size=16, patch_size=4, **widths),
        scale_factor=2,
        image_token_id=HFTokenizer(tok).token_to_id("<image>"),
    )
    return _save(
        transformers.Idefics3ForConditionalGeneration(config), tok, path / "smolvlm", seed
    ), SMOLVLM_TRANSFORM


def gemma3(path: Path) -> tuple[Path, list[str]]:
    """Gemma 3: the SigLIP tower's 16 patches pooled to 4 tokens an image, image tokens attended both ways."""
    import transformers

    tok = vlm_tokenizer_folder(path / "tok", "gemma3")
    ids = HFTokenizer(tok)
    text = transformers.Gemma3TextConfig(
        **{k: v for k, v in LLAMA_TEXT.items() if k != "tie_word_embeddings"},
        head_dim=16,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=6,
        query_pre_attn_scalar=24,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
        },
        tie_word_embeddings=True,
    )
    config = transformers.Gemma3Config(
        text_config=text.to_dict(),
        vision_config=dict(
            model_type="siglip_vision_model", vision_use_head=False, image_size=16, patch_size=4, **SIGLIP
        ),
        mm_tokens_per_image=4,
        boi_token_index=ids.token_to_id("<start_of_image>"),
        eoi_token_index=ids.token_to_id("<end_of_image>"),
        image_token_index=ids.token_to_id("<image_soft_token>"),
    )
    folder = _save(transformers.Gemma3ForConditionalGeneration(config), tok, path / "gemma3")
    return folder, _transform("ftune.data.Gemma3ImageTransform", image_size=16, image_seq_length=4)


def llava(path: Path) -> tuple[Path, list[str]]:
    """LLaVA-style (the `llava` builder's layout): SigLIP, an MLP projector, a llama decoder; 16 tokens an image."""
    import transformers

    tok = vlm_tokenizer_folder(path / "tok", "idefics3")
    config = transformers.LlavaConfig(
        vision_config=dict(
            model_type="siglip_vision_model", vision_use_head=False, image_size=16, patch_size=4, **SIGLIP
        ),
        text_config=transformers.LlamaConfig(**LLAMA_TEXT).to_dict(),
        image_token_index=HFTokenizer(tok).token_to_id("<image>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )
    folder = _save(transformers.LlavaForConditionalGeneration(config), tok, path / "llava")
    return folder, _transform("ftune.data.LlavaImageTransform", image_size=16, patch_size=4)


def llama3_2_vision(path: Path) -> tuple[Path, list[str]]:
    """Llama 3.2 Vision: 8 px tiles of 4 x 4 patches, a cross-attention layer between two self-attention ones."""
    import transformers

    tok = vlm_tokenizer_folder(path / "tok", "mllama")
    config = transformers.MllamaConfig(
        vision_config=dict(
            hidden_size=16,
            num_hidden_layers=2,
            num_global_layers=1,
            attention_heads=2,
            intermediate_size=24,
            vision_output_dim=32,
            image_size=8,
            patch_size=4,
            intermediate_layers_indices=[0],
        ),
        text_config=dict(
            vocab_size=448,
            hidden_size=32,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=48,
            cross_attention_layers=[1],
            max_position_embeddings=512,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=2,
        ),
        image_token_index=HFTokenizer(tok).token_to_id("<|image|>"),
    )
    folder = _save(transformers.MllamaForConditionalGeneration(config), tok, path / "llama3_2_vision")
    return folder, _transform("ftune.data.MllamaImageTransform", tile_size=8)


FAMILIES: dict[str, Callable[[Path], tuple[Path, list[str]]]] = {
    "smolvlm": smolvlm,
    "gemma3": gemma3,
    "llava": llava,
    "llama3_2_vision": llama3_2_vision,
}
# Each family's LoRA targets in every part (leaf names of the encoder, projector and decoder).
TARGETS = {
    "smolvlm": "{decoder: [q_proj, v_proj], projector: [proj], vision_encoder: [q_proj, v_proj]}",
    "gemma3": "{decoder: [q_proj, v_proj], vision_encoder: [q_proj, v_proj]}",  # its projector: no nn.Linear
    "llava": "{decoder: [q_proj, v_proj], projector: [linear_1, linear_2], vision_encoder: [q_proj, v_proj]}",
    "llama3_2_vision": "{decoder: [q_proj, v_proj], projector: [proj], vision_encoder: [q_proj, v_proj]}",
}

# Images per chat: rank 0 of two reads chats 0 and 2 (three images), rank 1 chats 1 and 3 (none), when
# the sampler does not shuffle: uneven images per rank, and a rank with a text-only batch.
IMAGES_PER_CHAT = (1, 0, 2, 0)


def chats(path: Path, images_per_chat: tuple[int, ...] = IMAGES_PER_CHAT) -> Path:
    """A jsonl of chats, the i-th with `images_per_chat[i]` drawn discs and their colours as the answer."""
    records = []
    for i, n in enumerate(images_per_chat):
        parts, names = [], []
        for j in range(n):
            rgb = COLOURS[(i + j) % len(COLOURS)]
            image = Image.new("RGB", (32, 24 + 8 * j), (128, 128, 128))
            ImageDraw.Draw(image).ellipse((4 + i, 4, 24, 20 - j), fill=rgb)
            image.save(path / f"chat{i}_{j}.png")
            parts.append({"type": "image", "image": f"chat{i}_{j}.png"})
            names.append(str(rgb[0]))
        question = [*parts, {"type": "text", "text": "What colour is the disc?"}]
        answer = [{"type": "text", "text": f"It is {' and '.join(names) or 'none'}."}]
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        records.append({"messages": messages})
    data = path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    return data
