"""The image demo, measured: a small VLM composed from SmolLM2-135M-Instruct, fine-tuned on the
synthetic image task, with held-out exact match before and after, and what images cost a step.

    ./quickstart.sh            # first: SmolLM2-135M-Instruct in $FTUNE_HOME/models (ftune convert gguf smollm2)
    OMP_NUM_THREADS=1 python benchmarks/vision_demo.py [--steps 300] [--minutes 25] [--batch-size 4]

1. **The model**: `ftune.models.llava.llava` joins the pretrained SmolLM2-135M-Instruct decoder with a
   randomly initialised SigLIP-style encoder (48 px images in 16 px patches: 9 image tokens, one a
   cell of the task's 3 x 3 grid; width 192, initialised as transformers initialises SigLIP) through a
   fresh MLP projector. ``--vision-layers`` sets the encoder's transformer layers: 0 (the default)
   keeps SigLIP's patch and position embeddings only, so each image token holds its own cell; on
   top of a random encoder, random layers mixed the cells and the decoder did not learn to read
   them in the runs docs/images.md shows (4 layers). The image
   token is one of SmolLM2's reserved special tokens (``<empty_output>``), so the tokenizer is unchanged.
2. **Training**: LoRA (rank 16) on every linear of the decoder at ``--lr``, the encoder and the
   projector trained fully (`requires_grad`) at ``--vision-lr`` (they start random), AdamW, on `ftune.datasets.image_task_dataset`'s training split (2000
   questions about Pillow-drawn shapes: colour, shape, count, left/right), for ``--steps`` steps or
   ``--minutes`` minutes. The loop is the recipes' forward line
   (``model.hidden(batch.tokens, **batch.model_inputs)``) and loss.
3. **Exact match** on the ``--n-heldout`` held-out questions (layouts never seen in training), greedy,
   before and after, overall and per question kind, beside two baselines per kind: chance (a uniform
   guess among the kind's answers) and the best constant answer on the held-out questions (what a
   model that learned the answers' prior but not the images scores).
4. **Images against text**: the step time (median of ``--repeats``) and peak RSS of a training
   batch with its images, against the same batch with every image token replaced by a text token
   and no images (the same token count): the encoder and projector's share of a step.

Writes benchmarks/results/vision_demo.json, which benchmarks/figures/report.py renders into
docs/images.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
from results_file import ROOT, load1, write_results

sys.path.insert(0, str(ROOT))
from ftune import data, training  # noqa: E402
from ftune.checkpointing import load_hf  # noqa: E402
from ftune.data import LlavaImageTransform, collate_prompts, padded_collate_vision  # noqa: E402
from ftune.datasets import exact_match, image_task_dataset, image_task_prompt_dataset  # noqa: E402
from ftune.datasets.image_task import ANSWERS  # noqa: E402
from ftune.generation import generate_batch  # noqa: E402
from ftune.models.llava import llava  # noqa: E402
from ftune.peft import apply_lora  # noqa: E402
from ftune.tokenizers import HFTokenizer  # noqa: E402
from ftune.training.run.memory import peak_memory_gib, reset_peak_memory  # noqa: E402
from ftune.training.step.loss import CrossEntropyLoss  # noqa: E402
from ftune.training.step.token_loss import batch_loss  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
IMAGE_TOKEN = "<empty_output>"  # a special token SmolLM2 reserves and never writes in chat
ENCODER = dict(image_size=48, patch_size=16, vision_embed_dim=192, vision_num_heads=3,
               vision_intermediate_dim=768)  # fmt: skip
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CPU = torch.device("cpu")


def build(folder: Path, tokenizer: HFTokenizer, vision_layers: int) -> torch.nn.Module:
    """The composed VLM: the pretrained decoder, a random encoder of `vision_layers` transformer layers
    and a random projector; LoRA on the decoder."""
    torch.manual_seed(0)
    model = llava(
        decoder=load_hf(folder), image_token_id=tokenizer.token_to_id(IMAGE_TOKEN),
        vision_num_layers=vision_layers, **ENCODER,
    )  # fmt: skip
    apply_lora(model, targets={"decoder": TARGETS}, rank=16, alpha=32)
    model.vision_encoder.requires_grad_(True)  # trained fully: they start random
    model.projector.requires_grad_(True)
    return model


@torch.no_grad()
def heldout_exact_match(model, tokenizer, prompts, batch_size: int = 25) -> dict[str, float]:
    """Greedy answers to the held-out questions: the share equal to the answer, overall and per kind."""
    model.eval()
    hits: dict[str, list[bool]] = {}
    for start in range(0, len(prompts), batch_size):
        batch = collate_prompts([prompts[i] for i in range(start, min(start + batch_size, len(prompts)))])
        out = generate_batch(
            model, batch.tokens, max_new_tokens=4, stop_tokens=tokenizer.stop_tokens,
            pad_id=tokenizer.pad_id, pixel_values=batch.pixel_values,
        )  # fmt: skip
        for ids, sample in zip(out, batch.samples):
            ids = ids[:-1] if ids and ids[-1] in tokenizer.stop_tokens else ids
            hit = exact_match(tokenizer.decode(ids, skip_special_tokens=True), sample["answer"])
            hits.setdefault(sample["task"], []).append(hit)
    model.train()
    every = [h for kind in hits.values() for h in kind]
    return {
        "all": round(sum(every) / len(every), 3),
        **{k: round(sum(v) / len(v), 3) for k, v in sorted(hits.items())},
    }


def baselines(prompts) -> dict[str, dict[str, float]]:
    """Per kind: chance (1 / the kind's answers) and the share of the best constant answer."""
    answers: dict[str, list[str]] = {}
    for record in prompts.records:  # the records only: no image decoded
        answers.setdefault(record["task"], []).append(record["answer"])
    return {
        kind: {
            "chance": round(1 / len(ANSWERS[kind]), 3),
            "constant": round(max(seen.count(a) for a in set(seen)) / len(seen), 3),
        }
        for kind, seen in sorted(answers.items())
    }


def timed_steps(model, optimizer, raw, repeats: int) -> dict[str, float]:
    """Median seconds of a forward, backward and optimizer step on `raw`, and the peak RSS over them."""
    loss_fn = CrossEntropyLoss()
    seconds = []
    reset_peak_memory(CPU)
    before = peak_memory_gib(CPU)["peak_rss_gib"]
    for _ in range(repeats):
        start = time.perf_counter()
        total, count = batch_loss(model, loss_fn, raw, device=CPU)
        (total / count).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
    peak = peak_memory_gib(CPU)["peak_rss_gib"]
    return {"step_seconds": round(statistics.median(seconds), 3), "peak_rss_gib": round(peak, 3),
            "rss_before_gib": round(before, 3)}  # fmt: skip


def text_only(raw: dict[str, torch.Tensor], image_id: int, text_id: int) -> dict[str, torch.Tensor]:
    """The batch without its images: each image token replaced by a text token (the same length)."""
    return {"tokens": raw["tokens"].masked_fill(raw["tokens"] == image_id, text_id), "labels": raw["labels"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--minutes", type=float, default=25.0, help="stop training after this long")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3, help="the decoder's LoRA adapters")
    p.add_argument("--vision-lr", type=float, default=3e-3, help="the encoder and the projector")
    p.add_argument("--vision-layers", type=int, default=0, help="the encoder's transformer layers")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--n-train", type=int, default=2000)
    p.add_argument("--n-heldout", type=int, default=200)
    p.add_argument(
        "--data-dir", default=None, help="default: $FTUNE_HOME/data/image_task_48_<n-train>_<n-heldout>"
    )
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "vision_demo.json"))
    args = p.parse_args()
    home = Path(os.environ.get("FTUNE_HOME", Path.home() / ".cache" / "ftune"))
    folder = home / "models" / MODEL
    if not (folder / "model.safetensors").is_file():
        sys.exit(
            f"vision_demo: no {folder}/model.safetensors; run ./quickstart.sh (or ftune convert gguf smollm2) first."
        )
    # The split sizes name the folder: files written for other sizes would be read as they are.
    data_dir = args.data_dir or str(home / "data" / f"image_task_48_{args.n_train}_{args.n_heldout}")
    tokenizer = HFTokenizer(folder)
    transform = LlavaImageTransform(
        image_size=ENCODER["image_size"], patch_size=ENCODER["patch_size"], image_token=IMAGE_TOKEN
    )
    sizes = dict(n_train=args.n_train, n_heldout=args.n_heldout, size=48)
    train = image_task_dataset(tokenizer, data_dir=data_dir, image_transform=transform, **sizes)
    heldout = image_task_prompt_dataset(
        tokenizer, data_dir=data_dir, image_transform=transform, split="heldout", **sizes
    )
    model = build(folder, tokenizer, args.vision_layers)
    trainable = training.trainable_params(model)
    vision = {id(p) for part in (model.vision_encoder, model.projector) for p in part.parameters()}
    groups = [
        {"params": [p for p in trainable if id(p) not in vision], "lr": args.lr},
        {"params": [p for p in trainable if id(p) in vision], "lr": args.vision_lr},
    ]
    optimizer = torch.optim.AdamW(groups, weight_decay=0.0)
    scheduler = training.cosine_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=args.steps)
    loader = data.build_dataloader(
        train,
        batch_size=args.batch_size,
        collate_fn=partial(padded_collate_vision, pad_id=tokenizer.pad_id),
        seed=0,
    )
    counts = {
        "decoder_lora": sum(p.numel() for n, p in model.decoder.named_parameters() if p.requires_grad),
        "encoder": sum(p.numel() for p in model.vision_encoder.parameters()),
        "projector": sum(p.numel() for p in model.projector.parameters()),
        "decoder": sum(p.numel() for p in model.decoder.parameters()),
    }
    print("parameters", counts, flush=True)

    baseline = baselines(heldout)
    print("held-out baselines", baseline, flush=True)
    start = time.perf_counter()
    before = heldout_exact_match(model, tokenizer, heldout)
    eval_seconds = time.perf_counter() - start
    print("held-out exact match before", before, f"({eval_seconds:.0f} s)", flush=True)

    loss_fn, losses, step, start = CrossEntropyLoss(), [], 0, time.perf_counter()
    first = None
    while step < args.steps and time.perf_counter() - start < args.minutes * 60:
        for raw in loader:
            first = first or raw
            total, count = batch_loss(model, loss_fn, raw, device=CPU)  # model.hidden(tokens, **model_inputs)
            (total / count).backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            losses.append(round((total / count).item(), 4))
            if step % 10 == 0:
                print(
                    f"step {step} loss {statistics.mean(losses[-10:]):.3f} {time.perf_counter() - start:.0f} s",
                    flush=True,
                )
            if step == args.steps or time.perf_counter() - start >= args.minutes * 60:
                break
    train_seconds = time.perf_counter() - start
    after = heldout_exact_match(model, tokenizer, heldout)
    print("held-out exact match after", after, flush=True)

    # Images against text-only batches of the same token count, on the trained model.
    text_id = tokenizer.encode(" the", add_bos=False, add_eos=False)[0]
    tokens = int(first["tokens"].numel())
    image_tokens = int((first["tokens"] == model.image_token_id).sum())
    with_images = timed_steps(model, optimizer, first, args.repeats)
    without = timed_steps(model, optimizer, text_only(first, model.image_token_id, text_id), args.repeats)
    cost = {"batch_size": args.batch_size, "tokens": tokens, "image_tokens": image_tokens,
            "images": with_images, "text_only": without,
            "step_ratio": round(with_images["step_seconds"] / without["step_seconds"], 3)}  # fmt: skip
    print("images vs text", cost, flush=True)

    rows = [{
        "model": f"{MODEL} + random SigLIP-style encoder ({args.vision_layers} layers, width "
                 f"{ENCODER['vision_embed_dim']}, {ENCODER['image_size']} px, {ENCODER['patch_size']} px patches) "
                 "+ MLP projector",
        "parameters": counts, "steps": step, "batch_size": args.batch_size, "lr": args.lr,
        "vision_lr": args.vision_lr, "vision_layers": args.vision_layers, "encoder_init": "transformers' SigLIP",
        "train_seconds": round(train_seconds, 1), "eval_seconds": round(eval_seconds, 1),
        "n_train": args.n_train, "n_heldout": args.n_heldout,
        "baselines": baseline, "exact_match_before": before, "exact_match_after": after,
        "loss_first10": round(statistics.mean(losses[:10]), 3), "loss_last10": round(statistics.mean(losses[-10:]), 3),
        "losses": losses, "images_vs_text": cost, "load1_end": load1(),
    }]  # fmt: skip
    note = (
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; 1-minute load at the start "
        f"{LOAD_START} and the end {load1()} (the machine is shared: step times are of a loaded machine)."
    )
    write_results(Path(args.results), "vision_demo", rows, note=note)
    print("wrote", args.results)


LOAD_START = load1()

if __name__ == "__main__":
    main()
