"""Tiny random `transformers` image-text models and the inputs their parity tests share (a helper
module, named uniquely so that it never collides with another test folder's helpers)."""

from typing import Any

import torch
from ftune_tiny_hf import _COMMON, GEMMA3_TINY, TINY_HF

IMAGE_TOKEN, BOI, EOI = 127, 125, 126  # the last ids of the tiny vocabulary (128)
TEXT_IDS = 120  # text tokens are drawn below this

# A SigLIP tower of 8 x 8 patches (56 / 7), without SigLIP's pooling head (as every VLM's).
SIGLIP_TINY: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=56,
    patch_size=7,
    layer_norm_eps=1e-6,
)


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter random (norms near 1), fp32, eval mode: HF initialises norms and biases to
    constants, which would hide a swapped weight and bias."""
    torch.manual_seed(seed)
    model = model.float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name.rsplit(".", 2)[-2] else p.normal_(0.0, 0.1)
    return model


def tiny_gemma3_vlm(seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """Gemma3ForConditionalGeneration: the tiny Gemma 3 text decoder (window 6), the tiny SigLIP, and
    16 tokens an image (8 x 8 patches pooled 2 x 2): an image is longer than the window."""
    import transformers

    text = transformers.Gemma3TextConfig(**{**_COMMON, **GEMMA3_TINY}).to_dict()
    config = transformers.Gemma3Config(
        text_config=text,
        vision_config=dict(model_type="siglip_vision_model", vision_use_head=False, **SIGLIP_TINY),
        mm_tokens_per_image=16,
        boi_token_index=BOI,
        eoi_token_index=EOI,
        image_token_index=IMAGE_TOKEN,
        **overrides,
    )
    return randomise(transformers.Gemma3ForConditionalGeneration(config), seed)


def tiny_llama_text_config(family: str = "smollm2") -> dict[str, Any]:
    """The tiny llama-style text config.json of `family` (`ftune_tiny_hf.TINY_HF`)."""
    import transformers

    _, options = TINY_HF[family]
    return transformers.LlamaConfig(**{**_COMMON, **options}).to_dict()


def layout(rows: list[list[tuple[str, int]]], tokens_per_image: int, seed: int) -> torch.Tensor:
    """Token ids (len(rows), s): each row a list of ("text", n) random text tokens and ("image", 1)
    images (BOI, the image tokens, EOI); every row must come to the same length."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for row in rows:
        ids: list[int] = []
        for kind, n in row:
            if kind == "text":
                ids += torch.randint(0, TEXT_IDS, (n,), generator=g).tolist()
            else:
                ids += [BOI] + [IMAGE_TOKEN] * tokens_per_image + [EOI]
        out.append(ids)
    assert len({len(r) for r in out}) == 1, [len(r) for r in out]
    return torch.tensor(out)


def pixels(n: int, size: int, seed: int) -> torch.Tensor:
    """(n, 3, size, size) normalised pixels in [-1, 1]."""
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def tiny_idefics3(seed: int = 0, kind: str = "idefics3", **overrides: Any) -> torch.nn.Module:
    """Idefics3ForConditionalGeneration (SmolVLM's architecture; `kind="smolvlm"`: SmolVLM2's class,
    SmolVLMForConditionalGeneration): the tiny SigLIP, pixel shuffle by 2 (8 x 8 patches -> 16 tokens
    an image) and the tiny SmolLM2 text decoder."""
    import transformers

    config_cls, model_cls = {
        "idefics3": (transformers.Idefics3Config, transformers.Idefics3ForConditionalGeneration),
        "smolvlm": (transformers.SmolVLMConfig, transformers.SmolVLMForConditionalGeneration),
    }[kind]
    config = config_cls(
        text_config=tiny_llama_text_config("smollm2"),
        vision_config=dict(SIGLIP_TINY),
        scale_factor=2,
        image_token_id=IMAGE_TOKEN,
        **overrides,
    )
    return randomise(model_cls(config), seed)


def tiny_llava(text_family: str = "smollm2", seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """LlavaForConditionalGeneration with the tiny SigLIP (64 patches = 64 tokens an image, every
    patch kept: strategy "full") and the tiny text decoder of `text_family` (smollm2 or gemma3): a
    composed small VLM."""
    import transformers

    if text_family == "gemma3":
        text = transformers.Gemma3TextConfig(**{**_COMMON, **GEMMA3_TINY}).to_dict()
    else:
        text = tiny_llama_text_config(text_family)
    config = transformers.LlavaConfig(
        vision_config=dict(model_type="siglip_vision_model", vision_use_head=False, **SIGLIP_TINY),
        text_config=text,
        image_token_index=IMAGE_TOKEN,
        vision_feature_select_strategy="full",
        **{"vision_feature_layer": -1, "projector_hidden_act": "gelu", **overrides},
    )
    return randomise(transformers.LlavaForConditionalGeneration(config), seed)
