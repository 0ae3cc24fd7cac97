"""Llama 3.2 Vision state-dict converters (pure: dict in, dict out).

transformers 5.24's save_pretrained writes MllamaForConditionalGeneration as `language_model.model.*`,
`language_model.lm_head.weight`, `vision_model.*` and `multi_modal_projector.*`; its modules (what
PEFT names adapters by) are `model.language_model.*`, `lm_head.*`, `model.vision_model.*` and
`model.multi_modal_projector.*`. Both are read; the first is written. Decoder layers keep their
index (cross-attention layers are layers of the decoder, at their HF index), and the vision
encoder keeps transformers' names under `vision_encoder.`.
"""

from ftune.models._converter import Converter
from ftune.models._key_rename import StateDict, invert, rename_key

FAMILY = "llama3_2_vision"
# Prefixes of the module layout (transformers 5's names) -> the written layout, longest first.
_MODULE_PREFIXES = {
    "model.language_model.": "language_model.model.",
    "model.vision_model.": "vision_model.",
    "model.multi_modal_projector.": "multi_modal_projector.",
    "lm_head.": "language_model.lm_head.",
}

_TEXT = "language_model.model.layers.{}."
_VISION_LAYER = {
    f"{part}.{kind}": f"{part}.{kind}"
    for part in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.fc1",
        "mlp.fc2",
        "input_layernorm",
        "post_attention_layernorm",
    )
    for kind in ("weight", "bias")
    if kind == "weight" or not part.startswith("self_attn")
}
_VISION = {
    "patch_embedding.weight": "patch_embedding.weight",
    "class_embedding": "class_embedding",
    "gated_positional_embedding.embedding": "gated_positional_embedding.embedding",
    "gated_positional_embedding.gate": "gated_positional_embedding.gate",
    "gated_positional_embedding.tile_embedding.weight": "gated_positional_embedding.tile_embedding.weight",
    **{
        f"{which}_tile_positional_embedding.{name}": f"{which}_tile_positional_embedding.{name}"
        for which in ("pre", "post")
        for name in ("embedding.weight", "gate")
    },
    **{f"layernorm_{w}.{k}": f"layernorm_{w}.{k}" for w in ("pre", "post") for k in ("weight", "bias")},
    **{f"transformer.layers.{{}}.{k}": f"transformer.layers.{{}}.{v}" for k, v in _VISION_LAYER.items()},
    **{
        f"global_transformer.layers.{{}}.{k}": f"global_transformer.layers.{{}}.{v}"
        for k, v in _VISION_LAYER.items()
    },
    "global_transformer.layers.{}.gate_attn": "global_transformer.layers.{}.gate_attn",
    "global_transformer.layers.{}.gate_ffn": "global_transformer.layers.{}.gate_ffn",
}
_MLP = {f"mlp.{p}_proj.weight": f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
_NORMS = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "mlp_norm.weight"}
# The self-attention and cross-attention layers share the norm and MLP names in both layouts; a
# self-attention layer has `self_attn.*`, a cross-attention layer `cross_attn.*` and two gates.
TABLE: dict[str, str] = {
    "language_model.model.embed_tokens.weight": "decoder.tok_embeddings.weight",
    "language_model.model.norm.weight": "decoder.norm.weight",
    "language_model.lm_head.weight": "decoder.output.weight",
    **{_TEXT + k: "decoder.layers.{}." + v for k, v in {**_MLP, **_NORMS}.items()},
    **{_TEXT + f"self_attn.{p}_proj.weight": f"decoder.layers.{{}}.attn.{p}_proj.weight" for p in "qkvo"},
    **{
        _TEXT + f"cross_attn.{p}_proj.weight": f"decoder.layers.{{}}.cross_attn.{p}_proj.weight"
        for p in "qkvo"
    },
    _TEXT + "cross_attn.q_norm.weight": "decoder.layers.{}.cross_attn.q_norm.weight",
    _TEXT + "cross_attn.k_norm.weight": "decoder.layers.{}.cross_attn.k_norm.weight",
    _TEXT + "cross_attn_attn_gate": "decoder.layers.{}.attn_gate",
    _TEXT + "cross_attn_mlp_gate": "decoder.layers.{}.mlp_gate",
    **{"vision_model." + k: "vision_encoder." + v for k, v in _VISION.items()},
    "multi_modal_projector.weight": "projector.proj.weight",
    "multi_modal_projector.bias": "projector.proj.bias",
}
_INVERSE = invert(TABLE)
_IGNORED = frozenset({_TEXT + "self_attn.rotary_emb.inv_freq"})


def _written(key: str) -> str:
    for prefix, new in _MODULE_PREFIXES.items():
        if key.startswith(prefix):
            return new + key[len(prefix) :]
    return key


def hf_to_ftune(sd: StateDict, *, tie_word_embeddings: bool | None = None) -> StateDict:
    """HF keys (the written or the module layout) -> `CrossAttentionImageTextModel` keys.

    `tie_word_embeddings` is accepted for the converters' common signature; Llama 3.2 Vision never
    ties (its output covers the vocabulary, its embedding 8 rows more).

    Raises:
        KeyError: a key of no part of the model, naming it and the known patterns.
    """
    out: StateDict = {}
    for key, value in sd.items():
        new = rename_key(_written(key), TABLE, _IGNORED, family=FAMILY, source="HF")
        if new is not None:
            out[new] = value
    return out


def _to_hf(sd: StateDict, prefixes: dict[str, str] | None) -> StateDict:
    out: StateDict = {}
    for key, value in sd.items():
        new = rename_key(key, _INVERSE, frozenset(), family=FAMILY, source="ftune")
        if prefixes is not None:
            new = next((p + new[len(w) :] for p, w in prefixes.items() if new.startswith(w)), new)
        out[new] = value
    return out


def ftune_to_hf(sd: StateDict) -> StateDict:
    """`CrossAttentionImageTextModel` keys -> the keys transformers' save_pretrained writes.

    Raises:
        KeyError: a key of no part of the model.
    """
    return _to_hf(sd, None)


def ftune_to_peft(sd: StateDict) -> StateDict:
    """`CrossAttentionImageTextModel` keys -> transformers 5's module names (PEFT's adapter names)."""
    return _to_hf(sd, _MODULE_PREFIXES)


CONVERTER = Converter(
    family=FAMILY, hf_to_ftune=hf_to_ftune, ftune_to_hf=ftune_to_hf, ftune_to_peft=ftune_to_peft
)
