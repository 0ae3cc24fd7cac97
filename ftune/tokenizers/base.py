"""The tokenizer interface every dataset, recipe and generator relies on, and the shared chat logic.

`Tokenizer` is the protocol (its docstring is the contract). `MessageTokenizer` is the base class of the
three backends (sentencepiece, tiktoken, HF tokenizer.json): a backend supplies `encode`,
`decode` and `token_to_id`; the base turns messages into (tokens, mask) through a
`PromptFormat`, appends EOS and truncates, the same way for every backend.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ftune.data.messages import Message
from ftune.tokenizers.formats import Control, Piece, PromptFormat, Segment, Special

logger = logging.getLogger(__name__)


@runtime_checkable
class Tokenizer(Protocol):
    """What ftune needs from a tokenizer.

    Attributes:
        bos_id: id prepended by `encode(add_bos=True)`, or None when the tokenizer has no BOS.
        eos_id: id appended by `encode(add_eos=True)` and `tokenize_messages(add_eos=True)`.
        pad_id: id used to pad batches (its labels are -100, so its value does not matter for the loss).
        stop_tokens: ids that end generation.
        vocab_size: number of ids, special tokens included.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.
    """

    bos_id: int | None
    eos_id: int
    pad_id: int
    stop_tokens: list[int]
    vocab_size: int
    max_seq_len: int | None

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...

    def tokenize_messages(
        self, messages: list[Message], *, add_eos: bool = True
    ) -> tuple[list[int], list[bool]]: ...


class MessageTokenizer:
    """Base of the backends: chat tokenization, EOS and truncation written once.

    Subclasses set `bos_id`, `eos_id`, `pad_id`, `stop_tokens`, `vocab_size`, `max_seq_len`
    and `prompt_format`, and implement `encode`, `decode` and `token_to_id`.
    """

    bos_id: int | None
    eos_id: int
    pad_id: int
    stop_tokens: list[int]
    vocab_size: int
    max_seq_len: int | None
    prompt_format: PromptFormat | None
    #: Where the vocabulary came from, used in error messages.
    source: str = "the tokenizer"

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        """The id of `token` if it is a single token of the vocabulary, else None."""
        raise NotImplementedError

    def tokenize_messages(
        self, messages: list[Message], *, add_eos: bool = True, add_generation_prompt: bool = False
    ) -> tuple[list[int], list[bool]]:
        """Tokenize a conversation with the tokenizer's prompt format.

        Args:
            messages: the conversation; each message's `masked` flag becomes the mask of its tokens.
            add_eos: append `eos_id` (masked) unless the sequence already ends with it.
            add_generation_prompt: append the masked opening of an assistant reply (for generation).

        Returns:
            (tokens, mask), of equal length; mask True means the token gets the ignore label.

        Raises:
            ValueError: empty conversation, a role the format cannot place, a special token the
                format needs that is missing from the vocabulary, or add_eos with add_generation_prompt.
        """
        check_messages(messages, add_eos=add_eos, add_generation_prompt=add_generation_prompt)
        if self.prompt_format is None:
            raise ValueError(
                f"{type(self).__name__} from {self.source} has no prompt format, so it cannot tokenize "
                "messages. Pass prompt_format= (e.g. ftune.tokenizers.formats.ChatMLFormat()) when building it."
            )
        segments = self.prompt_format.segments(messages)
        if add_generation_prompt:
            segments.append(Segment(self.prompt_format.generation_prompt(), True))
        tokens: list[int] = []
        mask: list[bool] = []
        for segment in segments:
            ids = self.encode_pieces(segment.pieces)
            tokens += ids
            mask += [segment.masked] * len(ids)
        return self.finish(tokens, mask, add_eos=add_eos)

    def encode_pieces(self, pieces: Sequence[Piece]) -> list[int]:
        """Encode a format's pieces: text with `encode`, special tokens by vocabulary lookup."""
        ids: list[int] = []
        for piece in pieces:
            if isinstance(piece, str):
                if piece:
                    ids += self.encode(piece, add_bos=False, add_eos=False)
            elif piece is Control.BOS:
                if self.bos_id is not None:
                    ids.append(self.bos_id)
            elif piece is Control.EOS:
                ids.append(self.eos_id)
            else:
                assert isinstance(piece, Special), piece
                ids.append(self.special_id(piece.token))
        return ids

    def special_id(self, token: str) -> int:
        """The id of a special token the prompt format needs; ValueError naming the vocabulary if absent."""
        token_id = self.token_to_id(token)
        if token_id is None:
            raise ValueError(
                f"The prompt format {type(self.prompt_format).__name__} needs the token {token!r}, but it is "
                f"not a single token in the vocabulary of {self.source}. Use the prompt format this model "
                "was trained with (e.g. its tokenizer builder in ftune.models.<family>, or HFTokenizer with "
                "the model's chat template)."
            )
        return token_id

    def finish(self, tokens: list[int], mask: list[bool], *, add_eos: bool) -> tuple[list[int], list[bool]]:
        """Append EOS (masked) if asked and not already last, then truncate to `max_seq_len`.

        When truncation cuts the sequence and `add_eos` is set, the last kept token is replaced
        by EOS, so every sequence still ends where the model should stop reading.
        """
        if add_eos and (not tokens or tokens[-1] != self.eos_id):
            tokens = tokens + [self.eos_id]
            mask = mask + [True]
        if self.max_seq_len is not None and len(tokens) > self.max_seq_len:
            tokens, mask = tokens[: self.max_seq_len], mask[: self.max_seq_len]
            if add_eos:
                tokens[-1], mask[-1] = self.eos_id, True
        return tokens, mask

    def check_ids(self, ids: Sequence[int]) -> None:
        """Raise ValueError if an id is outside [0, vocab_size)."""
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"Cannot decode ids {bad[:5]}{' ...' if len(bad) > 5 else ''}: the vocabulary of {self.source} "
                f"has ids 0..{self.vocab_size - 1}. Were these ids made by another tokenizer?"
            )


def check_max_seq_len(value: int | None, who: str) -> int | None:
    """Validate a `max_seq_len` argument: None (no truncation) or a positive int."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{who}: max_seq_len must be a positive int or None (no truncation), got {value!r}.")
    return value


def check_messages(messages: Sequence[Message], *, add_eos: bool, add_generation_prompt: bool) -> None:
    """Validate the arguments every `tokenize_messages` shares."""
    if not messages:
        raise ValueError("tokenize_messages got an empty conversation; pass at least one Message.")
    if add_eos and add_generation_prompt:
        raise ValueError(
            "tokenize_messages: add_generation_prompt=True opens an assistant reply, so the sequence must not "
            "end with EOS; pass add_eos=False with it."
        )
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise TypeError(
                f"tokenize_messages: messages[{i}] is a {type(message).__name__}, expected "
                "ftune.data.messages.Message (build it with Message(role=..., content=...))."
            )
