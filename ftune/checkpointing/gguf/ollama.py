"""GGUF export, Ollama: the Modelfile written beside a .gguf file.

    text = modelfile_text("smollm2-ft.Q8_0.gguf", chat_template=template, stops=("<|im_end|>",))

A Modelfile names the file (FROM), the prompt format in Ollama's Go template syntax (TEMPLATE),
the default system prompt (SYSTEM) and the tokens that end a reply (PARAMETER stop).

The TEMPLATE is written only when the model's Jinja chat template is known to render exactly as
a Go template ftune has: the Jinja template is rendered (as transformers renders it) on probe
conversations and compared with what Ollama would render from the Go template and SYSTEM line.
Ollama puts SYSTEM in front of a conversation that does not start with a system message, which is
what templates with a default system prompt (SmolLM2's, Qwen2.5's) do themselves.

Known formats: ChatML (`<|im_start|>role\\ncontent<|im_end|>\\n`, with or without a default system
prompt): SmolLM2 and Qwen2/2.5 instruct models. Other templates (Llama 3's headers, Gemma's turns,
Llama 2's [INST], templates with tools or reasoning branches) get no TEMPLATE line: Ollama then
picks its own template from the file's `tokenizer.chat_template`, which the comment says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from ftune.tokenizers.chat_template import compile_chat_template, render_chat

# Ollama's Go template for ChatML: every message (system ones included, as Ollama passes them in
# .Messages), then the opening of the assistant's reply.
CHATML_TEMPLATE = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n"
    "{{ .Content }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n"
)
CHATML_STOPS = ("<|im_end|>", "<|im_start|>")  # the end of a turn, and the start of the next one

# Contents of the probe conversations: spaces and newlines at the ends catch a template that trims.
_PROBES: list[list[tuple[str, str]]] = [
    [("user", "Probe user one.")],
    [("system", "Probe system.\n"), ("user", " Probe user one. ")],
    [("user", "Probe user one."), ("assistant", "Probe reply one."), ("user", "Probe user two.\n\n")],
    [
        ("system", "S"),
        ("user", "U1"),
        ("assistant", " A1 "),
        ("user", "U2"),
        ("assistant", "A2"),
        ("user", "U3"),
    ],
]


@dataclass(frozen=True)
class OllamaChat:
    """A chat format in Ollama's terms.

    Attributes:
        name: the format's name ("chatml").
        template: the Go template of the TEMPLATE line.
        system: the default system prompt (the SYSTEM line), or None.
        stops: the tokens of the format that end a reply.
    """

    name: str
    template: str
    system: str | None
    stops: tuple[str, ...]


def _chatml(messages: Sequence[tuple[str, str]], system: str | None) -> str:
    """What Ollama renders from CHATML_TEMPLATE and SYSTEM `system` for `messages`."""
    if system is not None and messages[0][0] != "system":
        messages = [("system", system), *messages]
    body = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
    return body + "<|im_start|>assistant\n"


def _default_system(rendered: str, user: str) -> str | None:
    """The system prompt a ChatML rendering of one user message starts with, or None."""
    head, tail = "<|im_start|>system\n", f"<|im_end|>\n<|im_start|>user\n{user}"
    if rendered.startswith(head) and tail in rendered:
        return rendered[len(head) : rendered.index(tail)]
    return None


def ollama_chat(chat_template: str | None) -> OllamaChat | None:
    """The Ollama form of a Jinja chat template, or None when it renders as no known format.

    Every probe conversation, rendered by the Jinja template with the generation prompt, must equal
    Ollama's rendering of the Go template (with the default system prompt found in the first probe).
    """
    if not chat_template:
        return None
    try:
        template = compile_chat_template(chat_template, "the model's chat template")
        rendered = [
            render_chat(template, [{"role": r, "content": c} for r, c in probe], add_generation_prompt=True)
            for probe in _PROBES
        ]
    except ValueError:  # invalid Jinja, or a template that refuses a probe conversation
        return None
    system = _default_system(rendered[0], _PROBES[0][0][1])
    if system is not None and ('"""' in system or "\\" in system):
        return None  # not writable in a Modelfile's triple quotes as is
    if all(text == _chatml(probe, system) for probe, text in zip(_PROBES, rendered)):
        return OllamaChat("chatml", CHATML_TEMPLATE, system, CHATML_STOPS)
    return None


def modelfile_text(gguf_name: str, *, chat_template: str | None, stops: Sequence[str]) -> str:
    """The Modelfile of the file `gguf_name` (in the same folder): FROM, TEMPLATE, SYSTEM, stops.

    Args:
        gguf_name: the .gguf file's name.
        chat_template: the model's Jinja chat template (tokenizer_config.json's), or None.
        stops: the texts of the tokens that end a reply (EOS, end of turn).
    """
    chat = ollama_chat(chat_template)
    lines = [f"# Ollama: ollama create <name> -f {PurePath(gguf_name).stem}.Modelfile"]
    if chat is not None:
        lines.append(
            f"# TEMPLATE: the model's chat template ({chat.name}) in Ollama's syntax, checked by ftune"
        )
    elif chat_template:
        lines.append(
            "# No TEMPLATE: ftune writes one for ChatML templates only; Ollama picks one from the file's "
            "tokenizer.chat_template."
        )
    else:
        lines.append("# The model has no chat template: use it for plain completion.")
    lines.append(f"FROM ./{gguf_name}")
    if chat is not None:
        lines.append(f'TEMPLATE """{chat.template}"""')
        if chat.system is not None:
            lines.append(f'SYSTEM """{chat.system}"""')
    all_stops = [*stops, *(chat.stops if chat else ())]
    lines += [f'PARAMETER stop "{_quote(stop)}"' for stop in dict.fromkeys(all_stops)]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
