"""Which model family a checkpoint holds, and its converter: lookups in `ftune.models`, never branches.

Checkpointers ask `ftune.models` (the `CONVERTERS` table and the HF-config reader) and do not
know any family themselves, so adding a family touches `ftune/models` only. What this module adds
is the checkpointer's error messages: the accepted families, a did-you-mean, the file.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from ftune.models import CONVERTERS, IMAGE_TEXT_CONVERTERS, Converter, converter_of
from ftune.models import family_from_hf_config as _family_from_hf_config


def known_families() -> list[str]:
    """Sorted family names of `ftune.models.CONVERTERS`."""
    return sorted(CONVERTERS)


def check_family(family: str) -> str:
    """Return `family` if `ftune.models.converter_of` knows it (a text family of `CONVERTERS`, or an
    image-text one: "gemma3_vision", "smolvlm", "llava_<text family>").

    Raises:
        KeyError: unknown family, with a did-you-mean and the accepted names.
    """
    families = known_families()
    if converter_of(family) is None:
        families += [*sorted(IMAGE_TEXT_CONVERTERS), "llava_<text family>"]
        close = difflib.get_close_matches(family, families, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise KeyError(
            f"model_type {family!r} is not a known model family.{hint} Accepted: {', '.join(families)}."
        )
    return family


def converter(family: str) -> Converter:
    """The converter of `family` (`ftune.models.converter_of`), with a readable error for unknown families."""
    return converter_of(check_family(family))


def family_from_hf_config(config: dict[str, Any], *, config_path: Path | None = None) -> str:
    """The ftune family of an HF `config.json` (its model_type/architectures and sizes).

    Args:
        config: parsed config.json.
        config_path: the file, for messages.

    Raises:
        ValueError: the config matches no ftune family (message from `ftune.models`, plus the file).
    """
    try:
        return _family_from_hf_config(config)
    except (KeyError, ValueError) as e:
        where = f" ({config_path})" if config_path else ""
        raise ValueError(
            f"cannot tell the model family from config.json{where}: {e} "
            f"Pass model_type=<family> to the checkpointer; families: {', '.join(known_families())}."
        ) from None
