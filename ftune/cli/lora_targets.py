"""`ftune validate`: every LoRA target names a module of the model, which is built on the meta device.

A misspelt target (``expert`` for ``experts``, ``qproj``) is refused by `ftune.peft.apply_lora` when
a run adapts the model; `validate` builds the same model on the meta device (no memory, no weights
read) and asks the same question (`ftune.peft.apply.target_problem`), so it refuses what the run
would. Imported by `ftune validate` only for a config with a ``peft`` section: it imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import ListConfig

from ftune.checkpointing import meta_model
from ftune.peft.apply import target_problem


def lora_target_problems(cfg: Any) -> list[str]:
    """``peft.targets: <what matches nothing, the model's linear names, the fix>``, or [].

    A model that cannot be built (no config.json, a component that does not import) is left to the
    checks that report it.
    """
    peft = cfg.node.get("peft")
    targets = peft.get("targets") if peft is not None and hasattr(peft, "get") else None
    per_part = hasattr(targets, "items")  # an image-text model's {part: names}
    if per_part:
        if not all(isinstance(v, ListConfig | list) for v in targets.values()):
            return []
        targets = {k: list(v) for k, v in targets.items()}
    elif targets is None or isinstance(targets, str) or not all(isinstance(t, str) for t in targets):
        return []  # the signature check and apply_lora's own check report these
    checkpointer = cfg.node.get("checkpointer")
    folder = (
        checkpointer.get("checkpoint_dir")
        if checkpointer is not None and hasattr(checkpointer, "get")
        else None
    )
    node = cfg.node.get("model")
    component = node.get("_component_") if node is not None and hasattr(node, "get") else None
    if component is not None and not str(component).startswith("ftune."):
        return []  # validate runs no code of a package the user trusts; apply_lora checks at run time
    try:
        image_text = bool(checkpointer.get("image_text")) if hasattr(checkpointer, "get") else False
        model = meta_model(folder, node, dtype=torch.float32, image_text=image_text)
    except (ValueError, OSError, ImportError, TypeError):
        return []
    if not isinstance(model, torch.nn.Module):
        return []
    problem = target_problem(model, targets if per_part else list(targets))
    return [] if problem is None else [f"peft.targets: {problem} ({cfg.where('peft.targets')})"]
