"""SIGKILL a LoRA run (dropout on) at many moments, resume it each time, and compare with a run never killed.

    python kill_driver.py <workdir> <checkpoint> <demo_dir> <kills_single> <kills_world2> [seed]

Started once by tests/recipes/test_kill9.py. Every run is a fork of this process (torch and the
recipes already imported), so a kill and its restart cost the recipe's own set-up, not a Python
start-up. At world size 2 the two ranks are two forks given torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR/PORT); when one dies, the other is killed at once, as torchrun does.

Where a run dies, drawn with a seeded RNG:
- inside a step: at the k-th module forward call, or at the k-th optimizer step (after backward,
  before the update);
- inside a save: after the k-th file of a step folder is written under its temporary name (not yet
  renamed), after the k-th rename, or after the k-th completion marker is removed (a step folder
  overwritten, or pruned);
- anywhere: SIGKILL from this process after a random delay.
The run kills itself (os.kill(getpid(), SIGKILL)) at the chosen event, so the kill point is exact.

After every kill this process checks the folder resume will pick: it holds its completion marker
and every file in it loads. The resumed run records the folder it picked. When a run finishes, its
final step folder is compared with the uninterrupted run's (adapters, optimizer state and RNG state,
bit for bit), and every logged loss with the uninterrupted run's loss at that step.
Writes the counts and any problem to <workdir>/results.json.
"""

import contextlib
import json
import os
import random
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "assets")]

from conftest import load_recipe  # noqa: E402
from tiny_checkpoint import tiny_overrides  # noqa: E402

from ftune.checkpointing import atomic  # noqa: E402
from ftune.config import load_config  # noqa: E402

MAX_STEPS = 5
STEP_KINDS = ("forward", "step")
SAVE_KINDS = ("write", "rename", "unmark")
EXTRA = [
    "peft.dropout=0.1",
    "save_every_n_steps=1",
    "checkpointer.resume_from_checkpoint=auto",
    "~lr_scheduler",
]
ADAPTER = "adapter_model.safetensors"


# The kill point of this process: it dies at the k-th event of kind `PLAN = (kind, k)` (None: never).
PLAN: tuple[str, int] | None = None
COUNTS = dict.fromkeys((*STEP_KINDS, *SAVE_KINDS), 0)
TRACE: list[Path] = []  # where the folder resume picked is recorded


def tick(kind: str) -> None:
    COUNTS[kind] += 1
    if PLAN == (kind, COUNTS[kind]):
        os.kill(os.getpid(), signal.SIGKILL)


def install_spies() -> None:
    """Count the events a kill point is drawn from (in this process, so every fork has them)."""
    torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: tick("forward"))
    register_optimizer_step_pre_hook(lambda *_: tick("step"))
    atomic_path, mark_incomplete, latest = (
        atomic.atomic_path,
        atomic.mark_incomplete,
        atomic.find_latest_complete,
    )

    @contextlib.contextmanager
    def spied_atomic_path(path):
        with atomic_path(path) as tmp:
            yield tmp
            tick("write")  # the whole file is under its temporary name, not yet renamed
        tick("rename")

    def spied_mark_incomplete(folder):
        mark_incomplete(folder)
        tick("unmark")

    def spied_latest(output_dir):
        found = latest(output_dir)
        if TRACE:
            picked = {
                "picked": str(found) if found else None,
                "complete": bool(found and atomic.is_complete(found)),
            }
            TRACE[0].write_text(json.dumps(picked))
        return found

    atomic.atomic_path, atomic.mark_incomplete, atomic.find_latest_complete = (
        spied_atomic_path,
        spied_mark_incomplete,
        spied_latest,
    )


def run_recipe(recipe, overrides) -> dict[str, int]:
    """One run in this process; returns the events counted."""
    COUNTS.update(dict.fromkeys(COUNTS, 0))
    load_recipe(recipe).main(load_config("smollm2/135M_lora", overrides))
    return dict(COUNTS)


def _counts(trace: Path) -> Path:
    """Where a rank writes its counts: next to its trace (`with_suffix` would give both ranks one file)."""
    return trace.with_name(trace.name + ".counts")


