"""PPO's loss: the clipped policy objective and the clipped value loss, with what torchtune logs.

Per response token, with the ratio ``r = exp(log π - log π_old)`` of the policy being trained to the
one that sampled, the whitened advantage ``A``, the value model's estimate ``V`` (and ``V_old`` at
sampling) and the return ``R`` (``ppo_advantages.gae``), as torchtune 0.6.1's ``rlhf.loss.PPOLoss``
(Schulman et al. 2017, eq. 7, and OpenAI baselines' value clip)::

    policy_loss = masked_mean(max(-A·r, -A·clip(r, 1-ε, 1+ε)))               over the response tokens
    value_loss  = ½·masked_mean(max((V - R)², (clip(V, V_old-c, V_old+c) - R)²))  over the value tokens
    loss        = policy_loss + value_coeff·value_loss

Logged with it, as torchtune's recipe: ``ratios`` (the plain mean of r over every position, padding
included, as torchtune takes it), ``clipfrac`` (the share of response tokens where the clipped term is
the larger) and ``approx_policy_kl`` (``mean(½·(log π - log π_old)²)``, every position).

A micro-batch's loss is its own mean (the masked means above), and a step's loss the mean of its
micro-batches' (torchtune's ``loss / gradient_accumulation_steps``, summed): ``loss.per`` counts each
micro-batch once, so ``StepLoss(per=loss.per)`` divides the summed means by the micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ftune.settings.ppo import loss_problems
from ftune.training.methods.ppo_advantages import masked_mean
from ftune.training.methods.ppo_trajectory import Trajectory, response_logps, response_values
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch


@dataclass(frozen=True)
class PPOLosses:
    """A micro-batch's PPO loss and its figures (each a micro-batch mean; the figures detached)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    ratios: torch.Tensor
    clipfrac: torch.Tensor
    approx_policy_kl: torch.Tensor

    def metrics(self) -> dict[str, Metric]:
        """torchtune's names, each a mean over the step's micro-batches (as torchtune's recipe logs them)."""
        figures = {"policy_loss": self.policy_loss, "value_loss": self.value_loss, "ratios": self.ratios}
        figures.update({"clipfrac": self.clipfrac, "approx_policy_kl": self.approx_policy_kl})
        return {name: Metric.mean(value.detach().float().reshape(1)) for name, value in figures.items()}


