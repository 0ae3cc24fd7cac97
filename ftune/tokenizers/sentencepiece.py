"""SentencePiece backend: a `tokenizer.model` protobuf (Llama 2, Mistral v1)."""

from __future__ import annotations

from pathlib import Path

import sentencepiece as spm

from ftune.tokenizers.base import MessageTokenizer, check_max_seq_len
from ftune.tokenizers.formats import PromptFormat


class SentencePieceTokenizer(MessageTokenizer):
    """A sentencepiece model with a prompt format.

    Text is encoded as sentencepiece does it (with the model's dummy-prefix space); special
    token strings inside text are plain text (sentencepiece never emits control ids from
    text), so data cannot inject a BOS/EOS.

    Args:
        path: the sentencepiece model file (`tokenizer.model`).
        prompt_format: how `tokenize_messages` lays out a conversation (e.g. `Llama2Format()`).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.
        pad_id: padding id when the model defines none (Llama 2 defines none; 0 is its `<unk>`,
            harmless because padded labels are -100).

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is not a sentencepiece model, or the model has no EOS.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        prompt_format: PromptFormat | None = None,
        max_seq_len: int | None = None,
        pad_id: int = 0,
    ) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"SentencePiece model {path} does not exist (expected a tokenizer.model file)."
            )
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.Load(str(path))
        except (OSError, RuntimeError) as e:
            raise ValueError(
                f"{path} is not a sentencepiece model ({e}). Expected the protobuf `tokenizer.model` of "
                "Llama 2 / Mistral; a Llama 3 `tokenizer.model` is a tiktoken ranks file (use "
                "llama3_tokenizer), and a tokenizer.json needs HFTokenizer."
            ) from e
        self.source = str(path)
        self.prompt_format = prompt_format
        self.max_seq_len = check_max_seq_len(max_seq_len, "SentencePieceTokenizer")
        self.vocab_size = self._sp.GetPieceSize()
        bos, eos, pad = self._sp.bos_id(), self._sp.eos_id(), self._sp.pad_id()
        if eos < 0:
            raise ValueError(
                f"SentencePiece model {path} defines no EOS piece (eos_id = -1); ftune needs one to end "
                "sequences. Train the model with eos_id >= 0 (e.g. --eos_id=2)."
            )
        self.bos_id = bos if bos >= 0 else None
        self.eos_id = eos
        self.pad_id = pad if pad >= 0 else pad_id
        self.stop_tokens = [eos]

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        """Encode text to ids, with BOS/EOS when asked (BOS only if the model has one)."""
        ids = self._sp.EncodeAsIds(text)
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if add_eos:
            ids = ids + [self.eos_id]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Decode ids; control tokens (BOS, EOS, pad) are dropped, or written as their piece if asked.

        With `skip_special_tokens=False` the text between control tokens is decoded run by run,
        so a run's leading dummy-prefix space is dropped, as sentencepiece does at the start.
        """
        ids = list(ids)
        self.check_ids(ids)
        if skip_special_tokens:
            return self._sp.DecodeIds(ids)
        out, run = [], []
        for i in ids:
            if self._sp.IsControl(i):
                out.append(self._sp.DecodeIds(run) + self._sp.IdToPiece(i))
                run = []
            else:
                run.append(i)
        return "".join(out) + self._sp.DecodeIds(run)

    def token_to_id(self, token: str) -> int | None:
        token_id = self._sp.PieceToId(token)
        return token_id if self._sp.IdToPiece(token_id) == token else None
