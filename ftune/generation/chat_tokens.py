"""How a multi-turn rollout turns a growing conversation into tokens: the tokenizer's chat template.

Each conversation lives on the KV cache as the tokens it was built from: the rendered opening messages,
then each model turn exactly as it was sampled (its end-of-turn token included), then the tokens of
the environment's answer, then the next turn... The environment's answer is never rendered on its own:
:meth:`ChatTokens.extension` renders the WHOLE conversation (with the generation prompt that opens the
next model turn) and takes what comes after the tokens already cached, so the context is what the
chat template makes of the conversation, token for token, when the template allows it.

Two cases, in this order (decided here, never silently):

1. token prefix: the cached tokens are the first tokens of the whole rendering; the new tokens are the
   rest. The usual case: the template renders a model turn as its text followed by its end-of-turn
   token, and the sampled tokens are the ones the tokenizer gives that text.
2. text prefix: a sampled turn is not the tokenizer's own split of its text (a sampling model may draw
   " th" + "e" where the tokenizer writes " the"), so case 1 fails at that turn. The sampled tokens
   stay in the context (they are what the model conditioned on and what the loss trains, with the
   log-probabilities they were drawn with: re-tokenizing them would train tokens nobody sampled); the
   cached tokens' text is then a prefix of the rendering's text and the rest of the text is encoded.
   No re-prefill of the history happens in either case.

Otherwise the template rewrites an earlier part of the conversation when it grows (e.g. drops the
reasoning of earlier turns, as Qwen3's does): :class:`ConversationError`, naming the row and where
the two texts part. Such a template cannot extend a cached conversation; give the tokenizer one that
renders every earlier turn as it was (``tokenizer.chat_template``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ftune.agents import Message
from ftune.data.messages import Message as ChatMessage


class ConversationError(ValueError):
    """The chat template's rendering of a grown conversation does not extend what is cached."""


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ChatTokens:
    """A tokenizer with a chat template, as a multi-turn rollout reads conversations.

    Args:
        tokenizer: an ftune tokenizer with ``render(messages, add_generation_prompt=...)`` (its chat
            template), ``encode`` and ``decode`` (``ftune.tokenizers.HFTokenizer``).
        tools: the environment's tool schemas, given to the template's ``tools`` when non-empty (the
            tokenizer's ``render`` must then accept ``tools=``).
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]] = ()) -> None:
        if not callable(getattr(tokenizer, "render", None)):
            raise ValueError(
                f"ChatTokens: {type(tokenizer).__name__} has no render(messages) (a chat template); multi-turn "
                "rollouts render each conversation with the tokenizer's chat template. Use "
                "ftune.tokenizers.HFTokenizer on a folder whose tokenizer_config.json has a chat_template."
            )
        self.tokenizer, self.tools = tokenizer, list(tools)

    def render(self, messages: Sequence[Message]) -> str:
        """The chat template's text of `messages`, with the generation prompt of the next model turn."""
        chat = [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
        if self.tools:
            return self.tokenizer.render(chat, add_generation_prompt=True, tools=self.tools)
        return self.tokenizer.render(chat, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        """Rendered text to ids, with no BOS or EOS added (the template writes its own, as transformers'
        ``apply_chat_template(tokenize=True)`` does)."""
        return self.tokenizer.encode(text, add_bos=False, add_eos=False)

    def text(self, ids: Sequence[int], *, special: bool) -> str:
        """Ids to text; ``special`` keeps special tokens (a turn's text as its parser and the template see it)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=not special)

    def prompt(self, messages: Sequence[Message]) -> list[int]:
        """The opening messages' tokens, ending where the model's first turn begins."""
        return self.encode(self.render(messages))

    def extension(self, cached: Sequence[int], messages: Sequence[Message], *, row: int) -> list[int]:
        """The tokens that follow `cached` when the conversation is `messages` (see the module docstring).

        Args:
            cached: the row's tokens so far (prompt, sampled turns, earlier answers).
            messages: the whole conversation, the environment's new messages last.
            row: the trajectory's row, for the error message.

        Raises:
            ConversationError: the rendering extends `cached` neither token for token nor as text.
        """
        full = self.render(messages)
        ids = self.encode(full)
        if ids[: len(cached)] == list(cached):
            return ids[len(cached) :]
        cached_text = self.text(cached, special=True)
        if full.startswith(cached_text):
            return self.encode(full[len(cached_text) :])
        at = _common_prefix(cached_text, full)
        raise ConversationError(
            f"multi-turn rollout, row {row}: the chat template renders the grown conversation (roles "
            f"{[m['role'] for m in messages]}) so that it no longer starts with the tokens already cached: "
            f"the texts part at character {at}: cached {cached_text[at : at + 40]!r}, rendered "
            f"{full[at : at + 40]!r}. A template that rewrites earlier turns (e.g. drops their reasoning) "
            "cannot extend a conversation on the KV cache; set tokenizer.chat_template to one that renders "
            "every earlier turn as it was."
        )
