"""Load a YAML config by registry name or path, apply overrides, and wrap it as a `Config`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ftune import registry
from ftune.config.errors import ConfigError, did_you_mean
from ftune.config.model_source import checkpoint_model_nodes
from ftune.config.overrides import Override, is_component_path, parse_override
from ftune.config.settings import absent_values, read_settings
from ftune.config.trust import (
    TRUST_KEY,
    components_of,
    importable_problems,
    importable_top,
    is_trusted,
    request_message,
    trust_folder,
    trust_requests,
    untrusted_message,
)


def ftune_home() -> str:
    """Where ftune keeps downloaded and converted models: ``$FTUNE_HOME``, default ``~/.cache/ftune``."""
    return os.path.expanduser(os.environ.get("FTUNE_HOME") or "~/.cache/ftune")


# `${ftune_home:}` in a YAML resolves to ftune_home(), e.g. `${ftune_home:}/models/SmolLM2-135M-Instruct`.
if not OmegaConf.has_resolver("ftune_home"):
    _register = getattr(OmegaConf, "register_resolver", None) or OmegaConf.register_new_resolver
    _register("ftune_home", ftune_home)


class Config:
    """A loaded config: the OmegaConf tree, the file it came from, and the keys set on the command line.

    Attribute access is strict: ``cfg.model`` returns the node under that key; a key the YAML does
    not set is None only if the recipe's settings class (see :meth:`settings`) declares it as an
    optional section (``cfg.dataset_val``) and its default if it declares it as a field. Any other
    key is a ConfigError with a did-you-mean, never a silent None.
    """

    def __init__(self, node: DictConfig, source: str | None = None, overridden: set[str] | None = None):
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "overridden", set(overridden or ()))
        object.__setattr__(self, "declared", None)  # set by declare(): {key: value when absent}
        object.__setattr__(self, "sized", {})  # set by declare(): {section: model from config.json}
        object.__setattr__(self, "values_checked", set())  # classes whose key/type/range check passed

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        sized = object.__getattribute__(self, "sized")
        if key in sized:  # no model section: the model config.json describes (ftune.config.model_source)
            return sized[key]
        if key in self.node:
            return self.node[key]
        declared = object.__getattribute__(self, "declared")
        if declared is not None and key in declared:
            return declared[key]
        known = sorted(set(self.node) | set(declared or ()))
        by = "the config or the recipe's settings" if declared is not None else "the config"
        order = (
            ""
            if declared is not None
            else " No settings class was declared yet: `s = cfg.settings(SETTINGS)` (the first line of "
            "main) declares the recipe's keys; read the config after it."
        )
        raise ConfigError(
            [
                f"{key}: read by the recipe but not declared by {by}.{did_you_mean(key, known)} "
                f"Declared keys: {', '.join(known)}. Fix the name in the recipe, or declare the key "
                f"(a field of the recipe's SETTINGS class, or a section in the YAML).{order}"
            ],
            self.source,
        )

    def __contains__(self, key: str) -> bool:
        return key in self.node

    def where(self, path: str) -> str:
        """Say where a key came from, for error messages."""
        if any(path == k or path.startswith(k + ".") for k in self.overridden):
            return "set on the command line"
        return f"in {self.source}" if self.source else "in the config"

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain Python containers."""
        return OmegaConf.to_container(self.node, resolve=True)  # type: ignore[return-value]

    def to_yaml(self) -> str:
        """The resolved config as YAML text (what `ftune cat` prints)."""
        return OmegaConf.to_yaml(self.node, resolve=True)

    def declare(self, cls: type) -> None:
        """Declare the keys of the settings class `cls`: attribute access then also accepts the keys
        `cls` declares but the YAML leaves out (optional sections read as None, fields as their
        default; a section of ``cls.FROM_CHECKPOINT`` left out or null reads as the model the
        checkpoint's config.json describes). `ftune run` and ``config.run`` declare the recipe's
        SETTINGS when they load the config, before ``main`` runs, so no read can come before it."""
        object.__setattr__(self, "declared", absent_values(cls))
        object.__setattr__(self, "sized", checkpoint_model_nodes(self.node, cls))

    def settings(self, cls: type) -> Any:
        """Check the config against `cls`, declare its keys, and read the recipe-level scalars into it.

        The key, type and range checks run once per config and class: a config `ftune run` checked
        before torch was imported gets only the component signatures checked here.
        """
        settings = read_settings(self, cls, values_checked=cls in self.values_checked)
        self.declare(cls)
        return settings


def _yaml_problem(path: Path, e: yaml.MarkedYAMLError) -> str:
    """`file:line:column: what the parser says` for a YAML syntax error, with the fix."""
    mark = e.problem_mark or e.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    what = "; ".join(p for p in (e.context, e.problem) if p)
    return (
        f"{where}: YAML syntax error ({what}). Fix the file at that line (check brackets, quotes, "
        "indentation and the ': ' after each key); `ftune cat` shows a config once it parses."
    )


def resolve_config_path(name_or_path: str | Path) -> Path:
    """Find a config by registry name (``smollm2/135M_lora``) or by file path.

    Raises:
        ConfigError: when neither a file nor a shipped config has that name (lists close names).
    """
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    shipped = registry.config_path(str(name_or_path))
    if shipped is not None:
        return shipped
    if path.is_file():
        return path
    names = registry.all_config_names()
    raise ConfigError(
        [
            f"--config {str(name_or_path)!r}: no such file and no shipped config of that name."
            + did_you_mean(str(name_or_path), names)
            + " Run `ftune ls` to list the shipped configs, or pass a path to a .yaml file."
        ]
    )


