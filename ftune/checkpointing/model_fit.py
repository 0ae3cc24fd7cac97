"""Does a state dict fit a model? Strict loading with errors that name tensors and shapes.

`nn.Module.load_state_dict` reports a shape mismatch as a wall of text, and `strict=False`
(torchtune's LoRA path) silently accepts a checkpoint for the wrong model. Here every key must
match, with one exception on a fresh LoRA/DoRA run: the adapter tensors (`lora_a`, `lora_b`,
`magnitude`) do not exist yet in the base checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ftune.checkpointing.loaded import Loaded
from ftune.peft.adapter_state import is_adapter_key

_SHOW = 8  # at most this many keys per list in a message


def split_adapter(state_dict: Mapping[str, torch.Tensor]) -> tuple[dict, dict]:
    """Split a state dict into (base tensors, adapter tensors), names unchanged.

    Adapter tensors are those of `ftune.peft.is_adapter_key`: `<linear>.lora_a.weight`,
    `<linear>.lora_b.weight` and DoRA's `<linear>.magnitude`.
    """
    base, adapter = {}, {}
    for k, v in state_dict.items():
        (adapter if is_adapter_key(k) else base)[k] = v
    return base, adapter


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _listing(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOW} more" if len(keys) > _SHOW else ""
    return ", ".join(keys[:_SHOW]) + more


def check_fits(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor], *, allow_missing_adapters: bool = False
) -> None:
    """Raise unless `state_dict` has exactly the model's keys with the model's shapes.

    Args:
        model: the model (may be on the meta device).
        state_dict: tensors in ftune names.
        allow_missing_adapters: accept missing adapter keys (fresh LoRA/DoRA run on a base checkpoint).

    Raises:
        ValueError: for shape mismatches (tensor name, checkpoint shape, model shape), missing keys
            or unexpected keys.
    """
    expected = model.state_dict()
    mismatched = [
        f"{k}: checkpoint has shape {_shape(v)}, model expects {_shape(expected[k])}"
        for k, v in state_dict.items()
        if k in expected and _shape(v) != _shape(expected[k])
    ]
    if mismatched:
        raise ValueError(
            f"{len(mismatched)} tensor(s) in the checkpoint do not fit the model: {'; '.join(mismatched[:_SHOW])}. "
            "The checkpoint is for a different model size: pick the model builder that matches it "
            "(see config.json / params.json in the checkpoint folder)."
        )
    # A floating parameter cannot hold integer weights (load_state_dict would fail deep inside torch).
    wrong_dtype = [
        f"{k}: checkpoint has {str(v.dtype).removeprefix('torch.')}, model expects a floating dtype"
        for k, v in state_dict.items()
        if k in expected
        and expected[k].is_floating_point()
        and not v.is_floating_point()
        and type(v) in (torch.Tensor, nn.Parameter)
    ]
    if wrong_dtype:
        raise ValueError(
            f"{len(wrong_dtype)} tensor(s) in the checkpoint have an integer dtype where the model has "
            f"floating weights: {'; '.join(wrong_dtype[:_SHOW])}. The file holds quantized or corrupt weights: "
            "use the unquantized (float/bf16) checkpoint, or a NativeCheckpointer folder saved by ftune quantize."
        )
    missing = [
        k for k in expected if k not in state_dict and not (allow_missing_adapters and is_adapter_key(k))
    ]
    if missing:
        adapters_only = all(is_adapter_key(k) for k in missing)
        hint = (
            " These are adapter weights: on a fresh LoRA run they start from their initial values "
            "(allow_missing_adapters=True); when resuming, the step folder must hold adapter_model.safetensors."
            if adapters_only
            else " The checkpoint was saved from a different architecture or is incomplete: pick the model "
            "builder that matches it (see config.json in the checkpoint folder), or re-download the checkpoint."
        )
        raise ValueError(
            f"{len(missing)} tensor(s) of the model are missing from the checkpoint: {_listing(missing)}.{hint}"
        )
    unexpected = [k for k in state_dict if k not in expected]
    if unexpected:
        raise ValueError(
            f"{len(unexpected)} tensor(s) in the checkpoint have no place in the model: {_listing(unexpected)}. "
            "If they are adapter weights, apply the same LoRA/DoRA settings (targets, rank) as the run "
            "that saved them; otherwise the checkpoint belongs to a different architecture."
        )


def load_into(
    model: nn.Module,
    state: Mapping[str, torch.Tensor] | Loaded,
    *,
    allow_missing_adapters: bool | None = None,
) -> None:
    """Strictly load `state` into `model` after `check_fits`, with readable errors.

    Args:
        model: the model, adapters already applied on a LoRA run. If it lives on the meta device
            the tensors are assigned (no copy, the checkpoint's dtype is kept); otherwise they are
            copied into the existing parameters (cast to the model's dtype).
        state: a state dict in ftune names, or a `Loaded` from a checkpointer, whose `model` and
            `adapter` dicts are combined.
        allow_missing_adapters: accept missing adapter keys. Default: False for a state dict;
            for a `Loaded`, True exactly when it carries no adapter (a fresh run).

    Raises:
        ValueError: see `check_fits`.
    """
    if isinstance(state, Mapping):
        sd = dict(state)
        allow = bool(allow_missing_adapters)
    else:
        sd = {**state.model, **(state.adapter or {})}
        allow = state.adapter is None if allow_missing_adapters is None else allow_missing_adapters
    check_fits(model, sd, allow_missing_adapters=allow)
    on_meta = any(t.is_meta for t in model.state_dict().values())
    model.load_state_dict(sd, strict=False, assign=on_meta)


def check_tokenizer_fits(
    tokenizer_vocab_size: int, model: nn.Module, *, tokenizer_path: str | None = None
) -> None:
    """Raise if the tokenizer can produce ids that the model's embedding has no row for.

    A smaller tokenizer is fine (models pad their vocabulary to a multiple of 64 or 128).

    Args:
        tokenizer_vocab_size: number of ids the tokenizer can emit, special tokens included.
        model: a model with `tok_embeddings` (nn.Embedding), or an image-text model whose text
            `decoder` has them.
        tokenizer_path: the tokenizer file, named in the message.

    Raises:
        ValueError: the tokenizer's vocabulary is larger than the embedding.
    """
    text = model.decoder if hasattr(model, "decoder") and not hasattr(model, "tok_embeddings") else model
    rows = text.tok_embeddings.num_embeddings
    if tokenizer_vocab_size > rows:
        where = f" {tokenizer_path!r}" if tokenizer_path else ""
        raise ValueError(
            f"tokenizer{where} has {tokenizer_vocab_size} tokens but the model's embedding "
            f"(tok_embeddings.weight) has only {rows} rows, so ids >= {rows} would index out of range. "
            "Use the tokenizer that ships with the checkpoint, or a model whose vocab_size is at least "
            f"{tokenizer_vocab_size}."
        )
