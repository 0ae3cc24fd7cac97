"""A `Converter` from an explicit HF <-> ftune pattern table, for families whose keys are not the
llama-style set (Qwen3's q/k norms, Gemma 3's four norms a layer)."""

from functools import partial

from ftune.models._converter import Converter
from ftune.models._hf_keys import HF_IGNORED, table_ftune_to_hf, table_hf_to_ftune


def table_converter(family: str, table: dict[str, str]) -> Converter:
    """HF-only converter (pure renames) of `family` from `table` (HF pattern -> ftune pattern).

    `hf_to_ftune(sd, *, tie_word_embeddings=None)` and `ftune_to_hf(sd)` behave like the
    llama-style ones: unknown keys raise `KeyError` naming the key and the known patterns.
    """
    return Converter(
        family=family,
        hf_to_ftune=partial(table_hf_to_ftune, family=family, table=table),
        ftune_to_hf=partial(table_ftune_to_hf, family=family, table=table),
        hf_ignored=HF_IGNORED,
    )
