"""`ftune convert`: an existing output is replaced only with --force, the input itself never (issue 26)."""

import hashlib
from pathlib import Path

import pytest

from ftune.cli.convert import main as convert_main

TT_FULL = """
output_dir: /tmp/torchtune/llama3_2_1B/full
model:
  _component_: torchtune.models.llama3_2.llama3_2_1b
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Llama-3.2-1B-Instruct/original/tokenizer.model
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Llama-3.2-1B-Instruct/
  checkpoint_files: [model.safetensors]
  output_dir: ${output_dir}
  model_type: LLAMA3_2
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
batch_size: 4
optimizer:
  _component_: torch.optim.AdamW
  lr: 2e-5
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
epochs: 1
device: cpu
dtype: fp32
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "1B_full_single_device.yaml"
    path.write_text(TT_FULL)
    return path


def test_torchtune_config_existing_output_needs_force(src: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "mine.yaml"
    out.write_text("# my edits\n")
    assert convert_main(["torchtune-config", str(src), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"-o/--output '{out}' already exists; ftune does not overwrite it. Pass --force" in err
    assert "Traceback" not in err
    assert out.read_text() == "# my edits\n"
    assert convert_main(["torchtune-config", str(src), "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("# Converted from the torchtune config 1B_full_single_device.yaml")


def test_torchtune_config_never_onto_its_input(src: Path, capsys) -> None:
    before = _sha(src)
    for extra in ([], ["--force"]):
        assert convert_main(["torchtune-config", str(src), "-o", str(src), *extra]) == 1
        err = capsys.readouterr().err
        assert f"-o/--output '{src}' is the input config" in err
        assert "refuses even with --force" in err and "1B_full_single_device_ftune.yaml" in err
    assert _sha(src) == before


def test_torchtune_config_output_folder_is_refused(src: Path, tmp_path: Path, capsys) -> None:
    assert convert_main(["torchtune-config", str(src), "-o", str(tmp_path), "--force"]) == 1
    assert f"-o/--output '{tmp_path}' is a folder; a file is expected" in capsys.readouterr().err


def test_gguf_existing_model_needs_force_and_input_is_never_replaced(tmp_path: Path, capsys) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not read before the output check")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"my weights")
    assert convert_main(["gguf", str(gguf), "--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert (
        f"--output-dir '{out}' already holds model.safetensors, config.json; ftune does not overwrite" in err
    )
    assert "Pass --force" in err
    assert (out / "model.safetensors").read_bytes() == b"my weights"
    # --force passes the check (and then reads the file, which is not GGUF)
    assert convert_main(["gguf", str(gguf), "--output-dir", str(out), "--force"]) == 1
    assert "cannot read this file as GGUF" in capsys.readouterr().err
    # an input named like an output file is never replaced, even with --force
    named = out / "model.safetensors"
    assert convert_main(["gguf", str(named), "--output-dir", str(out), "--force"]) == 1
    assert "is the input GGUF file" in capsys.readouterr().err
    assert named.read_bytes() == b"my weights"
