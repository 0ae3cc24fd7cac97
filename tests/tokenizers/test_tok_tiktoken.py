"""tiktoken backend and the Llama 3 tokenizer, against a tiktoken.Encoding built directly from the same ranks."""

from __future__ import annotations

import base64
import re

import pytest
import tiktoken
from tiny_tokenizer_files import tiny_ranks

from ftune.data.messages import Message
from ftune.models.llama3._tokenizer import LLAMA3_PATTERN, LLAMA3_SPECIAL_TOKENS, llama3_tokenizer
from ftune.models.llama3_1._tokenizer import llama3_1_tokenizer
from ftune.models.llama3_2._tokenizer import llama3_2_tokenizer
from ftune.tokenizers.base import Tokenizer
from ftune.tokenizers.tiktoken import TiktokenTokenizer, load_tiktoken_ranks, split_long_runs

TEXTS = [
    "the user in the thing",
    "Hello, world!\n\nNew paragraph 123456",
    "ünï©ode ✓",
    "",
    "<|eot_id|> as text",
]


@pytest.fixture(scope="module")
def reference() -> tiktoken.Encoding:
    base = len(tiny_ranks())
    return tiktoken.Encoding(
        name="reference",
        pat_str=LLAMA3_PATTERN,
        mergeable_ranks=tiny_ranks(),
        special_tokens={tok: base + i for i, tok in enumerate(LLAMA3_SPECIAL_TOKENS)},
    )


def test_llama3_special_token_ids(ranks_file):
    tok = llama3_tokenizer(ranks_file)
    assert isinstance(tok, Tokenizer)
    base = len(tiny_ranks())
    assert len(LLAMA3_SPECIAL_TOKENS) == len(set(LLAMA3_SPECIAL_TOKENS)) == 256
    ids = {name: tok.token_to_id(name) - base for name in LLAMA3_SPECIAL_TOKENS[:11]}
    assert ids == {
        "<|begin_of_text|>": 0,
        "<|end_of_text|>": 1,
        "<|reserved_special_token_0|>": 2,
        "<|reserved_special_token_1|>": 3,
        "<|finetune_right_pad_id|>": 4,
        "<|reserved_special_token_2|>": 5,
        "<|start_header_id|>": 6,
        "<|end_header_id|>": 7,
        "<|eom_id|>": 8,
        "<|eot_id|>": 9,
        "<|python_tag|>": 10,
    }
    # With the released 128000-token ranks these are 128000, 128001, 128004 and 128255.
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (base, base + 1, base + 4)
    assert tok.token_to_id("<|reserved_special_token_247|>") == base + 255
    assert tok.stop_tokens == [base + 1, base + 8, base + 9]
    assert tok.vocab_size == base + 256


def test_encode_decode_match_tiktoken(ranks_file, reference):
    tok = llama3_tokenizer(ranks_file)
    for text in TEXTS:
        ids = reference.encode(text, allowed_special=set(), disallowed_special=())
        assert tok.encode(text, add_bos=False, add_eos=False) == ids
        assert tok.encode(text) == [tok.bos_id, *ids, tok.eos_id]
        assert tok.decode(tok.encode(text)) == text
        assert (
            tok.decode(tok.encode(text), skip_special_tokens=False)
            == f"<|begin_of_text|>{text}<|end_of_text|>"
        )
    # special token strings in data stay text: no injected control ids
    assert tok.token_to_id("<|eot_id|>") not in tok.encode("<|eot_id|>", add_bos=False, add_eos=False)


def test_llama3_header_format_equals_reference_rendering(ranks_file, reference):
    tok = llama3_1_tokenizer(ranks_file)
    msgs = [
        Message("system", "You are the user helper.", masked=True),
        Message("user", "  Hello there\n", masked=True),
        Message("assistant", "the thing"),
        Message("tool", "42", masked=True),
        Message("assistant", "call", eot=False),
    ]
    tokens, mask = tok.tokenize_messages(msgs)
    rendered = (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are the user helper.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nthe thing<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\ncall<|eom_id|>"
        "<|end_of_text|>"
    )
    assert tokens == reference.encode(rendered, allowed_special="all")
    assert tok.decode(tokens, skip_special_tokens=False) == rendered
    # masked: BOS, system, user, tool turns, and the appended EOS; trained: the assistant turns
    trained = tok.decode([t for t, m in zip(tokens, mask) if not m], skip_special_tokens=False)
    assert trained == (
        "<|start_header_id|>assistant<|end_header_id|>\n\nthe thing<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\ncall<|eom_id|>"
    )
    assert mask[0] and mask[-1]


