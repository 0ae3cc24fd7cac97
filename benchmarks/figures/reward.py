"""The reward demo's figures (benchmarks/reward_demo.py): the reward model and GRPO with it against the
exact-match rule on the reward-model recipe's page, PPO's first steps on the PPO recipe's page."""

from __future__ import annotations

from figures.common import load, lr_text, minutes, provenance, table

ARM_NAMES = {"reward_model": "the reward model alone", "exact_match": "the exact-match rule alone"}


def _em(result: dict) -> str:
    return f"{result['accuracy']:.0%} ({result['num_correct']}/{result['num_total']})"


def _run() -> dict:
    (row,) = load("reward_demo")["rows"]
    return row


def _mean(curve: list[dict], key: str, part: slice) -> float:
    values = [c[key] for c in curve[part] if c.get(key) is not None]
    return sum(values) / len(values)


def _load(stage: dict) -> str:
    first, last = stage["load_average_1min"]
    return f"1-minute load average {first} -> {last}"


def _where(r: dict) -> str:
    threads = "one thread" if r["threads"] == "1" else f"OMP_NUM_THREADS={r['threads']}"
    return (
        f"Command: `{r['command']}` (fp32, {threads}, on the project's 2-core machine shared with other jobs: "
        "the times are not speed figures; the scores do not depend on them)."
    )


def reward_demo() -> str:
    """docs/recipes/reward_model_single_device.md: held-out pair accuracy, then GRPO with it against the rule."""
    r = _run()
    rm, s = r["reward_model"], r["settings"]
    (val,) = rm["val"][-1:]
    kinds = ", ".join(f"{k} {n}/{m}" for k, (n, m) in rm["val_accuracy_by_rejected_kind"].items())
    rm_table = table(
        ["reward model (LoRA, from the SFT model)", "steps", "time", "train accuracy (last steps)",
         "held-out pair accuracy", "by rejected answer", "held-out margin"],
        [["`smollm2/135M_demo_lora_rm`", s["rm_steps"], minutes(round(rm["seconds"])),
          f"{rm['train_accuracy_last10']:.0%}", f"{val['val_accuracy']:.0%} ({val.get('val_pairs', 100)} pairs)", kinds,
          f"{val['val_margin']:.2f}"]],
        "lrrrrrr",
    )  # fmt: skip
    rows = [["the quickstart's SFT model (60 LoRA steps, merged)", "-", "-", "-", _em(r["exact_match_sft"])]]
    for g in r["grpo"]:
        curve, n = g["curve"], len(g["curve"])
        head, tail = slice(0, max(1, n // 4)), slice(n - max(1, n // 4), n)
        rows.append([
            f"+ GRPO, reward: {ARM_NAMES[g['arm']]}",
            f"{g['steps']} ({minutes(round(g['seconds']))})",
            f"{_mean(curve, 'rewards/correct/mean', head):.0%} -> {_mean(curve, 'rewards/correct/mean', tail):.0%}",
            f"{_mean(curve, 'rewards/preference/mean', head):.2f} -> "
            f"{_mean(curve, 'rewards/preference/mean', tail):.2f}",
            _em(g["exact_match"]),
        ])  # fmt: skip
    grpo_table = table(
        ["", "GRPO steps (time)", "sampled: exact match (first -> last quarter)",
         "sampled: reward model score (first -> last quarter)", "exact match (greedy, 100 held-out)"],
        rows,
        "lrrrr",
    )  # fmt: skip
    lr_reached = ", ".join(
        f"{g['curve'][-1]['lr']:.2g} ({ARM_NAMES[g['arm']]})" for g in r["grpo"] if g["curve"][-1].get("lr")
    )
    loads = "; ".join(f"{ARM_NAMES[g['arm']]}: {_load(g)}" for g in r["grpo"])
    notes = (
        f"- GRPO settings, both runs: LoRA, lr {lr_text(s['lr'])}, {s['batch_size']} prompts a step, 8 completions "
        f"each, beta {s['beta']}, at most {s['grpo_steps']} steps or {s['minutes']:g} minutes; both runs score "
        "every completion with both rewards (the other at weight 0: logged, not trained on), side by side "
        f"with the PPO run. The config warms the learning rate up over its first 10 steps: at the last step it was "
        f"{lr_reached}. Loads: {loads}; reward model "
        f"{_load(rm)}.\n- {_where(r)}"
    )
    return "\n\n".join([rm_table, grpo_table, notes, provenance("reward_demo", up="../../")])


def ppo_demo() -> str:
    """docs/recipes/ppo_full_finetune_single_device.md: PPO's first steps with the demo's reward model."""
    r = _run()
    p = r["ppo"]
    summary = table(
        ["", "PPO steps (time)", "exact match (greedy, 100 held-out)"],
        [
            ["the quickstart's SFT model (60 LoRA steps, merged)", "-", _em(r["exact_match_sft"])],
            [f"+ PPO (value model: {p['value_model']})", f"{p['steps']} ({minutes(round(sum(c['step_seconds'] for c in p['curve'])))} of steps)",
             _em(p["exact_match"])],
        ],
        "lrr",
    )  # fmt: skip
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    keys = ("loss", "scores", "rlhf_reward", "kl", "approx_policy_kl", "clipfrac", "response_lengths")
    steps = table(["step", *keys], [[c["step"], *(fmt(c.get(k)) for k in keys)] for c in p["curve"]], "r" * 8)
    notes = f"- The config's settings as shipped (lr 1e-6, kl_coeff 0.01, ppo_epochs 2); {_load(p)}.\n- {_where(r)}"
    return "\n\n".join([summary, steps, notes, provenance("reward_demo", up="../../")])
