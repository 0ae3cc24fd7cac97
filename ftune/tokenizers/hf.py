"""Hugging Face backend: any model that ships a `tokenizer.json` (+ `tokenizer_config.json`).

Encoding is done by the `tokenizers` library; special tokens, BOS/EOS/pad and the chat
template come from `tokenizer_config.json` (a `chat_template.jinja` file next to it wins, as
in transformers). `tokenize_messages` renders the chat template like
`transformers.apply_chat_template` and tokenizes the rendering once, so the ids are the ones
transformers gives; each token's mask is that of the message owning its first character.
Without a chat template the conversation is laid out as ChatML.
"""

from __future__ import annotations

import bisect
import json
import logging
from pathlib import Path
from typing import Any

import tokenizers

from ftune.config.time_limit import TimeLimitError, call_with_time_limit, check_time_limit
from ftune.data.messages import Message
from ftune.tokenizers.base import MessageTokenizer, check_max_seq_len, check_messages
from ftune.tokenizers.chat_template import compile_chat_template, render_chat, render_with_spans
from ftune.tokenizers.files import find_tokenizer_file
from ftune.tokenizers.formats import ChatMLFormat, PromptFormat

logger = logging.getLogger(__name__)

# The time one conversation's chat-template rendering may take by default (HFTokenizer's
# `template_time_limit_s`): a template renders in well under a millisecond; one still rendering
# after this long loops without end (nested loops over large ranges).
TEMPLATE_TIME_LIMIT_S = 10.0

# The special-token attributes transformers passes to chat templates.
_TEMPLATE_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


def _token_str(value: Any) -> str | None:
    # tokenizer_config.json stores a token as a string or as a serialized AddedToken dict.
    if isinstance(value, dict):
        return value.get("content")
    return value


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}); expected {what}.") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}; expected {what} (a JSON object).")
    return data


def _pick_template(value: Any, origin: str) -> str | None:
    # A config may hold one template (str) or named ones ([{"name": ..., "template": ...}]).
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        if "default" in named:
            return named["default"]
        raise ValueError(
            f"{origin} holds several chat templates {sorted(map(str, named))} and none is named 'default'; "
            "pass chat_template= with the one to use."
        )
    raise ValueError(f"{origin} must be a string or a list of named templates, got {type(value).__name__}.")


