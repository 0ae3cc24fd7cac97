"""Runs under torchrun: one distributed recipe, many runs in one process group (launching torchrun
per run would cost ~10 s each). Writes {case: "ok" | error} as JSON on rank 0.

    torchrun --nproc_per_node 2 dist_driver.py <recipe> <config> <workdir> <checkpoint> <case>...

Cases are feature names from tests/recipes/features.py, plus "losses" (4 steps at batch_size 2 per
rank, logs kept in <workdir>/losses for the test to compare with the single-device run; the DPO
recipes also validate at steps 2 and 4; "losses_tp" and "losses_cp" the same run split), plus
"resume_dropout" (the resume check with LoRA dropout on), "sigterm" (SIGTERM on rank 0 only), "optimizers" (SGD and AdamW swapped in, fused and not), plus
"<feature>@<mutant>": the feature's check under that mutant of tests/recipes/mutants.py, whose
result is "killed: ...", "survived" or "error: ..." (the mutation test of the distributed recipes).
Each case's wall time goes to <workdir>/timings.json.
"""

import json
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "assets")]

import features  # noqa: E402
import features_parallel  # noqa: E402
from conftest import load_recipe, overrides_for  # noqa: E402
from features import CHECKS, read_log  # noqa: E402
from mutants import mutant_named, outcome  # noqa: E402
from tiny_checkpoint import TEACHER_SIZES, kd_overrides, make_tiny_checkpoint  # noqa: E402
from tiny_preference import VAL_EVERY_2  # noqa: E402

from ftune import registry  # noqa: E402
from ftune.config import load_config  # noqa: E402

# The compile check here captures each layer with dynamo and runs its graph as is: two processes
# tracing through FSDP2's hooks and AOTAutograd cost 1-2 minutes a recipe on 2 cores. The
# single-device run checks AOTAutograd (aot_eager), and `-m slow` inductor.
features.COMPILE_BACKEND = "eager"


# "losses_tp" / "losses_cp": the "losses" run split by tensor / context parallel; batch_size 8 reaches
# the recipe as 4 (_per_rank), the one row's batch: the single-device run's.
SPLITS = {
    "losses_tp": ("batch_size=8", "tensor_parallel_dim=2"),
    "losses_cp": ("batch_size=8", "context_parallel_dim=2"),
}


def main() -> None:
    recipe, config, workdir, checkpoint, *cases = sys.argv[1:]
    workdir, checkpoint = Path(workdir), Path(checkpoint)
    dist.init_process_group(
        "gloo", timeout=timedelta(seconds=300)
    )  # created here, so the recipes' destroy_distributed keeps it
    module = load_recipe(recipe)
    if registry.RECIPES[recipe].features["tensor_parallel"] == registry.YES and "peft" in load_config(config):
        features_parallel.FULL_WEIGHTS = ("~peft",)  # the LoRA reward model: tensor parallel checked full
    teacher = []
    if (registry.method_of(config) or "").startswith("kd"):  # the tiny teacher of tests/recipes/conftest.py
        if dist.get_rank() == 0:
            make_tiny_checkpoint(workdir / "teacher", seed=1, sizes=TEACHER_SIZES)
        dist.barrier()
        teacher = kd_overrides(workdir / "teacher")

    def run(*overrides, output_dir):
        # batch_size 2 per rank: the global batch of the single-device runs (batch_size 4).
        base = [*overrides_for(config, checkpoint, workdir / "demo", output_dir), *teacher]
        dist.barrier()  # every rank has done the check's file operations before the run starts
        module.main(load_config(config, [*base, "batch_size=2", *_per_rank(overrides)]))
        dist.barrier()
        return read_log(output_dir), output_dir

    results, timings = {}, {}
    for case in cases:
        out = workdir / case.replace("@", "_")
        start = time.perf_counter()
        try:
            if "@" in case:
                feature, name = case.split("@")
                results[case] = outcome(feature, mutant_named(feature, name), run, out)
            else:
                if case.startswith("losses"):  # the DPO runs validate too: their figures are compared as well
                    dpo = registry.method_of(config) in ("lora_dpo", "full_dpo")
                    split = SPLITS.get(case, ())  # one row of 2 ranks reading the single-device batch
                    run("max_steps=4", *split, *(VAL_EVERY_2 if dpo else ()), output_dir=out)
                elif case == "sigterm":
                    sigterm_on_rank_0(run, out)
                elif case == "optimizers":
                    swapped_optimizers(run, out)
                elif case == "resume_dropout":  # LoRA dropout draws in every step after the restore point
                    features.resume(
                        lambda *o, output_dir: run(*o, "peft.dropout=0.1", output_dir=output_dir), out
                    )
                else:
                    CHECKS[case](run, out)
                results[case] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            results[case] = traceback.format_exc(limit=6)
        timings[case] = round(time.perf_counter() - start, 2)
        dist.barrier()
    if dist.get_rank() == 0:
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
        (workdir / "timings.json").write_text(json.dumps(timings, indent=2))
    dist.destroy_process_group()


