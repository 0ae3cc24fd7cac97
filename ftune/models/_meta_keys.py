"""Meta `consolidated.*.pth` <-> ftune for the Llama families.

Meta's reference code rotates adjacent pairs (x[2i], x[2i+1]) with RoPE, ftune (like HF) rotates
(x[i], x[i + head_dim/2]). The two agree once the rows of each head in wq/wk are reordered, so
converting q/k weights is a permutation; everything else is a rename. `from_meta_qk` and
`to_meta_qk` are exact inverses (pure index shuffles, no arithmetic).
"""

import torch

from ftune.models._key_rename import StateDict, invert, rename_key

META_TABLE: dict[str, str] = {
    "tok_embeddings.weight": "tok_embeddings.weight",
    "norm.weight": "norm.weight",
    "output.weight": "output.weight",
    "layers.{}.attention_norm.weight": "layers.{}.attn_norm.weight",
    "layers.{}.ffn_norm.weight": "layers.{}.mlp_norm.weight",
    "layers.{}.attention.wq.weight": "layers.{}.attn.q_proj.weight",
    "layers.{}.attention.wk.weight": "layers.{}.attn.k_proj.weight",
    "layers.{}.attention.wv.weight": "layers.{}.attn.v_proj.weight",
    "layers.{}.attention.wo.weight": "layers.{}.attn.o_proj.weight",
    "layers.{}.feed_forward.w1.weight": "layers.{}.mlp.gate_proj.weight",
    "layers.{}.feed_forward.w3.weight": "layers.{}.mlp.up_proj.weight",
    "layers.{}.feed_forward.w2.weight": "layers.{}.mlp.down_proj.weight",
}
# Llama 2 checkpoints carry a precomputed RoPE table; ftune recomputes it.
META_IGNORED: frozenset[str] = frozenset({"rope.freqs"})


def from_meta_qk(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Reorder the rows of a q/k projection from the interleaved RoPE layout into rotate_half's.

    Meta's checkpoints and llama.cpp's GGUF files both store each head's rows so that RoPE rotates
    adjacent pairs (2i, 2i+1); ftune and HF rotate (i, i + head_dim/2). Row 2i+j of a head (pair i,
    member j) moves to row j * head_dim/2 + i.

    Args:
        w: [num_heads * head_dim, ...] (a weight [rows, in_features], or a bias [rows]).
        num_heads: heads of this projection (the kv heads for k).
    """
    head_dim = w.shape[0] // num_heads
    return w.reshape(num_heads, head_dim // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def to_meta_qk(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Inverse of `from_meta_qk`: rotate_half's row order -> the interleaved one (Meta, llama.cpp)."""
    head_dim = w.shape[0] // num_heads
    return w.reshape(num_heads, 2, head_dim // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _check_heads(sd: StateDict, key: str, num_heads: int, family: str) -> None:
    rows = sd[key].shape[0]
    if num_heads <= 0 or rows % num_heads or (rows // num_heads) % 2:
        raise ValueError(
            f"{family}: {key} has {rows} rows, which is not num_heads ({num_heads}) times an even head_dim; "
            "pass the num_heads / num_kv_heads of the checkpoint's params.json (n_heads, n_kv_heads)."
        )


def meta_to_ftune(
    sd: StateDict, *, family: str, num_heads: int, num_kv_heads: int, tie_word_embeddings: bool = False
) -> StateDict:
    """Convert a Meta consolidated state dict to ftune keys and RoPE layout (pure).

    Args:
        sd: Meta state dict (`layers.0.attention.wq.weight`, ...).
        family: model family, for error messages.
        num_heads: query heads (params.json `n_heads`).
        num_kv_heads: key/value heads (params.json `n_kv_heads`, or n_heads if absent).
        tie_word_embeddings: the model reuses its embeddings as output (Llama 3.2): Meta's
            `output.weight`, a copy of the embeddings, is then skipped.

    Returns:
        A new dict; q/k weights are new (permuted) tensors, every other value is the input tensor.

    Raises:
        KeyError: for a key that is neither known nor in `META_IGNORED`.
        ValueError: if the head counts do not divide the q/k weights.
    """
    out: StateDict = {}
    for key, value in sd.items():
        if tie_word_embeddings and key == "output.weight":
            continue
        new_key = rename_key(key, META_TABLE, META_IGNORED, family=family, source="Meta")
        if new_key is None:
            continue
        if new_key.endswith(("attn.q_proj.weight", "attn.k_proj.weight")):
            heads = num_heads if new_key.endswith("q_proj.weight") else num_kv_heads
            _check_heads(sd, key, heads, family)
            value = from_meta_qk(value, heads)
        out[new_key] = value
    return out


def ftune_to_meta(
    sd: StateDict, *, family: str, num_heads: int, num_kv_heads: int, tie_word_embeddings: bool = False
) -> StateDict:
    """Convert an ftune state dict to Meta keys and RoPE layout (pure); inverse of `meta_to_ftune`.

    With `tie_word_embeddings`, Meta's format still has an `output.weight` (its reference model
    has no tying), so the embedding tensor is emitted under both keys.

    Raises:
        KeyError: for a key that is not part of the family's base model (e.g. LoRA weights).
        ValueError: if the head counts do not divide the q/k weights.
    """
    table = invert(META_TABLE)
    out: StateDict = {}
    for key, value in sd.items():
        new_key = rename_key(key, table, frozenset(), family=family, source="ftune")
        if key.endswith(("attn.q_proj.weight", "attn.k_proj.weight")):
            heads = num_heads if key.endswith("q_proj.weight") else num_kv_heads
            _check_heads(sd, key, heads, family)
            value = to_meta_qk(value, heads)
        out[new_key] = value
    if tie_word_embeddings and "tok_embeddings.weight" in sd and "output.weight" not in sd:
        out["output.weight"] = sd["tok_embeddings.weight"]
    return out