class HFTokenizer(MessageTokenizer):
    """A `tokenizer.json` tokenizer with its config and chat template.

    Args:
        path: the `tokenizer.json` file, or the folder holding it (e.g. a checkpoint folder).
            `tokenizer_config.json`, `chat_template.jinja` and `generation_config.json` are read
            from the same folder when present.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.
        chat_template: a Jinja chat template overriding the one in the folder.
        prompt_format: lay conversations out with this format instead of any chat template.
        eos_token: override of the config's `eos_token` (e.g. "<|im_end|>").
        pad_token: override of the config's `pad_token` (default: the config's, else EOS).
        add_bos: whether `encode(add_bos=True)` prepends the config's `bos_token`. Default: as
            transformers does, i.e. if the config says `add_bos_token: true` or the
            tokenizer.json post-processor prepends the BOS. When it does not, `bos_id` is None.
        template_time_limit_s: the seconds the chat template may take to render one conversation
            (default 10; null: no limit). A rendering still running then is stopped with an error
            naming the template and the conversation's roles (`ftune.config.time_limit`: enforced
            on the main thread, which renders in the recipes and in DataLoader worker processes).

    Special token strings inside text become special tokens, as in transformers.

    Raises:
        FileNotFoundError: no tokenizer.json at `path`.
        ValueError: unreadable tokenizer.json / tokenizer_config.json, no EOS token, a special
            token missing from the vocabulary, or an invalid chat template.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_seq_len: int | None = None,
        chat_template: str | None = None,
        prompt_format: PromptFormat | None = None,
        eos_token: str | None = None,
        pad_token: str | None = None,
        add_bos: bool | None = None,
        template_time_limit_s: float | None = TEMPLATE_TIME_LIMIT_S,
    ) -> None:
        self.template_time_limit_s = check_time_limit(
            template_time_limit_s, "tokenizer.template_time_limit_s"
        )
        tokenizer_file = find_tokenizer_file(path, ("tokenizer.json",), who="HFTokenizer")
        folder = tokenizer_file.parent
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        except Exception as e:  # the Rust side raises a plain Exception for every parse error
            raise ValueError(
                f"{tokenizer_file} is not a valid HF tokenizer.json ({e}); expected the file written by "
                "`tokenizers` or transformers' save_pretrained."
            ) from e
        self.source = str(tokenizer_file)
        config_file = folder / "tokenizer_config.json"
        self._config_origin = (
            str(config_file) if config_file.is_file() else f"(no tokenizer_config.json in {folder})"
        )
        config = _read_json(config_file, "a tokenizer config") if config_file.is_file() else {}
        self.max_seq_len = check_max_seq_len(max_seq_len, "HFTokenizer")
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

        eos = eos_token or _token_str(config.get("eos_token"))
        if eos is None:
            raise ValueError(
                f"{self._config_origin}: no 'eos_token' set; ftune needs an end-of-sequence token. Add "
                '"eos_token": "<your eos>" to tokenizer_config.json or pass eos_token= to HFTokenizer.'
            )
        self.eos_id = self._vocab_id(eos, "eos_token")
        pad = pad_token or _token_str(config.get("pad_token"))
        self.pad_id = self._vocab_id(pad, "pad_token") if pad is not None else self.eos_id
        bos = _token_str(config.get("bos_token"))
        bos_id = self._vocab_id(bos, "bos_token") if bos is not None else None
        if add_bos is None:
            add_bos = config.get("add_bos_token")
        if add_bos is None:
            with_specials = self._tok.encode("", add_special_tokens=True).ids
            add_bos = bos_id is not None and with_specials[:1] == [bos_id]
        if add_bos and bos_id is None:
            raise ValueError(f"{self._config_origin}: add_bos is set but no 'bos_token' is; set bos_token.")
        self.bos_id = bos_id if add_bos else None
        self.stop_tokens = [self.eos_id] + self._generation_eos_ids(folder / "generation_config.json")

        self.template_tokens = {
            k: s for k in _TEMPLATE_TOKENS if (s := _token_str(config.get(k))) is not None
        }
        self.template_tokens["eos_token"] = eos
        self.prompt_format = prompt_format
        self.chat_template, self._template_origin = self._find_template(chat_template, folder, config)
        self._template = None
        if self.chat_template is not None and prompt_format is None:
            self._template = compile_chat_template(self.chat_template, self._template_origin)
        elif prompt_format is None:
            logger.info(
                "%s has no chat template; tokenize_messages lays conversations out as ChatML.", folder
            )
            self.prompt_format = ChatMLFormat()

    def __getstate__(self) -> dict[str, Any]:
        # A compiled Jinja template does not pickle (DataLoader workers may pickle the dataset and
        # its tokenizer); keep the source and compile again on unpickling.
        state = dict(self.__dict__)
        state["_template"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.chat_template is not None and self.prompt_format is None:
            self._template = compile_chat_template(self.chat_template, self._template_origin)

    def _find_template(self, override: str | None, folder: Path, config: dict) -> tuple[str | None, str]:
        if override is not None:
            return override, "the chat_template passed to HFTokenizer"
        jinja_file = folder / "chat_template.jinja"
        if jinja_file.is_file():
            return jinja_file.read_text(encoding="utf-8"), f"the chat template in {jinja_file}"
        origin = f"the chat template in {self._config_origin} (key 'chat_template')"
        return _pick_template(config.get("chat_template"), origin), origin

    def _vocab_id(self, token: str, what: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(
                f"{self._config_origin}: {what} {token!r} is not a token of {self.source}; set {what} to "
                "a token of that vocabulary (see its 'added_tokens')."
            )
        return token_id

    def _generation_eos_ids(self, path: Path) -> list[int]:
        # generation_config.json may list several stop ids (Llama 3.1: end_of_text, eom_id, eot_id).
        if not path.is_file():
            return []
        value = _read_json(path, "a generation config").get("eos_token_id")
        ids = value if isinstance(value, list) else [value] if isinstance(value, int) else []
        return [i for i in ids if i != self.eos_id and 0 <= i < self.vocab_size]

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        """Encode text with `tokenizers` (no post-processor), then add BOS/EOS when asked."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if add_eos:
            ids = ids + [self.eos_id]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Decode ids with `tokenizers`; special tokens are dropped unless asked for."""
        ids = list(ids)
        self.check_ids(ids)
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def render(
        self,
        messages: list[Message],
        *,
        add_generation_prompt: bool = False,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """The chat template's rendering of `messages` (the text `apply_chat_template(tokenize=False)` gives),
        with the JSON schemas of `tools` in the template's ``tools`` (an agent's environment's).

        Raises:
            ValueError: the tokenizer has no chat template (or uses a prompt format instead).
        """
        if self._template is None:
            raise ValueError(
                f"HFTokenizer({self.source}) renders no chat template: it has none, or a prompt_format "
                "replaces it. Use tokenize_messages, or pass chat_template=."
            )
        dicts = [{"role": m.role, "content": m.content} for m in messages]
        return self._limited(
            render_chat,
            messages,
            self._template,
            dicts,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.template_tokens,
            origin=self._template_origin,
            tools=tools,
        )

    def _limited(self, render: Any, messages: list[Message], *args: Any, **kwargs: Any) -> Any:
        """`render(*args, **kwargs)` under `template_time_limit_s`."""
        limit = self.template_time_limit_s

        def message() -> str:
            return (
                f"{self._template_origin} ran longer than tokenizer.template_time_limit_s={limit:g} s rendering a "
                f"conversation with roles {[m.role for m in messages]} and was stopped: a chat template renders in "
                "milliseconds unless it loops without end (nested loops over large ranges). Fix the template (or "
                "pass chat_template=), or raise template_time_limit_s (an argument of ftune.tokenizers.HFTokenizer; "
                "null: no limit)."
            )

        try:
            return call_with_time_limit(render, *args, seconds=limit, message=message, **kwargs)
        except TimeLimitError as e:
            raise ValueError(str(e)) from None

    def tokenize_messages(
        self, messages: list[Message], *, add_eos: bool = True, add_generation_prompt: bool = False
    ) -> tuple[list[int], list[bool]]:
        """Tokenize a conversation with the chat template (or the prompt format / ChatML).

        With a chat template the ids equal `apply_chat_template(messages, tokenize=True)`; a
        token's mask is the `masked` flag of the message owning its first character, and the
        generation prompt is masked. `Message.eot` is not seen by templates.
        See `MessageTokenizer.tokenize_messages` for arguments and errors.
        """
        if self._template is None:
            return super().tokenize_messages(
                messages, add_eos=add_eos, add_generation_prompt=add_generation_prompt
            )
        check_messages(messages, add_eos=add_eos, add_generation_prompt=add_generation_prompt)
        text, ends = self._limited(
            render_with_spans,
            messages,
            self._template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.template_tokens,
            origin=self._template_origin,
        )
        encoding = self._tok.encode(text, add_special_tokens=False)
        owner_masked = [m.masked for m in messages] + [True]  # the generation prompt is masked
        mask = [owner_masked[bisect.bisect_right(ends, start)] for start, _ in encoding.offsets]
        return self.finish(list(encoding.ids), mask, add_eos=add_eos)
