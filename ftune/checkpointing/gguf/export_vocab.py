"""GGUF export, tokenizer: a folder's tokenizer.json as llama.cpp's `tokenizer.ggml.*` metadata.

    info = write_tokenizer(writer, folder, vocab_size=49152)   # -> TokenizerInfo(stops, chat_template)

Two vocabularies, as llama.cpp's converter writes them:

- byte-level BPE ("gpt2": SmolLM2, Llama 3, Qwen): the tokens, their types, the merges, and the
  *name* of the pre-tokenizer (`tokenizer.ggml.pre`), since llama.cpp hard-codes each model's split
  rules. The name is read off the tokenizer.json's pre-tokenizer (its regex and digit splitting);
  one llama.cpp does not know by the same rules is refused rather than guessed.
- sentencepiece BPE ("llama": Llama 2, Mistral, Gemma 3; tokenizer.json with byte fallback): the
  tokens, a score per token and the types. llama.cpp merges the adjacent pair whose joined piece
  scores highest, so each piece scores minus the rank of the first merge that makes it: the same
  merge order as the tokenizer.json's.

Special token ids, whether BOS/EOS are added, the merges and the chat template are read by the
`gguf` package's `SpecialVocab`, which is what llama.cpp's converter calls. Token ids past the
tokenizer's end (an embedding padded to a multiple of 64) become `[PAD<id>]` tokens of type UNUSED.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from ftune.checkpointing.gguf.tokenizer import _LLAMA3_SPLIT

TokenType = gguf.TokenType

# Qwen2/2.5/3's split: Llama 3's with single digits.
QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
# (pre-tokenizer layout, regex) -> llama.cpp's `tokenizer.ggml.pre` name.
_SPLIT_NAMES = {_LLAMA3_SPLIT: "llama-bpe", QWEN2_SPLIT: "qwen2"}
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


@dataclass(frozen=True)
class TokenizerInfo:
    """What an Ollama Modelfile needs from the tokenizer.

    Attributes:
        stops: the texts of the tokens that end a reply (EOS and end-of-turn tokens).
        chat_template: the Jinja chat template, or None.
    """

    stops: tuple[str, ...]
    chat_template: str | None


def read_tokenizer_json(folder: Path) -> dict[str, Any]:
    """The folder's tokenizer.json, or a FileNotFoundError saying which files ftune needs."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(folder)!r} has no tokenizer.json, which a GGUF file must carry (llama.cpp tokenizes from it). "
            "Copy the base model's tokenizer.json, tokenizer_config.json and special_tokens_map.json into the "
            "folder (ftune's step folders get them from checkpoint_dir)."
        )
    return json.loads(path.read_text(encoding="utf-8"))


def pre_tokenizer_name(pre: Mapping[str, Any] | None, *, source: str | os.PathLike) -> str:
    """llama.cpp's `tokenizer.ggml.pre` for a byte-level BPE tokenizer.json's `pre_tokenizer`.

    Raises:
        ValueError: a pre-tokenizer whose split rules match none that llama.cpp hard-codes here.
    """
    steps = list(pre.get("pretokenizers", [])) if pre and pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") if s else None for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex"):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        name = _SPLIT_NAMES.get(steps[0].get("pattern", {}).get("Regex"))
        if name is not None:
            return name
    raise ValueError(
        f"{source}: tokenizer.json's pre_tokenizer ({json.dumps(pre)[:300]}) splits text by rules ftune "
        "cannot name for llama.cpp, whose pre-tokenizers are built in. Accepted: GPT-2's byte-level regex, "
        "SmolLM's digits + byte-level, Llama 3's and Qwen2's split regexes. For another model, use "
        "llama.cpp's convert_hf_to_gguf.py, which identifies more tokenizers."
    )


def _merge_pairs(merges: list[Any]) -> list[tuple[str, str]]:
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1]) for m in merges]


