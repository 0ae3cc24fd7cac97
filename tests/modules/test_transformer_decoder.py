"""TransformerDecoder: packed documents, KV-cache decoding, tied output, argument checks."""

import pytest
import torch
from torch import nn

from ftune.models.llama3 import llama3
from ftune.modules import TransformerDecoder, document_causal_mask

VOCAB = 96


def tiny(tie: bool = False, seed: int = 0) -> TransformerDecoder:
    torch.manual_seed(seed)
    model = llama3(
        vocab_size=VOCAB,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=64,
        max_seq_len=64,
        tie_word_embeddings=tie,
    )
    with torch.no_grad():  # default init gives near-uniform logits; widen them so differences show
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model.eval()


def tokens(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def test_packed_documents_match_each_document_alone() -> None:
    model = tiny()
    doc_a, doc_b = tokens(1, 5, seed=1), tokens(1, 7, seed=2)
    packed = torch.cat([doc_a, doc_b], dim=1)
    input_pos = torch.cat([torch.arange(5), torch.arange(7)])[None]
    document_ids = torch.tensor([[0] * 5 + [1] * 7])
    with torch.no_grad():
        logits = model(packed, input_pos=input_pos, mask=document_causal_mask(document_ids))
        alone_a, alone_b = model(doc_a), model(doc_b)
    torch.testing.assert_close(logits[:, :5], alone_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[:, 5:], alone_b, rtol=1e-5, atol=1e-5)
    # Without the mask the second document sees the first: the test above is not vacuous.
    with torch.no_grad():
        leaky = model(packed, input_pos=input_pos)
    assert (leaky[:, 5:] - alone_b).abs().max() > 1e-3


@pytest.mark.parametrize("tie", [False, True])
def test_kv_cache_decoding_step_by_step_equals_full_forward(tie: bool) -> None:
    model = tiny(tie=tie)
    seq = tokens(2, 12, seed=3)
    with torch.no_grad():
        full = model(seq)
        model.setup_caches(batch_size=2, max_seq_len=20)
        assert model.caches_are_enabled()
        steps = [model(seq[:, :4], input_pos=torch.arange(4)[None].expand(2, 4))]  # prefill
        for t in range(4, 12):
            steps.append(model(seq[:, t : t + 1], input_pos=torch.full((2, 1), t)))
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)

        model.reset_caches()  # a fresh decode after a reset gives the same logits again
        again = model(seq[:, :12], input_pos=torch.arange(12)[None].expand(2, 12))
        torch.testing.assert_close(again, full, rtol=1e-5, atol=1e-5)
    assert not any("cache" in k for k in model.state_dict())
    model.delete_caches()
    assert not model.caches_are_enabled()


def test_kv_cache_errors() -> None:
    model = tiny()
    model.setup_caches(batch_size=2, max_seq_len=8)
    with pytest.raises(ValueError, match=r"caches are enabled, so input_pos \(batch, seq_len\) is required"):
        model(tokens(2, 3))
    with pytest.raises(ValueError, match=r"batch size 1 does not match the cache's 2"):
        model(tokens(1, 3), input_pos=torch.arange(3)[None])
    with pytest.raises(ValueError, match=r"TransformerDecoder: position 9 is past the cache length 8"):
        model(tokens(2, 2), input_pos=torch.tensor([[8, 9], [8, 9]]))
    with pytest.raises(ValueError, match=r"mask must be a bool tensor of shape \(2, 3, 8\)"):
        model(tokens(2, 3), input_pos=torch.arange(3)[None], mask=torch.ones(2, 3, 3, dtype=torch.bool))


def test_tied_output_uses_the_embedding() -> None:
    model = tiny(tie=True)
    assert model.output is None and "output.weight" not in model.state_dict()
    assert model.head.weight is model.tok_embeddings.weight
    seq = tokens(1, 6)
    with torch.no_grad():
        h = model.hidden(seq)
        torch.testing.assert_close(model.project(h), h @ model.tok_embeddings.weight.T)
        assert torch.equal(model.project(h), model(seq))
    untied = tiny(tie=False)
    assert untied.head.weight is untied.output.weight
    assert {n.rsplit(".", 1)[-1] for n, m in untied.named_modules() if isinstance(m, nn.Linear)} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "output",
    }


def test_argument_errors() -> None:
    model = tiny()
    with pytest.raises(ValueError, match=r"tokens must be \(batch, seq_len\), got shape \(4,\)"):
        model(tokens(4))
    with pytest.raises(ValueError, match=r"input_pos must have shape \(2, 4\) like tokens, got \(2, 3\)"):
        model(tokens(2, 4), input_pos=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"mask must be a bool tensor of shape \(2, 4, 4\).*got torch.float32"
    ):
        model(tokens(2, 4), mask=torch.ones(2, 4, 4))
