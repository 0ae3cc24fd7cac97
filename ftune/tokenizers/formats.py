"""Prompt formats: how a conversation is laid out in tokens, independent of the tokenizer backend.

A format turns a list of `Message` into `Segment`s, one or more per message. A segment is a
list of pieces (plain text, a special token by its string, or the tokenizer's BOS/EOS) plus
the `masked` flag of the message it came from. The backend encodes text pieces one by one
(`encode(piece, add_bos=False, add_eos=False)`), looks special tokens up in its vocabulary,
and gives every token of a segment that segment's mask; see `base.MessageTokenizer`.

Text pieces are encoded separately, like the reference implementations of these formats
(Meta's Llama 2 and Llama 3 `chat_completion` encode each turn or header on its own), so a
piece boundary is also a tokenization boundary. With byte-level BPE every boundary here
falls where the pre-tokenizer would split anyway, so the ids equal those of the rendered
string. With sentencepiece each piece gets the model's dummy-prefix space, which is what the
`[INST]` formats expect between `[/INST]` and the answer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from ftune.data.messages import Message


@dataclass(frozen=True)
class Special:
    """A special token, named by its string (e.g. "<|eot_id|>"), looked up in the vocabulary."""

    token: str


class Control(enum.Enum):
    """The tokenizer's own begin/end-of-sequence ids, whatever their strings are."""

    BOS = "bos"
    EOS = "eos"


Piece = str | Special | Control


@dataclass
class Segment:
    """Pieces that share one mask: True means the tokens get the ignore label (-100)."""

    pieces: list[Piece]
    masked: bool


class PromptFormat(Protocol):
    """Lays out messages as segments; `generation_prompt` is what opens the assistant's reply."""

    def segments(self, messages: list[Message]) -> list[Segment]: ...

    def generation_prompt(self) -> list[Piece]: ...


def _unsupported(fmt: str, message: Message, accepted: str) -> ValueError:
    return ValueError(
        f"{fmt} cannot place a message with role {message.role!r}; it accepts {accepted}. "
        "Use a tokenizer whose format knows this role (e.g. ChatMLFormat, Llama3Format, or an HF "
        "chat template) or map the role in the dataset's message transform."
    )


class _InstFormat:
    """Shared logic of the `[INST] ... [/INST]` formats (Llama 2 chat, Mistral instruct v1).

    A system message is folded into the next user message, as both reference formats do.
    The folded turn is masked if either message is masked, so a prompt marked as masked is
    never trained on.
    """

    name = "[INST] format"

    def _system_prefix(self, system: str) -> str:
        raise NotImplementedError

    def _user_pieces(self, text: str) -> list[Piece]:
        raise NotImplementedError

    def _start(self) -> list[Segment]:
        return []

    def segments(self, messages: list[Message]) -> list[Segment]:
        out = self._start()
        system: Message | None = None
        for message in messages:
            if message.role == "system":
                system = message
            elif message.role == "user":
                text = message.content.strip()
                masked = message.masked
                if system is not None:
                    text = self._system_prefix(system.content.strip()) + text
                    masked = masked or system.masked
                    system = None
                out.append(Segment(self._user_pieces(text), masked))
            elif message.role == "assistant":
                pieces: list[Piece] = [message.content.strip()]
                if message.eot:
                    pieces.append(Control.EOS)
                out.append(Segment(pieces, message.masked))
            else:
                raise _unsupported(self.name, message, "system, user, assistant")
        if system is not None:
            raise ValueError(
                f"{self.name}: the system message {system.content[:40]!r} is not followed by a user "
                "message; this format places the system prompt inside the next [INST] block, so a "
                "system message must come before a user message."
            )
        return out

    def generation_prompt(self) -> list[Piece]:
        # The user turn already ends with "[/INST]": the answer follows directly.
        return []


class Llama2Format(_InstFormat):
    """Llama 2 chat: `<s>[INST] <<SYS>>\\n{system}\\n<</SYS>>\\n\\n{user} [/INST] {answer} </s>`.

    Every user turn opens with BOS, every finished assistant turn closes with EOS.
    """

    name = "Llama2Format"

    def _system_prefix(self, system: str) -> str:
        return f"<<SYS>>\n{system}\n<</SYS>>\n\n"

    def _user_pieces(self, text: str) -> list[Piece]:
        return [Control.BOS, f"[INST] {text} [/INST]"]


class MistralFormat(_InstFormat):
    """Mistral instruct (v1 tokenizer): `<s>[INST] {user} [/INST] {answer}</s>[INST] ...`.

    BOS opens the conversation once; a system prompt is prepended to the next user message,
    separated by a blank line. `[INST]` is written as text (the v1 vocabulary has no control
    token for it); for v3 vocabularies use `HFTokenizer` with the model's chat template.
    """

    name = "MistralFormat"

    def _start(self) -> list[Segment]:
        return [Segment([Control.BOS], True)]

    def _system_prefix(self, system: str) -> str:
        return f"{system}\n\n"

    def _user_pieces(self, text: str) -> list[Piece]:
        return [f"[INST] {text} [/INST]"]


class Llama3Format:
    """Llama 3 headers: `<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>`.

    BOS opens the conversation; a message with `eot=False` ends with `<|eom_id|>` instead of
    `<|eot_id|>` (a tool call that waits for its result). Role "tool" is written "ipython",
    the role Llama 3.1 uses for tool results. Content is stripped, as in Meta's reference.
    """

    def segments(self, messages: list[Message]) -> list[Segment]:
        out = [Segment([Control.BOS], True)]
        for message in messages:
            end = Special("<|eot_id|>" if message.eot else "<|eom_id|>")
            pieces = self._header(message.role) + [message.content.strip(), end]
            out.append(Segment(pieces, message.masked))
        return out

    def generation_prompt(self) -> list[Piece]:
        return self._header("assistant")

    @staticmethod
    def _header(role: str) -> list[Piece]:
        role = "ipython" if role == "tool" else role
        return [Special("<|start_header_id|>"), role, Special("<|end_header_id|>"), "\n\n"]


class ChatMLFormat:
    """ChatML (Qwen, SmolLM2 and many others): `<|im_start|>{role}\\n{content}<|im_end|>\\n`.

    No BOS. A message with `eot=False` stops after its content (no `<|im_end|>`), so the
    next message continues it. Content is kept as is, as the Hub's ChatML templates do.
    """

    def segments(self, messages: list[Message]) -> list[Segment]:
        out = []
        for message in messages:
            pieces: list[Piece] = [Special("<|im_start|>"), f"{message.role}\n{message.content}"]
            if message.eot:
                pieces += [Special("<|im_end|>"), "\n"]
            out.append(Segment(pieces, message.masked))
        return out

    def generation_prompt(self) -> list[Piece]:
        return [Special("<|im_start|>"), "assistant\n"]
