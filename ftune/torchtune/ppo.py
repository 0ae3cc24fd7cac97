"""The keys of torchtune 0.6.1's PPO config that need a rule (`methods.convert_special` hands them here).

- `reward_and_value_model`: torchtune builds both models from this classifier builder; ftune builds each
  from its own checkpointer's config.json (value_checkpointer, reward_checkpointer), with a score head
  of one output, so its arguments are covered when `num_classes` is 1.
- `ref_policy_checkpointer`: ftune's reference is the checkpointer's starting weights; torchtune
  requires the same folder at the start, so that folder is covered and another is unsupported.
- `dataset`: torchtune's `text_completion_dataset` of prompts becomes `ftune.datasets.prompt_dataset`
  (the prompt column, each prompt in the model's chat format: a note says so).
- `num_steps` counts prompts in torchtune; ftune's `max_steps` counts optimizer steps:
  ``num_steps // batch_size`` trajectories of ``ppo_epochs · batch_size / ppo_batch_size`` steps.
- `forward_batch_size`: ftune samples and scores a trajectory's prompts in one batch (covered when it
  equals batch_size).
- the reward model is frozen: its checkpointer's `output_dir` is covered (nothing is saved); the value
  model resumes with the run (`value_checkpointer.resume_from_checkpoint` follows the checkpointer's).
"""

from __future__ import annotations

from typing import Any

from ftune.torchtune.conversion import Converter, KeyReport

_TEXT = "torchtune.datasets.text_completion_dataset"
_DATASET_ARGS = {"source": "source", "split": "split", "data_files": "data_files", "name": "name"}


def convert_special(c: Converter, key: str, value: Any) -> bool:
    """Convert and report a PPO key; False when it is not one of this module's."""
    if key == "reward_and_value_model" and isinstance(value, dict):
        one = value.get("num_classes", 1) == 1
        for sub in value:
            if one:
                why = "ftune builds the reward and value models from value_checkpointer's and reward_checkpointer's config.json, with a one-output score head"
                c.note(f"{key}.{sub}", "covered", why)
            else:
                c.note(
                    f"{key}.{sub}",
                    "unsupported",
                    f"num_classes={value.get('num_classes')!r}: a score has one output",
                )
    elif key == "ref_policy_checkpointer" and isinstance(value, dict):
        start = _folder((c.tt.get("checkpointer") or {}).get("checkpoint_dir"))
        same = _folder(value.get("checkpoint_dir")) == start
        for sub in value:
            if same:
                c.note(
                    f"{key}.{sub}",
                    "covered",
                    "the reference is the checkpointer's starting weights (also resuming)",
                )
            else:
                why = f"{value.get('checkpoint_dir')}: ftune's reference is the checkpointer's starting weights ({start})"
                c.note(f"{key}.{sub}", "unsupported", why)
    elif key == "dataset" and isinstance(value, dict) and value.get("_component_") == _TEXT:
        _dataset(c, value)
    elif key == "num_steps":
        _num_steps(c, value)
    elif key == "forward_batch_size":
        if value == c.tt.get("batch_size"):
            c.note(
                key, "covered", "ftune samples and scores a trajectory's prompts in one batch (batch_size)"
            )
        else:
            c.note(
                key,
                "unsupported",
                f"{value}: ftune runs a trajectory's forwards on all batch_size prompts at once",
            )
    else:
        return False
    return True


def _folder(value: Any) -> str | None:
    return str(value).rstrip("/") if value is not None else None


def _dataset(c: Converter, node: dict[str, Any]) -> None:
    c.set("dataset._component_", "ftune.datasets.prompt_dataset")
    c.note(
        "dataset._component_",
        "mapped",
        "ftune.datasets.prompt_dataset: each prompt in the model's chat format, as the user's message "
        "(torchtune tokenizes the raw text)",
    )
    for sub, value in node.items():
        path = f"dataset.{sub}"
        if sub == "_component_":
            continue
        if sub in _DATASET_ARGS:
            c.set(f"dataset.{_DATASET_ARGS[sub]}", value)
            c.note(path, "mapped", f"dataset.{_DATASET_ARGS[sub]}")
        elif sub == "column":
            c.set("dataset.column_map", {"prompt": value})
            c.note(path, "mapped", "dataset.column_map.prompt")
        elif sub == "add_eos" and value is False:
            c.note(path, "covered", "a prompt ends where the response begins: no end-of-sequence token")
        else:
            c.note(path, "unsupported", f"ftune.datasets.prompt_dataset has no argument for {sub}={value!r}")


def _num_steps(c: Converter, value: Any) -> None:
    batch, ppo_batch = c.tt.get("batch_size"), c.tt.get("ppo_batch_size")
    epochs = c.tt.get("ppo_epochs", 1)
    if not all(isinstance(v, int) and v > 0 for v in (value, batch, ppo_batch, epochs)) or batch % ppo_batch:
        c.note(
            "num_steps",
            "unsupported",
            f"{value!r}: needs batch_size, ppo_batch_size and ppo_epochs to count steps",
        )
        return
    steps = value // batch * epochs * (batch // ppo_batch)
    c.out["max_steps"] = steps
    why = f"max_steps {steps}: {value} prompts are {value // batch} trajectories of {epochs * (batch // ppo_batch)} optimizer steps"
    c.note("num_steps", "mapped", why)


def defaults(c: Converter) -> None:
    """The value model resumes with the run; the frozen reward model saves nothing (its output_dir covered)."""
    value = c.out.get("value_checkpointer")
    if isinstance(value, dict):
        value["resume_from_checkpoint"] = "${checkpointer.resume_from_checkpoint}"
    reward = c.out.get("reward_checkpointer")
    if isinstance(reward, dict) and reward.pop("output_dir", None) is not None:
        i = next(i for i, r in enumerate(c.report) if r.key == "reward_checkpointer.output_dir")
        c.report[i] = KeyReport(c.report[i].key, "covered", "the reward model is frozen: nothing is saved")