def _child(recipe, overrides, plan, trace: Path, env: dict, threads: int | None = None) -> None:
    """The training process (never returns): run the recipe, dying at `plan` = (kind, k) if given; at
    `threads` threads (OMP_NUM_THREADS unset) when given, which a resume must set back to the saved count."""
    global PLAN
    code = 1
    try:
        os.environ.update(env)
        if threads is not None:
            os.environ.pop("OMP_NUM_THREADS", None)
            torch.set_num_threads(threads)
        PLAN, TRACE[:] = plan, [trace]
        _counts(trace).write_text(json.dumps(run_recipe(recipe, overrides)))
        code = 0
    except BaseException:  # noqa: BLE001 - the parent sees the exit code, the test the message
        traceback.print_exc()
    finally:
        os._exit(code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(recipe, overrides, out, plan, world, victim=0, delay=None, threads=None):
    """Start one run (world forks), kill per plan/delay; returns (codes, picked-folder record, counts)."""
    port = str(_free_port())
    traces = [out.parent / f"{out.name}.trace{r}" for r in range(world)]
    for t in traces:
        t.unlink(missing_ok=True)
        _counts(t).unlink(missing_ok=True)
    pids = []
    for rank in range(world):
        env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, LOCAL_WORLD_SIZE=str(world))
        pid = os.fork()
        if pid == 0:
            _child(recipe, overrides, plan if rank == victim else None, traces[rank], env, threads)
        pids.append(pid)
    if delay is not None:
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[victim], signal.SIGKILL)
    codes = {}
    while len(codes) < world:
        pid, status = os.wait()
        codes[pids.index(pid)] = os.waitstatus_to_exitcode(status)
        for other in pids:  # one rank gone: end the others, as torchrun does
            if other != pid and pids.index(other) not in codes and codes[pids.index(pid)] != 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(other, signal.SIGKILL)
    picked = [json.loads(t.read_text()) if t.exists() else None for t in traces]
    counts = json.loads(_counts(traces[0]).read_text()) if codes[0] == 0 else None
    return [codes[r] for r in range(world)], picked, counts


def check_resume_folder(out: Path, problems: list[str]) -> bool:
    """The folder a resume would pick is complete and loads; True if an incomplete folder was present."""
    from safetensors.torch import load_file

    found = atomic.find_latest_complete(out)
    if found is not None:
        try:
            load_file(str(found / ADAPTER))
            torch.load(found / "recipe_state.pt", weights_only=True)
            json.loads((found / "adapter_config.json").read_text())
        except Exception as e:  # noqa: BLE001
            problems.append(f"{found} is marked complete but does not load: {e}")
    return any(p.is_dir() and not atomic.is_complete(p) for p in out.glob("step_*"))


def final_state(out: Path):
    from safetensors.torch import load_file

    folder = out / f"step_{MAX_STEPS}"
    return load_file(str(folder / ADAPTER)), torch.load(folder / "recipe_state.pt", weights_only=True)


def equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(equal, a, b))
    return a == b


def logged_losses(out: Path) -> list[tuple[int, float]]:
    rows = []
    for file in sorted((out / "logs").glob("*.jsonl")):
        for line in file.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by the kill
                row = json.loads(line)
                if "loss" in row:
                    rows.append((row["step"], row["loss"]))
    return rows


