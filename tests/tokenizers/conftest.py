"""Fixtures: tiny tokenizer files built once per session in temp folders."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from tiny_tokenizer_files import chatml_config, tiny_ranks, train_hf_tokenizer, train_sp


@pytest.fixture(scope="session")
def sp_model(tmp_path_factory) -> Path:
    """A 160-piece BPE sentencepiece model with the Llama 2 ids: unk 0, bos 1, eos 2, no pad."""
    return train_sp(tmp_path_factory.mktemp("sp") / "tokenizer", vocab_size=160)


@pytest.fixture(scope="session")
def ranks_file(tmp_path_factory) -> Path:
    """A tiktoken ranks file: the 256 bytes and a few merges."""
    path = tmp_path_factory.mktemp("tiktoken") / "tokenizer.model"
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for tok, rank in tiny_ranks().items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory) -> Path:
    """A ChatML tokenizer folder: tokenizer.json + tokenizer_config.json with a chat template."""
    return train_hf_tokenizer(tmp_path_factory.mktemp("hf") / "chatml", chatml_config())
