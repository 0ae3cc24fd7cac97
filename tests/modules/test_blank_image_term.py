"""A text-only batch through an image-text model sharded over several ranks: with
`encode_without_images` (set by `ftune.training.shard_model`) the encoder and projector still run, on
a blank image whose features add zero, so every rank runs the same FSDP2 units (and reduces the same
gradients) whatever images its batch holds. The hidden states are bit for bit those of the plain
text forward, and every encoder and projector parameter gets a zero gradient."""

import pytest
import torch

from ftune.models.llama3 import llama3
from ftune.models.llama3_2_vision import llama3_2_vision
from ftune.models.llava import llava

TEXT = dict(vocab_size=64, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=16, intermediate_dim=24)


def _llava() -> torch.nn.Module:
    decoder = llama3(**TEXT, max_seq_len=32)
    return llava(
        decoder=decoder,
        image_size=8,
        patch_size=4,
        vision_embed_dim=8,
        vision_num_layers=1,
        vision_num_heads=2,
        vision_intermediate_dim=12,
        image_token_id=63,
    )


def _llama3_2_vision() -> torch.nn.Module:
    return llama3_2_vision(
        **{**TEXT, "num_layers": 3},
        max_seq_len=32,
        cross_attention_layers=[1],
        image_size=8,
        patch_size=4,
        vision_embed_dim=8,
        vision_num_layers=2,
        vision_num_global_layers=1,
        vision_num_heads=2,
        vision_intermediate_dim=12,
        vision_intermediate_layers=[0],
        image_token_id=63,
    )


@pytest.mark.parametrize("build", [_llava, _llama3_2_vision], ids=["llava", "llama3_2_vision"])
def test_text_only_batch_runs_the_encoder_and_adds_zero(build) -> None:
    torch.manual_seed(0)
    model = build()
    tokens = torch.randint(0, 60, (2, 7))
    plain = model.hidden(tokens)
    model.encode_without_images = True
    hidden = model.hidden(tokens)
    assert torch.equal(hidden, plain)
    hidden.sum().backward()
    parts = [*model.vision_encoder.named_parameters(), *model.projector.named_parameters()]
    zero = {n for n, p in parts if p.grad is not None and not p.grad.any()}
    assert zero == {n for n, p in parts if p.grad is not None}
    # every parameter an image reaches (LLaVA's feature layer -1 skips the encoder's final norm)
    assert {n for n, _ in parts} - zero <= {"post_layernorm.weight", "post_layernorm.bias"}
    model.zero_grad(set_to_none=True)
    model.encode_without_images = False
    model.hidden(tokens).sum().backward()  # the plain text forward leaves them out of the graph
    assert all(p.grad is None for p in model.vision_encoder.parameters())


def test_decoding_with_caches_encodes_nothing() -> None:
    """A decoding step after a prefill is never a training forward: no blank image then."""
    model = _llava().eval()
    model.encode_without_images = True
    calls = []
    model.vision_encoder.register_forward_hook(lambda *_: calls.append(1))
    model.setup_caches(1, 16)
    with torch.no_grad():
        model.hidden(torch.randint(0, 60, (1, 3)), input_pos=torch.arange(3)[None])
    assert calls == []
