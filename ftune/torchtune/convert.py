"""Convert a torchtune 0.6.1 config into an ftune config, reporting what became of every key.

    conversion = convert_torchtune_config(yaml.safe_load(text))
    conversion.config     # the ftune config (a dict, in ftune's key order)
    conversion.recipe     # the ftune recipe it is for
    conversion.report     # one KeyReport per torchtune key: mapped, covered or unsupported

The key and component mappings are the table in `table.py`; this module holds the rules
that need code: which recipe a config is for, model builders (a `lora_*`/`qlora_*` builder becomes
the base builder plus a `peft` section; a distillation config's teacher too), tokenizers (picked
by the model's family) and paths (torchtune's `/tmp/<model>` placeholders become
`${ftune_home:}/models/<model>`). The rules of the DPO, distillation and lm-eval configs are in
`methods.py`; the result types are in `conversion.py`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import ftune.torchtune.methods as methods
import ftune.torchtune.table as table
import ftune.torchtune.vision as vision
from ftune import registry
from ftune.config.recipe_file import recipe_settings
from ftune.torchtune.conversion import Conversion, Converter, KeyReport

_SETTINGS_ORDER = [
    "output_dir seed device dtype batch_size grad_accum_steps epochs max_steps clip_grad_norm shuffle".split(),
    "compile activation_checkpointing activation_offloading optimizer_in_backward".split(),
    "fsdp_cpu_offload log_every_n_steps profile qat prompt images system max_new_tokens temperature top_k top_p".split(),
]
_SECTION_ORDER = (
    "model tokenizer checkpointer teacher_model teacher_tokenizer teacher_checkpointer peft quantizer dataset "
    "loss optimizer lr_scheduler metric_logger"
)


def _path(value: Any) -> Any:
    """torchtune's path placeholders: /tmp/torchtune/<run> -> output/<run>, /tmp/<model> -> models folder."""
    if not isinstance(value, str) or not value.startswith("/tmp/"):
        return value
    rest = value.removeprefix("/tmp/").rstrip("/")
    if rest.startswith("torchtune/"):
        return "output/" + rest.removeprefix("torchtune/")
    return "${ftune_home:}/models/" + rest


def infer_recipe(tt: dict[str, Any]) -> str:
    """The torchtune recipe a config is for, from its content (torchtune configs do not name it).

    A config serves a method's single-device and distributed recipe alike; the single-device name
    is returned where torchtune has one.

    Raises:
        ValueError: never for a config of torchtune 0.6.1 (every one of its recipes has an ftune counterpart).
    """
    model = str((tt.get("model") or {}).get("_component_", ""))
    quantizer = str((tt.get("quantizer") or {}).get("_component_", ""))
    loss = str((tt.get("loss") or {}).get("_component_", ""))
    lora = model.rsplit(".", 1)[-1].startswith(("lora_", "qlora_"))
    if "reward_and_value_model" in tt or "ref_policy_checkpointer" in tt:
        return "ppo_full_finetune_single_device"
    if "teacher_model" in tt or "kd_loss" in tt:
        return "knowledge_distillation_single_device"
    if loss.startswith("torchtune.rlhf.") or "ref_checkpointer" in tt:
        return "lora_dpo_single_device" if lora else "full_dpo_distributed"
    if "tasks" in tt:
        return "eleuther_eval"
    if "QAT" in quantizer:
        return "qat_lora_finetune_distributed" if lora else "qat_distributed"
    if "prompt" in tt and "max_new_tokens" in tt:
        return "generate"
    if quantizer and "dataset" not in tt:
        return "quantize"
    return "lora_finetune_single_device" if lora else "full_finetune_single_device"


