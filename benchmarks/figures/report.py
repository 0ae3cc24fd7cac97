"""The figures of README.md and docs/, generated from benchmarks/results/*.json (the one source).

    python benchmarks/figures/report.py            # rewrite every generated block in place
    python benchmarks/figures/report.py --check    # exit 1, naming the blocks that differ (what the tests run)

A generated block sits between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->` in a page; edit
the results file (or rerun the benchmark that writes it), never the block. Every block ends with
the machine, commit and date its figures were measured on. The renderers, one small function a
block, live beside this file: training.py (docs/benchmarks.md, training recipes), sequence.py
(docs/benchmarks.md: tokens/s against sequence length), memory.py (docs/memory.md: the memory plan
against measured peaks, and what the heap keeps), step.py (where one step's time and memory go), methods.py (DPO, KD and
GRPO demos, GRPO against TRL, MoE experts), reward.py (the reward model, GRPO with it and PPO:
reward_demo.py), pages.py (README, quickstart, QAT tables, inference recipes), gguf.py (the GGUF
file types, the quickstart through llama.cpp), vision.py (docs/images.md: the image demo) and
text.py (sentences of prose built from the results);
tests/docs/test_doc_figures.py also fails on a measured figure written outside a block.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the package `figures`, qat_record
from figures import gguf, memory, methods, pages, reward, sequence, step, text, training, vision  # noqa: E402
from figures.common import ROOT  # noqa: E402

# block name -> (page, renderer)
BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "throughput": ("docs/benchmarks.md", training.throughput),
    "throughput_run": ("docs/benchmarks.md", training.throughput_run),
    "lora_over_full": ("docs/benchmarks.md", training.lora_over_full),
    "targets": ("docs/benchmarks.md", training.targets),
    "compile_memory": ("docs/benchmarks.md", text.compile_memory),
    "variants": ("docs/benchmarks.md", training.variants),
    "variants_notes": ("docs/benchmarks.md", text.variants_notes),
    "distributed": ("docs/benchmarks.md", training.distributed),
    "distributed_notes": ("docs/benchmarks.md", text.distributed_notes),
    "ablation_full_fp32": ("docs/benchmarks.md", training.ablation("full, fp32")),
    "ablation_lora_fp32": ("docs/benchmarks.md", training.ablation("LoRA, fp32")),
    "ablation_summary": ("docs/benchmarks.md", text.ablation_summary),
    "why_lora": ("docs/benchmarks.md", text.why_lora),
    "optimizer_state": ("docs/benchmarks.md", text.optimizer_state),
    "vs_torchtune": ("docs/benchmarks.md", training.vs_torchtune),
    "vs_torchtune_compile": ("docs/benchmarks.md", training.vs_torchtune_compile),
    "vs_torchtune_instruct": ("docs/benchmarks.md", training.vs_torchtune_instruct),
    "vs_torchtune_seq": ("docs/benchmarks.md", sequence.vs_torchtune_seq),
    "step_profile": ("docs/benchmarks.md", step.step_profile),
    "step_split": ("docs/benchmarks.md", step.step_split),
    "step_memory": ("docs/benchmarks.md", step.step_memory),
    "attention_core": ("docs/benchmarks.md", step.attention_core),
    "step_memory_allocator": ("docs/benchmarks.md", step.step_memory_allocator),
    "grpo_vs_trl": ("docs/benchmarks.md", methods.grpo_vs_trl),
    "moe_experts": ("docs/benchmarks.md", methods.moe_experts),
    "readme_speed": ("README.md", pages.readme_speed),
    "readme_quickstart": ("README.md", pages.readme_quickstart),
    "readme_tests": ("README.md", text.readme_tests),
    "quickstart": ("docs/quickstart.md", pages.quickstart),
    "quickstart_gemma3": ("docs/quickstart.md", pages.quickstart_gemma3),
    "dpo_demo": ("docs/recipes/lora_dpo_single_device.md", methods.dpo_demo),
    "dpo_packing": ("docs/recipes/lora_dpo_single_device.md", methods.dpo_packing),
    "kd_demo": ("docs/recipes/knowledge_distillation_single_device.md", methods.kd_demo),
    "grpo_demo": ("docs/recipes/lora_grpo_single_device.md", methods.grpo_demo),
    "grpo_packing": ("docs/recipes/lora_grpo_single_device.md", methods.grpo_packing),
    "agent_demo": ("docs/recipes/lora_grpo_agent_single_device.md", methods.agent_demo),
    "reward_demo": ("docs/recipes/reward_model_single_device.md", reward.reward_demo),
    "ppo_demo": ("docs/recipes/ppo_full_finetune_single_device.md", reward.ppo_demo),
    "gemma3_quickstart": ("docs/models/gemma3.md", lambda: pages.quickstart_gemma3(up="../../")),
    "qat_ptq_cost": ("docs/qat.md", text.qat_ptq_cost),
    "qat_results": ("docs/qat.md", pages.qat_results),
    "qat_recovered": ("docs/qat.md", pages.qat_recovered),
    "qat_summary": ("docs/qat.md", text.qat_summary),
    "qat_time": ("docs/qat.md", text.qat_time),
    "qat_variants": ("docs/qat.md", pages.qat_variants),
    "qat_sweep": ("docs/qat.md", pages.qat_sweep),
    "bf16_slowdown": ("docs/glossary.md", pages.bf16_slowdown),
    "gemma3_conversion": ("docs/checkpoints.md", text.gemma3_conversion),
    "gguf_quickstart": ("docs/checkpoints.md", gguf.gguf_quickstart),
    "gguf_types": ("docs/checkpoints.md", gguf.gguf_types),
    "gguf_quickstart_500": ("docs/checkpoints.md", gguf.gguf_quickstart_500),
    "quickstart_gguf": ("docs/quickstart.md", gguf.quickstart_gguf),
    "eval_speed": ("docs/recipes/eval.md", pages.eval_speed),
    "recipe_full_single": ("docs/recipes/full_finetune_single_device.md", training.recipe_full_single),
    "recipe_lora_single": ("docs/recipes/lora_finetune_single_device.md", training.recipe_lora_single),
    "recipe_full_dist": ("docs/recipes/full_finetune_distributed.md", training.recipe_full_dist),
    "recipe_lora_dist": ("docs/recipes/lora_finetune_distributed.md", training.recipe_lora_dist),
    "generate_speed": ("docs/recipes/generate.md", pages.generate_speed),
    "generate_vs_transformers": ("docs/recipes/generate.md", pages.generate_vs_transformers),
    "quantize_speed": ("docs/recipes/quantize.md", pages.quantize_speed),
    "memory_plan": ("docs/memory.md", memory.memory_plan),
    "heap_retention": ("docs/memory.md", memory.heap_retention),
    "vision_demo": ("docs/images.md", vision.vision_demo),
}


def pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- figures:{name} -->\n)(.*?)(\n<!-- /figures:{name} -->)", re.S)


def render(text: str, page: str) -> str:
    """`text` (the page `page`) with each of its blocks regenerated; raises when a block's markers are missing."""
    for name, (where, renderer) in BLOCKS.items():
        if where != page:
            continue
        if not pattern(name).search(text):
            raise ValueError(
                f"{page} lacks the markers <!-- figures:{name} --> ... <!-- /figures:{name} -->; "
                "add them where the figures go."
            )
        body = renderer()
        text = pattern(name).sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    return text


def stale_pages() -> list[str]:
    """Pages whose generated blocks differ from what the results files give."""
    return [
        page
        for page in sorted({p for p, _ in BLOCKS.values()})
        if render((ROOT / page).read_text(encoding="utf-8"), page)
        != (ROOT / page).read_text(encoding="utf-8")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only report pages that differ")
    args = parser.parse_args(argv)
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(
                f"{page}: generated figures differ from benchmarks/results; run python benchmarks/figures/report.py"
            )
        return 1 if stale else 0
    for page in stale:
        path = ROOT / page
        path.write_text(render(path.read_text(encoding="utf-8"), page), encoding="utf-8")
        print(f"rewrote the figures of {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
