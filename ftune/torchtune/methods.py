"""The keys of torchtune's DPO, distillation and lm-eval configs that need a rule, not only a table entry.

`convert.py` converts every config the same way (settings, sections, components from
`table.py`); it hands these keys here:

- full DPO: torchtune's `ref_checkpointer` loads the reference model. ftune's full_dpo_distributed
  takes the reference from the checkpointer's starting weights, so a reference in the same folder
  is covered and one from another folder is unsupported. The LoRA DPO recipes of both projects use
  the policy with its adapters off and read no reference checkpointer.
- distillation: torchtune's `loss` (cross-entropy), `kd_loss` (forward KL) and `kd_ratio` are one
  ftune `loss` section (ftune.training.KDLoss); the teacher gets the student's tokenizer, because
  torchtune tokenizes once for both models.
- inference recipes: keys they have no use for (eval's output_dir and seed, a null quantizer).
- PPO (`ftune.torchtune.ppo`): the reward and value models' builder, the reference's checkpointer,
  the prompt dataset, `num_steps` (prompts, in torchtune) and `forward_batch_size`.
"""

from __future__ import annotations

from typing import Any

import ftune.torchtune.table as table
from ftune import registry
from ftune.torchtune import ppo
from ftune.torchtune.conversion import Converter

# (ftune recipe, torchtune key) -> why the ftune recipe needs no key for it.
_UNUSED: dict[tuple[str, str], str] = {
    ("quantize", "seed"): "quantization samples nothing: ftune's quantize has no seed",
    ("generate", "output_dir"): "generate writes no checkpoint",
    ("generate", "quantizer"): "null: no quantization (ftune's generate reads quantized_checkpoint)",
    ("eval", "output_dir"): "eval writes no checkpoint",
    ("eval", "quantizer"): "null: no quantization (ftune's eval reads quantized_checkpoint)",
    ("eval", "seed"): "1234: lm-eval's own seeds (1234), which ftune's eval runs with (it has no seed key)",
}
# The value a key above must have to be covered; any other is unsupported, with the reason below.
_ONLY_AS: dict[tuple[str, str], tuple[object, str]] = {
    ("eval", "seed"): (1234, "ftune's eval has no seed key: it runs with lm-eval's own seeds (1234)"),
}
_KD_CROSS_ENTROPY = "torchtune.modules.loss.CEWithChunkedOutputLoss"
_KD_KEYS = ("teacher_model", "teacher_checkpointer", "kd_loss", "kd_ratio")
_QUANTIZED_INFERENCE = ("generate", "eval")


def unused_by_recipe(recipe: str, key: str, value: Any) -> tuple[str, str] | None:
    """(status, reason) for a torchtune key the ftune recipe has no use for, or None when it is not one."""
    reason = _UNUSED.get((recipe, key))
    if reason is None:
        return None
    only = _ONLY_AS.get((recipe, key))
    if only is not None and value != only[0]:
        return "unsupported", f"{value!r}: {only[1]}"
    return "covered", reason


def convert_special(c: Converter, tt_recipe: str, key: str, value: Any) -> bool:
    """Report (and convert) a top-level key the generic rules would get wrong; False when it is not one."""
    if tt_recipe in table.POLICY_RECIPES and ppo.convert_special(c, key, value):
        return True
    if key == "ref_checkpointer" and isinstance(value, dict):
        _reference(c, value)
    elif key == "loss" and tt_recipe in table.KD_RECIPES and isinstance(value, dict):
        _kd_cross_entropy(c, value)
    elif key in _KD_KEYS and tt_recipe not in table.KD_RECIPES:
        _all(c, key, value, "unsupported", f"a distillation key: {c.recipe} has no teacher")
    elif key == "quantizer" and c.recipe in _QUANTIZED_INFERENCE and isinstance(value, dict):
        _all(
            c,
            key,
            value,
            "unsupported",
            f"{c.recipe} does not quantize at load: it reads the quantize recipe's output "
            "(quantized_checkpoint=<its output_dir>)",
        )
    else:
        return False
    return True


