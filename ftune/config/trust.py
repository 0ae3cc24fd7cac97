"""Which `_component_` paths a config may import and call: the trust model, an allowlist.

A `_component_` is an import and a call, so a YAML file is code. ftune trusts a component by what
it is, not by how it is spelt, in two checks:

1. Before anything is imported, by the dotted path's text: inside ftune, torch and torchao the path
   must lie in a package that holds the kinds a config needs (`ftune.config.allowlist.AREAS`:
   ``torch.optim``, ``torch.nn``, ``torchao.optim``, ``torchao.quantization``, ftune outside
   ``ftune.cli`` / ``ftune.config``) and name no private part; any other package must be named by
   the user. So ``torch.utils.collect_env.run`` is refused before ``torch.utils.collect_env`` loads.
2. After the path is resolved and before anything is called, by the object itself: every module
   the attribute walk passes through must be trusted, and the object must be of one of the kinds
   of `ftune.config.allowlist.KINDS` (an optimizer, an LR scheduler, a ``torch.nn`` module or loss,
   a torchao quantization config, an ftune component), or be defined (``__module__``; a partial or
   bound method: the function it wraps; another object: its class) in a module the user trusts.
   So ``torch.nn.parallel.distributed.os.system`` is refused (it is ``os.system``).

Trust beyond the allowlist comes from the user's own command, never from a config:

- ``--trust PKG`` on `ftune run` / `ftune validate`, or ``FTUNE_TRUST=pkg1,pkg2``. A name trusts the
  objects defined in it and in its submodules (``mypkg`` trusts ``mypkg.data.build``, but not
  ``os.system`` reached as ``mypkg.os.system``), even inside `DENIED` (``--trust torch.hub`` allows
  ``torch.hub.load``). A name that is not an importable package or module is an error;
- a config's top-level ``trusted_modules: [pkg]`` (in the file or as an override) is a request: it is
  refused with the ``--trust`` that would grant it, unless the user's command already does;
- modules in the folder of a copied recipe or of the user's config file (``my_data.py`` next to
  ``my_recipe.py``), by file: the module an import would load must be a file in that folder, so an
  empty ``posix.py`` there does not make the built-in ``posix`` trusted.

Trust granted by ``--trust`` or a folder lasts for the process (as an entry of ``sys.path`` does).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterable
from typing import Any

from ftune.config.allowlist import in_area, kind_of
from ftune.config.trust_grants import (  # noqa: F401 - re-exported: the trust model's one import
    BUILTIN_TRUSTED,
    TRUST_ENV,
    TRUST_KEY,
    _file_in_folders,
    _from_trusted_folder,
    _in_trusted_folder,
    _named,
    _under,
    env_packages,
    importable_problems,
    module_exists,
    request_message,
    trust_folder,
    trust_packages,
    trust_requests,
    trusted_packages,
)

# Inside the trusted packages, these fetch, unpickle, compile or launch code, or run another recipe: a
# config could reach arbitrary code through them. Each maps to the module that defines it, the name
# to trust (--trust) to allow it.
DENIED = {
    "torch.hub": "torch.hub",
    "torch.load": "torch.serialization",
    "torch.serialization": "torch.serialization",
    "torch.package": "torch.package",
    "torch.jit.load": "torch.jit._serialization",
    "torch.utils.cpp_extension": "torch.utils.cpp_extension",
    "torch.distributed.run": "torch.distributed.run",
    "torch.distributed.launch": "torch.distributed.launch",
    "torch.distributed.launcher": "torch.distributed.launcher",
    "torch.distributed.elastic": "torch.distributed.elastic",  # starts processes
    "torch.distributed.checkpoint": "torch.distributed.checkpoint",  # unpickles its metadata
    "torch.utils.benchmark": "torch.utils.benchmark",  # runs code strings
    "ftune.cli": "ftune.cli",
    "ftune.config": "ftune.config",  # runs recipes, loads configs, grants trust
}
# Loaders and code-execution entry points, refused by identity under whatever name reaches them
# (``module:attribute``; a module not yet imported cannot have handed them out).
DENIED_OBJECTS = (
    "torch:load",
    "torch.jit:load",
    "torch.export:load",
    "torch.ops:load_library",  # loads a shared library: native code
    "torch.classes:load_library",
    "builtins:eval",
    "builtins:exec",
    "builtins:compile",
    "builtins:__import__",
    "builtins:open",
    "builtins:breakpoint",
    "importlib:import_module",
    "importlib:__import__",
    "pickle:load",
    "pickle:loads",
    "pickle:Unpickler",
    "marshal:load",
    "marshal:loads",
    "os:system",
    "os:popen",
    "os:execv",
    "os:execvp",
    "os:spawnv",
    "subprocess:Popen",
    "subprocess:run",
    "subprocess:getoutput",
    "subprocess:check_output",
    "shutil:rmtree",
)


def _text_refusal(dotted: str, extra: Iterable[str] = ()) -> tuple[str, str] | None:
    """Why `dotted` may not be imported, judged by its text, and the name to trust; None: it may."""
    if _named(dotted, extra):
        return None  # named by the user: trusted even inside a DENIED prefix
    denied = next((d for d in DENIED if _under(dotted, d)), None)
    if denied:
        home = DENIED[denied]
        return (
            f"{denied} can load or compile code, so it is not trusted with the rest of {denied.split('.')[0]}",
            home,
        )
    top = dotted.split(".")[0]
    if top in BUILTIN_TRUSTED:
        private = next((p for p in dotted.split(".")[1:] if p.startswith("_")), None)
        if private is not None:
            home = dotted[: dotted.index("." + private)] + "." + private
            return (
                f"{private!r} is a private name of {top} (a config names public API only; private modules "
                "such as torch._C and torch._inductor hold code loaders)",
                home,
            )
        if in_area(dotted):
            return None
        home = ".".join(dotted.split(".")[:-1]) or dotted
        return (
            f"it is outside the parts of {top} a config may call without --trust (optimizers, LR schedulers, "
            "torch.nn modules and losses, torchao's quantization configs, ftune's components: "
            "docs/config.md#what-a-config-can-run)",
            home,
        )
    if _in_trusted_folder(top):
        return None
    return f"{top!r} is not a trusted package (trusted: {', '.join(trusted_packages(extra))})", top


def is_trusted(dotted: str, extra: Iterable[str] = ()) -> bool:
    """Whether `dotted` may be imported (by its text alone: nothing is imported here)."""
    return _text_refusal(dotted, extra) is None


def importable_top(dotted: str) -> bool:
    """Whether the first name of `dotted` is an importable module (found, not imported: no code runs).

    A path whose package does not exist at all is a typo, reported as such ("no module named")
    rather than as a trust problem.
    """
    top = dotted.split(".")[0]
    try:
        return top in sys.modules or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _fix(name: str) -> str:
    return (
        f"A config's components are code that ftune runs; if you trust {name}, pass --trust {name} to "
        f"ftune run / ftune validate, or set {TRUST_ENV}={name} (a config file cannot grant trust itself)."
    )


def untrusted_message(dotted: str, key: str, where: str = "") -> str:
    """The one-line refusal: which import, from which key, and the three ways to trust it."""
    why, name = _text_refusal(dotted) or ("it is not trusted", dotted.split(".")[0])
    return f"{key}: refusing to import {dotted!r}{f' ({where})' if where else ''}: {why}. {_fix(name)}"


def _unwrap(obj: Any) -> Any:
    """The function a partial or bound method calls (partials of bound methods of partials...)."""
    for _ in range(16):
        if isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, types.MethodType):
            obj = obj.__func__
        else:
            break
    return obj


def defining_module(obj: Any) -> str | None:
    """The name of the module whose code runs when `obj` is called; for a module, its own name.

    A partial or a bound method is judged by the function it wraps, a C function by its module (or
    the module, class or object it is bound to), a method descriptor by its class, and any other
    object (an instance: calling it runs its class's ``__call__``) by its class. None: unknown.
    """
    obj = _unwrap(obj)
    try:
        if isinstance(obj, types.ModuleType):
            name = obj.__name__
        elif isinstance(obj, (type, types.FunctionType)):
            name = obj.__module__
        elif isinstance(obj, types.BuiltinFunctionType):
            name = obj.__module__
            if name is None:
                owner = obj.__self__
                if isinstance(owner, types.ModuleType):
                    name = owner.__name__
                elif owner is not None:
                    name = (owner if isinstance(owner, type) else type(owner)).__module__
        elif isinstance(
            obj, (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType)
        ):
            name = obj.__objclass__.__module__
        elif isinstance(obj, types.MethodWrapperType):
            name = type(obj.__self__).__module__
        else:
            name = type(obj).__module__
    except Exception:  # noqa: BLE001 - an object that will not say where it comes from is not trusted
        return None
    return name if isinstance(name, str) and name else None


def _denied_objects() -> list[Any]:
    found = []
    for entry in DENIED_OBJECTS:
        module, _, attr = entry.partition(":")
        if module in sys.modules and hasattr(sys.modules[module], attr):
            found.append(_unwrap(getattr(sys.modules[module], attr)))
    return found


def _builtin(name: str) -> bool:
    return any(_under(name, p) for p in BUILTIN_TRUSTED)


def _trusted_module(name: str) -> bool:
    return _builtin(name) or _from_trusted_folder(name)


def resolved_refusal(dotted: str, obj: Any, key: str, walked: str = "") -> str | None:
    """Why the object `dotted` resolved to may not be used, judged by what it is; None: it may.

    Args:
        dotted: the `_component_` path as written.
        obj: the object it resolved to (or a module the attribute walk passed through).
        key: the config key, for the message.
        walked: the part of `dotted` that reached `obj`, when it is a module met on the way.
    """
    name = defining_module(obj)
    what = f"{walked!r} is the module" if walked else "it is"
    head = f"{key}: refusing {dotted!r}"
    if name is None:
        return (
            f"{head}: cannot tell which module defines the object it names ({type(obj).__name__}), so it is "
            f"not trusted. Name a class or function of ftune, torch, torchao or a package you trust."
        )
    if _named(name):
        return None  # the user trusts the module that defines it
    label = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    if not isinstance(obj, types.ModuleType) and any(_unwrap(obj) is d for d in _denied_objects()):
        return (
            f"{head}: it is {name}.{label}, which can load or run code, so it is not trusted under any name. "
            f"{_fix(name)}"
        )
    denied = next((DENIED[d] for d in DENIED if _under(name, DENIED[d])), None)
    if denied:
        return (
            f"{head}: {what} {name}{'' if walked or isinstance(obj, types.ModuleType) else f'.{label}'}, "
            f"and {denied} can load or compile code, so it is not trusted with the rest of "
            f"{denied.split('.')[0]}. {_fix(denied)}"
        )
    if isinstance(obj, types.ModuleType):
        if _trusted_module(name):
            return None  # a module the attribute walk passes through
    elif _from_trusted_folder(name) or (_builtin(name) and kind_of(_unwrap(obj)) is not None):
        return None
    elif _builtin(name):
        return (
            f"{head}: it is {name}.{label}, which is none of the kinds a config may call without --trust "
            "(optimizers, LR schedulers, torch.nn modules and losses, torchao's quantization configs, "
            f"ftune's components: docs/config.md#what-a-config-can-run). {_fix(name)}"
        )
    shown = (
        f"{what} {name!r}"
        if walked or isinstance(obj, types.ModuleType)
        else f"it is {label}, defined in {name!r}"
    )
    return (
        f"{head}: {shown}, outside the trusted packages (trusted: {', '.join(trusted_packages())}). A "
        f"component is trusted by the module that defines it, not by the path that reaches it: name it "
        f"by its own package's path. {_fix(name.split('.')[0])}"
    )


class UntrustedComponentError(ImportError):
    """A `_component_` that is not trusted: by its text (raised before anything is imported) or by
    what it resolved to (raised before anything is called)."""


def components_of(data: object, path: str = "") -> list[tuple[str, str]]:
    """Every ``(key, dotted path)`` of a `_component_` in a plain config tree, in file order."""
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        if isinstance(data.get("_component_"), str):
            found.append((path or "config", data["_component_"]))
        for k, v in data.items():
            found.extend(components_of(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found.extend(components_of(v, f"{path}[{i}]"))
    return found
