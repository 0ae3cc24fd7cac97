"""Image-text models built from an HF config.json (`image_text_model_from_hf_config`) with their
converters (`image_text_converter`): each tiny transformers model's config and weights give its
logits; omitted keys take transformers' defaults; unsupported options are errors."""

import pytest
import torch
from ftune_tiny_vlm import layout, max_diff, pixels, tiny_gemma3_vlm, tiny_idefics3, tiny_llava

from ftune.models import image_text_converter, image_text_model_from_hf_config, is_image_text_model_config
from ftune.models._image_text_config import (
    IDEFICS3_IMAGE_TOKEN_ID,
    IDEFICS3_SCALE_FACTOR,
    IDEFICS3_VISION_DEFAULTS,
    LLAVA_FEATURE_LAYER,
    LLAVA_IMAGE_TOKEN_ID,
    SIGLIP_DEFAULTS,
)
from ftune.models.gemma3._vision import IMAGE_TOKEN_ID, TOKENS_PER_IMAGE

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {
    "gemma3": (lambda: tiny_gemma3_vlm(), "gemma3_vision", "gemma3"),
    "idefics3": (lambda: tiny_idefics3(), "smolvlm", "llama3"),
    "smolvlm2": (lambda: tiny_idefics3(kind="smolvlm"), "smolvlm", "llama3"),
    "llava-smollm2": (lambda: tiny_llava("smollm2"), "llava", "llama3"),
    "llava-gemma3": (lambda: tiny_llava("gemma3"), "llava", "gemma3"),
}


@pytest.mark.parametrize("name", TINY)
def test_config_and_weights_give_transformers_logits(name: str) -> None:
    make, family, _ = TINY[name]
    hf = make()
    config = hf.config.to_dict()
    assert is_image_text_model_config(config)
    got_family, text_family, model = image_text_model_from_hf_config(config)
    assert got_family == family
    model.load_state_dict(image_text_converter(family, text_family).hf_to_ftune(hf.state_dict()))
    n = model.tokens_per_image
    tokens = layout([[("text", 5), ("image", 1), ("text", 40)]], n, seed=1)
    images = pixels(1, config["vision_config"]["image_size"], seed=2)
    kwargs = {"token_type_ids": (tokens == model.image_token_id).long()} if name == "gemma3" else {}
    hf_images = images[None] if family == "smolvlm" else images
    with torch.no_grad():
        expected = hf(input_ids=tokens, pixel_values=hf_images, **kwargs).logits
        assert max_diff(model.eval()(tokens, images), expected) <= 1e-4


def test_omitted_keys_take_transformers_defaults() -> None:
    siglip = transformers.SiglipVisionConfig().to_dict()
    assert {k: siglip[k] for k in SIGLIP_DEFAULTS} == SIGLIP_DEFAULTS
    for config_cls in (transformers.Idefics3VisionConfig, transformers.SmolVLMVisionConfig):
        vision = config_cls().to_dict()
        assert {k: vision[k] for k in IDEFICS3_VISION_DEFAULTS} == IDEFICS3_VISION_DEFAULTS
    for config_cls in (transformers.Idefics3Config, transformers.SmolVLMConfig):
        config = config_cls()
        assert (config.image_token_id, config.scale_factor) == (
            IDEFICS3_IMAGE_TOKEN_ID,
            IDEFICS3_SCALE_FACTOR,
        )
    llava = transformers.LlavaConfig()
    assert (llava.image_token_index, llava.vision_feature_layer) == (
        LLAVA_IMAGE_TOKEN_ID,
        LLAVA_FEATURE_LAYER,
    )
    gemma = transformers.Gemma3Config()
    assert (gemma.mm_tokens_per_image, gemma.image_token_index) == (TOKENS_PER_IMAGE, IMAGE_TOKEN_ID)


def test_gemma3_4b_config_as_published_builds_the_published_model() -> None:
    # google/gemma-3-4b-it's config.json: a sparse text_config and vision_config (transformers fills
    # in the rest); built on the meta device, it has the published parameter count.
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "mm_tokens_per_image": 256,
        "image_token_index": 262_144,
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10_240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "vision_use_head": False,
        },
    }
    family, text_family, model = image_text_model_from_hf_config(config, device="meta")
    assert (family, text_family) == ("gemma3_vision", "gemma3")
    assert sum(p.numel() for p in model.parameters()) == 4_300_079_472


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            dict(vision_feature_select_strategy="default"),
            "vision_feature_select_strategy='default': .* takes 'full'",
        ),
        (
            dict(vision_config={"model_type": "clip_vision_model"}),
            "vision_config.model_type='clip_vision_model'",
        ),
        (dict(projector_hidden_act="relu"), "projector_hidden_act='relu'"),
        (dict(vision_feature_layer=[-2, -1]), r"vision_feature_layer=\[-2, -1\]: .* one layer index"),
    ],
)
def test_unsupported_llava_options_are_errors(change: dict, match: str) -> None:
    config = {**tiny_llava("smollm2").config.to_dict(), **change}
    with pytest.raises(ValueError, match=match):
        image_text_model_from_hf_config(config, device="meta")


def test_unknown_model_type_and_vision_options_are_errors() -> None:
    with pytest.raises(
        ValueError, match="model_type='paligemma': ftune builds gemma3, idefics3, llava, mllama, smolvlm"
    ):
        image_text_model_from_hf_config({"model_type": "paligemma"})
    config = tiny_idefics3().config.to_dict()
    config["vision_config"]["hidden_act"] = "gelu"
    with pytest.raises(
        ValueError, match="vision_config.hidden_act='gelu': ftune's SigLIP encoder takes 'gelu_pytorch_tanh'"
    ):
        image_text_model_from_hf_config(config, device="meta")
    with pytest.raises(KeyError, match="No image-text family 'qwen2_vl'"):
        image_text_converter("qwen2_vl", "qwen2")
