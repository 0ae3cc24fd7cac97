"""Which model family a checkpoint holds, and its converter: lookups in `ftune.models`, never branches.

Checkpointers ask `ftune.models` (the `CONVERTERS` table and the HF-config reader) and do not
know any family themselves, so adding a family touches `ftune/models` only.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any


def known_families() -> list[str]:
    """Sorted family names of `ftune.models.CONVERTERS`."""
    from ftune.models import CONVERTERS

    return sorted(CONVERTERS)


def check_family(family: str) -> str:
    """Return `family` if `ftune.models.CONVERTERS` has it.

    Raises:
        KeyError: unknown family, with a did-you-mean and the accepted names.
    """
    families = known_families()
    if family not in families:
        close = difflib.get_close_matches(family, families, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(
            f"model_type {family!r} is not a known model family.{hint} Accepted: {', '.join(families)}."
        )
    return family


def converter(family: str) -> Any:
    """`ftune.models.CONVERTERS[family]`, with a readable error for unknown families."""
    from ftune.models import CONVERTERS

    return CONVERTERS[check_family(family)]


def image_text_kind(config: dict[str, Any]) -> Any:
    """`ftune.models.image_text_kind`: for an image-text checkpoint's config.json (Gemma 3 4B/12B/27B)
    the module that maps it to its text decoder, else None."""
    from ftune.models import image_text_kind as kind

    return kind(config)


def text_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """`ftune.models.text_model_config`: the config.json of the text model ftune builds."""
    from ftune.models import text_model_config as text_config

    return text_config(config)


def family_from_hf_config(config: dict[str, Any], *, config_path: Path | None = None) -> str:
    """The ftune family of an HF `config.json` (its model_type/architectures and sizes).

    Uses `ftune.models.family_from_hf_config` when the models package provides it, else builds
    the model on the meta device with `ftune.models.model_from_hf_config` (no memory, no init)
    and keeps the family it reports.

    Args:
        config: parsed config.json.
        config_path: the file, for messages.

    Raises:
        ValueError: the config matches no ftune family (message from `ftune.models`, plus the file).
    """
    import ftune.models as models

    try:
        if hasattr(models, "family_from_hf_config"):
            return models.family_from_hf_config(config)
        family, _ = models.model_from_hf_config(config, device="meta")
        return family
    except (KeyError, ValueError) as e:
        where = f" ({config_path})" if config_path else ""
        raise ValueError(
            f"cannot tell the model family from config.json{where}: {e} "
            f"Pass model_type=<family> to the checkpointer; families: {', '.join(known_families())}."
        ) from None
