"""The tokenizer a GGUF file describes, rebuilt as a `tokenizers` tokenizer.json (+ its HF config files).

A GGUF carries no tokenizer.json: llama.cpp stores the vocabulary (`tokenizer.ggml.tokens`), the
BPE merges, a type per token (normal, control, user-defined, ...), the special token ids, the chat
template, and the *name* of the pre-tokenizer (`tokenizer.ggml.pre`) whose split rules llama.cpp
hard-codes. This module maps those back onto the `tokenizers` pieces the original model used.

Supported: byte-level BPE (`tokenizer.ggml.model == "gpt2"`: SmolLM, Llama 3, ...) and sentencepiece
BPE vocabularies ("llama": Llama 2, Mistral, TinyLlama, ...).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

logger = logging.getLogger(__name__)

# llama.cpp's token types (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Special-token roles -> llama.cpp metadata keys.
SPECIAL_TOKEN_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
}

# Llama 3's split pattern (from its tiktoken tokenizer): up to 3 digits per piece, letters with one
# leading non-letter, punctuation runs with their trailing newlines, whitespace.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2() -> pre_tokenizers.PreTokenizer:
    # GPT-2's own regex ('s|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), built into ByteLevel.
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp first isolates every \p{N} character, then applies GPT-2's regex; `Digits` splits on
    # Unicode numerics the same way, and is what SmolLM's own tokenizer.json uses.
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _llama3() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


# `tokenizer.ggml.pre` values (llama.cpp's names) -> the pre-tokenizer with the same split rules.
PRE_TOKENIZERS = {
    "default": _gpt2,
    "gpt-2": _gpt2,
    "smollm": _digits_then_gpt2,
    "starcoder": _digits_then_gpt2,
    "refact": _digits_then_gpt2,
    "codeshell": _digits_then_gpt2,
    "llama-bpe": _llama3,
    "llama3": _llama3,
    "llama-v3": _llama3,
    "smaug-bpe": _llama3,
    "dbrx": _llama3,
}


def special_token_ids(meta: Mapping[str, Any]) -> dict[str, int]:
    """Role ("bos", "eos", "unk", "pad", "eot", "eom") -> token id, for the roles the file sets."""
    return {role: int(meta[key]) for role, key in SPECIAL_TOKEN_KEYS.items() if key in meta}


def generation_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """generation_config.json: BOS, PAD, and every stop token (EOS, and end-of-turn ones like <|eot_id|>)."""
    special = special_token_ids(meta)
    stops = list(dict.fromkeys(special[k] for k in ("eos", "eot", "eom") if k in special))
    config: dict[str, Any] = {"bos_token_id": special.get("bos")}
    config["eos_token_id"] = stops[0] if len(stops) == 1 else stops or None
    if "pad" in special:
        config["pad_token_id"] = special["pad"]
    return config


def build_tokenizer(meta: Mapping[str, Any], *, source: str | os.PathLike) -> Tokenizer:
    """The `tokenizers.Tokenizer` described by a GGUF file's `tokenizer.ggml.*` metadata.

    Args:
        meta: the file's metadata (`ftune.checkpointing.gguf.reader.read_metadata`).
        source: file name for error messages.

    Raises:
        ValueError: the vocabulary type or pre-tokenizer is not supported, or a key is missing.
    """
    kind = require(meta, "tokenizer.ggml.model", source)
    if kind not in _BUILDERS:
        raise ValueError(
            f"{source}: tokenizer.ggml.model is {kind!r}; convert_gguf rebuilds 'gpt2' (byte-level BPE: "
            "SmolLM2, Llama 3, ...) and 'llama' (sentencepiece BPE: Llama 2, Mistral, ...) vocabularies. "
            "Use the original checkpoint's tokenizer files."
        )
    tokens: list[str] = require(meta, "tokenizer.ggml.tokens", source)
    types = _token_types(meta, tokens)
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if vocab.setdefault(token, index) != index:
            logger.warning(
                "%s: token %r appears again at id %d; keeping id %d.", source, token, index, vocab[token]
            )
    tokenizer = _BUILDERS[kind](meta, tokens, vocab, types, source)
    tokenizer.post_processor = _post_processor(meta, tokens, byte_level=kind == "gpt2")
    # llama.cpp matches control, unknown and user-defined tokens whole before splitting; so do added
    # tokens. The first two are "special" (dropped by decode(skip_special_tokens=True)).
    tokenizer.add_tokens(
        [
            AddedToken(token, special=ttype != USER_DEFINED, normalized=False)
            for token, ttype in zip(tokens, types)
            if ttype in (CONTROL, UNKNOWN, USER_DEFINED)
        ]
    )
    return tokenizer


def _byte_level_bpe(
    meta: Mapping[str, Any], tokens: list[str], vocab: dict[str, int], types: list[int], source: Any
) -> Tokenizer:
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"{source}: tokenizer.ggml.pre is {pre!r}, a pre-tokenizer convert_gguf does not know; "
            f"known: {', '.join(sorted(PRE_TOKENIZERS))}. Use the original checkpoint's tokenizer.json."
        )
    if pre == "default":
        logger.warning("%s: no tokenizer.ggml.pre (or 'default'); splitting text with GPT-2's regex.", source)
    merges = []
    for merge in require(meta, "tokenizer.ggml.merges", source):
        pair = merge.split(" ")
        if len(pair) != 2:
            raise ValueError(
                f"{source}: tokenizer.ggml.merges has {merge!r}, not two tokens joined by a space."
            )
        merges.append((pair[0], pair[1]))
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece_bpe(
    meta: Mapping[str, Any], tokens: list[str], vocab: dict[str, int], types: list[int], source: Any
) -> Tokenizer:
    # A sentencepiece BPE vocabulary: pieces spell a space as "▁", characters missing from it fall
    # back to <0xXX> byte pieces, and merging always takes the pair whose result scores highest.
    scores = meta.get("tokenizer.ggml.scores") or [-float(i) for i in range(len(types))]
    unk = special_token_ids(meta).get("unk")
    tokenizer = Tokenizer(
        models.BPE(
            vocab,
            _merges_from_scores(vocab, scores, types),
            unk_token=tokens[unk] if unk is not None and unk < len(tokens) else None,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    # llama.cpp (like HF's legacy Llama tokenizer) puts a space before every run of text, also
    # one that follows a special token; a normalizer runs on each such run.
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    steps = [normalizers.Prepend("▁")] if prefix else []
    tokenizer.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    strip = [decoders.Strip(" ", 1, 0)] if prefix else []
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), *strip]
    )
    return tokenizer


def _merges_from_scores(
    vocab: dict[str, int], scores: list[float], types: list[int]
) -> list[tuple[str, str]]:
    """BPE merges that reproduce sentencepiece's rule of merging the pair whose result scores best.

    Every split (left, right) of a normal piece whose halves are normal pieces too is a merge, ranked
    by the score of the piece it makes, best first.
    """
    normal = {token: i for token, i in vocab.items() if types[i] == NORMAL}
    ranked = []
    for piece, i in normal.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                ranked.append((-scores[i], normal[left], normal[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


_BUILDERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}


def _token_types(meta: Mapping[str, Any], tokens: list[str]) -> list[int]:
    return meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)


def adds_special(meta: Mapping[str, Any], role: str) -> bool:
    """Whether encoding adds BOS (role "bos") or EOS ("eos"); llama.cpp adds BOS to sentencepiece
    vocabularies that do not say."""
    default = role == "bos" and meta.get("tokenizer.ggml.model") == "llama"
    return bool(meta.get(f"tokenizer.ggml.add_{role}_token", default))


def _post_processor(meta: Mapping[str, Any], tokens: list[str], *, byte_level: bool) -> Any:
    ids = special_token_ids(meta)
    add = [
        role for role in ("bos", "eos") if adds_special(meta, role) and 0 <= ids.get(role, -1) < len(tokens)
    ]
    if not add:
        return processors.ByteLevel(trim_offsets=False) if byte_level else None
    bos = [f"{tokens[ids['bos']]}:0"] if "bos" in add else []
    eos = [f"{tokens[ids['eos']]}:0"] if "eos" in add else []
    return processors.TemplateProcessing(
        single=[*bos, "$A:0", *eos],
        pair=[*bos, "$A:0", *eos, *bos, "$B:1", *eos],
        special_tokens=[(tokens[ids[role]], ids[role]) for role in add],
    )


def tokenizer_configs(meta: Mapping[str, Any], *, source: str | os.PathLike) -> tuple[dict, dict]:
    """`(tokenizer_config.json, special_tokens_map.json)` contents for the file's tokenizer.

    tokenizer_config holds the chat template (`tokenizer.chat_template`), the special tokens by
    name, whether BOS/EOS are added, and the context length as `model_max_length`.
    """
    tokens: list[str] = require(meta, "tokenizer.ggml.tokens", source)
    types = _token_types(meta, tokens)
    names = {
        f"{role}_token": tokens[token_id]
        for role, token_id in special_token_ids(meta).items()
        if role in ("bos", "eos", "unk", "pad") and 0 <= token_id < len(tokens)
    }
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": adds_special(meta, "bos"),
        "add_eos_token": adds_special(meta, "eos"),
        **names,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(index): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": kind != USER_DEFINED,
            }
            for index, (token, kind) in enumerate(zip(tokens, types))
            if kind in (CONTROL, UNKNOWN, USER_DEFINED)
        },
    }
    arch = meta.get("general.architecture")
    if f"{arch}.context_length" in meta:
        config["model_max_length"] = int(meta[f"{arch}.context_length"])
    if "tokenizer.chat_template" in meta:
        config["chat_template"] = meta["tokenizer.chat_template"]
    return config, dict(names)


def require(meta: Mapping[str, Any], key: str, source: str | os.PathLike) -> Any:
    """`meta[key]`, or a ValueError naming the file and the missing key."""
    if key not in meta:
        raise ValueError(
            f"{source}: GGUF metadata key {key!r} is missing. llama.cpp's convert_hf_to_gguf.py writes it "
            "for llama models; re-convert the model with a recent llama.cpp, or use the original "
            "Hugging Face checkpoint."
        )
    return meta[key]
