"""PPO's two score-head models: the value model (trained) and the reward model (frozen).

Both are decoders with a scalar ``score`` head (``ftune.modules.score_head``), built from their own
checkpointer sections, as torchtune 0.6.1's recipe builds its ``reward_and_value_model`` from
``value_checkpointer`` and ``reward_checkpointer`` (both usually a reward model's checkpoint):

- the reward model is read at each (prompt, response) row's last real token and must be a reward
  model (a ``*ForSequenceClassification`` folder, e.g. a reward_model recipe's step folder);
- the value model is read at every response position; its folder may also be a language model, whose
  LM head is then replaced by a new score head (``N(0, 0.02²)``, transformers' initialisation), as
  TRL's PPOTrainer allows a value model built from the policy. Its weights train with the policy
  (one optimizer) and are saved under its checkpointer's own ``output_dir`` at every save.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from ftune.checkpointing.model_build import build_model
from ftune.modules.score_head import ScoreHead, add_score_head

logger = logging.getLogger(__name__)


def build_value_model(checkpointer: Any, *, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The value model from ``checkpointer`` (its newest step folder when it resumes), in train mode."""
    loaded = checkpointer.load()
    model = build_model(
        None, loaded.model, device=device, dtype=dtype, checkpoint_dir=checkpointer.checkpoint_dir
    )
    if not isinstance(getattr(model, "score", None), ScoreHead):
        logger.info(
            "value_checkpointer: %s holds a language model; its LM head is replaced by a new score head "
            "(N(0, 0.02^2)). Give it a reward model's folder to start the values from its scores.",
            checkpointer.checkpoint_dir,
        )
        add_score_head(model)
    return model


def build_reward_model(checkpointer: Any, *, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The frozen reward model from ``checkpointer``, in eval mode.

    Raises:
        ValueError: the folder holds a language model, not a reward model.
    """
    loaded = checkpointer.load()
    model = build_model(
        None, loaded.model, device=device, dtype=dtype, checkpoint_dir=checkpointer.checkpoint_dir
    )
    if not isinstance(getattr(model, "score", None), ScoreHead):
        raise ValueError(
            f"reward_checkpointer.checkpoint_dir: {checkpointer.checkpoint_dir} holds a language model, not a reward "
            "model (no score.weight). Give it the step folder of a full reward_model_single_device run, or any "
            "*ForSequenceClassification folder with one label."
        )
    model.requires_grad_(False)
    return model.eval()
