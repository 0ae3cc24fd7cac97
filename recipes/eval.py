"""Evaluate a model.   ftune run eval --config eval

Three measurements, each optional:
- perplexity of `text_files` (one document each) with rolling windows of `max_seq_len` tokens:
  word perplexity, byte perplexity and bits per byte, comparable across tokenizers;
- exact-match accuracy on `heldout_file` (chat records, e.g. the demo's held-out split): each
  conversation up to its last assistant turn goes through the chat template, the model answers
  greedily (batched, KV cache), and the answer must equal that turn up to whitespace; records with
  image parts (an image-text model's) are answered with their images, read before the model loads;
- lm-evaluation-harness tasks (`lm_eval_tasks`, built-in or from `lm_eval_include_path`) through
  ftune's model, tokenizer and KV cache; needs `pip install 'ftune[lm-eval]'`.

The model is the checkpointer's folder, plus `adapter_dir` merged in, or the quantize recipe's
output with `quantized_checkpoint`: evaluate before and after fine-tuning, or float against
quantized. Results are printed as a table and, with `output_file`, written as JSON.
"""

import time
from pathlib import Path

from ftune import checkpointing, config, evaluation, runtime
from ftune.checkpointing import atomic
from ftune.datasets import image_generation
from ftune.datasets.demo import HELDOUT_FILE, write_demo_data
from ftune.evaluation import EvalSettings, harness, image_exact_match
from ftune.evaluation.chat_samples import read_chat_samples

# A longer answer than the longest reference cannot match it; the margin covers the stop token
# and whitespace the comparison ignores.
ANSWER_MARGIN = 4


