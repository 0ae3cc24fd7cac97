"""The log-probabilities DPO and GRPO train on, against transformers, on tiny Qwen3-MoE, Mixtral and Gemma 2.

ftune's `sequence_logps` (a row's summed log-probability of its labelled tokens: DPO) and
`target_logps` (each labelled token's: GRPO), from the model's final hidden states and its output
head, equal `log_softmax` of transformers' logits of the same tiny model, gathered at the labels,
within 1e-5 relative. Gemma 2's logits are soft-capped in transformers' forward; ftune's head
applies the same cap, and the same figures without it are far off (the check would see a lost cap).
"""

from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf

from ftune.checkpointing import load_hf
from ftune.modules.transformer import OutputHead
from ftune.training.methods.logps import sequence_logps, target_logps

pytestmark = pytest.mark.usefixtures("one_thread")
transformers = pytest.importorskip("transformers")

VOCAB = 128  # tests/models/ftune_tiny_hf.py
IGNORE = -100


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens [3, 20] and their next-token labels [3, 19]: a prompt of 4 unlabelled positions in every
    row, the last row right-padded by 5, the second row without a label at all after position 10."""
    tokens = torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(3))
    labels = tokens[:, 1:].clone()
    labels[:, :4] = IGNORE
    labels[1, 10:] = IGNORE
    labels[2, -5:] = IGNORE
    return tokens, labels


def _pair(family: str, path: Path):
    hf = build_tiny_hf(family)
    hf.save_pretrained(path)
    return hf, load_hf(path).eval()


def _reference(hf, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' log p(label) per position [b, s - 1] (0 where ignored), in float64."""
    logits = hf(tokens).logits[:, :-1].double()  # (b, s - 1, vocab), capped by transformers for Gemma 2
    keep = labels != IGNORE
    picked = torch.log_softmax(logits, dim=-1).gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    return torch.where(keep, picked, torch.zeros_like(picked))


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gemma2"])
def test_sequence_and_token_logps_equal_transformers(family, tmp_path):
    hf, model = _pair(family, tmp_path)
    tokens, labels = _batch()
    with torch.no_grad():
        want = _reference(hf, tokens, labels)
        hidden = model.hidden(tokens)[:, :-1]  # (b, s - 1, dim): the positions that predict the labels
        per_token = target_logps(model.head, hidden, labels, num_chunks=3)
        sums, counts = sequence_logps(model.head, hidden, labels, num_chunks=3)
    assert counts.tolist() == (labels != IGNORE).sum(dim=1).tolist()
    torch.testing.assert_close(per_token.double(), want, rtol=1e-5, atol=0.0)
    torch.testing.assert_close(sums.double(), want.sum(dim=1), rtol=1e-5, atol=0.0)
    if family == "gemma2":
        cap = model.head.softcap
        assert cap == hf.config.final_logit_softcapping == 3.0
        uncapped = OutputHead(model.head.weight, None)
        with torch.no_grad():
            lost, _ = sequence_logps(uncapped, hidden, labels, num_chunks=3)
        assert not torch.allclose(lost.double(), want.sum(dim=1), rtol=1e-2)
