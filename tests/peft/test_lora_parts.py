"""Which parts of an image-text model train: LoRA targets per part, `train_parts` for a full
fine-tune; the parts left out are frozen, and a text model has no parts."""

import pytest
import torch

from ftune.models.smolvlm import smolvlm_tiny
from ftune.modules.vision import ImageTextModel
from ftune.peft import LoRALinear, apply_lora, train_parts, trainable_params
from ftune.peft.apply import target_problem

LORA = dict(rank=2, alpha=4.0)


def tiny_vlm() -> ImageTextModel:
    torch.manual_seed(0)
    return smolvlm_tiny()


def _trainable(model: torch.nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if p.requires_grad}


def test_lora_in_the_decoder_only_freezes_the_rest() -> None:
    model = tiny_vlm()
    swapped = apply_lora(model, targets={"decoder": ["q_proj", "v_proj"]}, **LORA)
    assert swapped == [f"decoder.layers.{i}.attn.{n}" for i in range(2) for n in ("q_proj", "v_proj")]
    assert _trainable(model) == {f"{s}.lora_{ab}.weight" for s in swapped for ab in "ab"}
    assert not any(
        isinstance(m, LoRALinear) for m in [*model.vision_encoder.modules(), *model.projector.modules()]
    )


def test_lora_targets_in_each_part() -> None:
    model = tiny_vlm()
    targets = {"decoder": ["q_proj"], "projector": ["proj"], "vision_encoder": ["q_proj", "fc1"]}
    swapped = apply_lora(model, targets=targets, **LORA)
    assert swapped == [
        "vision_encoder.layers.0.self_attn.q_proj",
        "vision_encoder.layers.0.mlp.fc1",
        "vision_encoder.layers.1.self_attn.q_proj",
        "vision_encoder.layers.1.mlp.fc1",
        "projector.proj",
        "decoder.layers.0.attn.q_proj",
        "decoder.layers.1.attn.q_proj",
    ]
    assert _trainable(model) == {f"{s}.lora_{ab}.weight" for s in swapped for ab in "ab"}
    assert [p for p in trainable_params(model)] == [p for p in model.parameters() if p.requires_grad]


def test_a_plain_list_on_an_image_text_model_is_refused() -> None:
    model = tiny_vlm()
    with pytest.raises(
        ValueError,
        match=r"image-text model, so say which of its parts get adapters: give peft.targets per part, e.g. targets: \{decoder: \['q_proj'\]\}",
    ):
        apply_lora(model, targets=["q_proj"], **LORA)
    assert not any("lora" in n for n, _ in model.named_parameters())


@pytest.mark.parametrize(
    "targets, match",
    [
        (
            {"text": ["q_proj"]},
            r"peft.targets: \['text'\] are no parts of an image-text model; its parts are vision_encoder, projector, decoder",
        ),
        (
            {"projector": ["q_proj"]},
            r"targets \['q_proj'\] match no nn.Linear in PixelShuffleProjector; its nn.Linear names are \['proj'\]. \(part projector\) Fix peft.targets.projector",
        ),
    ],
)
def test_bad_part_targets_are_refused_before_any_swap(targets, match) -> None:
    model = tiny_vlm()
    with pytest.raises(ValueError, match=match):
        apply_lora(model, targets={"decoder": ["q_proj"], **targets}, **LORA)
    assert not any("lora" in n for n, _ in model.named_parameters())
    assert target_problem(model, {"decoder": ["q_proj"], **targets}) is not None


def test_parts_on_a_text_model_are_refused() -> None:
    model = tiny_vlm().decoder
    with pytest.raises(
        ValueError,
        match="TransformerDecoder is a text model, which has no parts .decoder given.; only image-text",
    ):
        apply_lora(model, targets={"decoder": ["q_proj"]}, **LORA)


def test_train_parts_freezes_the_others() -> None:
    model = tiny_vlm()
    assert train_parts(model, ["decoder", "projector"]) == ["vision_encoder"]
    expected = {n for n, _ in model.named_parameters() if not n.startswith("vision_encoder.")}
    assert _trainable(model) == expected
    assert train_parts(model, ["vision_encoder"]) == ["projector", "decoder"]
    assert _trainable(model) == {n for n, _ in model.named_parameters() if n.startswith("vision_encoder.")}
    with pytest.raises(ValueError, match=r"train_parts: name at least one part of the image-text model"):
        train_parts(model, [])
