"""Builders of tiny tokenizer files (sentencepiece model, tiktoken ranks, tokenizer.json) for the tests."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a tiny corpus for a tiny tokenizer.",
    "The user asks a question and the assistant answers it politely.",
    "[INST] and [/INST] mark instructions; <<SYS>> marks the system prompt.",
    "Numbers like 12345 and symbols like #, $, % appear too.",
    "You are a helpful assistant. What is the capital of France? Paris is the capital.",
    "Tokenizers split text into pieces; the model reads ids.",
]

# ChatML with a default system prompt when the conversation has none (SmolLM2-style).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

HF_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]


def train_sp(prefix: Path, *, vocab_size: int, **options) -> Path:
    """Train a BPE sentencepiece model on CORPUS with the Llama 2 ids (unk 0, bos 1, eos 2, no pad)."""
    import sentencepiece as spm

    kwargs = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1, **options}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 3),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
        **kwargs,
    )
    return prefix.with_suffix(".model")


def tiny_ranks() -> dict[bytes, int]:
    """Bytes 0..255, then merges; each merge's parts come earlier, as BPE needs."""
    ranks = {bytes([b]): b for b in range(256)}
    for token in [
        b"th",
        b"he",
        b"the",
        b" t",
        b" the",
        b"in",
        b"ing",
        b"er",
        b"ll",
        b"llo",
        b"\n\n",
        b"us",
        b"user",
    ]:
        ranks[token] = len(ranks)
    return ranks


def train_hf_tokenizer(folder: Path, config: dict | None, *, post_bos: bool = False) -> Path:
    """Train a byte-level BPE tokenizer.json into `folder` and write `config` as tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=HF_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    if post_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def chatml_config(**extra) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHATML_TEMPLATE,
        **extra,
    }
