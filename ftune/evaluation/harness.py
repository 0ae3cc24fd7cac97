"""Run lm-evaluation-harness tasks on an ftune model: find the tasks, evaluate, tabulate.

lm_eval is an optional dependency (`pip install 'ftune[lm-eval]'`); nothing here imports it
before `require_lm_eval` has said it is there, so ftune works without it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftune.config.errors import did_you_mean
from ftune.evaluation.task_names import unknown_by_scan
from ftune.settings.eval import lm_eval_missing

if TYPE_CHECKING:
    from torch import nn

    from ftune.tokenizers.base import Tokenizer

# The parts of lm_eval's result that describe scores (the rest is configs and environment).
RESULT_KEYS = ("results", "groups", "group_subtasks", "n-shot", "n-samples", "versions", "higher_is_better")


def require_lm_eval(key: str = "lm_eval_tasks") -> None:
    """Raise ImportError saying what to install, unless lm_eval can be imported.

    Args:
        key: the setting that asked for lm-eval, named in the message.
    """
    try:
        import lm_eval  # noqa: F401
    except ImportError as e:
        raise ImportError(lm_eval_missing(key)) from e


def task_manager(include_path: str | None, *, builtin_tasks: bool) -> Any:
    """lm_eval's TaskManager over `include_path` and, if asked, lm_eval's own tasks.

    Raises:
        FileNotFoundError: include_path is not a folder.
        ValueError: neither an include_path nor the built-in tasks to look in.
    """
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    if include_path is not None and not Path(include_path).expanduser().is_dir():
        raise FileNotFoundError(
            f"lm_eval_include_path: {include_path!r} is not a folder; pass the folder holding your task YAMLs."
        )
    if include_path is None and not builtin_tasks:
        raise ValueError(
            "lm_eval_builtin_tasks is false and lm_eval_include_path is null, so there are no tasks to "
            "look in; set lm_eval_include_path=<folder of task YAMLs> or lm_eval_builtin_tasks=true."
        )
    path = None if include_path is None else str(Path(include_path).expanduser())
    return TaskManager(include_path=path, include_defaults=builtin_tasks)


def _where(include_path: str | None, builtin_tasks: bool) -> str:
    return " and ".join(
        ([f"lm_eval_include_path {include_path!r}"] if include_path else [])
        + (["lm-eval's built-in tasks"] if builtin_tasks else [])
    )


def check_tasks_before_load(tasks: Sequence[str], include_path: str | None, *, builtin_tasks: bool) -> None:
    """Refuse unknown task names before a model loads: the YAML scan of `ftune.evaluation.task_names`
    first (a fraction of a second); lm_eval's TaskManager only for names the scan did not find.

    Raises:
        ValueError: naming every unknown task, with a did-you-mean (see :func:`check_task_names`).
    """
    if unknown_by_scan(tasks, include_path, builtin_tasks=builtin_tasks):
        manager = task_manager(include_path, builtin_tasks=builtin_tasks)
        check_task_names(manager, tasks, where=_where(include_path, builtin_tasks))


def check_task_names(manager: Any, tasks: Sequence[str], *, where: str) -> None:
    """ValueError naming every requested task lm_eval does not know, with a did-you-mean.

    Args:
        manager: the TaskManager that will load the tasks.
        tasks: the names asked for.
        where: what the manager indexed, for the message.
    """
    known = set(manager.all_tasks)
    if unknown := [t for t in tasks if t not in known]:
        hints = "".join(did_you_mean(t, known) for t in unknown)
        raise ValueError(
            f"lm_eval_tasks: {unknown} are not tasks, groups or tags in {where}.{hints} Fix the names "
            "(`lm-eval ls tasks` lists the built-in ones), or point lm_eval_include_path at your task YAMLs."
        )


def run_tasks(
    model: nn.Module,
    tokenizer: Tokenizer,
    tasks: Sequence[str],
    *,
    include_path: str | None = None,
    builtin_tasks: bool = True,
    num_fewshot: int | None = None,
    limit: int | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
) -> dict[str, Any]:
    """Evaluate lm-eval `tasks` on an ftune model with `lm_eval.simple_evaluate`.

    Args:
        model: an ftune decoder in eval mode (adapters merged).
        tokenizer: its ftune tokenizer.
        tasks: task, group or tag names.
        include_path: a folder of extra task YAMLs, searched before the built-in tasks.
        builtin_tasks: index lm_eval's own tasks too (~15,000; tens of seconds).
        num_fewshot: few-shot examples per prompt; None keeps each task's own.
        limit: at most this many examples per task; None: all.
        batch_size: requests per forward pass.
        max_length: longest input in tokens; None: the model's max_seq_len.

    Returns:
        lm_eval's results, scores only (`RESULT_KEYS`), JSON-serialisable.
    """
    manager = task_manager(include_path, builtin_tasks=builtin_tasks)
    check_task_names(manager, tasks, where=_where(include_path, builtin_tasks))
    from lm_eval import simple_evaluate

    from ftune.evaluation.lm_eval_model import FtuneLM

    lm = FtuneLM(model, tokenizer, batch_size=batch_size, max_length=max_length)
    results = simple_evaluate(
        model=lm,
        tasks=list(tasks),
        num_fewshot=num_fewshot,
        limit=limit,
        task_manager=manager,
        log_samples=False,
    )
    scores = {key: results[key] for key in RESULT_KEYS if key in results}
    return json.loads(json.dumps(scores, default=_plain))  # numpy scalars -> numbers


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)


def score_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) rows: `<task> <metric>` and the score, with its standard error when there is one."""
    rows = []
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            metric, comma, filter_name = key.partition(",")
            if (
                not comma
                or metric.endswith("_stderr")
                or not isinstance(value, (int, float))
                or isinstance(value, bool)
            ):
                continue
            stderr = metrics.get(f"{metric}_stderr,{filter_name}")
            name = f"{task} {metric}" + ("" if filter_name in ("none", "") else f" ({filter_name})")
            spread = f" ± {stderr:.4f}" if isinstance(stderr, float) and math.isfinite(stderr) else ""
            rows.append((name, f"{value:.4f}{spread}"))
    return rows
