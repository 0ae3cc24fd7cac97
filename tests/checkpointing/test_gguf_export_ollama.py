"""The Ollama Modelfile written beside an exported GGUF: FROM, TEMPLATE (ChatML), SYSTEM, stops.

The TEMPLATE is Go template text that ftune cannot run here (no Go, no Ollama on the test
machines); what is checked is its exact text, and that the Python rendering of what Ollama does with
it (SYSTEM in front of a conversation without a system message, then the template) equals the Jinja
template's rendering on conversations other than the probes the recogniser uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_gguf_export import tiny_folder

from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.ollama import CHATML_TEMPLATE, _chatml, modelfile_text, ollama_chat
from ftune.tokenizers.chat_template import compile_chat_template, render_chat

pytestmark = pytest.mark.usefixtures("one_thread")

DEFAULT_SYSTEM = "You are a small helpful model."
# Written for these tests in the shapes of real templates: SmolLM2's (ChatML with a default system
# prompt), plain ChatML, one that trims contents, Llama 3's headers, and one without a generation prompt.
SMOLLM2_STYLE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_PLAIN = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHATML_TRIMMED = CHATML_PLAIN.replace("m.content", "m.content | trim")
LLAMA3_STYLE = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML_NO_PROMPT = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"

CONVERSATIONS = [
    [("user", "Rewrite the date 1999-07-02 in the format DD/MM/YYYY.")],
    [("system", "Answer in French."), ("user", "Hello"), ("assistant", "Bonjour"), ("user", "Thanks")],
    [("user", "a\n\nb"), ("assistant", "c"), ("user", "  d  ")],
]


def test_smollm2_style_template_gives_template_system_and_stops() -> None:
    text = modelfile_text("ft.Q8_0.gguf", chat_template=SMOLLM2_STYLE, stops=("<|im_end|>",))
    assert text == (
        "# Ollama: ollama create <name> -f ft.Q8_0.Modelfile\n"
        "# TEMPLATE: the model's chat template (chatml) in Ollama's syntax, checked by ftune\n"
        "FROM ./ft.Q8_0.gguf\n"
        'TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}\n'
        "{{ .Content }}<|im_end|>\n"
        '{{ end }}<|im_start|>assistant\n"""\n'
        f'SYSTEM """{DEFAULT_SYSTEM}"""\n'
        'PARAMETER stop "<|im_end|>"\n'
        'PARAMETER stop "<|im_start|>"\n'
    )


@pytest.mark.parametrize(("source", "system"), [(SMOLLM2_STYLE, DEFAULT_SYSTEM), (CHATML_PLAIN, None)])
def test_what_ollama_renders_equals_the_jinja_template(source: str, system: str | None) -> None:
    chat = ollama_chat(source)
    assert chat is not None and chat.template == CHATML_TEMPLATE and chat.system == system
    template = compile_chat_template(source)
    for conversation in CONVERSATIONS:
        jinja = render_chat(
            template, [{"role": r, "content": c} for r, c in conversation], add_generation_prompt=True
        )
        assert _chatml(conversation, chat.system) == jinja


def test_plain_chatml_has_no_system_line() -> None:
    text = modelfile_text("m.gguf", chat_template=CHATML_PLAIN, stops=("<|im_end|>",))
    assert "TEMPLATE" in text and "SYSTEM" not in text


@pytest.mark.parametrize("source", [CHATML_TRIMMED, LLAMA3_STYLE, CHATML_NO_PROMPT, "{% if %}", None])
def test_other_templates_get_no_template_line(source: str | None) -> None:
    assert ollama_chat(source) is None
    text = modelfile_text("m.gguf", chat_template=source, stops=("<|eot_id|>",))
    assert 'TEMPLATE "' not in text and "SYSTEM" not in text
    assert text.splitlines()[2:] == ["FROM ./m.gguf", 'PARAMETER stop "<|eot_id|>"']
    reason = "Ollama picks one from the file's tokenizer.chat_template" if source else "plain completion"
    assert reason in text.splitlines()[1]


def test_a_system_prompt_that_triple_quotes_cannot_hold_gets_no_template() -> None:
    assert ollama_chat(SMOLLM2_STYLE.replace(DEFAULT_SYSTEM, 'Say \\"\\"\\" never.')) is None


def test_export_writes_the_template_beside_the_file(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path / "model", "smollm2")
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "chat_template": SMOLLM2_STYLE}))
    exported = export_gguf(folder, tmp_path / "m.Q8_0.gguf", file_type="q8_0")
    lines = exported.modelfile.read_text().splitlines()
    assert lines[2:5] == [
        "FROM ./m.Q8_0.gguf",
        'TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}',
        "{{ .Content }}<|im_end|>",
    ]
    assert f'SYSTEM """{DEFAULT_SYSTEM}"""' in lines
    assert lines[-2:] == ['PARAMETER stop "<|im_end|>"', 'PARAMETER stop "<|im_start|>"']
