"""A refusal never waits for the dtype-speed measurement (issue 37, item 6).

A run with a set dtype measures fp32 against bf16 only when it is about to train (the Reporter asks
for the advice, ftune.training.run.dtype_advice.say_pending_advice): a missing checkpoint folder, an
empty data file or an output path that is a file is refused first. The measurement is replaced here
by one that fails the test if it is reached.
"""

import re

import pytest

from ftune.training.run import dtype_advice as da


@pytest.fixture
def never_measure(monkeypatch, tmp_path):
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path / "home"))  # no cache: a measurement would run

    def measure(*args, **kwargs):
        raise AssertionError("the dtype-speed measurement ran before the refusal")

    monkeypatch.setattr(da, "measure_speed", measure)


def run(run_recipe, *overrides):
    return run_recipe("full_finetune_single_device", "smollm2/135M_full", "max_steps=1", *overrides)


def test_a_missing_checkpoint_folder_is_refused_before_measuring(never_measure, run_recipe, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(
        FileNotFoundError, match=f"checkpoint folder '{re.escape(str(missing))}' does not exist"
    ):
        run(run_recipe, f"checkpointer.checkpoint_dir={missing}")


def test_an_output_path_that_is_a_file_is_refused_before_measuring(never_measure, run_recipe, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("notes\n")
    with pytest.raises(OSError, match=re.escape(str(a_file))):
        run(run_recipe, f"output_dir={a_file}")
    assert a_file.read_text() == "notes\n"


def test_an_empty_data_file_is_refused_before_measuring(never_measure, run_recipe, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    dataset = ["dataset._component_=ftune.datasets.instruct_dataset", "dataset.source=json"]
    dataset += [f"dataset.data_files={empty}", "~dataset.data_dir", "~dataset.n_train", "~dataset.n_heldout"]
    with pytest.raises(ValueError, match=re.escape(str(empty))):
        run(run_recipe, *dataset, "~dataset_val")


def test_a_run_that_trains_says_the_measured_advice_before_its_first_step(
    run_recipe, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path / "home"))
    measured = []
    real = da.measure_speed
    monkeypatch.setattr(da, "measure_speed", lambda *a, **k: measured.append(1) or real(*a, **k))
    logs, _ = run(run_recipe)
    err = capsys.readouterr().err
    assert measured == [1] and "ftune: measured here" in err and logs
    assert err.index("ftune: running on") < err.index("ftune: measured here")
