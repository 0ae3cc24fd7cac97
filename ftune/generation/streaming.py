"""Turn generated token ids into text as they arrive, for printing while the model decodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


class TextStreamer:
    """Feed token ids one at a time; complete text is passed to `write` as soon as it is known.

    Tokens are decoded together, not one by one: a byte-level BPE token may hold half of a UTF-8
    character, and sentencepiece drops a word's leading space when it is decoded alone. The text
    after the last flushed newline is decoded again on every token, and held back while it ends
    in an incomplete character (U+FFFD), so the output is exactly `tokenizer.decode(all ids)`.

    Args:
        tokenizer: decodes the ids (special tokens, such as the stop token, are skipped).
        write: receives each new piece of text, e.g. ``lambda t: print(t, end="", flush=True)``.

    Example:
        >>> streamer = TextStreamer(tokenizer, write)  # doctest: +SKIP
        >>> generate(model, prompt, max_new_tokens=64, on_token=streamer.put)  # doctest: +SKIP
        >>> streamer.end()  # doctest: +SKIP
    """

    def __init__(self, tokenizer: Tokenizer, write: Callable[[str], Any]) -> None:
        self.tokenizer = tokenizer
        self.write = write
        self.ids: list[int] = []
        self.text = ""  # everything written so far
        self._start = 0  # ids before this index are decoded for good (up to a newline)
        self._committed = ""  # their text

    def _pending(self) -> str:
        return self.tokenizer.decode(self.ids[self._start :], skip_special_tokens=True)

    def _emit(self, pending: str) -> None:
        full = self._committed + pending
        if full.startswith(self.text) and len(full) > len(self.text):
            self.write(full[len(self.text) :])
            self.text = full

    def put(self, token: int) -> None:
        """Add one token id; write the text it completes, if any."""
        self.ids.append(int(token))
        pending = self._pending()
        if pending.endswith("\ufffd"):
            return  # an incomplete UTF-8 character: wait for its remaining bytes
        self._emit(pending)
        if pending.endswith("\n"):
            self._committed += pending
            self._start = len(self.ids)

    def end(self) -> str:
        """Write whatever is still held back; return the whole decoded text."""
        self._emit(self._pending())
        return self.text
