"""A chat template renders under a time limit: nested loops end with an error, not a hung tokenizer."""

from __future__ import annotations

import pickle

import pytest

from ftune.data.messages import Message
from ftune.tokenizers import HFTokenizer

NESTED = (
    "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    "{% for m in messages %}{{ m['content'] }}{% endfor %}"
)
CHAT = [Message("user", "hi", masked=True), Message("assistant", "yo")]


def test_a_template_with_nested_loops_is_stopped_naming_the_template_and_the_roles(hf_dir):
    tok = HFTokenizer(hf_dir, chat_template=NESTED, template_time_limit_s=0.3)
    match = (
        r"the chat_template passed to HFTokenizer ran longer than tokenizer.template_time_limit_s=0.3 s rendering "
        r"a conversation with roles \['user', 'assistant'\] and was stopped.*raise template_time_limit_s"
    )
    with pytest.raises(ValueError, match=match):
        tok.tokenize_messages(CHAT)
    with pytest.raises(ValueError, match=match):
        tok.render(CHAT)


def test_the_limit_survives_pickling_and_null_turns_it_off(hf_dir):
    tok = pickle.loads(pickle.dumps(HFTokenizer(hf_dir, chat_template=NESTED, template_time_limit_s=0.3)))
    with pytest.raises(ValueError, match="template_time_limit_s=0.3 s"):
        tok.tokenize_messages(CHAT)
    assert HFTokenizer(hf_dir).template_time_limit_s == 10.0
    plain = HFTokenizer(hf_dir, template_time_limit_s=None)
    assert plain.tokenize_messages(CHAT) == HFTokenizer(hf_dir).tokenize_messages(CHAT)


def test_a_bad_limit_is_refused_with_its_key(hf_dir):
    with pytest.raises(
        ValueError, match=r"tokenizer.template_time_limit_s: must be a finite number of seconds > 0"
    ):
        HFTokenizer(hf_dir, template_time_limit_s=-1)
