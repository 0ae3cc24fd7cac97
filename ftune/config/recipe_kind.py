"""What kind of run a recipe, a config and a step folder belong to, told apart without torch.

A run's *objective* is what it trains on: "supervised" examples (the SFT and QAT recipes),
"preference" pairs (DPO), the same pairs for a "reward model" (a scalar score), a teacher's "distillation" (KD) or, for "online RL" (GRPO), the rewards
of completions it samples from prompts; the registry says which recipe has which. `ftune run` uses these checks before the recipe starts, so a DPO config given to the SFT
recipe, or a DPO run pointed at an SFT step folder, is named as such in well under a second
instead of failing after the model loads (``KeyError: tokens``, torch's optimizer message) or,
worse, continuing silently. A step folder's objective is read from its ``recipe_state.pt``
(`recorded_kind`: the pickle's opcodes are scanned, nothing is unpickled and torch is not imported).
"""

from __future__ import annotations

import pickletools
import re
import zipfile
from pathlib import Path
from typing import Any

from ftune import registry
from ftune.config.errors import ConfigError

# The keys `ftune.training.snapshot` writes first into recipe_state.pt.
RECIPE_KEY, KIND_KEY = "ftune_recipe", "ftune_recipe_kind"
_ADAPTER_FILE = "adapter_model.safetensors"  # ftune.checkpointing.adapter.ADAPTER_WEIGHTS_FILE
_STEP = re.compile(r"step_(\d+)")
_COMPLETE = ".complete"  # ftune.checkpointing.atomic.COMPLETE_MARKER

# The data each dataset builder of ftune.datasets gives.
_DATA_KINDS = {
    "preference_dataset": "preference",
    "demo_preference_dataset": "preference",
    "kto_dataset": "preference",
    "alpaca_dataset": "supervised",
    "instruct_dataset": "supervised",
    "chat_dataset": "supervised",
    "multimodal_chat_dataset": "supervised",
    "demo_dataset": "supervised",
    "text_completion_dataset": "supervised",
    "prompt_dataset": "prompts",
    "demo_prompt_dataset": "prompts",
}
# The data each objective trains on, how a dataset of each kind is described, and what to use instead.
_WANTS = {
    "preference": "preference",
    "reward model": "preference",
    "online RL": "prompts",
}  # every other objective: "supervised"
_GIVES = {
    "supervised": "supervised examples",
    "preference": "preference pairs (chosen, rejected)",
    "prompts": "prompts for online RL (no answer to train on)",
}
_TRAINS = {
    "supervised": "trains on supervised examples",
    "distillation": "trains on supervised examples (with a teacher)",
    "preference": "trains on preference pairs",
    "reward model": "trains a reward model (a scalar score) on preference pairs",
    "online RL": "samples completions of prompts and trains on their rewards (online RL)",
}
_RUN = {
    "supervised": "supervised examples",
    "preference": "preference pairs",
    "prompts": "online RL from prompts",
}
_USE = {
    "supervised": "a supervised dataset such as ftune.datasets.instruct_dataset",
    "preference": "ftune.datasets.preference_dataset (prompt, chosen, rejected)",
    "prompts": "ftune.datasets.prompt_dataset (a prompt and the fields its rewards read)",
}


def objective_of(recipe_name: str) -> str | None:
    """ "preference", "reward model", "distillation", "online RL" or "supervised" for a shipped training recipe;
    None otherwise."""
    recipe = registry.RECIPES.get(recipe_name)
    if recipe is None or not set(recipe.methods) & set(registry.TRAINING_METHODS):
        return None
    if any("dpo" in m for m in recipe.methods):
        return "preference"
    if any("grpo" in m or m == "ppo" for m in recipe.methods):
        return "online RL"
    if any(m.endswith("_rm") for m in recipe.methods):
        return "reward model"
    if any(m.startswith("kd") for m in recipe.methods):
        return "distillation"
    return "supervised"


def a_kind(objective: str) -> str:
    """The objective with its article: "a supervised", "an online RL"."""
    return f"{'an' if objective[:1].lower() in 'aeiou' else 'a'} {objective}"