def test_generation_prompt_and_truncation(ranks_file, reference):
    tok = llama3_2_tokenizer(ranks_file, max_seq_len=10)
    msgs = [Message("user", "the user in the thing", masked=True), Message("assistant", "the thing")]
    tokens, mask = tok.tokenize_messages(msgs)
    assert len(tokens) == 10 and tokens[-1] == tok.eos_id and mask[-1]
    full, _ = llama3_tokenizer(ranks_file).tokenize_messages(msgs)
    assert tokens[:9] == full[:9]
    prompt, prompt_mask = llama3_tokenizer(ranks_file).tokenize_messages(
        msgs[:1], add_eos=False, add_generation_prompt=True
    )
    expected = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nthe user in the thing<|eot_id|>"
    expected += "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert prompt == reference.encode(expected, allowed_special="all")
    assert all(prompt_mask)


def test_long_runs_are_split_but_text_round_trips(ranks_file):
    tok = llama3_tokenizer(ranks_file)
    text = "a" * 30_000 + " " * 26_000 + "the end"
    chunks = list(split_long_runs(text, max_run=25_000))
    assert "".join(chunks) == text and len(chunks) == 3
    assert max(len(run) for chunk in chunks for run in re.findall(r"\s+|\S+", chunk)) <= 25_000
    assert tok.decode(tok.encode(text)) == text


def test_ranks_file_errors(tmp_path, sp_model):
    bad = tmp_path / "bad.model"
    bad.write_text(f"{base64.b64encode(b'a').decode()} 0\nnot-base64!! 1\n")
    with pytest.raises(
        ValueError,
        match=r"bad.model, line 2: cannot read 'not-base64!! 1'; expected one '<base64 token> <rank>'",
    ):
        load_tiktoken_ranks(bad)
    gap = tmp_path / "gap.model"
    gap.write_text(f"{base64.b64encode(b'a').decode()} 0\n{base64.b64encode(b'b').decode()} 5\n")
    with pytest.raises(
        ValueError, match=r"gap.model: the 2 ranks are not 0..1 each used once \(max rank 5\)"
    ):
        load_tiktoken_ranks(gap)
    empty = tmp_path / "empty.model"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty.model holds no tokens"):
        load_tiktoken_ranks(empty)
    with pytest.raises(
        ValueError,
        match=r"tokenizer.model is a binary file, not a tiktoken ranks file; .*use llama2_tokenizer",
    ):
        llama3_tokenizer(sp_model)
    with pytest.raises(
        FileNotFoundError,
        match=r"llama3_tokenizer: the folder .* holds no tokenizer file; looked for "
        r"tokenizer.model, original/tokenizer.model",
    ):
        llama3_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="tiktoken ranks file .*missing.model does not exist"):
        load_tiktoken_ranks(tmp_path / "missing.model")


def test_original_subfolder_and_bad_special_tokens(tmp_path, ranks_file):
    (tmp_path / "original").mkdir()
    (tmp_path / "original" / "tokenizer.model").write_bytes(ranks_file.read_bytes())
    assert llama3_tokenizer(tmp_path).vocab_size == len(tiny_ranks()) + 256
    with pytest.raises(ValueError, match=r"eos_token '<\|eos\|>' is not among the special tokens"):
        TiktokenTokenizer(
            ranks_file,
            pattern=LLAMA3_PATTERN,
            special_tokens=["<|bos|>"],
            bos_token="<|bos|>",
            eos_token="<|eos|>",
            pad_token="<|bos|>",
        )
