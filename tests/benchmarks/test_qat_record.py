"""The pure parts of benchmarks/qat_record.py and the sweep's labels: a recorded run's command and name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import qat_record  # noqa: E402
from figures import pages as figures_pages  # noqa: E402

SETTINGS = {"seeds": [0], "methods": ["full", "qat"], "steps": 20, "lr": 2e-4, "lora_lr": 1e-3, "warmup": 2,
            "fake_quant_after": None}  # fmt: skip


def test_command_names_the_group_size_only_when_it_is_not_the_default():
    base = "python benchmarks/qat_experiment.py --seeds 0 --methods full qat --steps 20 --lr 2e-4 --warmup 2"
    assert qat_record.command(SETTINGS) == base  # a run recorded before --group-size existed
    assert qat_record.command(SETTINGS | {"group_size": 32}) == base
    assert qat_record.command(SETTINGS | {"group_size": 64}) == base + " --group-size 64"
    assert qat_record.command(SETTINGS | {"group_size": None}) == base + " --group-size channel"
    learned = SETTINGS | {"group_size": 192, "learn_ranges": True}
    assert qat_record.command(learned) == base + " --group-size 192 --learn-ranges"
    label = figures_pages._sweep_label(learned, "qat")
    assert label == "QAT, lr 2e-4 (full FT at lr 2e-4), 20 steps, group size 192, learned ranges"


def test_sweep_label_names_a_non_default_group_size():
    assert figures_pages._sweep_label(SETTINGS, "qat") == "QAT, lr 2e-4 (full FT at lr 2e-4), 20 steps"
    label = figures_pages._sweep_label(SETTINGS | {"group_size": 64}, "qat")
    assert label == "QAT, lr 2e-4 (full FT at lr 2e-4), 20 steps, group size 64"
    label = figures_pages._sweep_label(SETTINGS | {"group_size": None}, "qat")
    assert label == "QAT, lr 2e-4 (full FT at lr 2e-4), 20 steps, one scale per output channel"


def test_another_seed_of_the_same_settings_is_kept_beside_the_first():
    def entry(seed: int, ppl: float) -> dict:
        return {"settings": SETTINGS | {"group_size": 192}, "seeds": {f"seed{seed}": {"ppl": ppl}}}

    sweep = qat_record.merged([entry(0, 1.0)], entry(1, 2.0))
    assert [e["seeds"] for e in sweep] == [{"seed0": {"ppl": 1.0}}, {"seed1": {"ppl": 2.0}}]
    sweep = qat_record.merged(sweep, entry(1, 3.0))  # a rerun of seed 1 replaces it
    assert [e["seeds"] for e in sweep] == [{"seed0": {"ppl": 1.0}}, {"seed1": {"ppl": 3.0}}]
    other = {"settings": SETTINGS | {"group_size": 32}, "seeds": {"seed1": {"ppl": 4.0}}}
    assert len(qat_record.merged(sweep, other)) == 3  # other settings, same seed
    # An entry recorded before --group-size existed (no group_size: 32) is replaced by a rerun.
    old = {"settings": SETTINGS, "seeds": {"seed0": {"ppl": 5.0}}}
    rerun = {"settings": SETTINGS | {"group_size": 32}, "seeds": {"seed0": {"ppl": 6.0}}}
    assert qat_record.merged([old], rerun) == [rerun]


def test_the_recorded_group_size_reads_back_as_the_experiment_argument():
    import argparse

    import qat_experiment

    for size in (32, 192, None):
        assert qat_experiment.group_size_arg(qat_record.group_size_text({"group_size": size})) == size
    for bad in ("0", "-4", "per-channel"):
        try:
            qat_experiment.group_size_arg(bad)
        except argparse.ArgumentTypeError as err:
            assert repr(bad) in str(err)
        else:
            raise AssertionError(f"{bad!r} was accepted")


def test_a_qat_only_run_borrows_only_a_full_fine_tune_of_its_own_group_size(tmp_path):
    import pytest

    settings = {**SETTINGS, "batch_size": 2, "seq_len": 256, "methods": ["qat"], "group_size": 192}
    full = {"settings": {**settings, "methods": ["full", "qat"], "group_size": 32}, "runs": {}}
    with pytest.raises(SystemExit, match="group size 192"):
        qat_record._borrow_full({"settings": settings, "runs": {}}, full, tmp_path / "results.json")
