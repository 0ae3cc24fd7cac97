"""Behaviour every backend shares: pickling (DataLoader workers), max_seq_len checks, format layout."""

from __future__ import annotations

import pickle

import pytest

from ftune.data.messages import Message
from ftune.models.llama2._tokenizer import llama2_tokenizer
from ftune.models.llama3._tokenizer import llama3_tokenizer
from ftune.models.smollm2._tokenizer import smollm2_tokenizer
from ftune.tokenizers.formats import ChatMLFormat, Control, Llama3Format, Segment, Special

CONVERSATION = [Message("user", "the user asks", masked=True), Message("assistant", "the answer")]


@pytest.fixture(params=["sentencepiece", "tiktoken", "hf"])
def tokenizer(request, sp_model, ranks_file, hf_dir):
    build = {
        "sentencepiece": lambda: llama2_tokenizer(sp_model),
        "tiktoken": lambda: llama3_tokenizer(ranks_file),
    }
    build["hf"] = lambda: smollm2_tokenizer(hf_dir)
    return build[request.param]()


def test_pickle_round_trip(tokenizer):
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert copy.encode("the user") == tokenizer.encode("the user")
    assert copy.tokenize_messages(CONVERSATION) == tokenizer.tokenize_messages(CONVERSATION)


def test_masks_follow_messages(tokenizer):
    tokens, mask = tokenizer.tokenize_messages(CONVERSATION)
    assert len(tokens) == len(mask) and tokens[-1] == tokenizer.eos_id
    trained = tokenizer.decode([t for t, m in zip(tokens, mask) if not m])
    assert "the answer" in trained and "asks" not in trained
    all_masked = [Message(m.role, m.content, masked=True) for m in CONVERSATION]
    assert all(tokenizer.tokenize_messages(all_masked)[1])


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_max_seq_len_must_be_positive_int(ranks_file, value):
    with pytest.raises(ValueError, match=r"TiktokenTokenizer: max_seq_len must be a positive int or None"):
        llama3_tokenizer(ranks_file, max_seq_len=value)


def test_format_segments():
    msgs = [
        Message("system", "s", masked=True),
        Message("user", "u", masked=True),
        Message("assistant", "a", eot=False),
    ]
    assert ChatMLFormat().segments(msgs) == [
        Segment([Special("<|im_start|>"), "system\ns", Special("<|im_end|>"), "\n"], True),
        Segment([Special("<|im_start|>"), "user\nu", Special("<|im_end|>"), "\n"], True),
        Segment([Special("<|im_start|>"), "assistant\na"], False),
    ]
    header = [Special("<|start_header_id|>"), "assistant", Special("<|end_header_id|>"), "\n\n"]
    assert Llama3Format().segments(msgs[2:]) == [
        Segment([Control.BOS], True),
        Segment([*header, "a", Special("<|eom_id|>")], False),
    ]
    assert Llama3Format().generation_prompt() == header