def _convert_model(c: Converter, node: dict[str, Any], section: str = "model") -> None:
    """The student's (or only) model, with its peft section; PPO's policy_model, which is ftune's model; or, as
    section teacher_model, the teacher."""
    component = str(node.get("_component_", ""))
    parts = component.split(".")
    if len(parts) != 4 or parts[:2] != ["torchtune", "models"] or parts[2] not in table.FAMILIES:
        c.note(f"{section}._component_", "unsupported", f"{component}: ftune has no such model family")
        return
    tt_family, name = parts[2], parts[3]
    family = table.FAMILIES[tt_family]
    lora = name.startswith(("lora_", "qlora_"))
    policy = section in ("model", "policy_model")
    if policy:
        c.family = family
    else:
        c.teacher_family = family
        if lora:
            why = "ftune's teacher is a full model (merge a trained adapter into it with teacher_adapter_dir)"
            for key in node:
                c.note(f"{section}.{key}", "unsupported", f"{component}: {why}")
            return
    base = name.split("_", 1)[1] if lora else name
    variant_note = table.BUILDER_SUFFIXES.get(base)
    if variant_note is not None:
        base = base.rsplit("_", 1)[0]  # qwen2_5_7b_instruct -> qwen2_5_7b
    base = table.BUILDER_RENAMES.get(base, base)
    module = importlib.import_module(f"ftune.models.{family}")
    if not callable(getattr(module, base, None)):
        builders = sorted(n for n in module.__all__ if n.startswith(family + "_") and "tokenizer" not in n)
        c.note(
            f"{section}._component_",
            "unsupported",
            f"{component}: ftune has no builder {base}; {family} has {builders}",
        )
        return
    c.set(f"{'model' if policy else section}._component_", f"ftune.models.{family}.{base}")
    detail = f"ftune.models.{family}.{base}" + (" + peft section" if lora else "")
    detail = f"model: {detail}" if section == "policy_model" else detail
    if not policy:
        detail += "; teacher_tokenizer is the student's tokenizer (torchtune tokenizes once, for both models)"
    c.note(f"{section}._component_", "mapped", detail + (f" ({variant_note})" if variant_note else ""))
    if family == vision.FAMILY:
        vision.convert_model(c, node, base, lora)
        return
    if not lora:
        for key in sorted(set(node) - {"_component_"}):
            c.note(
                f"{section}.{key}",
                "unsupported",
                "ftune's model builders take no arguments (published sizes)",
            )
        return
    peft: dict[str, Any] = {"_component_": "ftune.peft.apply_lora", "targets": []}
    for key, value in node.items():
        path = f"model.{key}"
        if key == "_component_":
            continue
        if key == "lora_attn_modules":
            peft["targets"] += [table.LORA_ATTN_MODULES[m] for m in value]
            c.note(path, "mapped", "peft.targets (output_proj is o_proj)")
        elif key == "apply_lora_to_mlp":
            peft["targets"] += list(table.LORA_MLP) if value else []
            c.note(
                path,
                "mapped",
                f"peft.targets gets {', '.join(table.LORA_MLP)}" if value else "false: no MLP targets",
            )
        elif key == "apply_lora_to_output":
            peft["targets"] += ["output"] if value else []
            c.note(path, "mapped", "peft.targets gets output" if value else "false: output not adapted")
        elif key in table.LORA_ARGS:
            peft[table.LORA_ARGS[key]] = value
            c.note(path, "mapped", f"peft.{table.LORA_ARGS[key]}")
        else:
            c.note(path, "unsupported", f"no ftune.peft.apply_lora argument for {key}")
    peft.setdefault("dropout", 0.0)  # torchtune's builders default to 0.0, as does apply_lora
    peft.setdefault("use_dora", False)
    if name.startswith("qlora_"):
        peft["quantize_base"] = True
    peft.setdefault("quantize_base", False)
    c.out["peft"] = peft


def _convert_tokenizer(c: Converter, node: dict[str, Any]) -> None:
    if c.family is None:
        c.note("tokenizer._component_", "unsupported", "the model section did not convert, so no family")
        return
    target = f"ftune.models.{c.family}.{c.family}_tokenizer"
    c.set("tokenizer._component_", target)
    c.note("tokenizer._component_", "mapped", f"{target} (the model's family)")
    for key, value in node.items():
        path = f"tokenizer.{key}"
        if key == "_component_" or vision.tokenizer_key(c, key, value):
            continue
        if key in table.TOKENIZER_ARGS:
            if key in ("path", "vocab_path") and isinstance(value, str) and value.endswith("vocab.json"):
                value = value.rsplit("/", 1)[0]  # HF tokenizers: the folder holding tokenizer.json
            c.set(f"tokenizer.{table.TOKENIZER_ARGS[key]}", _path(value))
            c.note(path, "mapped", f"tokenizer.{table.TOKENIZER_ARGS[key]}")
        elif key in table.TOKENIZER_COVERED and (value is None or key in ("merges_file", "merges_path")):
            c.note(path, "covered", table.TOKENIZER_COVERED[key])
        else:
            c.note(path, "unsupported", f"{key}={value!r}: no ftune tokenizer argument for it")


