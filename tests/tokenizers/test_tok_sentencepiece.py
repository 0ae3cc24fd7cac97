"""SentencePiece backend and the [INST] formats, against sentencepiece itself on a tiny trained model."""

from __future__ import annotations

import pytest
import sentencepiece as spm
from tiny_tokenizer_files import train_sp

from ftune.data.messages import Message
from ftune.models.llama2._tokenizer import llama2_tokenizer
from ftune.models.mistral._tokenizer import mistral_tokenizer
from ftune.tokenizers.base import Tokenizer
from ftune.tokenizers.sentencepiece import SentencePieceTokenizer

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces",
    "",
    "ümlaut 12345",
]


@pytest.fixture(scope="module")
def sp(sp_model):
    return spm.SentencePieceProcessor(model_file=str(sp_model))


def test_encode_decode_match_sentencepiece(sp_model, sp):
    tok = SentencePieceTokenizer(sp_model)
    assert isinstance(tok, Tokenizer)
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.stop_tokens) == (1, 2, 0, [2])
    assert tok.vocab_size == sp.vocab_size() == 160
    for text in TEXTS:
        ids = sp.encode(text)
        assert tok.encode(text) == [1, *ids, 2]
        assert tok.encode(text, add_bos=False, add_eos=False) == ids
        assert tok.decode(tok.encode(text)) == sp.decode(ids)


def test_decode_keeps_control_tokens_when_asked(sp_model, sp):
    tok = SentencePieceTokenizer(sp_model)
    ids = tok.encode("Hello world")
    assert tok.decode(ids, skip_special_tokens=False) == "<s>" + sp.decode(ids[1:-1]) + "</s>"
    with pytest.raises(ValueError, match=r"Cannot decode ids \[160\]: the vocabulary of .* has ids 0..159"):
        tok.decode([5, 160])


def test_llama2_format_matches_reference_layout(sp_model, sp):
    tok = llama2_tokenizer(sp_model.parent)  # the folder works too
    msgs = [
        Message("system", "Be brief.", masked=True),
        Message("user", " What is the capital? ", masked=True),
        Message("assistant", "Paris."),
        Message("user", "And the fox?", masked=True),
        Message("assistant", "It jumps."),
    ]
    tokens, mask = tok.tokenize_messages(msgs)
    turn1 = [1, *sp.encode("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is the capital? [/INST]")]
    answer1 = [*sp.encode("Paris."), 2]
    turn2 = [1, *sp.encode("[INST] And the fox? [/INST]")]
    answer2 = [*sp.encode("It jumps."), 2]
    assert tokens == turn1 + answer1 + turn2 + answer2  # ends with EOS already: add_eos adds nothing
    assert mask == [True] * len(turn1) + [False] * len(answer1) + [True] * len(turn2) + [False] * len(answer2)


def test_mistral_format_and_generation_prompt(sp_model, sp):
    tok = mistral_tokenizer(sp_model)
    msgs = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello", eot=False)]
    tokens, mask = tok.tokenize_messages(msgs, add_eos=False)
    user = sp.encode("[INST] Be brief.\n\nHi [/INST]")
    assert tokens == [1, *user, *sp.encode("Hello")]
    assert mask == [True] + [False] * (len(tokens) - 1)  # nothing masked: messages are not masked
    prompt, prompt_mask = tok.tokenize_messages(
        [Message("user", "Hi")], add_eos=False, add_generation_prompt=True
    )
    assert prompt == [1, *sp.encode("[INST] Hi [/INST]")]
    assert prompt_mask == [True] + [False] * (len(prompt) - 1)


def test_inst_format_errors(sp_model):
    tok = llama2_tokenizer(sp_model)
    with pytest.raises(
        ValueError, match="Llama2Format cannot place a message with role 'tool'; it accepts system"
    ):
        tok.tokenize_messages([Message("user", "hi"), Message("tool", "42")])
    with pytest.raises(ValueError, match="the system message 'Be brief.' is not followed by a user message"):
        tok.tokenize_messages([Message("system", "Be brief.")])


def test_truncation_ends_with_eos(sp_model):
    tok = llama2_tokenizer(sp_model, max_seq_len=6)
    msgs = [
        Message("user", "The quick brown fox jumps over the lazy dog.", masked=True),
        Message("assistant", "ok"),
    ]
    tokens, mask = tok.tokenize_messages(msgs)
    assert len(tokens) == len(mask) == 6
    assert tokens[-1] == tok.eos_id and mask[-1] is True
    full, _ = llama2_tokenizer(sp_model).tokenize_messages(msgs)
    assert tokens[:5] == full[:5]
    no_eos, _ = tok.tokenize_messages(msgs, add_eos=False)
    assert no_eos == full[:6]


def test_file_errors(tmp_path, ranks_file):
    with pytest.raises(FileNotFoundError, match=r"llama2_tokenizer: tokenizer path .*nope does not exist"):
        llama2_tokenizer(tmp_path / "nope")
    with pytest.raises(
        FileNotFoundError, match=r"mistral_tokenizer: the folder .* holds no tokenizer file; looked for"
    ):
        mistral_tokenizer(tmp_path)
    with pytest.raises(
        ValueError, match=r"tokenizer.model is not a sentencepiece model .*use llama3_tokenizer"
    ):
        llama2_tokenizer(ranks_file)
    with pytest.raises(FileNotFoundError, match=r"SentencePiece model .*missing.model does not exist"):
        SentencePieceTokenizer(tmp_path / "missing.model")


def test_model_without_eos_is_rejected(tmp_path):
    train_sp(tmp_path / "noeos", vocab_size=60, eos_id=-1)
    with pytest.raises(ValueError, match=r"noeos.model defines no EOS piece \(eos_id = -1\)"):
        SentencePieceTokenizer(tmp_path / "noeos.model")


def test_tokenize_messages_argument_errors(sp_model):
    tok = llama2_tokenizer(sp_model)
    with pytest.raises(ValueError, match="tokenize_messages got an empty conversation"):
        tok.tokenize_messages([])
    with pytest.raises(ValueError, match="pass add_eos=False with it"):
        tok.tokenize_messages([Message("user", "hi")], add_generation_prompt=True)
    with pytest.raises(TypeError, match=r"messages\[0\] is a dict, expected ftune.data.messages.Message"):
        tok.tokenize_messages([{"role": "user", "content": "hi"}])
    plain = SentencePieceTokenizer(sp_model)
    with pytest.raises(ValueError, match="has no prompt format, so it cannot tokenize messages"):
        plain.tokenize_messages([Message("user", "hi")])
