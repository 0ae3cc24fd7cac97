"""docs/migrating-from-torchtune.md, rendered from the converter's table and its run over torchtune's own configs.

The page never restates the table by hand, and its converted share is measured, not claimed:
tests/config/test_torchtune_config.py renders it from the torchtune 0.6.1 wheel and fails when the
file differs.

    python -m ftune.torchtune.docs --wheel torchtune-0.6.1-py3-none-any.whl           # print
    python -m ftune.torchtune.docs --wheel torchtune-0.6.1-py3-none-any.whl --write   # write
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import ftune.torchtune.table as table
from ftune import registry
from ftune.torchtune.commands import COMMANDS
from ftune.torchtune.conversion import KeyReport
from ftune.torchtune.convert import convert_torchtune_config
from ftune.torchtune.corpus import TorchtuneConfig, read_wheel_configs
from ftune.torchtune.yaml_io import conversion_problems

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-torchtune.md"
WHEEL = "torchtune==0.6.1"


@dataclass(frozen=True)
class CorpusResult:
    """One torchtune config through the converter: what did not map, and what validation said."""

    path: str
    recipe: str
    unsupported: tuple[KeyReport, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.unsupported and not self.problems


def in_scope(config: TorchtuneConfig) -> bool:
    """A config of a recipe ftune has, for a model family ftune has."""
    return config.recipe in table.RECIPES and config.family in table.FAMILIES


def run_corpus(configs: list[TorchtuneConfig]) -> list[CorpusResult]:
    """Convert and validate every in-scope config (the recipe from torchtune's registry)."""
    results = []
    for c in configs:
        if not in_scope(c):
            continue
        conversion = convert_torchtune_config(c.data, recipe=c.recipe)
        problems = conversion_problems(conversion, c.path.replace("/", "_"))
        results.append(CorpusResult(c.path, str(c.recipe), tuple(conversion.unsupported), tuple(problems)))
    return results


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _code(text: str | None) -> str:
    return f"`{text}`" if text else "—"


def _mapping_tables() -> str:
    commands = _table(
        ["torchtune", "ftune", "note"],
        [[_code(k), _code(cmd), note] for k, (cmd, note) in COMMANDS.items()],
    )
    recipes = _table(
        ["torchtune recipe", "ftune recipe"],
        [[_code(k), _code(v)] for k, v in table.RECIPES.items()]
        + [[_code(k), v] for k, v in table.MISSING_RECIPES.items()],
    )
    keys = {**table.SETTINGS, **table.NESTED_SETTINGS}
    rows = [[_code(k), _code(r.target) if r.target else "(none)", r.note] for k, r in keys.items()]
    only: dict[tuple[str, str | None, str], list[str]] = {}  # a key of some recipes -> those recipes
    for recipe, recipe_keys in table.RECIPE_SETTINGS.items():
        for k, r in recipe_keys.items():
            only.setdefault((k, r.target, r.note), []).append(recipe)
    rows += [
        [f"{_code(k)} ({', '.join(recipes)} only)", _code(target) if target else "(none)", note]
        for (k, target, note), recipes in only.items()
    ]
    settings = _table(["torchtune key", "ftune key", "note"], rows)
    families = _table(
        ["torchtune.models.*", "ftune.models.*"], [[_code(k), _code(v)] for k, v in table.FAMILIES.items()]
    )
    components = []
    for name, rule in table.COMPONENTS.items():
        args = ", ".join(f"{a} → {b}" if a != b else a for a, b in rule.args.items())
        covered = ", ".join(rule.covered)
        detail = "; ".join(
            x for x in (args and f"arguments: {args}", covered and f"not needed: {covered}", rule.note) if x
        )
        components.append([_code(name), _code(rule.target) if rule.target else "(top-level keys)", detail])
    components += [[_code(name), "(none)", why] for name, why in table.UNSUPPORTED_COMPONENTS.items()]
    lora = _table(
        ["lora_* builder argument", "peft (ftune.peft.apply_lora)"],
        [
            [
                _code("lora_attn_modules"),
                "targets: " + ", ".join(f"{k} → {v}" for k, v in table.LORA_ATTN_MODULES.items()),
            ]
        ]
        + [[_code("apply_lora_to_mlp: true"), "targets += " + ", ".join(table.LORA_MLP)]]
        + [[_code("apply_lora_to_output: true"), "targets += output"]]
        + [[_code(k), _code(v)] for k, v in table.LORA_ARGS.items()]
        + [[_code("qlora_<model>"), "`quantize_base: true`"]],
    )
    tokenizer = ", ".join(f"{k} ({v})" for k, v in table.TOKENIZER_COVERED.items())
    return (
        "## Commands\n\n" + commands + "\n\n## Recipes\n\n" + recipes + "\n\n"
        "## Recipe-level keys\n\n" + settings + "\n\n"
        "## Models\n\nA model builder keeps its size; its family picks the tokenizer builder "
        "(`ftune.models.<family>.<family>_tokenizer`, arguments `path` and `max_seq_len`; not needed: "
        f"{tokenizer}).\n\n" + families + "\n\n"
        "A `lora_<model>` or `qlora_<model>` builder becomes the base builder plus a `peft` section:\n\n"
        + lora
        + "\n\n## Preference, distillation, evaluation and PPO configs\n\n"
        "- DPO: a `lora_dpo` config's reference model is the policy with its adapters off, in both projects. "
        "torchtune's full DPO loads the reference with its own `ref_checkpointer`; ftune's "
        "`full_dpo_distributed` takes it from the checkpointer's starting weights, so a `ref_checkpointer` "
        "of the checkpointer's folder is covered and one of another folder is unsupported.\n"
        "- Distillation: torchtune's `loss` (the cross-entropy), `kd_loss` (the forward KL) and `kd_ratio` "
        "become one `loss` section, `ftune.training.KDLoss` with `kd_ratio`. `teacher_model` and "
        "`teacher_checkpointer` keep their names; ftune's `teacher_tokenizer` is the student's tokenizer, "
        "because torchtune tokenizes once for both models.\n"
        "- lm-eval: `eleuther_eval` configs run with ftune's `eval` recipe and its `lm_eval_*` keys (table "
        "above); `heldout_file` and `text_files` stay unset, so only the lm-eval tasks run.\n"
        "- PPO: `policy_model` becomes `model`; `value_checkpointer` and `reward_checkpointer` keep their names "
        "(the value model resumes with the run, the frozen reward model saves nothing); "
        "`reward_and_value_model` is covered (ftune builds both models from their checkpoints' config.json, "
        "with a one-output score head) and so is a `ref_policy_checkpointer` of the checkpointer's folder (the "
        "reference is the starting weights); `num_steps` counts prompts in torchtune and becomes `max_steps`, "
        "optimizer steps (`num_steps // batch_size` trajectories of `ppo_epochs * batch_size / ppo_batch_size` "
        "steps); a `text_completion_dataset` of prompts becomes `ftune.datasets.prompt_dataset` (each prompt "
        "in the model's chat format, where torchtune tokenizes the raw text); `forward_batch_size` equal to "
        "`batch_size` is covered.\n"
        "\n## Components\n\n" + _table(["torchtune _component_", "ftune _component_", "details"], components)
    )


def _corpus_section(configs: list[TorchtuneConfig], results: list[CorpusResult]) -> str:
    ok = [r for r in results if r.ok]
    out_of_scope = Counter(
        "recipe not in ftune" if c.recipe not in table.RECIPES else "model family not in ftune"
        for c in configs
        if not in_scope(c) and c.recipe is not None
    )
    unregistered = sum(c.recipe is None for c in configs)
    lines = [
        f"The {WHEEL} wheel ships {len(configs)} YAML configs; {len(results)} are for a recipe and a model family "
        f"ftune has (Llama 3.3 counts: its 70B model is Llama 3.1 70B's architecture). "
        f"**{len(ok)} of {len(results)} ({100 * len(ok) / len(results):.0f}%) convert with every key mapped or "
        "covered and validate** against their ftune recipe's settings (`ftune validate`; the weights need "
        "not be present). Not in scope: "
        + ", ".join(f"{n} ({why})" for why, n in sorted(out_of_scope.items()))
        + f", {unregistered} (in no torchtune recipe's registry entry).",
        "",
        "The exceptions, each with its reason:",
        "",
    ]
    for r in results:
        if not r.ok:
            why = "; ".join([f"`{u.key}`: {u.detail}" for u in r.unsupported] + list(r.problems))
            lines.append(f"- `{r.path}` ({r.recipe}): {why}")
    if len(ok) == len(results):
        lines.append("- none")
    return "\n".join(lines)


# The page's commands, as printed (tests/config/test_torchtune_config.py runs them from the wheel).
MIGRATION_BLOCK = (
    "# needs: network\n"
    "ftune convert torchtune-config llama3_2/1B_lora_single_device.yaml -o 1B_lora.yaml   # a config of the torchtune wheel\n"
    "ftune validate 1B_lora.yaml   # against the recipe its header names\n"
)


def render(configs: list[TorchtuneConfig], results: list[CorpusResult]) -> str:
    """The whole page (markdown, ending in a newline)."""
    distributed = [
        r.name for r in registry.RECIPES.values() if r.distributed and r.name in table.RECIPES.values()
    ]
    return (
        "# Migrating from torchtune\n\n"
        "<!-- generated by `python -m ftune.torchtune.docs --write`: do not edit -->\n\n"
        "ftune keeps torchtune's model: a recipe, a YAML config with `_component_` nodes, overrides on the "
        "command line. The names moved in a few places. Convert a config with\n\n"
        f"```bash\n{MIGRATION_BLOCK}```\n\n"
        "It writes the ftune config, headed by the command that runs it (`# Run: ftune run <recipe> --config "
        "<this file>`) and a comment for every key that did not map one to one, checks it as `ftune "
        "validate` does, and prints each unsupported key with its reason (exit status 1 when there is one). "
        "`ftune validate` reads the recipe from that header, so the file validates as it says without "
        "`--recipe`. The recipe is inferred from the config (`--recipe` names it); one ftune config "
        f"serves a method's single-device and distributed recipe ({', '.join(distributed)}). Every key "
        "is mapped (to the ftune key below), covered (ftune needs no key: the reason says why) or "
        "unsupported; none is dropped silently. Paths: `/tmp/<model>` becomes "
        "`${ftune_home:}/models/<model>` (where `ftune download` puts models) and `/tmp/torchtune/<run>` "
        "becomes `output/<run>`.\n\n"
        "## torchtune's own configs\n\n"
        + _corpus_section(configs, results)
        + "\n\n"
        + _mapping_tables()
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ftune.torchtune.docs", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--wheel", type=Path, required=True, help=f"the {WHEEL} wheel (pip download --no-deps)"
    )
    parser.add_argument("--write", action="store_true", help=f"write {DOC.name} instead of printing it")
    args = parser.parse_args(argv)
    configs = read_wheel_configs(args.wheel)
    text = render(configs, run_corpus(configs))
    if args.write:
        DOC.write_text(text, encoding="utf-8")
        sys.stderr.write(f"Wrote {DOC}\n")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