def sigterm_on_rank_0(run, out: Path) -> None:
    """SIGTERM reaches rank 0 only, during step 2 (as a scheduler's pre-emption may reach one process
    first): every rank stops at the same step boundary, the step folder is saved complete, and every
    rank exits 143."""
    import os
    import signal

    from ftune import training
    from ftune.checkpointing.atomic import is_complete

    log_step = training.Reporter.step

    def step_then_signal(self, step, *args, **kwargs):
        log_step(self, step, *args, **kwargs)
        if step == 2 and dist.get_rank() == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    training.Reporter.step = step_then_signal
    code = None
    try:
        run("max_steps=50", "save_every_n_steps=null", output_dir=out)
    except SystemExit as stop:
        code = stop.code
    finally:
        training.Reporter.step = log_step
    codes = [None] * dist.get_world_size()
    dist.all_gather_object(codes, code)
    assert codes == [143] * len(codes), f"exit codes by rank: {codes}"
    folders = sorted(p.name for p in out.glob("step_*"))
    assert folders == ["step_2"] and is_complete(out / "step_2"), folders


def swapped_optimizers(run, out: Path) -> None:
    """SGD and AdamW, fused and not, as a user swaps them into a shipped config: each steps the sharded
    parameters twice, or is refused before its first step with the setting to change (ftune's check
    of what FSDP2 can step, ftune/training/step/optimizer.py)."""
    import math

    from ftune.config.errors import ConfigError

    steps = ("max_steps=2", "save_every_n_steps=null")
    runs = {
        "sgd": "optimizer={_component_: torch.optim.SGD, lr: 0.01}",
        "sgd_fused_false": "optimizer={_component_: torch.optim.SGD, lr: 0.01, fused: false}",
        "adamw": "optimizer={_component_: torch.optim.AdamW, lr: 0.0001}",
        "adamw_fused": "optimizer={_component_: torch.optim.AdamW, lr: 0.0001, fused: true}",
        "adamw_foreach": "optimizer={_component_: torch.optim.AdamW, lr: 0.0001, foreach: true}",
    }
    for name, optimizer in runs.items():
        logs, _ = run(*steps, optimizer, output_dir=out / name)
        got = [r["loss"] for r in logs if "loss" in r]
        assert len(got) == 2 and all(math.isfinite(x) for x in got), f"{name}: {logs}"
    try:  # the shipped config's fused: true kept under SGD, as `optimizer=torch.optim.SGD` does
        run(*steps, "optimizer._component_=torch.optim.SGD", output_dir=out / "sgd_fused")
    except ConfigError as e:
        assert "~optimizer.fused" in str(e) and "aten._fused_sgd_" in str(e), str(e)
    else:
        raise AssertionError(
            "SGD with fused: true ran at world size 2: the check of what FSDP2 steps is gone"
        )
    assert not (out / "sgd_fused").exists(), "the refusal came after the run had written its output"


def _per_rank(overrides):
    """Single-device batch sizes are global: halve them so that 2 ranks see the same global batch."""
    out = []
    for o in overrides:
        if o.startswith("batch_size="):
            o = f"batch_size={max(1, int(o.split('=')[1]) // 2)}"
        out.append(o)
    return out


if __name__ == "__main__":
    main()
