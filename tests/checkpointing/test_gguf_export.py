"""GGUF export (ftune.checkpointing.gguf.export): tiny seeded models of every exported family, written
as F32 GGUF files and read back by ftune's own importer (`ftune convert gguf`: dense llama-architecture
and gemma3 files) and by transformers' GGUF loader (every family but Gemma and Mixtral, which it does
not read): equal logits, equal weights.

The helpers here (tiny HF folders with a trained tokenizer) are imported by the other
tests/checkpointing/test_gguf_export_*.py files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import build_tiny_hf  # noqa: E402

from ftune.checkpointing import load_hf  # noqa: E402
from ftune.checkpointing.gguf.export import export_gguf  # noqa: E402
from ftune.checkpointing.gguf.export_vocab import QWEN2_SPLIT  # noqa: E402
from ftune.checkpointing.gguf.reader import convert_gguf  # noqa: E402
from ftune.checkpointing.gguf.tokenizer import _LLAMA3_SPLIT  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [
    "The quick brown fox jumps over the lazy dog. It's a sentence we've all seen!",
    "   leading spaces, trailing spaces   \n\n\nmultiple newlines\n \n  mixed   whitespace\t\there  ",
    "def f(x: int) -> int:\n    return x ** 2  # comment\n",
    "Numbers: 0 7 42 1234567890 3.14159 -273.15 1e-5 0x1F 2024-11-29 $1,234.56 99%",
    "Unicode: café naïve Größe — “quotes” … ñ ç ü; Русский, 中文，日本語.",
    "Emoji 😀🎉 and symbols ∑ √ ≤ ∞ → ©",
]
CORPUS = TEXTS * 3 + ["the cat sat on the mat, and the dog sat on the log; they were quick and lazy."] * 5
VOCAB = 640  # embedding rows; the tokenizers below have fewer tokens, as padded real vocabularies do
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}"
)

# Tokenizer style per family, as their real tokenizer.json files are built.
STYLE = {
    "smollm2": "smollm",
    "llama3": "llama3",
    "llama3_1": "llama3",
    "llama3_2": "llama3",
    "qwen2_5": "qwen2",
    "qwen3": "qwen2",
    "llama2": "spm",
    "mistral": "spm",
    "gemma3": "gemma",
    "qwen2": "qwen2",
    "code_llama2": "spm",
    "gemma": "gemma",
    "gemma2": "gemma",
    "phi3": "spm",
    "phi4": "llama3",  # Phi-4's tiktoken-style split is Llama 3's regex
    "qwen3_moe": "qwen2",
    "mixtral": "spm",
}
# What GGUF can hold, per family: Gemma 3's fixed 5 local : 1 global pattern and query scale head_dim
# (llama.cpp's); Llama 3.1/3.2 scaling with Llama 3's constants (the file keeps only the divisors,
# and ftune's importer rebuilds rope_scaling assuming them).
_SCALING = dict(
    rope_type="llama3", low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
)
OVERRIDES = {
    "llama3_1": dict(rope_scaling={**_SCALING, "factor": 8.0}, vocab_size=VOCAB),
    "llama3_2": dict(rope_scaling={**_SCALING, "factor": 32.0}, vocab_size=VOCAB),
    # llama.cpp scales Gemma 2's queries by 1/sqrt(head_dim) (but for the 27B).
    "gemma2": dict(query_pre_attn_scalar=16, vocab_size=VOCAB),
    "gemma3": dict(
        num_hidden_layers=6,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        query_pre_attn_scalar=16,
        vocab_size=VOCAB,
    ),
}


def byte_level_tokenizer(style: str) -> Tokenizer:
    """A byte-level BPE trained on CORPUS, split as SmolLM2 ("smollm"), Llama 3 or Qwen2 split."""
    split = {"llama3": _LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT}
    tok = Tokenizer(models.BPE())
    if style == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split[style]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens(["<think>"])  # a user-defined (non-special) added token
    return tok


def sentencepiece_tokenizer(style: str) -> Tokenizer:
    """A sentencepiece-style BPE (byte fallback, ▁ for spaces) as Llama 2/Mistral ("spm", space
    prefix) and Gemma 3 ("gemma", no prefix) ship it: <unk> <s> </s>, 256 byte pieces, trained pieces."""
    trained = Tokenizer(models.BPE())
    trained.normalizer = normalizers.Replace(" ", "▁")
    trained.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trained.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=260))
    learned = json.loads(trained.to_str())["model"]
    specials = ["<unk>", "<s>", "</s>"] + (["<start_of_turn>", "<end_of_turn>"] if style == "gemma" else [])
    pieces = specials + [f"<0x{b:02X}>" for b in range(256)]
    pieces += sorted(learned["vocab"], key=learned["vocab"].get)
    vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Prepend("▁")] if style == "spm" else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    strip = [decoders.Strip(" ", 1, 0)] if style == "spm" else []
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), *strip]
    )
    tok.add_special_tokens(specials)
    return tok


def tiny_folder(folder: Path, family: str, *, seed: int = 0, **sizes: Any) -> Path:
    """A seeded tiny HF checkpoint folder of `family` with a trained tokenizer, as ftune saves one
    (`sizes`: config overrides, e.g. hidden_size=256 for whole K-quant blocks)."""
    style = STYLE[family]
    model = build_tiny_hf(family, seed=seed, **{**OVERRIDES.get(family, {"vocab_size": VOCAB}), **sizes})
    model.save_pretrained(folder)
    if style in ("spm", "gemma"):
        tok = sentencepiece_tokenizer(style)
        names = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
        extra = {"add_bos_token": True, "add_eos_token": False}
        template = GEMMA_TEMPLATE if style == "gemma" else None
    else:
        tok = byte_level_tokenizer(style)
        names = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        extra = {"add_bos_token": False}
        template = CHATML
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **names, **extra, "model_max_length": 256}
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


FAMILIES = sorted(STYLE)
# Files ftune's importer reads: dense llama-architecture (Llama, SmolLM2, Mistral, Code Llama) and gemma3.
IMPORTABLE = ["code_llama2", "gemma3", "llama2", "llama3", "llama3_1", "llama3_2", "mistral", "smollm2"]
# Files transformers' GGUF loader reads: all but Gemma (1) (no "gemma" architecture there) and Mixtral
# (a llama file with experts, which its llama loader does not take).
TRANSFORMERS_READS = [f for f in FAMILIES if f not in ("gemma", "mixtral")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    out = {}
    for family in FAMILIES:
        root = tmp_path_factory.mktemp(family)
        folder = tiny_folder(root / "model", family)
        out[family] = (folder, export_gguf(folder, root / "model.gguf", file_type="f32").path)
    return out


def _tokens() -> torch.Tensor:
    return torch.randint(0, 290, (2, 12), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", IMPORTABLE)
def test_f32_export_reads_back_through_ftune_convert_gguf(
    family: str, exported: dict, tmp_path: Path
) -> None:
    folder, path = exported[family]
    back = convert_gguf(path, tmp_path / "back")
    ours, theirs = load_hf(folder).eval(), load_hf(back).eval()
    with torch.no_grad():
        want, got = ours(_tokens()), theirs(_tokens())
    # F32: the same model. Gemma 3 norms are stored as 1 + w (llama.cpp's convention), and
    # (1 + w) - 1 rounds in float32: within one float32 ulp of 2 there.
    atol = 2.5e-7 if family == "gemma3" else 0.0
    src = ours.state_dict()
    for key, value in theirs.state_dict().items():
        torch.testing.assert_close(value, src[key], rtol=0, atol=atol, msg=key)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 if atol else 0.0)


# transformers' GGUF loader reads only some hyper-parameters; what it leaves out is passed by hand
# (llama.cpp itself reads them: rope_freqs, the key length, linear scaling).
_NOT_READ_BY_TRANSFORMERS = {
    "llama3_1": ("rope_scaling",),
    "llama3_2": ("rope_scaling",),
    "qwen3": ("head_dim",),
    "qwen3_moe": ("head_dim", "moe_intermediate_size"),
    "gemma2": ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"),
    "gemma3": ("rope_parameters", "query_pre_attn_scalar"),
    "phi3": ("pad_token_id", "sliding_window"),  # the tiny config's pad id 32000 is past its vocabulary
    "phi4": ("pad_token_id",),
}


@pytest.mark.parametrize("family", TRANSFORMERS_READS)
def test_f32_export_loads_in_transformers_with_equal_logits(family: str, exported: dict) -> None:
    import transformers

    folder, path = exported[family]
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    kwargs = {k: getattr(reference.config, k) for k in _NOT_READ_BY_TRANSFORMERS.get(family, ())}
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, **kwargs
    ).eval()
    with torch.no_grad():
        want, got = reference(_tokens()).logits, loaded(_tokens()).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_llama_q_k_rows_are_permuted_as_llama_cpp_expects(exported: dict) -> None:
    # Row 2j + s of a head in the file is HF row s * head_dim/2 + j of that head (llama.cpp's permute).
    folder, path = exported["smollm2"]
    hf = load_hf(folder)
    reader = gguf.GGUFReader(path)
    q = torch.from_numpy(next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight").data.copy())
    w = hf.state_dict()["layers.0.attn.q_proj.weight"]
    head_dim = w.shape[0] // 4
    for h in range(4):
        for j in range(head_dim // 2):
            for s in range(2):
                assert torch.equal(q[h * head_dim + 2 * j + s], w[h * head_dim + s * head_dim // 2 + j])


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_experts_are_stacked_as_llama_cpp_expects(family: str, exported: dict, tmp_path: Path) -> None:
    # ffn_{gate,up}_exps[e] is expert e's (ffn, hidden) matrix, ffn_down_exps[e] its (hidden, ffn) one,
    # ffn_gate_inp the router; llama.cpp reads them so (test_gguf_export_llama_cpp.py), and a Q8_0
    # file holds each stacked tensor's Q8_0 blocks, the router in F32.
    folder, path = exported[family]
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    experts = hf["model.layers.1.mlp.experts.gate_up_proj"]  # transformers 5 fuses them in memory: (E, 2I, H)
    gate, up = experts.chunk(2, dim=1)
    want = {
        "blk.1.ffn_gate_exps.weight": gate,
        "blk.1.ffn_up_exps.weight": up,
        "blk.1.ffn_down_exps.weight": hf["model.layers.1.mlp.experts.down_proj"],
        "blk.1.ffn_gate_inp.weight": hf["model.layers.1.mlp.gate.weight"],
    }
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for name, value in want.items():
        assert torch.equal(torch.from_numpy(tensors[name].data.copy()), value), name
    q8 = {
        t.name: t
        for t in gguf.GGUFReader(export_gguf(folder, tmp_path / "q8.gguf", file_type="q8_0").path).tensors
    }
    assert q8["blk.1.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    for name in list(want)[:3]:
        reference = gguf.quants.quantize(want[name].numpy(), gguf.GGMLQuantizationType.Q8_0)
        assert np.array_equal(np.asarray(q8[name].data), reference), name
