"""HF <-> ftune keys of image-text models (`ftune.modules.vision.ImageTextModel`): pure renames.

An HF image-text checkpoint holds three parts under prefixes that moved between transformers
versions: the text model (e.g. `language_model.model.*` as transformers 5.24's save_pretrained writes
Gemma 3, `model.language_model.*` in its modules' names), the vision tower (SigLIP, its keys
optionally under `vision_model.`) and the projector. ftune keeps them as `decoder.*` (the text
family's own keys, converted by that family's converter), `vision_encoder.*` and `projector.*`.
Reading accepts every layout a family lists; writing writes the first (what save_pretrained
writes), so transformers loads it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from ftune.models._converter import Converter
from ftune.models._key_rename import StateDict, invert, rename_key

# SigLIP vision tower: HF pattern (under the tower's prefix) -> ftune pattern (under `vision_encoder.`).
SIGLIP_TABLE: dict[str, str] = {
    "embeddings.patch_embedding.weight": "patch_embedding.weight",
    "embeddings.patch_embedding.bias": "patch_embedding.bias",
    "embeddings.position_embedding.weight": "position_embedding.weight",
    "post_layernorm.weight": "post_layernorm.weight",
    "post_layernorm.bias": "post_layernorm.bias",
    **{
        f"encoder.layers.{{}}.{part}.{kind}": f"layers.{{}}.{part}.{kind}"
        for part in (
            "layer_norm1",
            "layer_norm2",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
            "mlp.fc1",
            "mlp.fc2",
        )
        for kind in ("weight", "bias")
    },
}
# SigLIP's attention-pooling head (`vision_use_head`): no image-text model reads it.
SIGLIP_HEAD = "head."


@dataclass(frozen=True)
class ImageTextKeys:
    """Where an HF image-text checkpoint keeps its parts; the first entry of each is what is written.

    Attributes:
        text: (HF prefix, prefix in the text family's causal-LM names), e.g.
            ("language_model.model.", "model."); the first pair for each causal-LM prefix is written.
        vision: HF prefixes of the vision tower (whose keys may continue with `vision_model.`).
        projector: HF prefixes of the projector.
        projector_table: HF name under the projector prefix -> ftune name under `projector.`.
        modules: the layout of the transformers model's module names, when it is not the written one
            (what PEFT names adapters by); None = the written layout.
    """

    text: tuple[tuple[str, str], ...]
    vision: tuple[str, ...]
    projector: tuple[str, ...]
    projector_table: dict[str, str]
    modules: "ImageTextKeys | None" = None


def conditional_generation_keys(projector_table: dict[str, str]) -> ImageTextKeys:
    """The layout of transformers' `*ForConditionalGeneration` checkpoints (Gemma 3, LLaVA): the v4 names
    it writes (`language_model.model.`, `vision_tower.`, `multi_modal_projector.`), the v5 names it also
    reads (`model.language_model.`, ...), and its module names for PEFT (the v5 layout)."""
    return ImageTextKeys(
        text=(
            ("language_model.model.", "model."),
            ("language_model.lm_head.", "lm_head."),
            ("model.language_model.", "model."),
            ("lm_head.", "lm_head."),
        ),
        vision=("vision_tower.", "model.vision_tower."),
        projector=("multi_modal_projector.", "model.multi_modal_projector."),
        # Modules of transformers 5's model (PEFT's adapter names): the v5 layout, the vision tower
        # without `vision_model.`.
        modules=ImageTextKeys(
            text=(("model.language_model.", "model."), ("lm_head.", "lm_head.")),
            vision=("model.vision_tower.",),
            projector=("model.multi_modal_projector.",),
            projector_table=projector_table,
        ),
        projector_table=projector_table,
    )


def _strip(key: str, prefixes: tuple[str, ...]) -> str | None:
    for prefix in sorted(prefixes, key=len, reverse=True):  # the longest first: "model.x." before "x."
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None


def _split(key: str, keys: ImageTextKeys, family: str) -> tuple[str, str | None]:
    """(part, key inside the part) of an HF key; part is "text", "vision", "projector" or "ignored"."""
    text_prefixes = dict(keys.text)
    for prefix in sorted(text_prefixes, key=len, reverse=True):
        if key.startswith(prefix):
            return "text", text_prefixes[prefix] + key[len(prefix) :]
    rest = _strip(key, keys.projector)
    if rest is not None:
        return "projector", rest
    rest = _strip(key, keys.vision)
    if rest is not None:
        rest = rest.removeprefix("vision_model.")
        return ("ignored", None) if rest.startswith(SIGLIP_HEAD) else ("vision", rest)
    accepted = [p for p, _ in keys.text] + list(keys.vision) + list(keys.projector)
    raise KeyError(
        f"{family}: {key!r} is no tensor of this image-text model: expected the text model, the vision "
        f"tower or the projector under one of {', '.join(accepted)}."
    )


def rename_in_part(
    key: str, inner: str, table: dict[str, str], *, family: str, part: str, source: str
) -> str:
    """`inner` (the part of `key` under its part's prefix) through `table`; raises naming all of `key`."""
    try:
        return rename_key(inner, table, frozenset(), family=family, source=source)
    except KeyError:
        raise KeyError(
            f"{family}: unknown key {key!r} in a {source} state dict: {inner!r} is no {part} key; the "
            f"{part}'s patterns are {', '.join(sorted(table))}."
        ) from None


def image_text_hf_to_ftune(
    sd: StateDict,
    *,
    family: str,
    keys: ImageTextKeys,
    text_to_ftune: Callable[..., StateDict],
    tie_word_embeddings: bool | None = None,
) -> StateDict:
    """HF keys (any listed layout) -> `ImageTextModel` keys; the vision tower's unused pooling head is
    dropped, anything unknown raises `KeyError` naming the key."""
    text: StateDict = {}
    out: StateDict = {}
    for key, value in sd.items():
        part, inner = _split(key, keys, family)
        if part == "text":
            text[inner] = value
        elif part == "vision":
            new = rename_in_part(key, inner, SIGLIP_TABLE, family=family, part="vision tower", source="HF")
            out["vision_encoder." + new] = value
        elif part == "projector":
            new = rename_in_part(
                key, inner, keys.projector_table, family=family, part="projector", source="HF"
            )
            out["projector." + new] = value
    out.update(
        {"decoder." + k: v for k, v in text_to_ftune(text, tie_word_embeddings=tie_word_embeddings).items()}
    )
    return out


def image_text_ftune_to_hf(
    sd: StateDict, *, family: str, keys: ImageTextKeys, text_to_hf: Callable[..., StateDict]
) -> StateDict:
    """`ImageTextModel` keys -> HF keys in the first (written) layout of `keys`."""
    written: dict[str, str] = {}
    for hf_prefix, lm_prefix in keys.text:
        written.setdefault(lm_prefix, hf_prefix)
    text: StateDict = {}
    out: StateDict = {}
    vision_inverse, projector_inverse = invert(SIGLIP_TABLE), invert(keys.projector_table)
    for key, value in sd.items():
        part, _, inner = key.partition(".")
        if part == "decoder":
            text[inner] = value
        elif part == "vision_encoder":
            new = rename_in_part(
                key, inner, vision_inverse, family=family, part="vision encoder", source="ftune"
            )
            out[keys.vision[0] + new] = value
        elif part == "projector":
            new = rename_in_part(
                key, inner, projector_inverse, family=family, part="projector", source="ftune"
            )
            out[keys.projector[0] + new] = value
        else:
            raise KeyError(
                f"{family}: {key!r} is no key of an ImageTextModel: expected decoder.*, vision_encoder.* or "
                "projector.*."
            )
    for key, value in text_to_hf(text).items():
        prefix = next((p for p in sorted(written, key=len, reverse=True) if key.startswith(p)), None)
        if prefix is None:
            raise KeyError(f"{family}: the text model's key {key!r} has no place in the image-text layout.")
        out[written[prefix] + key[len(prefix) :]] = value
    return out


def image_text_converter(family: str, *, keys: ImageTextKeys, text: Converter) -> Converter:
    """The `Converter` of an image-text family whose text model converts with `text`."""
    return Converter(
        family=family,
        hf_to_ftune=partial(image_text_hf_to_ftune, family=family, keys=keys, text_to_ftune=text.hf_to_ftune),
        ftune_to_hf=partial(image_text_ftune_to_hf, family=family, keys=keys, text_to_hf=text.ftune_to_hf),
        hf_ignored=text.hf_ignored,
        ftune_to_peft=partial(
            image_text_ftune_to_hf, family=family, keys=keys.modules or keys, text_to_hf=text.ftune_to_hf
        ),
    )
