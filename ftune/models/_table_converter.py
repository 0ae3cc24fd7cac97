"""A `Converter` from an explicit HF <-> ftune pattern table, for families whose keys are not the
llama-style set (Qwen3's q/k norms, Gemma 3's four norms a layer)."""

from functools import partial

from ftune.models._converter import Converter
from ftune.models._hf_keys import HF_IGNORED, _aliases
from ftune.models._key_rename import StateDict, invert, rename_key


def _hf_to_ftune(
    sd: StateDict, *, family: str, table: dict[str, str], tie_word_embeddings: bool | None = None
) -> StateDict:
    # Same contract as `_hf_keys.hf_to_ftune`: a tied model's `lm_head.weight` is dropped when
    # asked to, or when it is the embeddings' own memory (`model.state_dict()` of a tied HF model).
    embed = sd.get("model.embed_tokens.weight")
    out: StateDict = {}
    for key, value in sd.items():
        if key == "lm_head.weight" and (
            tie_word_embeddings
            or (tie_word_embeddings is None and embed is not None and _aliases(value, embed))
        ):
            continue
        new_key = rename_key(key, table, HF_IGNORED, family=family, source="HF")
        if new_key is not None:
            out[new_key] = value
    return out


def _ftune_to_hf(sd: StateDict, *, family: str, table: dict[str, str]) -> StateDict:
    inverse = invert(table)
    return {rename_key(k, inverse, frozenset(), family=family, source="ftune"): v for k, v in sd.items()}


def table_converter(family: str, table: dict[str, str]) -> Converter:
    """HF-only converter (pure renames) of `family` from `table` (HF pattern -> ftune pattern).

    `hf_to_ftune(sd, *, tie_word_embeddings=None)` and `ftune_to_hf(sd)` behave like the
    llama-style ones: unknown keys raise `KeyError` naming the key and the known patterns.
    """
    return Converter(
        family=family,
        hf_to_ftune=partial(_hf_to_ftune, family=family, table=table),
        ftune_to_hf=partial(_ftune_to_hf, family=family, table=table),
        hf_ignored=HF_IGNORED,
    )
