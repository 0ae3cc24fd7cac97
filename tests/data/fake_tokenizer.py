"""A byte-level tokenizer following ftune's Tokenizer protocol, for data tests.

ids 0..255 are the utf-8 bytes of the text; specials follow. A conversation is
    <bos> then, per message, <role> content-bytes [<eot>]   then <eos> (if add_eos)
and every token of a message carries that message's `masked` flag; <bos> is masked and
<eos> takes the last message's flag.
"""

from __future__ import annotations

from ftune.data.messages import Message

BOS, EOS, PAD, EOT = 256, 257, 258, 259
ROLE_IDS = {"system": 260, "user": 261, "assistant": 262, "tool": 263, "ipython": 264}


class FakeTokenizer:
    bos_id: int | None = BOS
    eos_id: int = EOS
    pad_id: int = PAD
    vocab_size: int = 265

    def __init__(self, max_seq_len: int | None = None) -> None:
        self.max_seq_len = max_seq_len
        self.stop_tokens = [EOS, EOT]

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return ([BOS] if add_bos else []) + ids + ([EOS] if add_eos else [])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        data = bytes(i for i in ids if i < 256)
        return data.decode("utf-8", errors="replace")

    def tokenize_messages(
        self, messages: list[Message], *, add_eos: bool = True
    ) -> tuple[list[int], list[bool]]:
        tokens, mask = [BOS], [True]
        for m in messages:
            ids = [ROLE_IDS[m.role], *m.content.encode("utf-8")] + ([EOT] if m.eot else [])
            tokens += ids
            mask += [m.masked] * len(ids)
        if add_eos:
            tokens.append(EOS)
            mask.append(messages[-1].masked if messages else True)
        if self.max_seq_len is not None:
            tokens, mask = tokens[: self.max_seq_len], mask[: self.max_seq_len]
        return tokens, mask
