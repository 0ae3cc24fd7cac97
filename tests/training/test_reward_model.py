"""A reward model (score head, Bradley-Terry loss) against transformers' sequence classifier and by hand,
and its saves: full models load in transformers, LoRA adapters in peft, with equal scores."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.data import padded_collate_preference
from ftune.modules.score_head import SCORE_KEY, ScoreHead
from ftune.peft import apply_lora
from ftune.training import (
    RewardLoss,
    StepLoss,
    add_score_head,
    apply_peft,
    on_device,
    per_pair,
    reward_loss,
    reward_scores,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper

CPU = torch.device("cpu")
PAD = 0


def _rows(seed: int, n: int = 4) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(1, 128, (int(torch.randint(2, 9, (), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


def _padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def _seq_cls(folder: Path):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(folder).eval()


def _reward_model(tmp_path: Path, family: str):
    hf = build_tiny_hf(family, seed=0)
    hf.save_pretrained(tmp_path / "base")
    model = load_hf(tmp_path / "base")
    torch.manual_seed(1)
    add_score_head(model, pad_id=PAD)
    return model


def _ours(model, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return reward_scores(model, model.hidden(tokens), tokens)


def test_last_token_is_the_rightmost_non_pad_token_as_transformers_reads_it():
    head = ScoreHead(4, pad_id=PAD)
    tokens = torch.tensor([[5, 6, 7, 0], [5, 0, 7, 0], [0, 0, 0, 0], [5, 6, 7, 8]])
    assert head.last_tokens(tokens).tolist() == [2, 2, 0, 3]
    assert ScoreHead(4).last_tokens(tokens).tolist() == [3, 3, 3, 3]  # no pad id: the last position


def test_a_reward_model_has_no_lm_head(tmp_path):
    model = _reward_model(tmp_path, "llama3")
    assert "output.weight" not in model.state_dict() and SCORE_KEY in model.state_dict()
    with pytest.raises(ValueError, match="reward model .* has no LM head"):
        model(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="has no score head"):
        reward_scores(load_hf(tmp_path / "base"), torch.zeros(1, 2, 64), torch.tensor([[1, 2]]))


def test_bradley_terry_loss_with_margin_and_centring_by_hand():
    chosen, rejected, margins = torch.tensor([1.0, -0.5]), torch.tensor([0.2, 0.3]), torch.tensor([0.5, 0.0])
    losses = RewardLoss(center_rewards_coefficient=0.01)(chosen, rejected, margins)
    expected = -F.logsigmoid(chosen - rejected - margins) + 0.01 * (chosen + rejected) ** 2
    torch.testing.assert_close(losses, expected)
    torch.testing.assert_close(RewardLoss()(chosen, rejected), -F.logsigmoid(chosen - rejected))
    with pytest.raises(ValueError, match="center_rewards_coefficient: RewardLoss needs a number >= 0"):
        RewardLoss(center_rewards_coefficient=-1.0)


def test_reward_loss_logs_trl_figures(tmp_path):
    model = _reward_model(tmp_path, "llama3")
    chosen, rejected = _rows(1, 3), _rows(2, 3)
    items = [
        {"chosen_tokens": c, "chosen_labels": c, "rejected_tokens": r, "rejected_labels": r, "margin": m}
        for c, r, m in zip(chosen, rejected, (0.0, 0.5, 1.0))
    ]
    batch = on_device(padded_collate_preference(items, pad_id=PAD), CPU)
    loss = reward_loss(RewardLoss(), model, model.hidden(batch.tokens), batch)
    scores = _ours(model, batch.tokens)
    c, r = scores.chunk(2)
    assert loss.count == 3
    torch.testing.assert_close(loss.sum, (-F.logsigmoid(c - r - torch.tensor([0.0, 0.5, 1.0]))).sum())
    values = {k: m.value() for k, m in loss.metrics.items()}
    assert values["accuracy"] == pytest.approx(float((c > r).float().mean()))
    assert values["margin"] == pytest.approx(float((c - r).mean()), abs=1e-6)
    assert values["min_reward"] == pytest.approx(float(scores.min()))
    assert values["max_reward"] == pytest.approx(float(scores.max()))
    assert values["mean_reward"] == pytest.approx(float(scores.mean()), abs=1e-6)


@pytest.mark.parametrize("family", ["llama3", "qwen2_5"])  # untied and tied embeddings
def test_full_save_loads_in_transformers_with_equal_scores(tmp_path, family):
    model = _reward_model(tmp_path, family)
    ckpt = HFCheckpointer(tmp_path / "base", tmp_path / "out")
    tokens = _padded(_rows(3) + [[7, 8, PAD, 9]])  # a pad id inside a row: read after it
    ckpt.save(1, model.state_dict(), pad_token_id=PAD)
    folder = tmp_path / "out" / "step_1"
    hf = _seq_cls(folder)
    assert type(hf).__name__.endswith("ForSequenceClassification") and hf.config.num_labels == 1
    assert hf.config.pad_token_id == PAD
    with torch.no_grad():
        theirs = hf(input_ids=tokens).logits.squeeze(-1)
    torch.testing.assert_close(_ours(model, tokens), theirs, rtol=1e-5, atol=1e-6)
    again = load_hf(folder)  # a reward model's folder reads back as one
    again.score.pad_id = PAD
    torch.testing.assert_close(_ours(again, tokens), theirs, rtol=1e-5, atol=1e-6)


def test_lora_adapter_loads_in_peft_with_equal_scores(tmp_path):
    from peft import PeftModel

    model = _reward_model(tmp_path, "llama3")
    settings = apply_peft(
        {"_component_": "ftune.peft.apply_lora", "targets": ["q_proj", "v_proj"], "rank": 2, "alpha": 4},
        model,
        None,
        dtype=torch.float32,
    )
    assert model.score.weight.requires_grad  # PEFT's modules_to_save: the head trains with the adapters
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name or name == SCORE_KEY:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    ckpt = HFCheckpointer(tmp_path / "base", tmp_path / "out")
    ckpt.save(1, model.state_dict(), adapter_config=settings, pad_token_id=PAD)
    folder = tmp_path / "out" / "step_1"
    base = _load_causal_as_seq_cls(tmp_path / "base")
    peft_model = PeftModel.from_pretrained(base, folder).eval()
    tokens = _padded(_rows(4))
    with torch.no_grad():
        theirs = peft_model(input_ids=tokens).logits.squeeze(-1)
    torch.testing.assert_close(_ours(model, tokens), theirs, rtol=1e-5, atol=1e-6)
    # Resuming reads the head back with the adapters.
    loaded = HFCheckpointer(tmp_path / "base", tmp_path / "out", resume_from_checkpoint="auto").load()
    torch.testing.assert_close(loaded.adapter[SCORE_KEY], model.score.weight.detach())


def _load_causal_as_seq_cls(folder: Path):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, pad_token_id=PAD)


def test_lora_swap_leaves_the_head_alone():
    # apply_lora freezes every non-adapter weight; apply_peft then unfreezes a reward model's head only.
    model = torch.nn.Module()
    model.q_proj = torch.nn.Linear(4, 4)
    apply_lora(model, targets=["q_proj"], rank=1, alpha=1)
    assert not model.q_proj.weight.requires_grad


def test_step_loss_over_pairs(tmp_path):
    model = _reward_model(tmp_path, "llama3")
    items = [
        {"chosen_tokens": c, "chosen_labels": c, "rejected_tokens": r, "rejected_labels": r}
        for c, r in zip(_rows(5, 2), _rows(6, 2))
    ]
    batch = on_device(padded_collate_preference(items, pad_id=PAD), CPU)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    step_loss = StepLoss([batch], optimizer, step=1, device=CPU, per=per_pair)
    step_loss.scaled(reward_loss(RewardLoss(), model, model.hidden(batch.tokens), batch)).backward()
    stats = step_loss.finish()
    c, r = _ours(model, batch.tokens).chunk(2)
    assert stats.loss == pytest.approx(float(-F.logsigmoid(c - r).mean()), rel=1e-5)
    assert model.score.weight.grad is not None
