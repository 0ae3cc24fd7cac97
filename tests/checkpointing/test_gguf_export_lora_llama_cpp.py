"""A LoRA adapter GGUF in llama.cpp (marker `llama_cpp`): the base file plus the adapter (`lora_path`)
gives the logits of the merged export.

llama.cpp computes `W x + alpha / rank * B (A x)` where the merged file holds `(W + alpha / rank * B A) x`:
the same product in another order, so the logits differ by float32 rounding only. Measured on these
tiny models (F32 files, F32 KV cache, one thread; the adapter moves the logits by 2.8 to 4.0): max
|difference| 1.5e-6 (llama2), 1.8e-6 (smollm2), 1.4e-6 (qwen2_5), 1.3e-6 (qwen3_moe, adapters on
attention: llama.cpp's format has no stacked-expert adapters); the bound is 1e-5, the tolerance the
F32 export itself meets against ftune in test_gguf_export_llama_cpp.py. Gemma 2: 2.4e-4 (logits
capped at 3), bound 1e-3; llama.cpp's Gemma files already differ from ftune by 3e-3 there, where
rounding-level differences pass through GELU (ggml's, not traced further) and the soft-caps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_gguf_export import TEXTS
from test_gguf_export_lora import lora_step
from tokenizers import Tokenizer

from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.export_lora import export_lora_gguf

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python==0.3.36 (builds llama.cpp)")
pytestmark = [pytest.mark.llama_cpp, pytest.mark.usefixtures("one_thread")]
F32 = 0  # GGML_TYPE_F32, for the KV cache


def _logits(path: Path, ids: list[int], lora: Path | None = None) -> np.ndarray:
    options = {"lora_path": str(lora)} if lora else {}
    llm = llama_cpp.Llama(
        str(path), n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=1, type_k=F32, type_v=F32,
        **options,
    )  # fmt: skip
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)])


@pytest.mark.parametrize("family", ["llama2", "smollm2", "qwen2_5", "gemma2", "qwen3_moe"])
def test_base_with_the_adapter_file_gives_the_merged_logits(family: str, tmp_path: Path) -> None:
    moe = family == "qwen3_moe"  # its experts take no unmerged adapter: attention only
    folder, step = lora_step(
        tmp_path, family, **({"targets": ["q_proj", "k_proj", "v_proj", "o_proj"]} if moe else {})
    )
    base = export_gguf(folder, tmp_path / "base.gguf", file_type="f32").path
    merged = export_gguf(folder, tmp_path / "merged.gguf", file_type="f32", adapter_dir=step).path
    adapter = export_lora_gguf(folder, step, tmp_path / "a.gguf", file_type="f32").path
    ids = (
        Tokenizer.from_file(str(folder / "tokenizer.json"))
        .encode(TEXTS[0], add_special_tokens=False)
        .ids[:20]
    )
    plain, want, got = _logits(base, ids), _logits(merged, ids), _logits(base, ids, lora=adapter)
    difference = np.abs(got - want).max()
    print(
        f"\n{family}: max |base + adapter - merged| = {difference:.1e} (adapter effect {np.abs(want - plain).max():.2f})"
    )
    assert np.abs(want - plain).max() > 0.05  # the adapter matters
    assert difference <= (1e-3 if family == "gemma2" else 1e-5)
