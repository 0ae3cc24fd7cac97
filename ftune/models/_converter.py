"""The `Converter` record that `ftune.models.CONVERTERS` holds, and its llama-style factory."""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import ftune.models._hf_keys as _hf_keys
import ftune.models._meta_keys as _meta_keys
from ftune.models._key_rename import StateDict


@dataclass(frozen=True)
class Converter:
    """Pure state-dict converters of one family (dict in, dict out; no I/O, casts or mutation).

    Attributes:
        family: the family name, e.g. "llama3".
        hf_to_ftune: `(sd, *, tie_word_embeddings=None) -> sd`, HF keys -> ftune keys.
        ftune_to_hf: `(sd) -> sd`, ftune keys -> HF keys.
        meta_to_ftune: `(sd, *, num_heads, num_kv_heads, tie_word_embeddings=<family default>) -> sd`
            for families Meta publishes in consolidated.pth form; None otherwise.
        ftune_to_meta: the inverse of `meta_to_ftune`, same keyword arguments; None otherwise.
        hf_ignored: HF key patterns skipped on purpose when reading.
        meta_ignored: Meta key patterns skipped on purpose when reading.
        fused_modules: HF module pattern -> the ftune module patterns it fuses, in row order (Phi-3's
            `qkv_proj`); adapters of those parts take PEFT's layout of `ftune.peft.fused_adapters`.
        ftune_to_peft: `(sd) -> sd`, ftune keys -> the names of the transformers model's modules,
            where they differ from what save_pretrained writes (Gemma 3's image-text model writes
            `language_model.model.*` but its module is `model.language_model.*`); PEFT names adapters
            by the modules. None = `ftune_to_hf`.
    """

    family: str
    hf_to_ftune: Callable[..., StateDict]
    ftune_to_hf: Callable[..., StateDict]
    meta_to_ftune: Callable[..., StateDict] | None = None
    ftune_to_meta: Callable[..., StateDict] | None = None
    hf_ignored: frozenset[str] = frozenset()
    meta_ignored: frozenset[str] = frozenset()
    fused_modules: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ftune_to_peft: Callable[..., StateDict] | None = None

    @property
    def supports_meta(self) -> bool:
        """True if the family converts to and from Meta's consolidated format."""
        return self.meta_to_ftune is not None


def llama_style_converter(
    family: str, *, qkv_bias: bool = False, meta: bool = False, meta_tied: bool = False
) -> Converter:
    """Converter for a family built by `llama_style_decoder`.

    Args:
        family: family name.
        qkv_bias: the family's attention has q/k/v biases (Qwen2).
        meta: the family also converts from/to Meta consolidated checkpoints.
        meta_tied: default of `tie_word_embeddings` for the Meta functions (True for Llama 3.2).
    """
    meta_kwargs = {"family": family, "tie_word_embeddings": meta_tied}
    return Converter(
        family=family,
        hf_to_ftune=partial(_hf_keys.hf_to_ftune, family=family, qkv_bias=qkv_bias),
        ftune_to_hf=partial(_hf_keys.ftune_to_hf, family=family, qkv_bias=qkv_bias),
        meta_to_ftune=partial(_meta_keys.meta_to_ftune, **meta_kwargs) if meta else None,
        ftune_to_meta=partial(_meta_keys.ftune_to_meta, **meta_kwargs) if meta else None,
        hf_ignored=_hf_keys.HF_IGNORED,
        meta_ignored=_meta_keys.META_IGNORED if meta else frozenset(),
    )
