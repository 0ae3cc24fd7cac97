"""The checks `ftune run` makes before torch is imported: common mistakes in under a second.

`ftune run` loads the config once (`ftune.config.run_config.load_run_config`) and calls `fast_check`
on it (for a distributed run, in the launcher, before torchrun starts any rank); `ftune validate`
calls `fast_problems` and `check_data_files`. It reads the recipe file's ``SETTINGS = ...`` line
with `ast` (the file is not run, so its ``import torch`` is not either), takes the class of that
name from `ftune.settings` (every shipped recipe's settings, torch-free; ``training.LoRASettings``
is ``ftune.settings.LoRASettings`` re-exported), and checks the loaded config: unknown keys,
types, ranges, sections, trusted components; then the local data files (`ftune.config.data_files`),
the folder a run resumes from (`ftune.config.recipe_kind`) and the model source
(`ftune.config.model_source`). Component signatures need the targets imported, so they are checked
afterwards, by the recipe itself or `ftune validate`. A recipe whose SETTINGS is defined in the
file itself (a copied recipe with its own dataclass) has no fast check: the recipe's own check
reports the same problems.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from ftune import settings as recipe_settings_module  # this package: every shipped class
from ftune.config import data_files, image_checks, image_task_manifest, record_checks
from ftune.config.errors import ConfigError
from ftune.config.loading import Config
from ftune.config.model_source import check_model_source
from ftune.config.output_path import logs_on_inputs, outputs_in_files
from ftune.config.recipe_kind import check_resume_folder, recipe_kind_problems
from ftune.config.settings import Settings, collect_problems


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and (base := _dotted(expr.value)):
        return f"{base}.{expr.attr}"
    return None


def settings_path(recipe: Path) -> str | None:
    """The full dotted name of the recipe file's SETTINGS (e.g. ``ftune.training.LoRASettings``), or None."""
    try:
        tree = ast.parse(recipe.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None  # the recipe's own import reports it
    names: dict[str, str] = {}
    target: str | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            names.update(
                {
                    a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                    for a in node.names
                }
            )
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SETTINGS" for t in node.targets
        ):
            target = _dotted(node.value)
    if target is None:
        return None
    head, _, rest = target.partition(".")
    if head not in names:
        return None  # defined in the recipe file itself
    return names[head] + (f".{rest}" if rest else "")


def settings_class(dotted: str) -> type | None:
    """The shipped settings class a recipe's SETTINGS names (``ftune.training.LoRASettings`` ->
    ``ftune.settings.LoRASettings``), or None for a class outside ftune."""
    package, _, name = dotted.rpartition(".")
    if not package.startswith("ftune") or name not in recipe_settings_module.__all__:
        return None
    cls = getattr(recipe_settings_module, name)
    return cls if isinstance(cls, type) and issubclass(cls, Settings) else None


def fast_problems(cfg, recipe: Path) -> list[str] | None:
    """The problems of `cfg` against the recipe file's settings, found without importing torch.

    Returns:
        The problems (empty: none), or None when the settings class cannot be had without running
        the recipe (SETTINGS defined in the file itself, or outside ftune).
    """
    dotted = settings_path(recipe)
    cls = settings_class(dotted) if dotted is not None else None
    if cls is None:
        return None
    # A config or dataset of another kind of run first: it explains the key problems that follow.
    problems = recipe_kind_problems(cfg, recipe) + collect_problems(cfg, cls, signatures=False)
    return problems + logs_on_inputs(cfg) + outputs_in_files(cfg)


# A supervised .jsonl file up to this size has every line parsed before the recipe starts (about
# 0.5 s); a bigger one is parsed by `datasets` when it loads, which names a bad line only then.
_EVERY_LINE_MAX_BYTES = 64 << 20
# Dataset builders whose records are preference pairs read from `source` (ftune.datasets).
_PREFERENCE_BUILDERS = ("ftune.datasets.preference_dataset", "ftune.datasets.preference.preference_dataset")
_PROMPT_BUILDERS = ("ftune.datasets.prompt_dataset", "ftune.datasets.prompts.prompt_dataset")
_KTO_BUILDERS = ("ftune.datasets.kto_dataset", "ftune.datasets.kto.kto_dataset")
_IMAGE_BUILDERS = (
    "ftune.datasets.multimodal_chat_dataset",
    "ftune.datasets.multimodal.multimodal_chat_dataset",
    "ftune.datasets.image_preference_dataset",
    "ftune.datasets.image_preference.image_preference_dataset",
    "ftune.datasets.image_prompt_dataset",
    "ftune.datasets.image_prompts.image_prompt_dataset",
)