def _convert_component(c: Converter, section: str, node: dict[str, Any]) -> None:
    component = str(node.get("_component_", ""))
    rule = table.COMPONENTS.get(component)
    if rule is None:
        why = table.UNSUPPORTED_COMPONENTS.get(component, "no ftune counterpart in the table")
        c.note(f"{section}._component_", "unsupported", f"{component}: {why}")
        return
    into = table.SECTION_INTO.get(section, section)  # the ftune section (kd_loss is KDLoss, the loss)
    if rule.target is not None:
        c.set(f"{into}._component_", rule.target)
        for key, value in rule.set_args.items():
            c.set(f"{into}.{key}", value)
    target = rule.target or rule.note or "no section in ftune"
    c.note(f"{section}._component_", "mapped", target if into == section else f"{into}: {target}")
    if section == "profiler" and node.get("enabled"):
        rule = dataclasses.replace(rule, covered={})  # an enabled profiler's settings matter
    for key, value in node.items():
        path = f"{section}.{key}"
        if key == "_component_":
            continue
        if key in rule.args and rule.target is None:  # e.g. profiler.enabled -> profile
            c.out[rule.args[key]] = value
            c.note(path, "mapped", rule.args[key])
        elif key in rule.args:
            if key == "model_type":
                value = c.teacher_family if section == "teacher_checkpointer" else c.family
            c.set(f"{into}.{rule.args[key]}", _path(value))
            c.note(path, "mapped", f"{into}.{rule.args[key]}")
        elif key in rule.covered and rule.covered_only_as.get(key, value) == value:
            c.note(path, "covered", rule.covered[key])
        else:
            c.note(path, "unsupported", f"{rule.target or section} has no argument for {key}={value!r}")


def _splits(recipe: str, feature: str) -> bool:
    return registry.RECIPES[recipe].features.get(feature) == registry.YES


def _settings_fields(recipe: str) -> set[str]:
    return {f.name for f in dataclasses.fields(recipe_settings(registry.RECIPES[recipe].file))}


def _convert_setting(c: Converter, key: str, rule: table.Key, value: Any, fields: set[str]) -> None:
    if key == "tensor_parallel_dim" and value not in (1, None) and not _splits(c.recipe, "tensor_parallel"):
        c.note(
            key,
            "unsupported",
            f"{value}: {c.recipe} has no tensor parallelism (full_finetune_distributed has)",
        )
    elif key == "max_steps_per_epoch" and value is not None and c.tt.get("epochs", 1) != 1:
        c.note(
            key,
            "unsupported",
            f"{value} per epoch over {c.tt['epochs']} epochs: ftune's max_steps is a total",
        )
    elif rule.target is None:
        c.note(key, "covered", rule.note)
    elif "." in rule.target:
        value = {True: "auto", False: None}.get(value, value) if key == "resume_from_checkpoint" else value
        c.set(rule.target, value)
        c.note(key, "mapped", rule.target + (f" ({rule.note})" if rule.note else ""))
    elif rule.target not in fields:
        status, reason = methods.unused_by_recipe(c.recipe, key, value) or (
            "unsupported",
            f"{c.recipe} has no setting {rule.target}",
        )
        c.note(key, status, reason)  # type: ignore[arg-type]
    else:
        noted = rule.note and (key != "seed" or value is None)  # the seed note is about null only
        value = 0 if key == "seed" and value is None else _path(value) if key == "output_dir" else value
        c.out[rule.target] = value
        c.note(key, "mapped", rule.target + (f" ({rule.note})" if noted else ""))


