"""Jinja chat-template rendering against transformers' renderer, and per-message character spans."""

from __future__ import annotations

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from ftune.data.messages import Message
from ftune.tokenizers.chat_template import compile_chat_template, render_chat, render_with_spans

# Whitespace control (trim_blocks / lstrip_blocks), tojson without HTML escaping, loop controls,
# namespace, a generation block, filters, and the special-token variables.
TEMPLATES = {
    "blocks": """{{ bos_token }}
{% for message in messages %}
    {% if message['role'] == 'system' %}
<<{{ message['content'] }}>>
    {% else %}
[{{ message['role'] | upper }}] {{ message['content'] | trim }}{{ eos_token }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}[ASSISTANT]{% endif %}""",
    "tojson_loops": """{% set ns = namespace(n=0) %}
{%- for message in messages -%}
{%- if loop.index > 3 %}{% break %}{% endif -%}
{%- set ns.n = ns.n + 1 -%}
{{ message | tojson }}|{{ ns.n }}
{% endfor -%}""",
    "generation": """{% for m in messages %}{{ m['role'] }}: {% if m['role'] == 'assistant' %}{% generation %}"""
    """{{ m['content'] }}{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}
{% endfor %}""",
}

MESSAGES = [
    Message("system", "Be <brief> & kind"),
    Message("user", '  héllo "quoted"  '),
    Message("assistant", "hi ✓"),
    Message("user", "more"),
]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_render_matches_transformers(name, add_generation_prompt):
    dicts = [{"role": m.role, "content": m.content} for m in MESSAGES]
    expected = render_jinja_template(
        [dicts], chat_template=TEMPLATES[name], add_generation_prompt=add_generation_prompt, **SPECIALS
    )[0][0]
    template = compile_chat_template(TEMPLATES[name])
    assert (
        render_chat(template, dicts, add_generation_prompt=add_generation_prompt, special_tokens=SPECIALS)
        == expected
    )


def test_spans_cover_each_message():
    template = compile_chat_template(TEMPLATES["blocks"])
    text, ends = render_with_spans(template, MESSAGES, special_tokens=SPECIALS)
    starts = [0] + ends[:-1]
    parts = [text[a:b] for a, b in zip(starts, ends)]
    assert parts == [
        "<s>\n<<Be <brief> & kind>>\n",
        '[USER] héllo "quoted"</s>\n',
        "[ASSISTANT] hi ✓</s>\n",
        "[USER] more</s>\n",
    ]
    text, ends = render_with_spans(template, MESSAGES, add_generation_prompt=True, special_tokens=SPECIALS)
    assert text[ends[-1] :] == "[ASSISTANT]"


def test_template_that_rewrites_history_still_gets_monotonic_spans():
    # Marks the last message specially, so a prefix is not a prefix of the whole rendering.
    template = compile_chat_template(
        "{% for m in messages %}{{ m['content'] }}{% if loop.last %}!{% endif %};{% endfor %}"
    )
    msgs = [Message("user", "aa"), Message("assistant", "bb"), Message("user", "cc")]
    text, ends = render_with_spans(template, msgs)
    assert text == "aa;bb;cc!;"
    assert ends == [2, 5, 10]  # each boundary is where the prefix rendering departs from the whole


def test_template_errors():
    with pytest.raises(ValueError, match=r"my template is not valid Jinja: .*\(template line 1\)"):
        compile_chat_template("{% if %}", "my template")
    template = compile_chat_template("{{ raise_exception('roles must alternate') }}", "t")
    with pytest.raises(
        ValueError, match=r"t rejected the conversation with roles \['user'\]: roles must alternate"
    ):
        render_chat(template, [{"role": "user", "content": "x"}], origin="t")
    sandboxed = compile_chat_template("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ValueError, match="rejected the conversation"):
        render_chat(sandboxed, [{"role": "user", "content": "x"}])
