"""A tiny Hugging Face folder of any ftune family, as transformers writes it, for the family sweep.

`make_family_folder(family, folder)` saves `build_tiny_hf(family)` (tests/models/ftune_tiny_hf.py)
with transformers' own `save_pretrained` (config.json + model.safetensors), and the tokenizer files
the family's tokenizer builder reads, laid out as the family's Hub repositories hold them:

- sentencepiece families (Llama 2, Code Llama, Mistral, Mixtral): `tokenizer.model`, trained by
  sentencepiece (Mixtral's folder also has the tokenizer.json of its 8x22B configs' tokenizer);
- tiktoken families (Llama 3, 3.1, 3.2): `original/tokenizer.model`, a ranks file as Meta ships it;
- the others: `tokenizer.json` + `tokenizer_config.json` (+ `chat_template.jinja`) written by
  transformers' `PreTrainedTokenizerFast.save_pretrained`, a byte-level BPE with a ChatML template.

Every tokenizer is trained on the demo task's text, so a shipped config trains on the demo data.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import TINY_HF, build_tiny_hf  # noqa: E402 - tests/models' helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpointing"))
from tiny_gguf import _byte_alphabet  # noqa: E402 - the one spelling of the byte alphabet in the tests

FAMILIES = sorted(TINY_HF)
SENTENCEPIECE = ("llama2", "code_llama2", "mistral", "mixtral")
TIKTOKEN = ("llama3", "llama3_1", "llama3_2")
PIECES = 320  # the trained vocabularies (a tiktoken file adds Llama 3's 256 special tokens)
LLAMA3_SPECIALS = 256
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _corpus() -> list[str]:
    from ftune.datasets.demo import generate_demo_examples

    return [f"user\n{e.prompt}\nassistant\n{e.answer}" for e in generate_demo_examples(300, seed=7)]


def _sentencepiece(folder: Path) -> int:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus()),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=PIECES,
        model_type="bpe",
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return PIECES


def _tiktoken(folder: Path) -> int:
    """The 256 bytes, then the merges a byte-level BPE learns on the corpus, each after its parts."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=PIECES, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    to_byte = {c: b for b, c in _bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    for piece, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
        raw = bytes(to_byte[c] for c in piece)
        ranks.setdefault(raw, len(ranks))
    (folder / "original").mkdir()
    lines = [f"{base64.b64encode(piece).decode()} {rank}" for piece, rank in ranks.items()]
    (folder / "original" / "tokenizer.model").write_text("\n".join(lines) + "\n")
    return len(ranks) + LLAMA3_SPECIALS


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which byte-level BPE pieces are spelled in."""
    return dict(enumerate(_byte_alphabet()))


def _hf_tokenizer(folder: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=PIECES,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML
    )
    fast.save_pretrained(folder)
    return tok.get_vocab_size()


def make_family_folder(family: str, folder: Path) -> Path:
    """Write a tiny `family` folder (model and tokenizer, see the module docstring) into `folder`."""
    folder.mkdir(parents=True)
    if family in SENTENCEPIECE:
        vocab = _sentencepiece(folder)
        if family == "mixtral":
            vocab = max(vocab, _hf_tokenizer(folder))
    elif family in TIKTOKEN:
        vocab = _tiktoken(folder)
    else:
        vocab = _hf_tokenizer(folder)
    build_tiny_hf(family, vocab_size=vocab, max_position_embeddings=2048).save_pretrained(folder)
    return folder