_IMAGE_PAIR_BUILDERS = (
    "ftune.datasets.image_preference_dataset",
    "ftune.datasets.image_preference.image_preference_dataset",
)


def _local_records(node: dict) -> tuple[Path, list] | None:
    """A dataset section's local .json/.jsonl records with their lines, when the whole file is its split."""
    path = Path(str(node.get("source", ""))).expanduser()
    if (
        node.get("data_files") is not None
        or node.get("split", "train") != "train"
        or path.suffix.lower() not in (".json", ".jsonl")
        or not path.is_file()
        or path.stat().st_size > _EVERY_LINE_MAX_BYTES
    ):
        return None  # the dataset's own load reports these
    lines = data_files.json_records(path)
    return (path, lines) if lines is not None else None


def _check_prompt_file(node: dict, rewards: object) -> None:
    """A GRPO prompt file: every prompt text, every reference answer a built-in reward reads (file:line)."""
    column_map = node.get("column_map") or {}
    if not isinstance(column_map, dict) or set(column_map) - {"prompt"}:
        return  # the dataset's own load reports a bad column_map
    found = _local_records(node)
    if found is not None:
        path, lines = found
        rows = [(f"{path}:{number}", record) for number, record in lines]
        fields = record_checks.reference_fields_of(rewards)
        record_checks.check_prompt_rows(rows, column_map.get("prompt", "prompt"), fields, str(node["source"]))


def _check_kto_file(node: dict) -> None:
    """A KTO file: every record's prompt, completion and label, and both label values present (file:line)."""
    column_map = node.get("column_map") or {}
    if not isinstance(column_map, dict) or set(column_map) - set(record_checks.KTO_FIELDS):
        return  # the dataset's own load reports a bad column_map
    found = _local_records(node)
    if found is not None:
        path, lines = found
        columns = {field: column_map.get(field, field) for field in record_checks.KTO_FIELDS}
        rows = [(f"{path}:{number}", record) for number, record in lines]
        record_checks.check_kto_rows(rows, columns, str(node["source"]))


def _check_image_file(node: dict) -> None:
    """A multimodal file (.json, .jsonl, .parquet): every record's images read and decoded (file:line or row)."""
    column_map = node.get("column_map") or {}
    path = Path(str(node.get("source", ""))).expanduser()
    if (
        not isinstance(column_map, dict)
        or set(column_map) - {"messages", "images", "chosen", "rejected"}
        or node.get("data_files") is not None
        or node.get("split", "train") != "train"
        or not path.is_file()
    ):
        return  # the dataset's own load reports these (it reads every image too)
    rows = image_checks.local_rows(path)
    if rows is not None:
        base = Path(str(node["image_dir"])).expanduser() if node.get("image_dir") else path.parent
        columns = (column_map.get("messages", "messages"), column_map.get("images", "images"))
        image_checks.check_image_rows(rows, *columns, base, str(node["source"]))


def _check_image_pairs(node: dict) -> None:
    """Image-grounded preference pairs in a local .json/.jsonl file: both answers of every record (file:line)."""
    column_map = node.get("column_map") or {}
    if not isinstance(column_map, dict):
        return  # the dataset's own load reports a bad column_map
    found = _local_records(node)
    if found is not None:
        path, lines = found
        columns = [column_map.get(side, side) for side in ("chosen", "rejected")]
        rows = [(f"{path}:{number}", record) for number, record in lines]
        record_checks.check_answer_rows(rows, columns, str(node["source"]))