def _select(node: DictConfig, key: str) -> Any:
    return OmegaConf.select(node, key, default=None, throw_on_missing=False)


def apply_overrides(node: DictConfig, overrides: list[Override]) -> set[str]:
    """Apply parsed overrides to `node` in place, collecting every problem.

    ``model=ftune.models.x.y`` on a node that is a component sets its ``_component_`` (and only that:
    the node's other keys still come from the file).

    Returns:
        The dotted keys the overrides set or deleted (``model._component_`` for that shorthand).
    """
    problems: list[str] = []
    keys: set[str] = set()
    for ov in overrides:
        parent_key, _, leaf = ov.key.rpartition(".")
        parent = _select(node, parent_key) if parent_key else node
        if ov.delete:
            if not isinstance(parent, DictConfig) or leaf not in parent:
                siblings = list(parent.keys()) if isinstance(parent, DictConfig) else []
                problems.append(
                    f"override {ov.text!r}: there is no key {ov.key!r} to delete."
                    + did_you_mean(leaf, [str(s) for s in siblings])
                )
                continue
            del parent[leaf]
            keys.add(ov.key)
            continue
        current = _select(node, ov.key)
        if isinstance(current, DictConfig) and "_component_" in current and is_component_path(ov.value):
            current["_component_"] = ov.value
            keys.add(f"{ov.key}._component_")
            continue
        keys.add(ov.key)
        if isinstance(parent, ListConfig) or (
            parent_key and parent is not None and not isinstance(parent, DictConfig)
        ):
            problems.append(
                f"override {ov.text!r}: {parent_key!r} is not a mapping, so {leaf!r} cannot be set in it."
            )
            continue
        try:
            OmegaConf.update(node, ov.key, ov.value, merge=False, force_add=True)
        except OmegaConfBaseException as e:
            problems.append(f"override {ov.text!r}: {str(e).splitlines()[0]}")
    if problems:
        raise ConfigError(problems)
    return keys


def load_config(name_or_path: str | Path, overrides: list[str] | None = None) -> Config:
    """Load a config, apply command-line overrides, and check that every `${...}` resolves.

    Args:
        name_or_path: a shipped config name (``smollm2/135M_lora``) or a path to a YAML file.
        overrides: ``key=value`` / ``~key`` strings, applied in order.

    Raises:
        ConfigError: for a missing config, malformed YAML, malformed overrides or a broken interpolation.
    """
    path = resolve_config_path(name_or_path)
    try:
        node = OmegaConf.load(path)
    except yaml.MarkedYAMLError as e:
        raise ConfigError([_yaml_problem(path, e)], str(path)) from None
    except (OmegaConfBaseException, OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError([f"{path}: cannot read the YAML ({str(e).splitlines()[0]})."], str(path)) from None
    if not isinstance(node, DictConfig):
        raise ConfigError(
            [
                f"{path}: the top level must be a mapping of keys, got a {type(node).__name__}. A config is "
                "a YAML mapping such as `batch_size: 4`, one key per line (see `ftune cat smollm2/135M_lora`)."
            ]
        )
    parsed: list[Override] = []
    problems: list[str] = []
    for text in overrides or []:
        try:
            parsed.append(parse_override(text))
        except ConfigError as e:
            problems.extend(e.problems)
    if problems:
        raise ConfigError(problems, str(path))
    try:
        overridden = apply_overrides(node, parsed)
    except ConfigError as e:
        raise ConfigError(e.problems, str(path)) from None
    try:
        OmegaConf.resolve(node)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "interpolation"
        where = "set on the command line" if key in {ov.key for ov in parsed} else f"in {path}"
        raise ConfigError(
            [
                f"{key}: {str(e).splitlines()[0]} ({where}). A ${{...}} reference must name another key of "
                "the config (e.g. ${output_dir}) or a resolver such as ${ftune_home:}."
            ],
            str(path),
        ) from None
    cfg = Config(node, str(path), overridden)
    _check_trust(cfg, path)
    return cfg


def _check_trust(cfg: Config, path: Path) -> None:
    """Apply the config's `trusted_modules` and refuse any `_component_` outside the trusted packages.

    Runs at load time, on the text of the paths: nothing is imported or built before the refusal.
    """
    data = cfg.to_dict()
    named = data.get(TRUST_KEY, [])
    if not isinstance(named, list) or not all(isinstance(n, str) and n for n in named):
        raise ConfigError(
            [
                f"{TRUST_KEY}: expected a list of package or module names such as [my_pkg] "
                f"({cfg.where(TRUST_KEY)}), got {named!r}."
            ],
            cfg.source,
        )
    trust_folder(path.parent)  # modules next to a user's config file (by file: ftune.config.trust)
    if bad := importable_problems(named, f"{TRUST_KEY} ({cfg.where(TRUST_KEY)})"):
        raise ConfigError(bad, cfg.source)
    if asked := trust_requests(named):  # a config asks; only the user's command line grants
        raise ConfigError([request_message(asked, cfg.where(TRUST_KEY))], cfg.source)
    problems = [
        untrusted_message(dotted, f"{key}._component_", cfg.where(f"{key}._component_"))
        for key, dotted in components_of(data)
        if not is_trusted(dotted) and importable_top(dotted)  # a missing package is reported as such later
    ]
    if problems:
        raise ConfigError(problems, cfg.source)
