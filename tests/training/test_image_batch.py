"""A collated image batch through the step's batch (``on_device``) and the recipes' forward line
``model.hidden(batch.tokens, **batch.model_inputs)``: images reach the model, text batches are unchanged."""

import torch

from ftune.data import padded_collate_sft
from ftune.models.smollm2 import smollm2
from ftune.models.smolvlm import smolvlm_tiny
from ftune.training import on_device
from ftune.training.methods.distill_loss import teacher_hidden
from ftune.training.step.loss import CrossEntropyLoss
from ftune.training.step.token_loss import batch_loss

CPU = torch.device("cpu")


def _image_batch() -> dict[str, torch.Tensor]:
    """Two rows, one image then two (4 image tokens each, id 63), labels on the text after the images."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 60, (2, 12), generator=g)
    tokens[0, 2:6] = tokens[1, 1:5] = tokens[1, 7:11] = 63
    labels = tokens.clone()
    labels[:, :6] = -100
    labels[1, 7:11] = -100
    return {
        "tokens": tokens,
        "labels": labels,
        "pixel_values": torch.rand(3, 3, 16, 16, generator=g),
        "image_sample": torch.tensor([0, 1, 1]),
    }


def test_on_device_carries_the_images_and_the_forward_gets_them() -> None:
    raw = _image_batch()
    batch = on_device(raw, CPU)
    assert torch.equal(batch.pixel_values, raw["pixel_values"])
    assert batch.image_sample.tolist() == [0, 1, 1]
    assert set(batch.model_inputs) == {"input_pos", "mask", "pixel_values"}

    torch.manual_seed(0)
    model = smolvlm_tiny()
    hidden = model.hidden(batch.tokens, **batch.model_inputs)
    assert torch.equal(hidden, model.hidden(raw["tokens"], raw["pixel_values"]))
    assert not torch.allclose(hidden, model.hidden(raw["tokens"], raw["pixel_values"].flip(0)))


def test_the_loss_of_an_image_batch_depends_on_its_images() -> None:
    torch.manual_seed(0)
    model = smolvlm_tiny()
    loss_fn = CrossEntropyLoss()
    raw = _image_batch()
    got, count = batch_loss(model, loss_fn, raw, device=CPU)
    other, _ = batch_loss(model, loss_fn, {**raw, "pixel_values": raw["pixel_values"] * 0}, device=CPU)
    assert count == int((raw["labels"][:, 1:] != -100).sum()) and torch.isfinite(got)
    assert not torch.allclose(got, other)


def test_a_text_batch_has_no_image_inputs() -> None:
    batch = on_device(
        padded_collate_sft([{"tokens": [1, 2, 3], "labels": [1, 2, 3]}, {"tokens": [4], "labels": [4]}], 0),
        CPU,
    )
    assert batch.pixel_values is None and batch.image_sample is None
    assert batch.model_inputs == {"input_pos": None, "mask": None}


def test_an_image_text_teacher_sees_the_images_a_text_teacher_the_tokens() -> None:
    """KD: the teacher pass of an image batch hands an image-text teacher the batch's images."""
    batch = on_device(_image_batch(), CPU)
    torch.manual_seed(0)
    teacher = smolvlm_tiny().eval()
    with torch.no_grad():
        expected = teacher.hidden(batch.tokens, batch.pixel_values)
    assert torch.equal(teacher_hidden(teacher, batch), expected)
    text = smollm2(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=32,
                   intermediate_dim=48, max_seq_len=64).eval()  # fmt: skip
    with torch.no_grad():
        assert torch.equal(teacher_hidden(text, batch), text.hidden(batch.tokens))