class PPOLoss(nn.Module):
    """The clipped PPO policy loss plus the clipped value loss (torchtune's ``PPOLoss``, same arguments).

    Args:
        epsilon: ε, the ratio's clip range (> 0; torchtune's configs use 0.2).
        value_clip_range: c, how far the value may move from its sampling-time estimate (>= 0).
        value_coeff: the value loss's weight (>= 0; torchtune's configs use 0.1).

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(self, epsilon: float = 0.1, value_clip_range: float = 0.2, value_coeff: float = 0.1) -> None:
        super().__init__()
        args = {"epsilon": epsilon, "value_clip_range": value_clip_range, "value_coeff": value_coeff}
        if problems := loss_problems(args):  # the checks `ftune run` makes before torch (ftune.settings.ppo)
            raise ValueError(problems[0])
        self.epsilon, self.value_clip_range, self.value_coeff = (
            float(epsilon),
            float(value_clip_range),
            float(value_coeff),
        )

    def per(self, batch: MicroBatch) -> torch.Tensor:
        """The step normaliser: 1 a micro-batch (its loss is already its own mean)."""
        return torch.ones((), dtype=torch.long, device=batch.tokens.device)

    def forward(
        self,
        old_logps: torch.Tensor,
        logps: torch.Tensor,
        advantages: torch.Tensor,
        old_values: torch.Tensor,
        values: torch.Tensor,
        returns: torch.Tensor,
        mask: torch.Tensor | None = None,
        value_mask: torch.Tensor | None = None,
    ) -> PPOLosses:
        """The micro-batch's loss (torchtune's argument order).

        Args:
            old_logps: ``[b, t]`` the sampling policy's log-probabilities.
            logps: ``[b, t]`` the current policy's (with a graph).
            advantages: ``[b, t]`` whitened advantages.
            old_values: ``[b, t]`` the value model's estimates at sampling.
            values: ``[b, t]`` its current estimates (with a graph).
            returns: ``[b, t]`` the value targets.
            mask: ``[b, t]`` bool, True at real response tokens (None: all).
            value_mask: ``[b, t]`` bool, True where the value loss reads (None: all).

        Raises:
            ValueError: tensors of different shapes.
        """
        named = {"old_logps": old_logps, "advantages": advantages, "old_values": old_values, "values": values,
                 "returns": returns, "mask": mask, "value_mask": value_mask}  # fmt: skip
        wrong = {k: list(v.shape) for k, v in named.items() if v is not None and v.shape != logps.shape}
        if wrong:
            raise ValueError(
                f"PPOLoss: every tensor must have logps' shape {list(logps.shape)}; got {wrong}."
            )
        ratios = torch.exp(logps - old_logps)
        clipped = -advantages * torch.clamp(ratios, 1.0 - self.epsilon, 1.0 + self.epsilon)
        unclipped = -advantages * ratios
        clipfrac = (clipped > unclipped).float()
        policy = torch.maximum(clipped, unclipped)
        policy_loss = policy.mean() if mask is None else masked_mean(policy, mask)
        clipfrac = clipfrac.mean() if mask is None else masked_mean(clipfrac, mask)
        values_clipped = torch.clamp(
            values, old_values - self.value_clip_range, old_values + self.value_clip_range
        )
        value = torch.maximum((values - returns) ** 2, (values_clipped - returns) ** 2)
        value_loss = 0.5 * (value.mean() if value_mask is None else masked_mean(value, value_mask))
        loss = policy_loss + self.value_coeff * value_loss
        with torch.no_grad():
            approx_kl = (0.5 * (logps - old_logps).pow(2)).mean()
        return PPOLosses(loss, policy_loss.detach(), value_loss.detach(), ratios.mean().detach(), clipfrac.detach(),
                         approx_kl)  # fmt: skip


def ppo_loss(
    loss_fn: PPOLoss, model: nn.Module, hidden: torch.Tensor, value_model: nn.Module, batch: MicroBatch
) -> Loss:
    """A PPO micro-batch's loss (its own mean, count 1), and the figures logged with it.

    Args:
        loss_fn: the recipe's :class:`PPOLoss`.
        model: the policy whose ``hidden`` these are (its output head).
        hidden: the policy's final hidden states ``[b, s, dim]`` of ``batch.tokens``.
        value_model: the value model (its forward runs here, on the same rows).
        batch: a :class:`ftune.training.methods.ppo_trajectory.Trajectory`.

    Raises:
        ValueError: ``batch`` is not a Trajectory, or ``loss_fn`` not a PPOLoss.
    """
    if not isinstance(batch, Trajectory) or not isinstance(loss_fn, PPOLoss):
        raise ValueError(
            f"ppo_loss: got a {type(batch).__name__} and a {type(loss_fn).__name__}; a PPO recipe's batches come "
            "from training.PPOLoader (prompts in, trajectories out) and its loss is "
            "loss._component_=ftune.training.PPOLoss."
        )
    logps = response_logps(model.head, hidden, batch)
    values = response_values(value_model, value_model.hidden(batch.tokens), batch)
    out = loss_fn(batch.logps, logps, batch.advantages, batch.values, values, batch.returns, ~batch.padding,
                  ~batch.value_padding)  # fmt: skip
    metrics = {
        **out.metrics(),
        "scores": Metric.mean(batch.scores),
        "rlhf_reward": Metric.mean(batch.scores + batch.kl_reward),
        "kl": Metric.mean(batch.kl),
        "kl_reward": Metric.mean(batch.kl_reward),
        "response_lengths": Metric.mean(batch.last.float()),  # torchtune's seq_lens: the last index
        "stopped": Metric.mean(batch.padding.any(-1).float()),  # the share of torchtune's num_stop_tokens
    }
    return Loss(out.loss, 1, metrics)
