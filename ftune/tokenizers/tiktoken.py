"""tiktoken backend: a local BPE ranks file (the Llama 3 `tokenizer.model` format) plus special tokens."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Sequence
from pathlib import Path

import tiktoken

from ftune.tokenizers.base import MessageTokenizer, check_max_seq_len
from ftune.tokenizers.formats import PromptFormat

# tiktoken's regex can hit its backtracking limits on very long runs of whitespace (or of
# non-whitespace); such runs are cut into chunks of this many characters before encoding.
MAX_RUN_CHARS = 25_000


def load_tiktoken_ranks(path: str | Path) -> dict[bytes, int]:
    """Read a ranks file: one `<base64 token> <rank>` per line, ranks 0..n-1 each used once.

    Read here rather than with `tiktoken.load.load_tiktoken_bpe`, which caches by path (a
    stale cache if the file changes) and reports a bad line without its file and line number.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: a line is not `<base64> <int>`, or the ranks are not 0..n-1 without repeats.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"tiktoken ranks file {path} does not exist (expected a tokenizer.model file)."
        )
    data = path.read_bytes()
    expected = (
        "expected one '<base64 token> <rank>' per line, as in Llama 3's tokenizer.model (a sentencepiece "
        "tokenizer.model is binary: use llama2_tokenizer / mistral_tokenizer for it)"
    )
    try:
        data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is a binary file, not a tiktoken ranks file; {expected}.") from None
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            shown = line[:60].decode("utf-8", errors="replace")
            raise ValueError(f"{path}, line {lineno}: cannot read {shown!r}; {expected}.") from None
    if not ranks:
        raise ValueError(f"{path} holds no tokens; {expected}.")
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(
            f"{path}: the {len(ranks)} ranks are not 0..{len(ranks) - 1} each used once (max rank "
            f"{max(ranks.values())}); the file is truncated or not a tiktoken ranks file."
        )
    return ranks


def split_long_runs(text: str, max_run: int = MAX_RUN_CHARS) -> Iterator[str]:
    """Cut `text` so that no chunk holds a run of whitespace, or of non-whitespace, longer than `max_run`."""
    if len(text) <= max_run:
        yield text
        return
    start = run_start = 0
    for i in range(1, len(text)):
        if text[i].isspace() != text[i - 1].isspace():
            run_start = i
        elif i - run_start >= max_run:
            yield text[start:i]
            start = run_start = i
    yield text[start:]


class TiktokenTokenizer(MessageTokenizer):
    """Byte-level BPE with tiktoken: ranks from a local file, special tokens after them.

    Special tokens get ids `len(ranks) + i` in the order given, like Llama 3 (128000 onwards).
    Special token strings inside text are encoded as plain text, so data cannot inject them.

    Args:
        path: the ranks file (Llama 3's `tokenizer.model`).
        pattern: the pre-tokenizer regex.
        special_tokens: special token strings, in id order.
        bos_token: special token prepended by `encode(add_bos=True)`, or None.
        eos_token: special token appended by `encode(add_eos=True)`.
        pad_token: special token used for padding.
        stop_tokens: special tokens that end generation (EOS is always one).
        prompt_format: how `tokenize_messages` lays out a conversation (e.g. `Llama3Format()`).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.
        name: name of the tiktoken encoding.

    Raises:
        FileNotFoundError / ValueError: see `load_tiktoken_ranks`.
        ValueError: bos/eos/pad/stop token not among `special_tokens`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        pattern: str,
        special_tokens: Sequence[str],
        bos_token: str | None,
        eos_token: str,
        pad_token: str,
        stop_tokens: Sequence[str] = (),
        prompt_format: PromptFormat | None = None,
        max_seq_len: int | None = None,
        name: str = "ftune_tiktoken",
    ) -> None:
        ranks = load_tiktoken_ranks(path)
        self.source = str(path)
        self.num_base_tokens = len(ranks)
        self.special_tokens = {tok: len(ranks) + i for i, tok in enumerate(special_tokens)}
        self._encoding = tiktoken.Encoding(
            name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=self.special_tokens
        )
        self.prompt_format = prompt_format
        self.max_seq_len = check_max_seq_len(max_seq_len, "TiktokenTokenizer")
        self.vocab_size = self._encoding.n_vocab
        self.bos_id = None if bos_token is None else self._special(bos_token, "bos_token")
        self.eos_id = self._special(eos_token, "eos_token")
        self.pad_id = self._special(pad_token, "pad_token")
        stops = [self.eos_id] + [self._special(t, "stop_tokens") for t in stop_tokens]
        self.stop_tokens = list(dict.fromkeys(stops))

    def _special(self, token: str, what: str) -> int:
        if token not in self.special_tokens:
            raise ValueError(
                f"TiktokenTokenizer({self.source}): {what} {token!r} is not among the special tokens; "
                f"add it to special_tokens (given: {list(self.special_tokens)[:8]} ...)."
            )
        return self.special_tokens[token]

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        """Encode text to ids (special token strings count as text), with BOS/EOS when asked."""
        ids: list[int] = []
        for chunk in split_long_runs(text):
            ids += self._encoding.encode(chunk, allowed_special=set(), disallowed_special=())
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if add_eos:
            ids = ids + [self.eos_id]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Decode ids to text (invalid UTF-8 becomes U+FFFD); special tokens dropped unless asked."""
        ids = list(ids)
        self.check_ids(ids)
        if skip_special_tokens:
            ids = [i for i in ids if i < self.num_base_tokens]
        return self._encoding.decode(ids)

    def token_to_id(self, token: str) -> int | None:
        if token in self.special_tokens:
            return self.special_tokens[token]
        ids = self._encoding.encode(token, allowed_special=set(), disallowed_special=())
        return ids[0] if len(ids) == 1 else None