def check_data_files(cfg) -> None:
    """Check the local data files of `dataset` / `dataset_val` (ftune.datasets builders), without torch.

    The checks the dataset makes when it loads, made before the recipe starts, so a bad file fails
    here and not after the model loads: a missing, empty, non-UTF-8 or unsupported file and a
    broken JSON line (`ftune.config.data_files.check_local_source`), and for preference data, a
    record without an answer or the prompt, or with one empty (same module); for prompt data (GRPO),
    a prompt that is not text and a reference answer a built-in reward reads that is missing or null
    (`ftune.config.record_checks`); for multimodal data, every image of every record
    (`ftune.config.image_checks`); for the image task, a data_dir written for other sizes
    (`ftune.config.image_task_manifest`). Hub
    ids, folders and split slices are left to the dataset's own check.

    Raises:
        FileNotFoundError, ValueError: as the dataset would raise them (file:line where it applies).
    """
    data = cfg.to_dict()
    for section in ("dataset", "dataset_val"):
        node = data.get(section)
        component = node.get("_component_") if isinstance(node, dict) else None
        if not (isinstance(component, str) and component.startswith("ftune.datasets.")):
            continue
        if isinstance(node.get("source"), str):
            path = Path(node["source"]).expanduser()
            small = path.is_file() and path.stat().st_size <= _EVERY_LINE_MAX_BYTES
            every_line = small or node["source"] in data_files.BUILDERS  # each data file up to the same size
            data_files.check_local_source(node["source"], node.get("data_files"), every_line=every_line)
        if component in _PROMPT_BUILDERS:
            _check_prompt_file(node, data.get("rewards"))
        if component in _IMAGE_BUILDERS:
            _check_image_file(node)
        if component in _IMAGE_PAIR_BUILDERS:
            _check_image_pairs(node)
        if component in image_task_manifest.BUILDERS and isinstance(node.get("data_dir"), str):
            given = {key: node.get(key, default) for key, default in image_task_manifest.ARGS.items()}
            image_task_manifest.check_manifest(Path(node["data_dir"]).expanduser(), given, section)
        if component in _KTO_BUILDERS:
            if section == "dataset" and data.get("batch_size") == 1:
                raise ValueError(
                    f"batch_size: 1 with a KTO dataset ({cfg.where('batch_size')}); KTO estimates its KL term from "
                    "the other answers of each batch (TRL refuses 1 too). Set batch_size=2 or more."
                )
            _check_kto_file(node)
        if component not in _PREFERENCE_BUILDERS:
            continue
        column_map = node.get("column_map") or {}
        path = Path(str(node.get("source", ""))).expanduser()
        if (
            not isinstance(column_map, dict)
            or node.get("data_files") is not None
            or node.get("split", "train") != "train"
            or path.suffix.lower() not in (".json", ".jsonl")
            or not path.is_file()
        ):
            continue  # the dataset's own load reports these (bad column_map keys included)
        if set(column_map) - set(data_files.PREFERENCE_FIELDS):
            continue
        columns = {k: column_map.get(k, k) for k in data_files.PREFERENCE_FIELDS}
        lines = data_files.json_records(path)
        if lines is not None:
            rows = [(f"{path}:{number}", record) for number, record in lines]
            data_files.check_preference_rows(rows, columns, str(node["source"]))
            if isinstance(margin := node.get("margin_column"), str):  # a reward model's margins
                data_files.check_margin_rows(rows, margin, str(node["source"]))


def fast_check(cfg: Config, recipe: Path, more: Callable[[Config], list[str]] | None = None) -> None:
    """Check a loaded config against the recipe's settings, its files and folders, without torch.

    When the recipe's settings class is found (a shipped class, named at the recipe's top), its keys
    are declared on the config and the class is added to ``cfg.values_checked``: the recipe's
    ``cfg.settings`` then checks only the component signatures (and so do the ranks of a launch:
    `ftune.config.launch_checked`). A recipe that defines its own class is left to its own
    ``cfg.settings``.

    Args:
        cfg: the config the run reads, loaded once (`ftune.config.run_config.load_run_config`).
        recipe: the recipe file.
        more: further config-only checks from a higher layer (`ftune run` builds the built-in rewards:
            ftune.rewards), made with these, before the data files and folders.

    Raises:
        ConfigError: every problem found.
    """
    dotted = settings_path(recipe)
    cls = settings_class(dotted) if dotted is not None else None
    if cls is None:
        return  # SETTINGS defined in the recipe file: the recipe's own check reports problems
    problems = recipe_kind_problems(cfg, recipe) + collect_problems(cfg, cls, signatures=False)
    problems += logs_on_inputs(cfg)  # metric logs never land in a model folder the run reads
    problems += outputs_in_files(cfg)  # an output_dir that is a file: a stat, not a failed mkdir later
    problems += more(cfg) if more is not None and not problems else []
    if problems:
        raise ConfigError(problems, cfg.source)
    check_data_files(cfg)
    check_resume_folder(cfg, recipe)
    check_model_source(cfg, cls)
    cfg.values_checked.add(cls)
    cfg.declare(cls)
