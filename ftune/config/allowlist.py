"""What a config may call from ftune, torch and torchao without ``--trust``: the kinds a config needs.

A package as large as torch holds process launchers, loaders and file writers under public names
(``torch.utils.collect_env.run`` is a ``subprocess.Popen(shell=True)``), so a list of what to refuse
in it always leaks. ftune trusts only the kinds of object a config names, judged by what the object
is after the path resolves (a subclass of ``torch.optim.Optimizer``, of ``torch.nn.Module``, ...),
and, before anything is imported, only paths under the packages that hold those kinds (`AREAS`).
Everything else in torch, torchao or ftune needs the user's own ``--trust``. `describe` renders the
list into docs/config.md (tests/docs check it is current).

Nothing here imports torch or torchao: an object from them was resolved, so they are loaded already.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The package paths a config may import from without --trust (by the text of its `_component_`,
# before anything is imported). Inside them, `KINDS` decides by what the path resolves to.
AREAS = ("torch.optim", "torch.nn", "torchao.optim", "torchao.quantization", "ftune")
# ftune's own packages a config never names: they run recipes, load configs and grant trust.
FTUNE_EXCLUDED = ("ftune.cli", "ftune.config")
# ftune's packages whose public functions are components (builders, collates, losses, schedulers,
# rewards, swaps). Functions elsewhere in ftune (checkpoint writers, plotting, resume, process
# set-up) read or write files or processes and are called by recipes, never by a config.
FTUNE_FUNCTION_PACKAGES = (
    "ftune.models",
    "ftune.modules",
    "ftune.peft",
    "ftune.datasets",
    "ftune.data",
    "ftune.tokenizers",
    "ftune.rewards",
    "ftune.quantization",
    "ftune.training.step",
    "ftune.training.methods",
    "ftune.training.features",
    "ftune.generation",
    "ftune.evaluation",
)
# Single functions elsewhere: a model sized by config.json; a family's tool-call format (an agent config's
# `tool_format`; the rest of ftune.agents runs tools and sandboxes, so its functions are not components).
FTUNE_FUNCTIONS = ("ftune.checkpointing.model_from_checkpoint", "ftune.agents.tool_formats.tool_format")


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _subclass_of(obj: Any, base: str) -> bool:
    """Whether `obj` is a subclass of `base` (``"module:Class"``; a module not loaded has none)."""
    module, _, attr = base.partition(":")
    found = getattr(sys.modules.get(module), attr, None)
    return inspect.isclass(obj) and isinstance(found, type) and issubclass(obj, found)


def _defined_in(obj: Any, *packages: str) -> bool:
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and _public(module) and any(_under(module, p) for p in packages)


def _ftune_component(obj: Any) -> bool:
    # ftune's modules may be private (``_model_builders``): the path a config names is public (the
    # text check) and the object's own name must be.
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or not _under(module, "ftune"):
        return False
    if any(_under(module, x) for x in FTUNE_EXCLUDED):
        return False
    if inspect.isclass(obj):
        return not obj.__name__.startswith("_")
    if not isinstance(obj, types.FunctionType) or obj.__name__.startswith("_"):
        return False
    return any(_under(module, p) for p in FTUNE_FUNCTION_PACKAGES) or any(
        obj is _attribute(f) for f in FTUNE_FUNCTIONS
    )


def _attribute(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(sys.modules.get(module), attr, None)


def _functional(obj: Any) -> bool:
    """A public function of ``torch.nn.functional`` (by identity; not the helpers it imports)."""
    functional = sys.modules.get("torch.nn.functional")
    name = getattr(obj, "__name__", "")
    return (
        functional is not None
        and isinstance(obj, (types.FunctionType, types.BuiltinFunctionType))
        and not name.startswith("_")
        and getattr(functional, name, None) is obj
        and getattr(obj, "__module__", None) in ("torch.nn.functional", "torch._C._nn", "torch")
    )


@dataclass(frozen=True)
class Kind:
    """One kind of object a config may call: its name, what it covers (for the docs), and its test:
    a subclass of one of `bases` (``"module:Class"``) defined in one of `within`, or what `also` accepts."""

    name: str
    covers: str
    within: tuple[str, ...] = ()
    bases: tuple[str, ...] = ()
    also: Callable[[Any], bool] | None = None

    def test(self, obj: Any) -> bool:
        if self.bases and _defined_in(obj, *self.within) and any(_subclass_of(obj, b) for b in self.bases):
            return True
        return self.also is not None and self.also(obj)


KINDS = (
    Kind(
        "optimizer",
        "subclasses of `torch.optim.Optimizer` defined in torch, torchao or ftune (`torch.optim.AdamW`, "
        "`torchao.optim.AdamW8bit`, `ftune.training.AdamWBf16State`)",
        within=("torch", "torchao", "ftune"),
        bases=("torch.optim:Optimizer",),
    ),
    Kind(
        "LR scheduler",
        "subclasses of `torch.optim.lr_scheduler.LRScheduler` and `ReduceLROnPlateau`",
        within=("torch.optim",),
        bases=("torch.optim.lr_scheduler:LRScheduler", "torch.optim.lr_scheduler:ReduceLROnPlateau"),
    ),
    Kind(
        "module or loss",
        "subclasses of `torch.nn.Module` defined in `torch.nn` (layers and losses such as "
        "`torch.nn.CrossEntropyLoss`), and the functions of `torch.nn.functional` "
        "(`torch.nn.functional.cross_entropy`)",
        within=("torch.nn",),
        bases=("torch.nn:Module",),
        also=_functional,
    ),
    Kind(
        "quantization config",
        "torchao's quantization and QAT configs and quantizers: subclasses of "
        "`torchao.core.config.AOBaseConfig`, `FakeQuantizeConfigBase` and `TwoStepQuantizer`",
        within=("torchao.quantization",),
        bases=(
            "torchao.core.config:AOBaseConfig",
            "torchao.quantization.qat.fake_quantize_config:FakeQuantizeConfigBase",
            "torchao.quantization.qat.two_step_quantizer:TwoStepQuantizer",
        ),
    ),
    Kind(
        "ftune component",
        "ftune's public classes, and the public functions of its component packages ("
        + ", ".join(f"`{p}`" for p in FTUNE_FUNCTION_PACKAGES)
        + ") and "
        + ", ".join(f"`{f}`" for f in FTUNE_FUNCTIONS)
        + "; not `ftune.cli` or `ftune.config`",
        also=_ftune_component,
    ),
)


def kind_of(obj: Any) -> str | None:
    """The name of the kind `obj` (a resolved, unwrapped `_component_`) belongs to; None: no kind."""
    for kind in KINDS:
        try:
            if kind.test(obj):
                return kind.name
        except Exception:  # noqa: BLE001 - an object that breaks a test belongs to no kind
            continue
    return None


def in_area(dotted: str) -> bool:
    """Whether a `_component_` path's text lies in a package a config may import without --trust."""
    return (
        _public(dotted)
        and any(_under(dotted, a) for a in AREAS)
        and not any(_under(dotted, x) for x in FTUNE_EXCLUDED)
    )


def describe() -> str:
    """The allowlist as a Markdown list (docs/config.md holds it between generated markers)."""
    lines = [f"- **{k.name}**: {k.covers};" for k in KINDS]
    lines[-1] = lines[-1][:-1] + "."
    areas = ", ".join(f"`{a}`" for a in AREAS)
    return "\n".join(
        [*lines, "", f"A path outside {areas} is refused by its text, before anything is imported."]
    )
