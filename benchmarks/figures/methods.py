"""The figures of the preference and distillation demos (benchmarks/method_demos.py) on their recipe pages,
the GRPO and agent demos, GRPO against TRL, and the mixture-of-experts expert computation (benchmarks/moe_experts.py)."""

from __future__ import annotations

from figures.common import load, lr_text, minutes, provenance, table


def _row(name: str) -> dict:
    (row,) = [r for r in load("method_demos")["rows"] if r["demo"] == name]
    return row


def _timing(r: dict) -> str:
    load = r["load_average_1min"]
    return (
        f"Command: `{r['command']}`. Training took {minutes(round(r['train_seconds']))} (fp32, one thread; the machine's "
        f"1-minute load average went from {load[0]} to {load[1]}: other jobs shared its two cores, so the time is "
        "not a speed figure; the scores do not depend on it)."
    )


def _em(result: dict) -> str:
    return f"{result['accuracy']:.0%} ({result['num_correct']}/{result['num_total']})"


def dpo_demo() -> str:
    runs = sorted((r for r in load("method_demos")["rows"] if r["demo"] == "dpo"), key=lambda r: -r["lr"])
    first = runs[0]
    rows = [
        [
            "SmolLM2-135M-Instruct, base",
            f"{first['logps_accuracy_before']:.0%}",
            "-",
            _em(first["exact_match_before"]),
        ]
    ]
    rows += [
        [
            f"after {r['steps']} LoRA DPO steps, lr {lr_text(r['lr'])}",
            f"{r['logps_accuracy_after']:.0%}",
            f"{r['rewards_accuracy_after']:.0%} (margin {r['rewards_margin_after']:.2f}, chosen "
            f"{r['rewards_chosen_after']:.2f})",
            _em(r["exact_match_after"]),
        ]
        for r in runs
    ]
    header = [
        "",
        f"held-out pairs ({first['val_pairs']}): chosen more likely",
        "DPO reward accuracy",
        "exact match (greedy, 100 prompts)",
    ]
    timing = "\n".join(f"- {_timing(r)}" for r in runs)
    return table(header, rows, "lrrr") + "\n\n" + timing + "\n\n" + provenance("method_demos", up="../../")


def kd_demo() -> str:
    r = _row("kd")
    rows = [
        ["SmolLM2-135M-Instruct, base (the student before)", _em(r["exact_match_base"])],
        ["teacher: the base with the quickstart's LoRA adapter merged", _em(r["exact_match_teacher"])],
        [
            f"student after {r['steps']} distillation steps (LoRA, kd_ratio 1: no label loss)",
            _em(r["exact_match_student"]),
        ],
    ]
    timing = _timing(r)
    header = ["", "exact match (greedy, 100 held-out prompts)"]
    return table(header, rows, "lr") + "\n\n" + timing + "\n\n" + provenance("method_demos", up="../../")


