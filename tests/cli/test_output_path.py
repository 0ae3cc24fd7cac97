"""`ftune cp` and `ftune export` share one rule for where a file is written (ftune.config.output_path).

Issue 37: trailing slashes, missing parents, symlinks (dangling too), existing outputs, a file in the
path, a folder in the way and cp onto its own source: each refused with one message, no traceback,
nothing written, or written as asked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ftune import registry
from ftune.cli.main import main
from ftune.config.loading import load_config
from ftune.config.output_path import OutputPathError, logs_on_inputs, output_file

RECIPE = registry.RECIPES["dist_check"].file
TEXT = RECIPE.read_text()


def _ftune(capfd, *argv: str) -> tuple[int, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    return rc, err


def _export(capfd, tmp_path: Path, output: str, *extra: str) -> tuple[int, str]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return _ftune(capfd, "export", "gguf", str(model), output, "--type", "f16", *extra)


def test_cp_trailing_slash_names_a_folder(tmp_path: Path, capfd) -> None:
    rc, err = _ftune(capfd, "cp", "dist_check", f"{tmp_path}/newdir/")
    assert rc == 1 and not (tmp_path / "newdir").exists()  # not a file called newdir
    assert (
        f"dest '{tmp_path}/newdir/' ends in '/', so it names a folder, and the folder {tmp_path}/newdir does not "
        f"exist; ftune does not create folders unasked (nor write a file called 'newdir'). Create it with "
        f"`mkdir -p {tmp_path}/newdir` or pass --make-parents, or drop the '/' to write the file"
    ) in err
    assert _ftune(capfd, "cp", "dist_check", f"{tmp_path}/newdir/", "--make-parents")[0] == 0
    assert (tmp_path / "newdir" / RECIPE.name).read_text() == TEXT


def test_cp_onto_a_symlink_is_refused_even_dangling_and_with_force(tmp_path: Path, capfd) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / "live.py").symlink_to(victim)
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    for name, state in (("live.py", ""), ("dangling.py", ", which does not exist \\(a dangling link\\)")):
        for force in ((), ("--force",)):
            rc, err = _ftune(capfd, "cp", "dist_check", str(tmp_path / name), *force)
            assert rc == 1
            assert re.search(
                rf"dest '.*{name}' is a symbolic link to '.*'{state}; ftune never writes through a link, even with "
                rf"--force .*Remove the link \(`rm .*{name}`\) or give another path\.",
                err,
            ), err
    assert victim.read_text() == "keep" and not (tmp_path / "nowhere.py").exists()
    assert (tmp_path / "dangling.py").is_symlink()


def test_cp_force_replaces_a_file_not_what_a_hard_link_shares(tmp_path: Path, capfd) -> None:
    dest = tmp_path / "mine.py"
    dest.write_text("my edits")
    os.link(dest, tmp_path / "hard.py")
    rc, err = _ftune(capfd, "cp", "dist_check", str(dest))
    assert rc == 1 and f"dest '{dest}' already exists; ftune does not overwrite it. Pass --force" in err
    assert _ftune(capfd, "cp", "dist_check", str(dest), "--force")[0] == 0
    assert (
        dest.read_text() == TEXT and (tmp_path / "hard.py").read_text() == "my edits"
    )  # replaced, not written into
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.py", "mine.py"]  # no temp file left


def test_cp_onto_its_own_source_a_folder_or_through_a_file(tmp_path: Path, capfd) -> None:
    rc, err = _ftune(capfd, "cp", "dist_check", str(RECIPE), "--force")
    assert rc == 1 and f"dest '{RECIPE}' is the shipped {RECIPE.name} itself" in err
    assert "refuses even with --force" in err and RECIPE.read_text() == TEXT
    (tmp_path / RECIPE.name).mkdir()  # cp into tmp_path would land on this folder
    rc, err = _ftune(capfd, "cp", "dist_check", str(tmp_path), "--force")
    assert (
        rc == 1 and f"dest '{tmp_path / RECIPE.name}' is a folder; ftune writes a file there only if" in err
    )
    (tmp_path / "notes.txt").write_text("mine")
    rc, err = _ftune(capfd, "cp", "dist_check", str(tmp_path / "notes.txt" / "x.py"), "--make-parents")
    assert (
        rc == 1
        and f"{tmp_path / 'notes.txt'} is a file, not a folder, so nothing can be written below it" in err
    )
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_export_refuses_a_missing_parent_as_cp_does(tmp_path: Path, capfd) -> None:
    out = tmp_path / "a" / "b" / "m.gguf"
    rc, err = _export(capfd, tmp_path, str(out))
    assert rc == 1 and not (tmp_path / "a").exists()
    assert (
        f"output '{out}': the folder {out.parent} does not exist; ftune does not create folders unasked. Create it "
        f"with `mkdir -p {out.parent}`, or pass --make-parents."
    ) in err
    rc, err = _ftune(capfd, "cp", "dist_check", str(out))
    assert f"dest '{out}': the folder {out.parent} does not exist" in err


def test_export_output_links_folders_and_files_in_the_path(tmp_path: Path, capfd) -> None:
    (tmp_path / "dangling.gguf").symlink_to(tmp_path / "elsewhere.gguf")
    rc, err = _export(capfd, tmp_path, str(tmp_path / "dangling.gguf"), "--force")
    assert rc == 1 and "is a symbolic link to" in err and "a dangling link" in err
    assert not (tmp_path / "elsewhere.gguf").exists()
    rc, err = _export(capfd, tmp_path, f"{tmp_path}/out.gguf/")
    assert rc == 1 and f"output '{tmp_path}/out.gguf/' is a folder; a file is expected" in err
    (tmp_path / "taken").write_text("mine")
    rc, err = _export(capfd, tmp_path, str(tmp_path / "taken" / "m.gguf"), "--make-parents")
    assert rc == 1 and f"{tmp_path / 'taken'} is a file, not a folder" in err


def test_output_file_returns_the_file_to_write(tmp_path: Path) -> None:
    assert output_file(str(tmp_path), option="dest", force=False, into="x.py") == tmp_path / "x.py"
    assert output_file(f"{tmp_path}/new/", option="dest", force=False, make_parents=True, into="x.py") == (
        tmp_path / "new" / "x.py"
    )
    assert not (tmp_path / "new").exists()  # created by the writer, after every check
    with pytest.raises(OutputPathError, match=r"dest '.*' is a folder; a file is expected"):
        output_file(str(tmp_path), option="dest", force=True)


def test_metric_logs_never_land_in_a_model_folder(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "model", tmp_path / "out"
    base = ["checkpointer.checkpoint_dir=" + str(ckpt), f"output_dir={out}"]
    assert logs_on_inputs(load_config("smollm2/135M_lora", base)) == []  # ${output_dir}/logs
    cfg = load_config("smollm2/135M_lora", [*base, f"metric_logger.log_dir={ckpt}"])
    assert logs_on_inputs(cfg) == [
        f"metric_logger.log_dir '{ckpt}' (set on the command line) is checkpointer.checkpoint_dir '{ckpt}': ftune "
        "never writes where it reads a model, which would mix its logs into the input's files. Accepted: a folder "
        f"outside {ckpt.resolve()}. Set metric_logger.log_dir to another folder, e.g. "
        "metric_logger.log_dir=${output_dir}/logs."
    ]
    # continuing from a step folder of output_dir: logs beside it are fine, logs inside it are not
    step = out / "step_50"
    cfg = load_config("smollm2/135M_lora", [f"checkpointer.checkpoint_dir={step}", f"output_dir={out}"])
    assert logs_on_inputs(cfg) == []
    cfg = load_config(
        "smollm2/135M_lora",
        [f"checkpointer.checkpoint_dir={step}", f"output_dir={out}", f"metric_logger.log_dir={step}/logs"],
    )
    assert "is inside checkpointer.checkpoint_dir" in logs_on_inputs(cfg)[0]