# The settings this recipe reads; `ftune run/validate/--help` read them from here.
SETTINGS = EvalSettings


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    if not s.text_files and s.heldout_file is None and not s.lm_eval_tasks:
        raise ValueError(
            "nothing to evaluate: text_files and lm_eval_tasks are empty and heldout_file is null. Set "
            "text_files=[path/to/a.txt] for perplexity, heldout_file=path/to/heldout.jsonl for exact match "
            "and/or lm_eval_tasks=[task] for lm-evaluation-harness tasks."
        )
    if s.lm_eval_tasks:  # before the model loads: what to install, and task names that do not exist
        harness.require_lm_eval()
        harness.check_tasks_before_load(
            s.lm_eval_tasks, s.lm_eval_include_path, builtin_tasks=s.lm_eval_builtin_tasks
        )
    if missing := [f for f in s.text_files if not Path(f).expanduser().is_file()]:
        raise FileNotFoundError(f"text_files: {missing} do not exist; pass readable text files.")
    ckpt = config.instantiate(cfg.checkpointer)
    image_samples = None  # image QA records: their images read, and a model that takes them, before it loads
    if s.heldout_file is not None:
        image_samples = image_exact_match.read_image_samples(s.heldout_file, limit=s.limit)
    if image_samples is not None:
        folder = image_generation.check_image_model_folder(
            s.quantized_checkpoint or ckpt.checkpoint_dir,
            image_text=s.quantized_checkpoint is not None or getattr(ckpt, "image_text", False),
            key="heldout_file (its records hold images)",
        )
    device, dtype = runtime.get_device(s.device), runtime.get_dtype(s.dtype)
    runtime.announce(device, dtype)
    if s.output_file is not None:  # before the model loads: the results never land on an input
        inputs = {"checkpointer.checkpoint_dir": ckpt.checkpoint_dir, "adapter_dir": s.adapter_dir}
        inputs |= {"quantized_checkpoint": s.quantized_checkpoint, "heldout_file": s.heldout_file}
        inputs |= {f"text_files[{i}]": f for i, f in enumerate(s.text_files)}
        checkpointing.check_output_dir(
            s.output_file, inputs, key="output_file", fix="Set output_file to a file outside the inputs."
        )
    model = checkpointing.load_inference_model(
        ckpt,
        model=cfg.model,
        adapter_dir=s.adapter_dir,
        quantized_checkpoint=s.quantized_checkpoint,
        device=device,
        dtype=dtype,
    )
    tokenizer = config.instantiate(cfg.tokenizer)
    checkpointing.check_tokenizer_fits(tokenizer.vocab_size, model)
    source = s.quantized_checkpoint or str(ckpt.checkpoint_dir)
    results: dict = {"model": source, "adapter_dir": s.adapter_dir}
    rows: list[tuple[str, str]] = []

    if s.text_files:
        texts = [Path(f).expanduser().read_text(encoding="utf-8") for f in s.text_files]
        start = time.perf_counter()
        ppl = evaluation.perplexity(
            model, tokenizer, texts, max_seq_len=s.max_seq_len, stride=s.stride, batch_size=s.batch_size
        )
        seconds = time.perf_counter() - start
        results["perplexity"] = {**ppl.as_dict(), "files": s.text_files, "seconds": seconds}
        rows += [
            ("word_perplexity", f"{ppl.word_perplexity:.4f}"),
            ("byte_perplexity", f"{ppl.byte_perplexity:.4f}"),
            ("bits_per_byte", f"{ppl.bits_per_byte:.4f}"),
            (
                "perplexity_tokens",
                f"{ppl.num_tokens} in {seconds:.1f} s ({ppl.num_tokens / seconds:.0f} tokens/s)",
            ),
        ]

    if s.heldout_file is not None:
        heldout = Path(s.heldout_file).expanduser()
        if not heldout.exists() and s.demo_data_if_missing and heldout.name == HELDOUT_FILE:
            write_demo_data(heldout.parent)  # the same files the demo's training config writes
        if image_samples is None:
            samples = read_chat_samples(heldout, limit=s.limit)
        else:  # the prompts' text without their images, for the results
            transform = cfg.image_transform  # null: the family's, with its processor's published defaults
            transform = (
                config.instantiate(transform)
                if transform
                else image_generation.family_image_transform(folder)
            )
            dataset = image_exact_match.image_samples_dataset(image_samples, tokenizer, transform)
            read = dataset.layout.message_transform.messages
            samples = [(read(r), a) for r, a in zip(image_samples.prompts, image_samples.references)]
        budget = s.max_new_tokens
        if budget is None:
            budget = ANSWER_MARGIN + max(
                len(tokenizer.encode(r, add_bos=False, add_eos=False)) for _, r in samples
            )
        start = time.perf_counter()
        if image_samples is None:
            em = evaluation.exact_match(
                model, tokenizer, samples, max_new_tokens=budget, batch_size=s.batch_size
            )
        else:
            em = image_exact_match.image_exact_match(
                model,
                tokenizer,
                dataset,
                image_samples.references,
                max_new_tokens=budget,
                batch_size=s.batch_size,
            )
        seconds = time.perf_counter() - start
        results["exact_match"] = {
            "accuracy": em.accuracy,
            "num_correct": em.num_correct,
            "num_total": em.num_total,
            "file": str(heldout),
            "max_new_tokens": budget,
            "seconds": seconds,
            "samples": [
                {
                    "prompt": prompt[-1].content,
                    "reference": reference,
                    "prediction": prediction,
                    "correct": ok,
                }
                for (prompt, reference), prediction, ok in zip(samples, em.predictions, em.correct)
            ],
        }
        rows += [
            ("exact_match", f"{em.accuracy:.4f} ({em.num_correct}/{em.num_total})"),
            (
                "exact_match_time",
                f"{seconds:.1f} s ({em.num_total / seconds:.2f} prompts/s, {budget} new tokens max)",
            ),
        ]

    if s.lm_eval_tasks:
        start = time.perf_counter()
        scores = harness.run_tasks(
            model,
            tokenizer,
            s.lm_eval_tasks,
            include_path=s.lm_eval_include_path,
            builtin_tasks=s.lm_eval_builtin_tasks,
            num_fewshot=s.lm_eval_num_fewshot,
            limit=s.lm_eval_limit,
            batch_size=s.batch_size,
            max_length=s.lm_eval_max_length,
        )
        seconds = time.perf_counter() - start
        results["lm_eval"] = {**scores, "seconds": seconds}
        rows += [*harness.score_rows(scores), ("lm_eval_time", f"{seconds:.1f} s")]

    width = max(len(name) for name, _ in rows)
    adapter = f" + adapter {s.adapter_dir}" if s.adapter_dir else ""
    print(f"eval of {source}{adapter}\n" + "\n".join(f"  {name:<{width}}  {value}" for name, value in rows))
    for sample in results.get("exact_match", {}).get("samples", [])[: s.show_examples]:
        mark = "ok  " if sample["correct"] else "miss"
        print(
            f"  [{mark}] {sample['prompt'][:70]!r} -> {sample['prediction'][:40]!r} (want {sample['reference']!r})"
        )
    if s.output_file is not None:
        atomic.write_json(results, Path(s.output_file).expanduser())
        print(f"Wrote {s.output_file}", flush=True)


if __name__ == "__main__":
    config.run(main)
