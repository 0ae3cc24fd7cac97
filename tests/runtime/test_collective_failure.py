"""A collective that times out or loses a rank is reported in one line naming the rank (and the key to raise)."""

from ftune.config.run import format_error, is_user_error
from ftune.runtime import distributed

GLOO_TIMEOUT = (
    "[/src/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete"
)
GLOO_PEER = (
    "[/src/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:60649. This is typically ..."
)


def test_a_timeout_names_the_rank_and_the_key(monkeypatch):
    monkeypatch.setattr(distributed, "_TIMEOUT_S", 3.0)
    monkeypatch.setenv("RANK", "1")
    err = distributed.explain_collective_failure(RuntimeError(GLOO_TIMEOUT))
    assert is_user_error(err)
    text = format_error(err)
    assert "rank 1 waited more than dist_timeout_s=3 s" in text
    assert "(Timed out waiting 3000ms for recv operation to complete)" in text  # gloo's source prefix dropped
    assert "dist_timeout_s=6" in text


def test_a_lost_rank_points_at_the_first_error(monkeypatch):
    monkeypatch.setattr(distributed, "_TIMEOUT_S", 1800.0)
    monkeypatch.setenv("RANK", "0")
    text = format_error(distributed.explain_collective_failure(RuntimeError(GLOO_PEER)))
    assert "rank 0 lost another rank in a collective (Connection closed by peer [127.0.0.1]:60649)" in text
    assert "printed above" in text


def test_other_errors_and_runs_without_a_process_group_are_left_alone(monkeypatch):
    monkeypatch.setattr(distributed, "_TIMEOUT_S", None)
    assert distributed.explain_collective_failure(RuntimeError(GLOO_TIMEOUT)) is None
    monkeypatch.setattr(distributed, "_TIMEOUT_S", 3.0)
    assert distributed.explain_collective_failure(RuntimeError("shape mismatch")) is None
    assert distributed.explain_collective_failure(ValueError("timeout must be > 0")) is None
