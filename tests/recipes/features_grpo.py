"""The GRPO recipes' padding_free check: a rollout's rows laid end to end for the update. Part of
tests/recipes/features.py's CHECKS (its ``padding_free`` calls this for a GRPO run); same contract
(tests/recipes/mutants.py's ``padding_free_collate_pads`` leaves the rows padded and must fail it)."""

from __future__ import annotations

import pytest
from run_logs import _column, losses


def padding_free_rollouts(run, tmp_path):
    """padding_free=true packs a step's rollouts, padding_free=false right-pads the same ones.

    The positions the step computes (the ``tokens`` column, padding included) shrink; the completion
    tokens trained, the loss and the gradient norm stay (the rollout is sampled before the update, from
    the same seeds: both layouts train on the same completions). One step each: the first update is
    where the layouts meet the same weights."""
    flat, _ = run("max_steps=1", "padding_free=true", output_dir=tmp_path / "packed")
    padded, _ = run("max_steps=1", "padding_free=false", output_dir=tmp_path / "padded")
    flat_tokens, padded_tokens = _column(flat, "tokens"), _column(padded, "tokens")
    assert flat_tokens[0] < padded_tokens[0], (
        f"positions a step: {flat_tokens} packed vs padded {padded_tokens}"
    )
    assert _column(flat, "tokens_trained") == _column(padded, "tokens_trained")  # the same completions
    # abs: a GRPO loss is ~0 at ratio 1 (advantages sum to 0 per group); its gradient is not.
    assert losses(flat) == pytest.approx(losses(padded), rel=1e-5, abs=1e-6)
    assert _column(flat, "grad_norm") == pytest.approx(_column(padded, "grad_norm"), rel=1e-4)
