"""Agent GRPO's loss over multi-turn trajectories equals TRL 1.16's on the same fixed trajectories.

TRL treats a multi-turn completion as its completion tokens with a ``tool_mask`` (0 at tool-result
tokens): ``_compute_loss`` multiplies ``completion_mask`` by it, and ``num_items_in_batch`` (dapo's
normaliser) counts the product. ftune labels the environment's tokens -100 in the trajectory's row
(``Trajectories.training_batch``) and runs the single-turn path (``training.grpo_loss``, through
``model.head``). Both run here on one tiny model's forward: TRL's ``_compute_loss`` read from its
installed source (tests/training/trl_grpo.py), fed the per-token log-probabilities of the same
hidden states; the losses and the gradients they give the model's weights must agree.
"""

import pytest
import torch
from trl_grpo import trl_is_ratio, trl_loss

from ftune.generation.multi_turn import Trajectories, Trajectory
from ftune.models.llama3 import llama3
from ftune.training import GRPOLoss, RolloutBatch, grpo_loss, on_device
from ftune.training.methods.logps import target_logps
from ftune.training.methods.off_policy import importance_weights

BUDGET = 14  # max_trajectory_tokens: TRL's max_completion_length, dr_grpo's constant


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return llama3(
        vocab_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=64,
        max_seq_len=64,
    )


def _trajectories() -> Trajectories:
    """Four fixed conversations (two groups of two): prompts of different lengths, 1 to 3 turns, answers between."""
    m, e = True, False
    shapes = [  # (prompt length, per-token: sampled by the model or the environment's)
        (5, [m, m, m, e, e, e, m, m, e, e, m, m, m, m]),
        (5, [m, m, m, m]),
        (3, [m, e, e, e, e, m, m, e, e, m]),
        (3, [m, m, e, e, m, m, m, m, m, m, m]),
    ]
    g = torch.Generator().manual_seed(1)
    rows = []
    for prompt_len, sampled in shapes:
        ids = torch.randint(4, 64, (prompt_len + len(sampled),), generator=g).tolist()
        rows.append(Trajectory(ids[:prompt_len], ids[prompt_len:], sampled, [0.0] * len(sampled)))
    return Trajectories(rows, group_size=2, pad_id=0, logp_temperature=1.0)


def _noisy(x: torch.Tensor, seed: int, where: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (x.detach() + (torch.rand(x.shape, generator=g) - 0.5) * 0.8) * where


def _grads(model) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("kl_estimator", ["k3", "k3_ratio"])
@pytest.mark.parametrize("stale", [False, True], ids=["current", "stale"])
def test_loss_over_turns_equals_trls_with_its_tool_mask(loss_type, kl_estimator, stale):
    """Stale: the rollout was sampled by an older policy, weighted by TRL's truncated importance sampling
    (token_truncate, C = 3) on both sides, TRL's weights from its own lines."""
    model, traj = _model(), _trajectories()
    raw = traj.training_batch()
    batch = on_device({"tokens": raw["tokens"], "labels": raw["labels"]}, torch.device("cpu"))
    trained = batch.labels != -100  # shifted: the positions that predict a model token
    loss_fn = GRPOLoss(
        loss_type,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.04,
        max_completion_length=BUDGET if loss_type == "dr_grpo" else None,
        kl_estimator=kl_estimator,
    )
    with torch.no_grad():
        current = loss_fn.token_logps(model.head, model.hidden(batch.tokens), batch.labels)
    old, ref = _noisy(current, 2, trained), _noisy(current, 3, trained)  # ratios ~[0.67, 1.5]: both clips
    advantages = torch.tensor([0.9, -0.9, -0.4, 0.4])
    spread = torch.rand(old.shape, generator=torch.Generator().manual_seed(4))
    sampling = (old + (spread - 0.7) * 3.0) * trained  # the stale sampler's: weights 0.4 to 8, some capped
    weights = importance_weights(old, sampling, trained, cap=3.0) if stale else None
    if stale:
        assert (weights[trained] == 3.0).any() and (weights[trained] < 1).any()
    agent = RolloutBatch(
        batch.tokens, batch.labels, None, None,
        advantages=advantages, old_logps=old, ref_logps=ref, temperature=1.0, metrics={}, is_weights=weights,
    )  # fmt: skip
    ours = grpo_loss(loss_fn, model, model.hidden(batch.tokens), agent)
    (ours.sum / ours.count).backward()
    our_grads = _grads(model)

    # TRL's layout: each row's completion (everything after its prompt) left-aligned, right-padded.
    width = max(len(r.tokens) for r in traj.rows)
    every = raw["labels"].clone()  # every completion token as a label, the environment's too
    for i, r in enumerate(traj.rows):
        every[i, len(r.prompt) : len(r.prompt) + len(r.tokens)] = torch.tensor(r.tokens)
    every = on_device({"tokens": raw["tokens"], "labels": every}, torch.device("cpu")).labels
    all_logps = target_logps(model.head, model.hidden(batch.tokens), every, num_chunks=8)
    zeros = torch.zeros(len(traj.rows), width)
    old_t, ref_t, sampling_t, completion_mask, tool_mask = (zeros.clone() for _ in range(5))
    logps = [None] * len(traj.rows)
    for i, r in enumerate(traj.rows):
        span = slice(
            len(r.prompt) - 1, len(r.prompt) - 1 + len(r.tokens)
        )  # shifted positions of the completion
        n = len(r.tokens)
        logps[i] = torch.nn.functional.pad(all_logps[i, span], (0, width - n))
        old_t[i, :n], ref_t[i, :n], sampling_t[i, :n] = old[i, span], ref[i, span], sampling[i, span]
        completion_mask[i, :n] = 1
        tool_mask[i, :n] = torch.tensor(r.sampled, dtype=torch.float32)
    completion_mask, tool_mask = completion_mask.long(), tool_mask.long()
    is_ratio = trl_is_ratio(old_t, sampling_t, completion_mask, tool_mask, cap=3.0) if stale else None
    theirs, _ = trl_loss(
        loss_type, beta=0.04, eps=0.2, eps_high=0.28, max_len=BUDGET, logps=torch.stack(logps), old=old_t,
        ref=ref_t, adv=advantages, mask=completion_mask, tool_mask=tool_mask,
        num_items=(completion_mask * tool_mask).sum(), ratio_kl=kl_estimator == "k3_ratio", is_ratio=is_ratio,
    )  # fmt: skip
    theirs.backward()
    torch.testing.assert_close(ours.sum / ours.count, theirs.detach(), rtol=1e-6, atol=1e-7)
    for a, b in zip(our_grads, _grads(model)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert ours.count == {"grpo": 4, "dapo": int(tool_mask.sum()), "dr_grpo": 4 * BUDGET}[loss_type]