def campaign(name, recipe, world, n_kills, rng, base, workdir, results):
    """Kill `n_kills` times (restarting each time), starting a fresh output folder whenever a run finishes."""
    extra = [*EXTRA, f"max_steps={MAX_STEPS}"] + (
        ["batch_size=2", "dist_timeout_s=120"] if world == 2 else []
    )
    ref_out = workdir / f"{name}_ref"
    start = time.perf_counter()
    if world == 1:  # in this process: it also warms every fork up (lazy imports, caches)
        counts = run_recipe(recipe, [*base(ref_out), *extra])
    else:
        codes, _, counts = launch(recipe, [*base(ref_out), *extra], ref_out, None, world)
        if codes != [0] * world:
            raise RuntimeError(f"{name}: the uninterrupted run failed with {codes}")
    ref_time = time.perf_counter() - start
    ref_adapter, ref_state = final_state(ref_out)
    ref_losses = dict(logged_losses(ref_out))
    per_step = {k: counts[k] // MAX_STEPS for k in STEP_KINDS}
    per_save = {k: max(1, counts[k] // MAX_STEPS) for k in SAVE_KINDS}
    stats = results.setdefault(name, {"kills": 0, "by_kind": {}, "resumes": 0, "finished_runs": 0})
    stats.update(uninterrupted_run_s=round(ref_time, 2), mismatches=0, incomplete_folders_seen=0)
    problems = results.setdefault("problems", [])
    out, n, last = workdir / f"{name}_0", 0, ref_time
    kinds = [*STEP_KINDS, *SAVE_KINDS, "delay"]
    while stats["kills"] < n_kills:
        latest = atomic.find_latest_complete(out)
        remaining = MAX_STEPS - (atomic.step_of(latest) if latest else 0)
        kind = kinds[(stats["kills"] + stats["finished_runs"]) % len(kinds)]
        plan, delay = None, None
        if kind == "delay":  # a moment within what the previous launch took
            delay = rng.uniform(0.0, last)
        else:
            per = per_step[kind] if kind in STEP_KINDS else per_save[kind]
            plan = (kind, rng.randint(1, max(1, per * max(remaining, 1))))
        victim = rng.randrange(world) if kind in STEP_KINDS or kind == "delay" else 0  # rank 0 writes
        # Issue 46: every other resume on one device starts in a process at 2 threads; the step folder
        # was saved at 1, and the resumed steps must be computed at 1 to equal the reference.
        threads = 2 if world == 1 and latest is not None and stats["resumes"] % 2 else None
        start = time.perf_counter()
        codes, picked, _ = launch(recipe, [*base(out), *extra], out, plan, world, victim, delay, threads)
        last = time.perf_counter() - start
        stats["resumes"] += latest is not None
        for p in filter(None, picked):  # what each rank's checkpointer resumed from
            got = Path(p["picked"]) if p["picked"] else None
            if got != latest or (got is not None and not p["complete"]):
                problems.append(f"{name}: resume picked {p}, the newest complete folder was {latest}")
        if codes[victim] == -signal.SIGKILL:
            stats["kills"] += 1
            stats["by_kind"][kind] = stats["by_kind"].get(kind, 0) + 1
            stats["incomplete_folders_seen"] += check_resume_folder(out, problems)
            continue
        if codes != [0] * world:
            problems.append(f"{name}: a run exited with {codes} (plan {plan}, delay {delay})")
            break
        stats["finished_runs"] += 1  # finished before its kill point: compare, then start afresh
        compare(name, out, ref_adapter, ref_state, ref_losses, stats, problems)
        n += 1
        out = workdir / f"{name}_{n}"
    if out.exists():  # the last kill left a run to finish
        codes, _, _ = launch(recipe, [*base(out), *extra], out, None, world)
        stats["resumes"] += 1
        if codes != [0] * world:
            problems.append(f"{name}: the last resume exited with {codes}")
        else:
            stats["finished_runs"] += 1
            compare(name, out, ref_adapter, ref_state, ref_losses, stats, problems)


def compare(name, out, ref_adapter, ref_state, ref_losses, stats, problems) -> None:
    """A finished run's final adapters, optimizer and RNG state, and every logged loss, against the reference."""
    adapter, state = final_state(out)
    same = equal(adapter, ref_adapter) and equal(state, ref_state)
    wrong = [(s, v) for s, v in logged_losses(out) if ref_losses.get(s) != v]
    if not same or wrong:
        stats["mismatches"] += 1
        problems.append(f"{name} {out.name}: final state equal: {same}; losses not the reference's: {wrong}")


def main() -> None:
    workdir, checkpoint, demo, kills_single, kills_world2, *seed = sys.argv[1:]
    workdir, rng = Path(workdir), random.Random(int(seed[0]) if seed else 0)
    base = lambda out: tiny_overrides(Path(checkpoint), Path(demo), out)  # noqa: E731
    torch.set_num_threads(1)  # no OpenMP pool in this process: its forks run torch ops safely
    install_spies()
    results = {"problems": []}
    start = time.perf_counter()
    campaign("single", "lora_finetune_single_device", 1, int(kills_single), rng, base, workdir, results)
    campaign("world2", "lora_finetune_distributed", 2, int(kills_world2), rng, base, workdir, results)
    results["wall_s"] = round(time.perf_counter() - start, 2)
    t = os.times()  # this process and every fork: the cost that does not depend on the machine's load
    results["cpu_s"] = round(t.user + t.system + t.children_user + t.children_system, 2)
    (workdir / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
