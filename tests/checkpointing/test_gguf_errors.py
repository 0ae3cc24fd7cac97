"""GGUF import errors: each bad file is refused with a message naming what is wrong (tiny files from tiny_gguf.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from tiny_gguf import _tiny_hf_model as _tiny_hf_model
from tiny_gguf import write_tiny_gguf

from ftune.checkpointing.gguf.reader import convert_gguf

Q = gguf.GGMLQuantizationType


def test_error_not_llama(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "q.gguf", arch="qwen2")
    with pytest.raises(
        ValueError, match=r"q\.gguf: general\.architecture is 'qwen2'; convert_gguf reads only 'llama'"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_missing_metadata(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf", drop=("embedding_length",))
    with pytest.raises(ValueError, match=r"m\.gguf: GGUF metadata key 'llama\.embedding_length' is missing"):
        convert_gguf(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists(), "nothing is written before the file is known to be convertible"


def test_error_unsupported_tensor_type(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "i.gguf", extra={"blk.0.attn_q.bias": np.zeros(64, dtype=np.int32)})
    with pytest.raises(
        ValueError,
        match=r"i\.gguf: tensor 'blk\.0\.attn_q\.bias' is stored as I32, which .* Supported types: F32, F16",
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_unknown_tensor(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "u.gguf", extra={"blk.0.attn_q.bias": np.zeros(64, dtype=np.float32)})
    with pytest.raises(
        ValueError, match=r"u\.gguf: tensor 'blk\.0\.attn_q\.bias' is not part of a llama model"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_rope_freqs_that_are_not_llama3_scaling(tmp_path: Path) -> None:
    divisors = np.random.default_rng(0).uniform(1, 8, 8).astype(np.float32)
    path = write_tiny_gguf(tmp_path / "r.gguf", extra={"rope_freqs.weight": divisors})
    with pytest.raises(
        ValueError, match=r"r\.gguf: tensor 'rope_freqs\.weight' holds RoPE divisors that are not Llama-3"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_unknown_vocabulary_and_pre_tokenizer(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "s.gguf", meta={"tokenizer.ggml.model": "t5"})
    with pytest.raises(
        ValueError,
        match=r"s\.gguf: tokenizer\.ggml\.model is 't5'; convert_gguf rebuilds 'gpt2' \(byte-level",
    ):
        convert_gguf(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    path = write_tiny_gguf(tmp_path / "p.gguf", meta={"tokenizer.ggml.pre": "tekken"})
    with pytest.raises(
        ValueError, match=r"p\.gguf: tokenizer\.ggml\.pre is 'tekken', a pre-tokenizer .* known: codeshell"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors.gguf"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(
        ValueError, match=r"model\.safetensors\.gguf: cannot read this file as GGUF .*b'GGUF'"
    ):
        convert_gguf(path, tmp_path / "hf")
    with pytest.raises(FileNotFoundError, match=r"GGUF file '.*nope\.gguf' does not exist"):
        convert_gguf(tmp_path / "nope.gguf", tmp_path / "hf")