def saved_objective(saved_recipe: str | None, saved_kind: str | None) -> str | None:
    """The objective of the run that wrote a step folder: its recipe's, when the registry knows it (a GRPO
    folder saved before GRPO had its own kind recorded "supervised"), else the recorded one."""
    return (objective_of(saved_recipe) if saved_recipe else None) or saved_kind


def _shipped(recipe: Path) -> registry.Recipe | None:
    found = registry.RECIPES.get(recipe.stem)
    return found if found is not None and found.file.resolve() == recipe.resolve() else None


def _config_name(source: str | None) -> str | None:
    if not source:
        return None
    try:
        name = str(Path(source).resolve().relative_to(registry.configs_dir().resolve()).with_suffix(""))
    except ValueError:
        return None
    return name if name in registry.CONFIGS else None


def recipe_kind_problems(cfg: Any, recipe: Path) -> list[str]:
    """A shipped config of another recipe, or a dataset of the other kind (pairs vs examples).

    Args:
        cfg: the loaded config.
        recipe: the recipe file; only shipped recipes are checked.

    Returns:
        One line per problem (empty: none).
    """
    shipped = _shipped(recipe)
    if shipped is None:
        return []
    name, data = shipped.name, cfg.to_dict()
    config = _config_name(cfg.source)
    method = registry.CONFIGS.get(config) if config else None
    if method is not None and method not in shipped.methods:
        owners = [r.name for r in registry.RECIPES.values() if method in r.methods]
        family = config.rpartition("/")[0] + "/"
        own = sorted(shipped.configs, key=lambda c: not c.startswith(family))[:3]  # same model first
        return [
            f"--config: {config} is a {method} config (for {', '.join(owners)}), and {name} runs "
            f"{'/'.join(shipped.methods)} configs ({', '.join(own)}, ...; see `ftune ls`). "
            f"Run `ftune run {owners[0]} --config {config}`, or give {name} one of its own configs."
        ]
    objective = objective_of(name)
    out = []
    for section in ("dataset", "dataset_val"):
        node = data.get(section)
        component = str(node.get("_component_", "")) if isinstance(node, dict) else ""
        kind = (
            _DATA_KINDS.get(component.rpartition(".")[2]) if component.startswith("ftune.datasets.") else None
        )
        wants = _WANTS.get(objective or "", "supervised")
        if kind is None or objective is None or kind == wants:
            continue
        objectives = {r.name: objective_of(r.name) for r in registry.RECIPES.values()}
        others = [r for r, o in objectives.items() if o is not None and _WANTS.get(o, "supervised") == kind]
        out.append(
            f"{section}._component_: {component} gives {_GIVES[kind]}, and {name} {_TRAINS[objective]} "
            f"({cfg.where(section)}). Use {_USE[wants]}, or run a recipe for {_RUN[kind]} "
            f"({', '.join(others[:4])})."
        )
    return out


def recorded_kind(recipe_state: Path) -> tuple[str | None, str | None]:
    """(recipe name, objective) that `snapshot` wrote into a recipe_state.pt; (None, None) if absent.

    The pickle inside torch's zip is scanned opcode by opcode (`pickletools.genops`: nothing is
    built, no code runs) up to the two leading keys, so a file of gigabytes costs microseconds.
    """
    try:
        with zipfile.ZipFile(recipe_state) as z:
            name = next((n for n in z.namelist() if n.endswith("data.pkl")), None)
            if name is None:
                return None, None
            with z.open(name) as f:
                return _leading_strings(f)
    except (OSError, zipfile.BadZipFile, ValueError):
        return None, None  # unreadable: the checkpointer's own load names the problem


