"""Images drawn with Pillow and a tiny tokenizer with the image tokens of Gemma 3, Idefics3 and Llama 3.2 Vision."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from PIL import Image, ImageDraw

# (width, height, mode): tiny, square, wide, tall, odd sizes; every mode a dataset meets
SHAPES = [
    (1, 1, "RGB"), (2, 3, "L"), (7, 5, "RGBA"), (16, 16, "P"), (37, 21, "RGB"), (21, 37, "LA"),
    (64, 64, "RGB"), (100, 10, "RGBA"), (10, 100, "L"), (300, 40, "P"), (40, 300, "RGB"), (128, 96, "CMYK"),
    (96, 128, "1"), (333, 222, "RGB"), (222, 333, "RGBA"), (512, 512, "RGB"), (513, 511, "L"), (600, 150, "RGB"),
    (150, 600, "P"), (1000, 800, "RGB"), (800, 1000, "RGBA"), (1200, 300, "RGB"), (31, 1100, "PT"),
]  # fmt: skip


def drawn_image(width: int, height: int, mode: str, seed: int) -> Image.Image:
    """Noise, a disc and a bar in `mode` ("PT": a palette image with a transparent colour; "RGBA": an alpha ramp)."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 256, (height, width, 3), generator=g, dtype=torch.uint8)
    image = Image.frombytes("RGB", (width, height), noise.numpy().tobytes())
    draw = ImageDraw.Draw(image)
    draw.ellipse((width // 4, height // 4, 3 * width // 4, 3 * height // 4), fill=(220, 30, 40))
    draw.rectangle((0, 0, width // 3, height // 5), fill=(10, 200, 90))
    if mode == "RGBA":
        alpha = Image.linear_gradient("L").resize((width, height))
        image.putalpha(alpha)
        return image
    if mode == "LA":
        image = image.convert("L")
        image.putalpha(Image.linear_gradient("L").resize((width, height)))
        return image
    if mode == "PT":
        image = image.convert("P")
        image.info["transparency"] = image.getpixel((0, 0))
        return image
    return image.convert(mode)


def drawn_images() -> list[Image.Image]:
    return [drawn_image(w, h, m, seed) for seed, (w, h, m) in enumerate(SHAPES)]


def png_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


CORPUS = [
    "Describe the picture. What colour is the disc? It is red.",
    "How many shapes are there? There are two shapes in the image.",
    "Hello world, this is a tiny corpus for a tiny tokenizer.",
    "user\n\n\nA picture.\n\nuser\n\nTwo.\n\n\n",  # newline runs merge, as in Gemma 3's vocabulary
]
IMAGE_TOKENS = [
    "<start_of_image>", "<image_soft_token>", "<end_of_image>",  # Gemma 3
    "<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>",  # Idefics3
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
    "<|image|>", "<|python_tag|>",  # Llama 3.2 Vision
]  # fmt: skip
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", *IMAGE_TOKENS]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def vlm_tokenizer_folder(folder: Path, family: str) -> Path:
    """A byte-level BPE tokenizer.json (420 ids) whose special tokens include every family's image tokens;
    for "gemma3" its config names them as Gemma 3's tokenizer does (transformers' processor reads them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "bos_token": "<s>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "chat_template": CHATML,
    }
    if family == "gemma3":
        names = ("boi_token", "image_token", "eoi_token")
        config["extra_special_tokens"] = dict(zip(names, IMAGE_TOKENS[:3]))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder
