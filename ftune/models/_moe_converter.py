"""A `Converter` for the mixture-of-experts families (Mixtral, Qwen3-MoE): a pattern table for every
key but the experts, and an `ExpertLayout` for them.

Reading stacks each layer's per-expert HF weights (a copy, one layer at a time) and renames the rest;
writing hands out the per-expert weights as views of the stacked tensors (no copy). A family may read
more names than it writes (`read_only`: transformers 5's in-memory names beside the files' ones).
"""

from functools import partial

from ftune.models._converter import Converter
from ftune.models._expert_keys import ExpertLayout
from ftune.models._hf_keys import HF_IGNORED, table_ftune_to_hf, table_hf_to_ftune
from ftune.models._key_rename import StateDict, key_pattern


def _one_name_each(sd: StateDict, *, family: str, table: dict[str, str]) -> None:
    # Two HF names of one tensor (the files' and transformers' in-memory one) in one checkpoint.
    targets: dict[str, str] = {}
    for key in sd:
        pattern, index = key_pattern(key)
        if pattern in table and index is not None:
            target = table[pattern].replace("{}", index)
            if target in targets:
                raise KeyError(
                    f"{family}: {key!r} and {targets[target]!r} both hold {target}; a checkpoint holds "
                    "one layout (the hub files' names or transformers' in-memory ones). Remove one."
                )
            targets[target] = key


def _moe_hf_to_ftune(
    sd: StateDict,
    *,
    experts: ExpertLayout,
    table: dict[str, str],
    tie_word_embeddings: bool | None = None,
) -> StateDict:
    per_expert, rest = experts.split_hf(sd)
    out = table_hf_to_ftune(rest, family=experts.family, table=table, tie_word_embeddings=tie_word_embeddings)
    _one_name_each(rest, family=experts.family, table=table)
    return experts.add_stacked(out, per_expert)


def _moe_ftune_to_hf(sd: StateDict, *, experts: ExpertLayout, table: dict[str, str]) -> StateDict:
    rest, out = experts.split_ftune(sd)
    return {**table_ftune_to_hf(rest, family=experts.family, table=table), **out}


def moe_converter(
    experts: ExpertLayout, table: dict[str, str], *, read_only: dict[str, str] | None = None
) -> Converter:
    """The converter of the family `experts.family`.

    Args:
        experts: where its per-expert HF weights live and what they are called.
        table: HF pattern -> ftune pattern of every other key, both ways.
        read_only: more HF patterns read (never written), e.g. transformers 5's in-memory names.

    `hf_to_ftune(sd, *, tie_word_embeddings=None)` raises KeyError for an unknown key, a layer
    missing some expert's projection, or a tensor given under two names (per-expert and fused
    experts, or a read-only name beside its written one); `ftune_to_hf(sd)` raises KeyError for a key
    that is not part of the base model (e.g. LoRA weights).
    """
    return Converter(
        family=experts.family,
        hf_to_ftune=partial(_moe_hf_to_ftune, experts=experts, table={**table, **(read_only or {})}),
        ftune_to_hf=partial(_moe_ftune_to_hf, experts=experts, table=table),
        hf_ignored=HF_IGNORED,
    )