def sentencepiece_scores(vocab: Mapping[str, int], merges: list[Any], size: int) -> list[float]:
    """A score per token id: minus the rank of the first merge that makes the token; tokens no
    merge makes (characters, bytes) score 0, except multi-character ones, which rank after all merges."""
    scores: dict[int, float] = {}
    for rank, (left, right) in enumerate(_merge_pairs(merges)):
        token_id = vocab.get(left + right)
        if token_id is not None:
            scores.setdefault(token_id, -float(rank))
    unreachable = -float(len(merges))
    by_id = {i: t for t, i in vocab.items()}
    return [scores.get(i, unreachable - i if len(by_id.get(i, "")) > 1 else 0.0) for i in range(size)]


def _adds_space_prefix(tokenizer: Mapping[str, Any]) -> bool:
    text = json.dumps([tokenizer.get("normalizer"), tokenizer.get("pre_tokenizer")])
    prepends = '"type": "Prepend"' in text and '"prepend": "\\u2581"' in text
    metaspace = '"type": "Metaspace"' in text and '"prepend_scheme": "never"' not in text
    return prepends or metaspace


def write_tokenizer(
    writer: gguf.GGUFWriter, folder: Path, *, vocab_size: int, source: str | os.PathLike
) -> TokenizerInfo:
    """Write the folder's tokenizer as `tokenizer.ggml.*` metadata (and the chat template).

    Args:
        writer: the open writer.
        folder: holds tokenizer.json (and tokenizer_config.json, config.json for special tokens).
        vocab_size: rows of the model's embedding (the token list is padded to it).
        source: the folder as the user gave it, for messages.

    Returns:
        The stop tokens and chat template (for the Ollama Modelfile).

    Raises:
        FileNotFoundError: no tokenizer.json.
        ValueError: not a BPE tokenizer, more tokens than embedding rows, or an unknown pre-tokenizer.
    """
    tokenizer = read_tokenizer_json(folder)
    model = tokenizer.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(
            f"{source}: tokenizer.json has a {model.get('type')!r} model; ftune exports BPE tokenizers "
            "(byte-level as in SmolLM2, Llama 3, Qwen; sentencepiece-style with byte fallback as in Llama 2, "
            "Mistral, Gemma 3)."
        )
    vocab: dict[str, int] = dict(model.get("vocab", {}))
    added = {t["content"]: t for t in tokenizer.get("added_tokens", [])}
    vocab.update({content: t["id"] for content, t in added.items()})
    if (largest := max(vocab.values(), default=-1)) >= vocab_size:
        raise ValueError(
            f"{source}: tokenizer.json has token id {largest}, but the model's embedding has {vocab_size} rows. "
            "The tokenizer belongs to another model: copy the base model's tokenizer files into the folder."
        )
    sentencepiece = bool(model.get("byte_fallback"))
    unk = model.get("unk_token")
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif token in added:
            tokens.append(token)
            types.append(TokenType.CONTROL if added[token].get("special") else TokenType.USER_DEFINED)
        elif sentencepiece and _BYTE_TOKEN.fullmatch(token):
            tokens.append(token)
            types.append(TokenType.BYTE)
        else:
            tokens.append(token)
            types.append(TokenType.UNKNOWN if sentencepiece and token == unk else TokenType.NORMAL)
    if sentencepiece:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(sentencepiece_scores(vocab, model.get("merges", []), vocab_size))
        writer.add_token_types(types)
        writer.add_add_space_prefix(_adds_space_prefix(tokenizer))
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre_tokenizer_name(tokenizer.get("pre_tokenizer"), source=source))
        writer.add_token_list(tokens)
        writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=not sentencepiece, n_vocab=vocab_size)
    if sentencepiece and unk in vocab:  # the model's unk, when tokenizer_config.json does not name it
        special.special_token_ids.setdefault("unk", vocab[unk])
    special.add_to_gguf(writer, quiet=True)
    return TokenizerInfo(stops=_stops(folder, special, tokens), chat_template=special.chat_template)


def _stops(folder: Path, special: gguf.SpecialVocab, tokens: list[str]) -> tuple[str, ...]:
    ids = [special.special_token_ids.get(k) for k in ("eos", "eot", "eom")]
    gen = folder / "generation_config.json"
    if gen.is_file():
        eos = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        ids += eos if isinstance(eos, list) else [eos]
    return tuple(dict.fromkeys(tokens[i] for i in ids if isinstance(i, int) and 0 <= i < len(tokens)))