def _leading_strings(f: Any) -> tuple[str | None, str | None]:
    found: dict[str, str] = {}
    pending = None  # the key whose value comes next
    for number, (op, arg, _) in enumerate(pickletools.genops(f)):
        if number > 64 or op.name in ("GLOBAL", "STACK_GLOBAL", "EMPTY_LIST"):
            break  # past the leading keys
        if op.name in _BOOKKEEPING:
            continue
        text = arg if isinstance(arg, str) and op.name.endswith("UNICODE") else None
        if pending is not None:
            if text is not None:
                found[pending] = text
            pending = None  # a value of another type (None: a recipe the registry does not know)
        elif text in (RECIPE_KEY, KIND_KEY):
            pending = text
    return found.get(RECIPE_KEY), found.get(KIND_KEY)


# Opcodes between a dict key and its value that are not values.
_BOOKKEEPING = ("PROTO", "FRAME", "MARK", "EMPTY_DICT", "BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE")


def resume_folder(checkpointer: dict[str, Any]) -> Path | None:
    """The step folder the checkpointer would resume from (as `resume_dir` picks it), or None."""
    choice = checkpointer.get("resume_from_checkpoint")
    output_dir = Path(str(checkpointer.get("output_dir", "output"))).expanduser()
    if choice is None:
        return None
    if choice == "auto":
        steps = [
            (int(m.group(1)), p)
            for p in (output_dir.iterdir() if output_dir.is_dir() else [])
            if (m := _STEP.fullmatch(p.name)) and (p / _COMPLETE).is_file()
        ]
        return max(steps)[1] if steps else None
    path = Path(str(choice)).expanduser()
    if not path.is_dir() and (output_dir / path).is_dir():
        path = output_dir / path
    return path if (path / _COMPLETE).is_file() else None  # else the checkpointer says what is wrong


def check_resume_folder(cfg: Any, recipe: Path) -> None:
    """Refuse to resume from a step folder of another kind of run: LoRA vs full, or another objective.

    Raises:
        ConfigError: naming the folder, what wrote it, and the two ways on (continue that run with
            its own recipe, or start this one from the folder's weights with a fresh optimizer).
    """
    data = cfg.to_dict()
    checkpointer = data.get("checkpointer")
    folder = resume_folder(checkpointer) if isinstance(checkpointer, dict) else None
    if folder is None:
        return
    name = recipe.stem
    key = "checkpointer.resume_from_checkpoint"
    lora_folder, lora_run = (folder / _ADAPTER_FILE).is_file(), isinstance(data.get("peft"), dict)
    saved_recipe, saved_kind = recorded_kind(folder / "recipe_state.pt")
    saved_kind = saved_objective(saved_recipe, saved_kind)
    objective = objective_of(name) if _shipped(recipe) else None
    wrote = f"written by {saved_recipe}" if saved_recipe else "written by an earlier run"
    fresh = "set checkpointer.resume_from_checkpoint=null and point checkpointer.checkpoint_dir at "
    if lora_folder != lora_run:
        what = "a LoRA run (it holds adapter_model.safetensors)" if lora_folder else "a full fine-tune"
        runs = (
            "trains LoRA adapters (a peft section)" if lora_run else "trains every weight (no peft section)"
        )
        start = (
            f"{fresh}{folder / 'merged'} (saved with checkpointer.save_adapter_weights_only=false)"
            if lora_folder
            else f"{fresh}{folder}"
        )
        problem = (
            f"{folder} is a step folder of {what}, {wrote}, and {name} {runs}: its optimizer state does "
            f"not fit this run. To continue that run, run the recipe that wrote it with its config; to start "
            f"this run from its weights with a fresh optimizer, {start}."
        )
    elif saved_kind is not None and objective is not None and saved_kind != objective:
        problem = (
            f"{folder} is a step folder of {a_kind(saved_kind)} run ({wrote}), and {name} is {a_kind(objective)} "
            f"recipe: its step, learning-rate schedule and data position belong to the other run. To continue "
            f"that run, use {saved_recipe or 'its recipe'}; to start {name} from its weights with a fresh "
            f"optimizer, {fresh}{folder / 'merged' if lora_folder else folder}."
        )
    else:
        return
    raise ConfigError([f"{key}: {problem} ({cfg.where(key)})"], cfg.source)