def convert_torchtune_config(tt: dict[str, Any], *, recipe: str | None = None) -> Conversion:
    """Map a torchtune 0.6.1 config onto ftune's schema.

    Args:
        tt: the torchtune config as loaded from YAML (interpolations such as ``${output_dir}`` are kept).
        recipe: the torchtune recipe it is for; inferred from the content when None.

    Returns:
        The ftune config, its ftune recipe, and a report entry for every torchtune key.

    Raises:
        ValueError: for a recipe ftune has no counterpart for (names it and what to do instead).
    """
    tt_recipe = recipe or infer_recipe(tt)
    if tt_recipe in table.MISSING_RECIPES:
        raise ValueError(f"torchtune recipe {tt_recipe}: {table.MISSING_RECIPES[tt_recipe]}.")
    if tt_recipe not in table.RECIPES:
        raise ValueError(
            f"unknown torchtune recipe {tt_recipe!r}; known: {', '.join(sorted(table.RECIPES))}."
        )
    ftune_recipe = table.RECIPES[tt_recipe]
    c = Converter(tt, ftune_recipe)
    fields = _settings_fields(ftune_recipe)
    models = ("model", "teacher_model") if tt_recipe in table.KD_RECIPES else ("model",)
    models = ("policy_model",) if tt_recipe in table.POLICY_RECIPES else models
    for key in models:  # first: the tokenizer and each checkpointer's model_type follow a model's family
        if isinstance(tt.get(key), dict):
            _convert_model(c, tt[key], key)
    own = {**table.SETTINGS, **table.RECIPE_SETTINGS.get(tt_recipe, {})}
    for key, value in tt.items():
        if (
            key in models
            and isinstance(value, dict)
            or methods.convert_special(c, tt_recipe, key, value)
            or vision.convert_special(c, key, value)
        ):
            continue
        if key == "tokenizer" and isinstance(value, dict):
            _convert_tokenizer(c, value)
        elif isinstance(value, dict) and "_component_" in value:
            _convert_component(c, key, value)
        elif isinstance(value, dict):
            for sub, v in value.items():
                rule = table.NESTED_SETTINGS.get(f"{key}.{sub}")
                if rule is None:
                    c.note(f"{key}.{sub}", "unsupported", "not a torchtune key the converter knows")
                else:
                    _convert_setting(c, f"{key}.{sub}", rule, v, fields)
        elif key in own:
            _convert_setting(c, key, own[key], value, fields)
        elif value is None and (unused := methods.unused_by_recipe(ftune_recipe, key, value)):
            c.note(key, *unused)  # type: ignore[arg-type]
        else:
            c.note(key, "unsupported", f"{key}={value!r}: not a torchtune key the converter knows")
    _defaults(c, tt_recipe)
    _check_features(c)
    if "output_dir" not in c.out and isinstance(tt.get("output_dir"), str):
        c.out = _substitute(c.out, "${output_dir}", str(_path(tt["output_dir"])))
    return Conversion(ftune_recipe, _ordered(c.out), c.report)


def _defaults(c: Converter, tt_recipe: str) -> None:
    """Where torchtune's default for an absent key differs from ftune's, write torchtune's."""
    if "peft" in c.out and "save_adapter_weights_only" not in c.tt and "checkpointer" in c.out:
        c.out["checkpointer"]["save_adapter_weights_only"] = False  # torchtune's LoRA recipes: full model too
    if tt_recipe == "quantize":
        c.out.setdefault("qat", False)  # a PTQ quantizer (torchtune's QAT quantizers convert elsewhere)
    if tt_recipe == "generate" and "system" not in c.out:
        c.out["system"] = None
    methods.method_defaults(c, tt_recipe)


def _check_features(c: Converter) -> None:
    """A feature the config uses must be one the ftune recipe supports (the registry says why not)."""
    used = []
    if "peft" in c.out:
        peft = c.out["peft"]
        used.append(
            (
                "model._component_",
                "qlora" if peft["quantize_base"] else "dora" if peft["use_dora"] else "lora",
            )
        )
    if c.out.get("optimizer_in_backward"):
        used.append(("optimizer_in_bwd", "optimizer_in_backward"))
    features = registry.RECIPES[c.recipe].features
    for key, feature in used:
        support = features.get(feature, registry.na("not declared"))
        if support != registry.YES and not methods.feature_by_config(c.recipe, feature):
            # the key's entry turns unsupported (each key has one entry)
            i = next(i for i, r in enumerate(c.report) if r.key == key)
            reason = (
                f"{feature} in {c.recipe}: {support.removeprefix('n/a: ')} (was mapped: {c.report[i].detail})"
            )
            c.report[i] = KeyReport(key, "unsupported", reason)


def _substitute(node: Any, pattern: str, value: str) -> Any:
    # an interpolation of a key ftune's recipe does not have (generate's output_dir) becomes its value
    if isinstance(node, dict):
        return {k: _substitute(v, pattern, value) for k, v in node.items()}
    return node.replace(pattern, value) if isinstance(node, str) else node


def _ordered(out: dict[str, Any]) -> dict[str, Any]:
    order = [k for group in _SETTINGS_ORDER for k in group] + _SECTION_ORDER.split()
    return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}
