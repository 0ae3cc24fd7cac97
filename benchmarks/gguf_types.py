"""The GGUF file types on a real model: size, export time, agreement with llama.cpp's quantizer, quality, speed.

    python benchmarks/gguf_types.py                          # SmolLM2-135M-Instruct in $FTUNE_HOME/models
    python benchmarks/gguf_types.py --model DIR --types q8_0 q4_k_m

For each `--type`, `ftune export gguf` of the model (in this process, timed), then llama.cpp
(llama-cpp-python 0.3.36):

1. agreement: llama.cpp's own quantizer (`llama_model_quantize`, no importance matrix, or with
   `--imatrix FILE` both sides quantize with that importance matrix) makes the same type of ftune's F32
   export; recorded is how many tensors hold the same GGML type and the same bytes;
2. quality: the file runs over the first tokens of `--text` (default docs/glossary.md), one window;
   recorded are the perplexity and how often its next-token argmax equals the F32 file's;
3. speed: prompt processing of that window and 64 greedy tokens after a short prompt, tokens/s,
   on `--threads` threads.

Writes benchmarks/results/gguf_types.json (`--json` elsewhere); benchmarks/figures/report.py renders it into
docs/checkpoints.md.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
from gguf_quickstart import without_extra_buffers
from results_file import ROOT, load1, write_results

from ftune.checkpointing.gguf.export import export_gguf

HOME = Path(os.environ.get("FTUNE_HOME", Path.home() / ".cache" / "ftune")).expanduser()
MODEL = HOME / "models" / "SmolLM2-135M-Instruct"
TYPES = ["f16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q4_k_m", "q4_k_s", "q4_0"]
LLAMA_FTYPE = {name: int(getattr(gguf.LlamaFileType, f"MOSTLY_{name.upper()}")) for name in TYPES}


def llama_quantize(source: Path, target: Path, name: str, imatrix: Path | None = None) -> None:
    """llama.cpp's quantizer, given the importance weights llama-quantize --imatrix would pass it."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPE[name]
    params.nthread = 1
    if imatrix is not None:
        from ftune.checkpointing.gguf.imatrix import read_imatrix

        matrix = read_imatrix(imatrix)
        keep = {key: np.ascontiguousarray(matrix.weights(key), dtype=np.float32) for key in matrix.sums}
        entries = (llama_cpp.llama_model_imatrix_data * (len(keep) + 1))()  # ends with a null name
        for entry, (key, values) in zip(entries, keep.items()):
            entry.name, entry.size = key.encode(), values.size
            entry.data = values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        params.imatrix = ctypes.cast(entries, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({source}, {name}) returned {rc}")


def agreement(ours: Path, theirs: Path) -> dict:
    """Tensors of the same type and bytes in both files."""
    a = {t.name: t for t in gguf.GGUFReader(ours).tensors}
    b = {t.name: t for t in gguf.GGUFReader(theirs).tensors}
    same_type = sum(a[k].tensor_type == b[k].tensor_type for k in a if k in b)
    same_bytes = sum(np.array_equal(np.asarray(a[k].data), np.asarray(b[k].data)) for k in a if k in b)
    return {
        "tensors": len(a),
        "same_names": set(a) == set(b),
        "same_type": same_type,
        "same_bytes": same_bytes,
    }


def run(path: Path, ids: list[int], threads: int) -> tuple[np.ndarray, dict]:
    """Logits over `ids` (one window) and the speed of prompt processing and greedy generation."""
    llm = llama_cpp.Llama(str(path), n_ctx=len(ids) + 80, n_batch=len(ids), logits_all=True, verbose=False,
                          n_threads=threads, n_threads_batch=threads)  # fmt: skip
    start = time.perf_counter()
    llm.eval(ids)
    prompt_seconds = time.perf_counter() - start
    logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    llm.reset()
    start, made = time.perf_counter(), 0  # the 16-token prompt is in the time: small next to 64 tokens
    for _ in llm.generate(ids[:16], temp=0.0, top_k=1):
        made += 1
        if made == 64:
            break
    return logits, {
        "prompt_tok_s": len(ids) / prompt_seconds,
        "generate_tok_s": made / (time.perf_counter() - start),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=MODEL, help="an HF-layout model folder")
    parser.add_argument("--types", nargs="+", default=TYPES, help=f"file types (default {' '.join(TYPES)})")
    parser.add_argument("--text", type=Path, default=ROOT / "docs" / "glossary.md", help="the quality text")
    parser.add_argument("--tokens", type=int, default=512, help="tokens of the text in the window")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--work", type=Path, default=ROOT / "output" / "gguf_types", help="files go here")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "gguf_types.json")
    parser.add_argument("--imatrix", type=Path, help="quantize both sides with this importance matrix file")
    parser.add_argument("--note", default="", help="what else to record (e.g. what shared the machine)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    without_extra_buffers()
    load = [load1()]
    f32 = export_gguf(args.model, args.work / "model.F32.gguf", file_type="f32").path
    vocab = llama_cpp.Llama(str(f32), vocab_only=True, verbose=False)
    ids = vocab.tokenize(args.text.read_text(encoding="utf-8").encode(), add_bos=False)[: args.tokens]
    reference, _ = run(f32, ids, args.threads)
    rows = []
    for name in args.types:
        start = time.perf_counter()
        path = export_gguf(
            args.model, args.work / f"model.{name.upper()}.gguf", file_type=name, imatrix=args.imatrix
        ).path
        seconds = time.perf_counter() - start
        llama_quantize(f32, args.work / f"llama.{name.upper()}.gguf", name, args.imatrix)
        same = agreement(path, args.work / f"llama.{name.upper()}.gguf")
        logits, speed = run(path, ids, args.threads)
        shifted = logits - logits.max(axis=1, keepdims=True)
        logprob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        nll = -logprob[np.arange(len(ids) - 1), ids[1:]].mean()
        top1 = float((logits.argmax(axis=1) == reference.argmax(axis=1)).mean())
        rows.append({"type": name, "size_bytes": path.stat().st_size, "export_seconds": round(seconds, 1),
                     **same, "perplexity": round(float(np.exp(nll)), 3), "top1_same_as_f32": round(top1, 4),
                     **{k: round(v, 1) for k, v in speed.items()}})  # fmt: skip
        print(rows[-1], flush=True)
    shifted = reference - reference.max(axis=1, keepdims=True)
    nll = -(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))[
        np.arange(len(ids) - 1), ids[1:]
    ].mean()
    load.append(load1())
    write_results(args.json, "gguf_types", rows, note=args.note, model=args.model.name, text=str(args.text.relative_to(ROOT)),
                  tokens=len(ids), f32_perplexity=round(float(np.exp(nll)), 3), threads=args.threads,
                  llama_cpp_python=llama_cpp.__version__, load_average_1min=load,
                  imatrix=None if args.imatrix is None else args.imatrix.name)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
