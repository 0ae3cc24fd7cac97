"""`ftune export gguf`: the command, its output guards and its error messages (no traceback)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gguf
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpointing"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_gguf_export import tiny_folder  # noqa: E402

from ftune.cli.main import main as ftune_main  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_folder(tmp_path_factory.mktemp("export") / "SmolLM2-tiny", "smollm2")


def test_export_writes_the_file_and_a_modelfile(model: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "tiny.Q8_0.gguf"
    assert ftune_main(["export", "gguf", str(model), str(out), "--type", "Q8_0"]) == 0
    printed = capsys.readouterr().out
    assert (
        f"Wrote {out} (smollm2 as llama.cpp 'llama', q8_0" in printed and "tensors: 5 F32, 15 Q8_0" in printed
    )
    assert f"ollama create my-model -f {tmp_path / 'tiny.Q8_0.Modelfile'}" in printed
    reader = gguf.GGUFReader(out)
    assert reader.fields["general.name"].contents() == "SmolLM2-tiny"
    assert (tmp_path / "tiny.Q8_0.Modelfile").read_text().splitlines()[2:] == [
        "FROM ./tiny.Q8_0.gguf",
        'PARAMETER stop "<|im_end|>"',
    ]


def test_existing_output_needs_force(model: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.gguf"
    out.write_bytes(b"mine")
    assert ftune_main(["export", "gguf", str(model), str(out), "--type", "f16"]) == 1
    err = capsys.readouterr().err
    assert f"output '{out}' already exists; ftune does not overwrite it. Pass --force" in err
    assert "Traceback" not in err and out.read_bytes() == b"mine"
    assert ftune_main(["export", "gguf", str(model), str(out), "--type", "f16", "--force"]) == 0
    assert out.read_bytes()[:4] == b"GGUF"


def test_existing_modelfile_needs_force_too(model: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "m.Modelfile").write_text("FROM my-edits\n")
    assert ftune_main(["export", "gguf", str(model), str(tmp_path / "m.gguf"), "--type", "f16"]) == 1
    assert f"output '{tmp_path / 'm.Modelfile'}' already exists" in capsys.readouterr().err
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize("where", ["model", "adapter"])
def test_output_inside_an_input_folder_is_refused_even_with_force(
    model: Path, tmp_path: Path, where: str, capsys
) -> None:
    adapter = tmp_path / "step_3"
    adapter.mkdir()
    inside = (model if where == "model" else adapter) / "out.gguf"
    argv = ["export", "gguf", str(model), str(inside), "--type", "f16", "--adapter", str(adapter), "--force"]
    assert ftune_main(argv) == 1
    err = capsys.readouterr().err
    name = "the model folder" if where == "model" else "the --adapter folder"
    assert f"output '{inside}' is inside {name}" in err and "Write the .gguf file outside" in err
    assert not inside.exists()


def test_unknown_type_lists_the_accepted_ones(model: Path, tmp_path: Path, capsys) -> None:
    assert ftune_main(["export", "gguf", str(model), str(tmp_path / "m.gguf"), "--type", "iq4_xs"]) == 1
    err = capsys.readouterr().err
    accepted = "f32, f16, bf16, q8_0, q6_k, q5_k_m, q5_k_s, q4_k_m, q4_k_s, q4_0"
    assert f"--type 'iq4_xs' is not a GGUF type ftune writes. Accepted: {accepted}" in err
    assert "llama-quantize" in err and "Traceback" not in err


def test_output_must_be_a_gguf_file(model: Path, tmp_path: Path, capsys) -> None:
    assert ftune_main(["export", "gguf", str(model), str(tmp_path / "model.bin"), "--type", "f16"]) == 1
    assert "does not end in .gguf" in capsys.readouterr().err


def test_adapter_only_step_folder_as_model_says_to_use_adapter(model: Path, tmp_path: Path, capsys) -> None:
    step = tmp_path / "step_3"
    step.mkdir()
    (step / "adapter_model.safetensors").write_bytes(b"")
    assert ftune_main(["export", "gguf", str(step), str(tmp_path / "m.gguf"), "--type", "f16"]) == 1
    err = capsys.readouterr().err
    assert "holds a LoRA/DoRA adapter, not a whole model. Pass the base model folder" in err
    assert f"--adapter {step}" in err


def test_missing_model_folder(tmp_path: Path, capsys) -> None:
    assert (
        ftune_main(["export", "gguf", str(tmp_path / "nope"), str(tmp_path / "m.gguf"), "--type", "f16"]) == 1
    )
    assert "does not exist or is not a folder" in capsys.readouterr().err


def test_gemma3_layout_llama_cpp_cannot_run_is_refused(tmp_path: Path, capsys) -> None:
    folder = tiny_folder(tmp_path / "g", "gemma3")
    config = (
        (folder / "config.json")
        .read_text()
        .replace('"query_pre_attn_scalar": 16', '"query_pre_attn_scalar": 24')
    )
    (folder / "config.json").write_text(config)
    assert ftune_main(["export", "gguf", str(folder), str(tmp_path / "g.gguf"), "--type", "f16"]) == 1
    err = capsys.readouterr().err
    assert "this Gemma 3 model cannot run in llama.cpp as ftune runs it: query_pre_attn_scalar is 24" in err


def test_gemma2_without_soft_caps_is_refused(tmp_path: Path, capsys) -> None:
    folder = tiny_folder(tmp_path / "g", "gemma2")
    config = json.loads((folder / "config.json").read_text())
    config.update(attn_logit_softcapping=None, query_pre_attn_scalar=24)
    (folder / "config.json").write_text(json.dumps(config))
    assert ftune_main(["export", "gguf", str(folder), str(tmp_path / "g.gguf"), "--type", "f16"]) == 1
    err = capsys.readouterr().err
    assert "this Gemma 2 model cannot run in llama.cpp as ftune runs it: query_pre_attn_scalar is 24" in err
    assert "attn_logit_softcapping is null (llama.cpp always caps Gemma 2)" in err and "Traceback" not in err
    assert not (tmp_path / "g.gguf").exists()


def test_qwen3_moe_routing_llama_cpp_does_not_run_is_refused(tmp_path: Path, capsys) -> None:
    folder = tiny_folder(tmp_path / "q", "qwen3_moe")
    config = json.loads((folder / "config.json").read_text())
    config.update(norm_topk_prob=False, mlp_only_layers=[1])
    (folder / "config.json").write_text(json.dumps(config))
    assert ftune_main(["export", "gguf", str(folder), str(tmp_path / "q.gguf"), "--type", "q8_0"]) == 1
    err = capsys.readouterr().err
    assert "this qwen3_moe model cannot run in llama.cpp as ftune runs it: norm_topk_prob is false" in err
    assert (
        "mlp_only_layers=[1], decoder_sparse_step=1 (llama.cpp makes every layer a mixture of experts)" in err
    )
    assert not (tmp_path / "q.gguf").exists()
