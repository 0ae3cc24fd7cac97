"""tokenizer.max_seq_len above the model's positions is refused before torch, naming the positions and the key."""

from __future__ import annotations

import json

import pytest

from ftune.config.positions import max_seq_len_problems


def _ckpt(tmp_path, positions=512):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "max_position_embeddings": positions})
    )
    return {"checkpoint_dir": str(tmp_path)}


def test_a_length_beyond_the_checkpoints_positions_is_refused(tmp_path):
    data = {"tokenizer": {"max_seq_len": 10**12}, "checkpointer": _ckpt(tmp_path)}
    assert max_seq_len_problems(data) == [
        f"tokenizer.max_seq_len: 1000000000000 tokens is more than the model's 512 positions (max_position_embeddings "
        f"in {tmp_path / 'config.json'}); a longer sample would reach positions the model does not have. Set "
        "tokenizer.max_seq_len=512 or less."
    ]


def test_the_models_own_max_seq_len_wins_over_config_json(tmp_path):
    data = {
        "tokenizer": {"max_seq_len": 1024},
        "model": {"max_seq_len": 256},
        "checkpointer": _ckpt(tmp_path, 4096),
    }
    (problem,) = max_seq_len_problems(data)
    assert "the model's 256 positions (model.max_seq_len)" in problem and "max_seq_len=256 or less" in problem


@pytest.mark.parametrize("length", [512, 64, None, 0, "long", 1e12])
def test_lengths_within_the_positions_or_reported_by_the_range_check_pass(tmp_path, length):
    data = {"tokenizer": {"max_seq_len": length}, "checkpointer": _ckpt(tmp_path)}
    assert max_seq_len_problems(data) == []


def test_without_a_config_json_or_a_model_length_nothing_is_claimed(tmp_path):
    data = {"tokenizer": {"max_seq_len": 10**9}, "checkpointer": {"checkpoint_dir": str(tmp_path / "none")}}
    assert max_seq_len_problems(data) == []