def grpo_demo() -> str:
    """The GRPO demo (benchmarks/grpo_demo.py): held-out exact match of the SFT model and after GRPO."""
    runs = load("grpo_demo")["rows"]
    first = runs[0]
    rows = [["the quickstart's SFT model (60 LoRA steps, merged)", "-", "-", _em(first["exact_match_sft"])]]
    for r in runs:
        curve = [c for c in r["curve"] if c.get("reward") is not None]
        head, tail = curve[: max(1, len(curve) // 10)], curve[-max(1, len(curve) // 10) :]
        mean = lambda rows: sum(c["reward"] for c in rows) / len(rows)  # noqa: E731
        s = r["settings"]
        rows.append([
            f"+ {r['steps']} LoRA GRPO steps (lr {lr_text(s['lr'])}, G {s['group_size']}, "
            f"{s['batch_size']} prompts a step, T {s['temperature']}, beta {s['beta']})",
            f"{minutes(round(r['train_seconds']))}",
            f"{mean(head):.0%} -> {mean(tail):.0%}",
            _em(r["exact_match_grpo"]),
        ])  # fmt: skip
    header = [
        "",
        "GRPO time",
        "sampled reward (first -> last tenth of the steps)",
        "exact match (greedy, 100 held-out)",
    ]
    notes = "\n".join(
        f"- `{r['command']}` (fp32, {'one thread' if r.get('threads') == '1' else 'two threads'}): the machine's "
        f"1-minute load average went from {r['load_average_1min'][0]} to {r['load_average_1min'][1]} (other jobs "
        "shared its two cores, so the 20 minutes held fewer steps than an idle machine runs)."
        for r in runs
    )
    return table(header, rows, "lrrr") + "\n\n" + notes + "\n\n" + provenance("grpo_demo", up="../../")


def agent_demo() -> str:
    """The agent demo (benchmarks/agent_demo.py): held-out exact match with the calculator before, after SFT and
    after multi-turn GRPO; GRPO steps per hour with the rollouts in the step and beside training."""
    (r,) = load("agent_demo")["rows"]
    s = r["settings"]

    def em(result: dict) -> str:
        return f"{_em(result)}; {result['tool_called']} called the tool"

    rows = [
        ["SmolLM2-135M-Instruct, base (the tool offered, its format not taught)", em(r["exact_match_base"])],
        [f"after SFT ({s['sft_steps']} LoRA steps on the tool traces, merged)", em(r["exact_match_sft"])],
        [f"+ {s['grpo_steps']} multi-turn LoRA GRPO steps (G {s['group_size']}, {s['batch_size']} questions a "
         f"step, lr {lr_text(s['lr'])}, reward: exact match)", em(r["exact_match_grpo"])],
    ]  # fmt: skip
    header = ["", f"exact match (greedy, with the calculator, {s['heldout']} held-out questions)"]
    names = {"sync": "in the step (synchronous)", "beside": "beside training (max_off_policy_steps=1)"}
    runs = [  # in the order they ran; a repeat (benchmarks/agent_demo.py --speed-repeats) has its number
        (names[k.split("_")[1]] + (f", run {k.split('_')[2]}" if k.count("_") == 2 else ""), x)
        for k, x in r.items()
        if k.startswith(("grpo_sync", "grpo_beside"))
    ]
    speed_rows = [
        [
            name,
            f"{x['steps_per_hour']:.0f}",
            f"{x['median_step_seconds']:.0f} s",
            x["steps"],
            x["load_average_1min_after"],
        ]
        for name, x in runs
    ]
    header_speed = ["GRPO rollouts", "steps per hour", "median step", "steps run", "1-min load after"]
    loads = [
        x["load_average_1min_after"]
        for x in r.values()
        if isinstance(x, dict) and "load_average_1min_after" in x
    ]
    notes = (
        f"Command: `{r['command']}` (fp32, {'one thread' if r.get('threads') == '1' else 'two threads'} a "
        f"process). SFT: `{r['sft_command']}`; GRPO: `{r['grpo_command']}`. The machine's 1-minute load average "
        f"was {min(loads)} to {max(loads)} during the run: other jobs shared its two cores, so the step times are "
        "this run's, the GRPO runs (back to back, the same settings) compared with each other, not an idle "
        "machine's speed. Beside training is two processes of one thread each (the trainer and the sampling "
        "worker): on cores shared with other jobs they get a larger share of them than the synchronous run's one "
        "process, which is part of the difference; on an idle machine the gain is bounded by the sampling time "
        "the trainer no longer waits for."
    )
    speed = table(header_speed, speed_rows, "lrrrr")
    rewards = [c["reward"] for c in r["curve"] if c.get("reward") is not None]
    if rewards and min(rewards) == 1.0:
        signal = (
            f" Every conversation sampled in the {len(rewards)} GRPO steps was right (reward 1.0 in each step), so every "
            "group's advantages were zero: after this SFT, GRPO had no error left to learn from on this task."
        )
    else:
        signal = f" The sampled reward per GRPO step ranged from {min(rewards):.2f} to {max(rewards):.2f}."
    if len(runs) > 2:
        signal += (
            " The machine's load changed during the run (the load column): compare rates measured at about the same "
            "load, e.g. the repeated pair, which ran back to back in the other order."
        )
    notes += signal
    return (
        table(header, rows, "lr")
        + "\n\n"
        + speed
        + "\n\n"
        + notes
        + "\n\n"
        + provenance("agent_demo", up="../../")
    )


def _grpo_rows(part: str) -> dict[tuple[str, bool], dict]:
    return {
        (r["tool"], r.get("stop_token", True)): r for r in load("grpo_vs_trl")["rows"] if r["part"] == part
    }


def grpo_vs_trl() -> str:
    """docs/benchmarks.md: rollouts against transformers' generate, GRPO steps against TRL (grpo_vs_trl.py)."""
    r, rolls, steps = load("grpo_vs_trl"), _grpo_rows("rollout"), _grpo_rows("step")
    w = r["workload"]
    rows = []
    for stop, what in (
        (True, "stop at `<|im_end|>` (the recipe's setting)"),
        (False, "no stop token (every row 16 tokens)"),
    ):
        ft, hf = rolls[("ftune", stop)], rolls[("transformers", stop)]
        rows.append([what, ft["tokens_per_second"], hf["tokens_per_second"],
                     f"{ft['tokens_per_second'] / hf['tokens_per_second']:.2f}x", f"{ft['seconds_per_rollout']:.2f}",
                     f"{hf['seconds_per_rollout']:.2f}", f"{ft['mean_completion_tokens']} / {hf['mean_completion_tokens']}"])  # fmt: skip
    header = ["rollout: 4 prompts x 8 completions", "ftune tok/s", "transformers tok/s", "ftune / transformers",
              "ftune s", "transformers s", "tokens a completion (ftune / transformers)"]  # fmt: skip
    first = table(header, rows, "lrrrrrr")
    ft, trl = steps[("ftune", True)], steps[("TRL", True)]
    lines = [("step (end to end)", "step_seconds"), ("rollout (generation, rewards, reference log-probs)", "rollout_seconds"),
             ("- of which generation", "generation_seconds"),
             ("- of which rewards and reference log-probs", "scoring_and_reference_seconds"),
             ("update (step - rollout: policy forward, loss, backward, AdamW)", "update_seconds")]  # fmt: skip
    rows = [[what, f"{ft[k]:.2f}", f"{trl[k]:.2f}", f"{ft[k] / trl[k]:.2f}"] for what, k in lines]
    rows += [
        ["tokens a completion (mean)", ft["mean_completion_length"], trl["mean_completion_length"], "-"],
        ["peak RSS of the process, GiB", f"{ft['max_rss_mib'] / 1024:.2f}", f"{trl['max_rss_mib'] / 1024:.2f}",
         f"{ft['max_rss_mib'] / trl['max_rss_mib']:.2f}"],
    ]  # fmt: skip
    second = table([f"GRPO step, seconds (median of {ft['steps_measured']} / {trl['steps_measured']} steps)", "ftune",
                    "TRL", "ftune / TRL"], rows, "lrrr")  # fmt: skip
    runs = ", ".join(f"{tool} {row['run_step_seconds']}" for tool, row in (("ftune", ft), ("TRL", trl)))
    load1 = r["load_average_1min"]
    text = (
        f"Each run's median step (s): {runs}. The machine's 1-minute load average went from {load1[0]} to "
        f"{load1[1]} ({w['repeats']} runs of {w['steps_per_run']} steps a tool, alternating; {r['note']}). "
        f"Prompt token ids identical in both tools: {'yes' if w['same_prompt_tokens'] else 'NO'}."
    )
    return first + "\n\n" + second + "\n\n" + text + "\n\n" + provenance("grpo_vs_trl")


def moe_experts() -> str:
    """Mixture-of-experts experts on CPU (benchmarks/moe_experts.py): forward + backward time of each way."""
    r = load("moe_experts")
    ways = list(dict.fromkeys(row["way"] for row in r["rows"]))
    cases = list(dict.fromkeys((row["shape"], row["threads"]) for row in r["rows"]))
    by = {(row["shape"], row["threads"], row["way"]): row for row in r["rows"]}
    rows = [
        [f"{shape}, {threads} thread{'s' if threads > 1 else ''}"]
        + [
            f"{by[(shape, threads, way)]['fwd_bwd_ms']:.1f} ({by[(shape, threads, way)]['vs_hf_loop']:.2f}x)"
            if (shape, threads, way) in by
            else "-"
            for way in ways
        ]
        for shape, threads in cases
    ]
    header = ["shape", *(f"{way} ms (vs hf_loop)" for way in ways)]
    run_line = (
        f"`{r['command']}`: median forward + backward ms of each way, and its speed-up over transformers' "
        f"per-expert loop (hf_loop); fp32; 1-minute load {r['load_1min']}."
        + ("" if r["note"] in r["command"] else f" {r['note']}")
    )
    return "\n\n".join((table(header, rows, "l" + "r" * len(ways)), run_line, provenance("moe_experts")))


def dpo_packing() -> str:
    """Packed DPO against right padding (benchmarks/dpo_packing.py): positions, time and memory a step."""
    r = load("dpo_packing")
    rows = [
        [
            f"{row['layout']} (round {row['round'] + 1})",
            f"{row['positions_per_step']:.0f}",
            f"{row['labelled_per_step']:.0f}",
            f"{row['step_s_median']:.2f}",
            f"{row['positions_per_s']:.0f}",
            f"{row['peak_rss_gib']:.2f}",
            f"{row['load1_before']:.1f}",
        ]
        for row in r["rows"]
    ]
    header = ["layout", "positions a step", "labelled tokens a step", "median step s", "positions/s",
              "peak RSS GiB", "load before"]  # fmt: skip
    command = r["command"].split(" --note")[0]  # the note follows in full
    packed, padded = (
        sum(x["positions_per_step"] for x in r["rows"] if x["layout"] == k) for k in ("packed", "padded")
    )
    run_line = (
        f"`{command}`: {r['note']} Packing computes {1 - packed / padded:.1%} fewer positions here: the demo's "
        "answers are dates, close in length, so there is little padding to save."
    )
    return "\n\n".join((table(header, rows, "lrrrrrr"), run_line, provenance("dpo_packing", up="../../")))


def grpo_packing() -> str:
    """Packed GRPO updates against right padding (benchmarks/grpo_packing.py): positions, time and memory."""
    r = load("grpo_packing")
    rows = [
        [
            f"{row['layout']} (round {row['round'] + 1})",
            f"{row['positions_per_step']:.0f}",
            f"{row['labelled_per_step']:.0f}",
            f"{row['update_s_median']:.2f}",
            f"{row['rollout_s_median']:.2f}",
            f"{row['positions_per_s']:.0f}",
            f"{row['peak_rss_gib']:.2f}",
            f"{row['load1_before']:.1f}",
        ]
        for row in r["rows"]
    ]
    header = ["layout", "positions a step", "completion tokens a step", "median update s", "median rollout s",
              "positions/s of update", "peak RSS GiB", "load before"]  # fmt: skip
    command = r["command"].split(" --note")[0]  # the note follows in full

    def mean(layout: str, key: str) -> float:
        values = [x[key] for x in r["rows"] if x["layout"] == layout]
        return sum(values) / len(values)

    positions = 1 - mean("packed", "positions_per_step") / mean("padded", "positions_per_step")
    slower = mean("packed", "update_s_median") / mean("padded", "update_s_median")
    run_line = (
        f"`{command}`: {r['note']} Packing computes {positions:.1%} fewer positions a step here (the demo's "
        "prompts are close in length and most completions run to the 16-token limit), and its update takes "
        f"{slower:.2f}x the padded update's time: on CPU each of a packed row's 32 short documents is "
        "attended in a call of its own, where the padded batch makes one call. The rollout column holds the "
        "sampling and the reference pass (packed too), so it is not the same work in both layouts. The "
        "shipped configs keep `padding_free: false`; turn it on where completions differ in length."
    )
    return "\n\n".join((table(header, rows, "lrrrrrrr"), run_line, provenance("grpo_packing", up="../../")))
