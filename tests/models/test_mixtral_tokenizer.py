"""Mixtral's tokenizers: 8x7B's is Mistral's sentencepiece one; 8x22B's v3 tokenizer.json with its
chat template gives transformers' AutoTokenizer's tokens, control tokens included."""

import json
from pathlib import Path

import pytest

from ftune.data.messages import Message
from ftune.models.mistral import mistral_tokenizer
from ftune.models.mixtral import mixtral_tokenizer, mixtral_v3_tokenizer

transformers = pytest.importorskip("transformers")

# The shape of Mixtral-8x22B-Instruct's template without its tool branches: [INST] and [/INST] are
# control tokens of the v3 vocabulary.
V3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
)


def test_8x7b_tokenizer_is_mistrals() -> None:
    assert mixtral_tokenizer is mistral_tokenizer


def test_v3_tokenizer_is_token_exact_with_autotokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁")])
    corpus = ["Which planet is the largest? Jupiter is.", "Name a prime number: seven."]
    tok.train_from_iterator(corpus * 3, trainer=trainers.BpeTrainer(vocab_size=160, special_tokens=specials))
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": V3_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours = mixtral_v3_tokenizer(folder, max_seq_len=64)
    reference = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    conversation = [
        Message("user", "Which planet is the largest?", masked=True),
        Message("assistant", "Jupiter."),
        Message("user", "Name a prime number.", masked=True),
        Message("assistant", "Seven."),
    ]
    tokens, mask = ours.tokenize_messages(conversation, add_eos=False)
    as_dicts = [{"role": m.role, "content": m.content} for m in conversation]
    expected = reference.apply_chat_template(as_dicts, tokenize=True, return_dict=True)["input_ids"]
    assert tokens == list(expected) and len(mask) == len(tokens)
    assert tokens.count(ours.token_to_id("[INST]")) == 2 and tokens.count(ours.token_to_id("[/INST]")) == 2
    assert sum(mask) > 0 and not all(mask)  # the user turns are masked, the answers are not
