"""QAT against post-training quantization: how much of the 8da4w perplexity loss does QAT recover?

    python benchmarks/qat_experiment.py [--steps N] [--seeds 0 1] [--out DIR] [--with-base]

The test plan of torchtune's QAT recipe (pytorch/torchtune#1854), with ftune's recipes, on CPU:

1. fine-tune SmolLM2-135M-Instruct twice at world size 2, same data, steps, seed and lr:
   ``ftune run --nproc_per_node 2 full_finetune_distributed --config smollm2/135M_full`` and
   ``ftune run --nproc_per_node 2 qat_distributed --config smollm2/135M_qat_full`` (fake 8da4w:
   int8 dynamic activations, int4 weights in groups of --group-size (default 32), from the first step);
2. quantize both to 8da4w with ``ftune run quantize --config quantization``: PTQ of the full
   fine-tune, and ``qat=true`` (prepare + convert) of the QAT fine-tune;
3. ``ftune run eval --config eval`` on held-out text: word perplexity, byte perplexity, bits per
   byte of the four models (float full-FT, PTQ of full-FT, float QAT-FT, QAT converted), and with
   --with-base of the base model and its PTQ for reference.

It reports ``recovered = (ppl(PTQ of full) - ppl(QAT converted)) / (ppl(PTQ of full) - ppl(float full))``
(torchao reports about 68% on wikitext word perplexity for Llama-3-8B).

Corpus: the Python language reference and library topics that ship with CPython itself
(``pydoc_data.topics``, PSF-2.0 licensed, 79 topics, ~113k SmolLM2 tokens), so it is available
offline everywhere. Several topics repeat paragraphs of others (``compound`` holds ``if``, ``for``,
``try``...), so the split is made on paragraphs: the held-out topics (HELDOUT below) are written
one file each, and the training documents are the other topics with every paragraph that is
held out or already used dropped. Training packs the documents into rows of --seq-len tokens.

Every step is one command through the real CLI (printed before it runs), run one after the
other; the 1-minute load average is recorded around each, since the machine's cores are shared.
Results go to ``<out>/results.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_NAME = "SmolLM2-135M-Instruct"
HELDOUT = ("calls", "import", "objects", "raise")  # pydoc_data.topics keys, ~5.7k tokens
QUANTIZER = "quantizer._component_=ftune.quantization.Int8DynActInt4Weight"
METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte", "token_perplexity")
# method -> (recipe, config), run at world size 2
METHODS = {
    "full": ("full_finetune_distributed", "smollm2/135M_full"),
    "qat": ("qat_distributed", "smollm2/135M_qat_full"),
    "qat_lora": ("qat_lora_finetune_distributed", "smollm2/135M_qat_lora"),
}
LABELS = {"full": "full", "qat": "QAT", "qat_lora": "QAT+LoRA"}


def recovered_fractions(ppl: dict[str, dict]) -> dict[str, dict]:
    """(PTQ of full - converted) / (PTQ of full - float full), per metric, for each converted model run."""
    out = {}
    if "ptq_full" not in ppl:
        return out
    for key, converted in (("recovered", "qat_converted"), ("recovered_qat_lora", "qat_lora_converted")):
        if converted in ppl:
            out[key] = {}
            for m in METRICS:
                gap = ppl["ptq_full"][m] - ppl["float_full"][m]
                out[key][m] = (ppl["ptq_full"][m] - ppl[converted][m]) / gap if gap else float("nan")
    return out


def write_corpus(data_dir: Path) -> tuple[Path, list[Path]]:
    """Write the training JSONL and the held-out text files (one per held-out topic)."""
    from pydoc_data.topics import topics

    def paragraphs(text: str) -> list[str]:
        return [p.strip("\n") for p in text.split("\n\n") if p.strip()]

    data_dir.mkdir(parents=True, exist_ok=True)
    heldout_files, seen = [], set()
    for key in HELDOUT:
        path = data_dir / f"heldout_{key}.txt"
        path.write_text(topics[key].strip() + "\n", encoding="utf-8")
        heldout_files.append(path)
        seen.update(p.strip() for p in paragraphs(topics[key]))
    train = data_dir / "train.jsonl"
    with train.open("w", encoding="utf-8") as f:
        for key in sorted(topics):
            if key in HELDOUT:
                continue
            kept = []
            for p in paragraphs(topics[key]):
                if p.strip() not in seen:
                    seen.add(p.strip())
                    kept.append(p)
            if kept:
                f.write(json.dumps({"text": "\n\n".join(kept)}) + "\n")
    return train, heldout_files


def group_size_arg(text: str) -> int | None:
    """--group-size: a positive int, or 'channel' (None: one scale per output channel)."""
    if text == "channel":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'channel', got {text!r}")
    return value


def load1() -> float:
    return os.getloadavg()[0]


def run(cmd: list[str], env: dict[str, str], log: Path) -> dict:
    """Run one CLI command, its output to `log`; return wall time and load averages."""
    print("$ " + shlex.join(cmd), flush=True)
    before, start = load1(), time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(cmd, env=env, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        sys.exit(f"command failed (exit {proc.returncode}), log {log}:\n{tail}")
    row = {
        "command": shlex.join(cmd),
        "seconds": round(seconds, 1),
        "load_before": before,
        "load_after": load1(),
    }
    print(f"  {seconds:.1f} s, load {before:.2f} -> {row['load_after']:.2f}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps of each fine-tune")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one experiment per seed")
    parser.add_argument("--batch-size", type=int, default=2, help="rows per rank per step")
    parser.add_argument("--seq-len", type=int, default=256, help="packed row length")
    parser.add_argument("--lr", type=float, default=5e-5, help="AdamW lr (the configs' value)")
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=sorted(METHODS),
        default=["full", "qat"],
        help="fine-tunes to run: full (the baseline), qat, qat_lora (LoRA over a fake-quantized base)",
    )
    parser.add_argument("--lora-lr", type=float, default=1e-3, help="AdamW lr of qat_lora (adapters)")
    parser.add_argument("--warmup", type=int, default=2, help="cosine schedule warm-up steps")
    parser.add_argument(
        "--fake-quant-after",
        type=int,
        default=None,
        help="QAT: fake_quant_after_n_steps (default: fake quantization from step 1)",
    )
    parser.add_argument(
        "--group-size",
        type=group_size_arg,
        default=32,
        help="int4 weight group size of QAT and of every quantization; 'channel': one scale per output channel",
    )
    parser.add_argument(
        "--learn-ranges",
        action="store_true",
        help="QAT learns its weight scales (quantizer.learn_ranges=true), and converts with them",
    )
    parser.add_argument("--eval-seq-len", type=int, default=512, help="perplexity window")
    parser.add_argument("--out", type=Path, default=Path("/tmp/qat_experiment"), help="all outputs go here")
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/qat_home")))
    parser.add_argument("--with-base", action="store_true", help="also evaluate the base model and its PTQ")
    args = parser.parse_args()
    if args.learn_ranges and "qat_lora" in args.methods:
        parser.error("--learn-ranges: QAT + LoRA trains its adapters only, not ranges; drop qat_lora")

    quantizer = [QUANTIZER, f"quantizer.group_size={'null' if args.group_size is None else args.group_size}"]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FTUNE_HOME": str(args.home)}
    ftune = [sys.executable, "-m", "ftune.cli"]
    model_dir = args.home / "models" / MODEL_NAME
    steps: list[dict] = []
    start = time.perf_counter()
    if not (model_dir / "model.safetensors").exists():
        steps.append(run([*ftune, "convert", "gguf", "smollm2"], env, out / "convert.log"))
    train, heldout = write_corpus(out / "data")
    model_args = [f"checkpointer.checkpoint_dir={model_dir}", f"tokenizer.path={model_dir}"]

    def evaluate(name: str, extra: list[str]) -> dict:
        result = out / f"eval_{name}.json"
        cmd = [*ftune, "run", "eval", "--config", "eval", *model_args, "heldout_file=null"]
        cmd += [f"text_files=[{','.join(str(p) for p in heldout)}]", f"max_seq_len={args.eval_seq_len}"]
        cmd += ["batch_size=8", f"output_file={result}", *extra]
        steps.append(run(cmd, env, out / f"eval_{name}.log"))
        return json.loads(result.read_text())["perplexity"]

    learn = ["quantizer.learn_ranges=true"] if args.learn_ranges else []

    def quantize(name: str, source: Path, qat: bool, extra: list[str] = ()) -> Path:
        qdir = out / f"quantized_{name}"
        cmd = [*ftune, "run", "quantize", "--config", "quantization", f"output_dir={qdir}"]
        cmd += [f"checkpointer.checkpoint_dir={source}", f"qat={str(qat).lower()}", *quantizer, *extra]
        steps.append(run(cmd, env, out / f"quantize_{name}.log"))
        return qdir

    results: dict = {"runs": {}}
    if args.with_base:
        results["base"] = {
            "float": evaluate("base_float", []),
            "ptq": evaluate("base_ptq", [f"quantized_checkpoint={quantize('base', model_dir, qat=False)}"]),
        }
    for seed in args.seeds:
        ppl: dict[str, dict] = {}
        folders = {}
        for method in args.methods:
            recipe, config = METHODS[method]
            lr = args.lora_lr if method == "qat_lora" else args.lr
            run_dir = out / f"seed{seed}_{method}"
            shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, one metrics file
            cmd = [*ftune, "run", "--standalone", "--nproc_per_node", "2", recipe, "--config", config]
            cmd += [f"output_dir={run_dir}", *model_args, f"seed={seed}", f"max_steps={args.steps}"]
            cmd += [f"batch_size={args.batch_size}", "grad_accum_steps=1", f"optimizer.lr={lr}"]
            cmd += [f"lr_scheduler.num_warmup_steps={args.warmup}", f"save_every_n_steps={args.steps}"]
            cmd += ["run_val_every_n_steps=null", "~dataset_val", "progress_bar=false", "dtype=fp32"]
            cmd += [
                f"tokenizer.max_seq_len={args.seq_len}",
                "dataset._component_=ftune.datasets.text_completion_dataset",
            ]
            cmd += ["~dataset.data_dir", "~dataset.split", f"dataset.source={train}", "dataset.packed=true"]
            cmd += [f"dataset.max_seq_len={args.seq_len}"]
            if method in ("qat", "qat_lora"):
                fq = "null" if args.fake_quant_after is None else str(args.fake_quant_after)
                cmd += [f"fake_quant_after_n_steps={fq}", *quantizer, *(learn if method == "qat" else [])]
            steps.append(run(cmd, env, out / f"train_seed{seed}_{method}.log"))
            folders[method] = run_dir / f"step_{args.steps}"
            (metrics,) = (run_dir / "logs").glob("*.jsonl")
            logged = [json.loads(line) for line in metrics.read_text().splitlines()]
            results.setdefault("training", {})[f"seed{seed}_{method}"] = {
                "loss": [round(r["loss"], 4) for r in logged if "loss" in r],
                "median_tokens_per_second": statistics.median(
                    r["tokens_per_second"] for r in logged if "tokens_per_second" in r
                ),
            }
        # The training curves overlaid (ftune plot): loss, lr, tokens/s, peak memory.
        plot = [*ftune, "plot", *(str(out / f"seed{seed}_{m}") for m in args.methods)]
        labels = ",".join(LABELS[m] for m in args.methods)
        run([*plot, "--labels", labels, "-o", str(out / f"plot_seed{seed}.png")], env, out / "plot.log")
        if "full" in folders:
            ppl["float_full"] = evaluate(
                f"seed{seed}_float_full", [f"checkpointer.checkpoint_dir={folders['full']}"]
            )
            qfull = quantize(f"seed{seed}_ptq_full", folders["full"], qat=False)
            ppl["ptq_full"] = evaluate(f"seed{seed}_ptq_full", [f"quantized_checkpoint={qfull}"])
        if "qat" in folders:
            ppl["float_qat"] = evaluate(
                f"seed{seed}_float_qat", [f"checkpointer.checkpoint_dir={folders['qat']}"]
            )
            qqat = quantize(f"seed{seed}_qat_converted", folders["qat"], qat=True, extra=learn)
            ppl["qat_converted"] = evaluate(f"seed{seed}_qat_converted", [f"quantized_checkpoint={qqat}"])
        if "qat_lora" in folders:
            # The adapters merged into the base weights (adapter_dir), then prepared and converted.
            adapter = [f"adapter_dir={folders['qat_lora']}"]
            ppl["float_qat_lora"] = evaluate(f"seed{seed}_float_qat_lora", adapter)
            qlora = quantize(f"seed{seed}_qat_lora_converted", model_dir, qat=True, extra=adapter)
            ppl["qat_lora_converted"] = evaluate(
                f"seed{seed}_qat_lora_converted", [f"quantized_checkpoint={qlora}"]
            )
        results["runs"][f"seed{seed}"] = {"perplexity": ppl, **recovered_fractions(ppl)}

    import torch
    import torchao

    results["machine"] = {
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in open("/proc/cpuinfo")
                if line.startswith("model name")
            ),
            platform.processor(),
        ),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchao": torchao.__version__,
    }
    results["settings"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    results["corpus"] = {"train": str(train), "heldout": [str(p) for p in heldout]}
    results["steps"] = steps
    results["total_seconds"] = round(time.perf_counter() - start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print_table(results)


def print_table(results: dict) -> None:
    """Markdown tables of the perplexities and the recovered fractions."""
    print(
        "\n| model | seed | word ppl | byte ppl | bits/byte | token ppl |\n| --- | --- | --- | --- | --- | --- |"
    )
    rows = []
    if "base" in results:
        rows += [
            ("base float", "-", results["base"]["float"]),
            ("base PTQ 8da4w", "-", results["base"]["ptq"]),
        ]
    names = {
        "float_full": "full FT, float",
        "ptq_full": "full FT, PTQ 8da4w",
        "float_qat": "QAT FT, float",
        "qat_converted": "QAT FT, converted 8da4w",
        "float_qat_lora": "QAT+LoRA FT, float (merged)",
        "qat_lora_converted": "QAT+LoRA FT, converted 8da4w",
    }
    for seed, r in results["runs"].items():
        rows += [(names[k], seed.removeprefix("seed"), v) for k, v in r["perplexity"].items()]
    for name, seed, p in rows:
        print(f"| {name} | {seed} | " + " | ".join(f"{p[m]:.4f}" for m in METRICS) + " |")
    for key in ("recovered", "recovered_qat_lora"):
        runs = {seed: r[key] for seed, r in results["runs"].items() if key in r}
        if not runs:
            continue
        print(
            f"\n| seed | {key} (word ppl) | (byte ppl) | (bits/byte) | (token ppl) |\n|---|---|---|---|---|"
        )
        for seed, rec in runs.items():
            print(f"| {seed.removeprefix('seed')} | " + " | ".join(f"{rec[m]:.1%}" for m in METRICS) + " |")
        if len(runs) > 1:
            mean = {m: statistics.mean(rec[m] for rec in runs.values()) for m in METRICS}
            print("| mean | " + " | ".join(f"{mean[m]:.1%}" for m in METRICS) + " |")
    print(f"\ntotal {results['total_seconds']:.0f} s; steps:")
    for s in results["steps"]:
        print(
            f"  {s['seconds']:7.1f} s  load {s['load_before']:.2f}->{s['load_after']:.2f}  {s['command'][-90:]}"
        )


if __name__ == "__main__":
    main()