def method_defaults(c: Converter, tt_recipe: str) -> None:
    """What torchtune implies for a distillation config and ftune's schema states: kd_ratio, the teacher's
    tokenizer; for a PPO config, where its value and reward models resume and save (`ppo.defaults`)."""
    if tt_recipe in table.POLICY_RECIPES:
        ppo.defaults(c)
    if tt_recipe not in table.KD_RECIPES:
        return
    loss = c.out.get("loss")
    if isinstance(loss, dict):
        kd_ratio = loss.pop("kd_ratio", 0.5)  # torchtune's recipes: cfg.get("kd_ratio", 0.5)
        component = loss.pop("_component_", None)
        c.out["loss"] = {"_component_": component, "kd_ratio": kd_ratio, **loss}
    tokenizer = c.out.get("tokenizer")
    if isinstance(tokenizer, dict):
        c.out["teacher_tokenizer"] = {k: tokenizer[k] for k in ("_component_", "path") if k in tokenizer}


def feature_by_config(recipe: str, feature: str) -> bool:
    """Whether a recipe supports a feature through a config method of its own.

    The feature matrix marks LoRA n/a for the distillation recipes because their feature checks run
    the full student, but a LoRA student is one of their configs (the `_kd_lora` method).
    """
    return any(m.endswith("_" + feature) for m in registry.RECIPES[recipe].methods)


def _all(c: Converter, key: str, value: Any, status: str, detail: str) -> None:
    for sub in value if isinstance(value, dict) else [None]:
        c.note(key if sub is None else f"{key}.{sub}", status, detail)  # type: ignore[arg-type]


def _folder(value: Any) -> str | None:
    return str(value).rstrip("/") if value is not None else None


def _reference(c: Converter, node: dict[str, Any]) -> None:
    if c.recipe != "full_dpo_distributed":
        why = "the policy with its adapters off" if c.recipe.startswith("lora_dpo") else "none"
        _all(
            c,
            "ref_checkpointer",
            node,
            "unsupported",
            f"{c.recipe} reads no reference model (its reference: {why})",
        )
        return
    start = _folder((c.tt.get("checkpointer") or {}).get("checkpoint_dir"))
    folder = _folder(node.get("checkpoint_dir"))
    for sub, value in node.items():
        key = f"ref_checkpointer.{sub}"
        if sub != "checkpoint_dir":
            c.note(
                key,
                "covered",
                "the reference loads with the checkpointer (see ref_checkpointer.checkpoint_dir)",
            )
        elif folder == start:
            c.note(
                key,
                "covered",
                "the checkpointer's folder: ftune's full_dpo_distributed takes the reference from the "
                "checkpointer's starting weights (also on a resumed run)",
            )
        else:
            c.note(
                key,
                "unsupported",
                f"{value}: ftune's full_dpo_distributed takes the reference from the checkpointer's starting "
                f"weights ({start}); a reference model from another folder is not supported",
            )


def _kd_cross_entropy(c: Converter, node: dict[str, Any]) -> None:
    component = node.get("_component_")
    for sub, value in node.items():
        key = f"loss.{sub}"
        if sub == "_component_" and value == _KD_CROSS_ENTROPY:
            c.note(
                key,
                "covered",
                "the cross-entropy term of ftune.training.KDLoss, weighted 1 - kd_ratio (the loss section, from kd_loss)",
            )
        elif sub == "_component_":
            c.note(key, "unsupported", f"{value}: the cross-entropy term of ftune.training.KDLoss is chunked")
        elif sub == "num_output_chunks" and component == _KD_CROSS_ENTROPY:
            c.note(
                key,
                "covered",
                "KDLoss chunks both terms by kd_loss.num_output_chunks (torchtune requires them equal)",
            )
        elif sub == "ignore_index" and value == -100:
            c.note(key, "covered", "-100 is KDLoss's ignore_index")
        else:
            c.note(
                key,
                "unsupported",
                f"ftune.training.KDLoss has no argument for the cross-entropy's {sub}={value!r}",
            )
