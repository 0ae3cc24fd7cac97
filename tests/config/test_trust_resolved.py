"""Trust by what a `_component_` resolves to, not by how it is spelt (issue 26).

The candidates are generated, not listed by hand: every attribute of every loaded module of the
trusted packages that is a module of the standard library's process, import, pickle and file
entry points (os, subprocess, importlib, pickle, marshal, shutil, sys), a function or class
defined there, one of the builtins that run code, or `torch.load` under another name.
"""

import builtins
import functools
import os
import subprocess
import sys
import types
import warnings

import pytest
import torch
import torchao  # noqa: F401 - its modules are candidates too

import ftune
import ftune.config
from ftune import registry
from ftune.cli.main import main
from ftune.config import ConfigError, instantiate, load_config, trust, trust_grants
from ftune.config.instantiate import resolve
from ftune.config.trust import UntrustedComponentError, components_of, defining_module

DANGER = {"os", "posix", "nt", "subprocess", "_posixsubprocess", "importlib", "pickle", "_pickle"}
DANGER |= {"marshal", "shutil", "sys"}
CODE_BUILTINS = [builtins.eval, builtins.exec, builtins.compile, builtins.__import__, builtins.open]
# The entry points tried through each dangerous module reached by an attribute walk.
ENTRY_POINTS = {
    "os": ["system", "popen", "execv", "remove"],
    "subprocess": ["Popen", "run", "getoutput", "check_output"],
    "importlib": ["import_module"],
    "pickle": ["loads", "load"],
    "marshal": ["loads"],
    "shutil": ["rmtree"],
    "sys": ["exit"],
}
# Audit events of what the candidates could do; none may fire while a refused config is built.
EVENTS = {"os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.remove"}
EVENTS |= {"shutil.rmtree", "marshal.loads", "marshal.load", "pickle.find_class", "torch.load"}
_seen: list[str] = []
_watching: list[bool] = []


def _audit(event: str, args: tuple) -> None:
    if _watching and event in EVENTS:
        _seen.append(event)


sys.addaudithook(_audit)  # cannot be removed: it records only while `_watching` is set


def _top(name: object) -> str:
    return name.split(".")[0] if isinstance(name, str) else ""


def _dangerous(value: object) -> bool:
    if isinstance(value, types.ModuleType):
        return _top(value.__name__) in DANGER
    if any(value is b for b in CODE_BUILTINS) or value is torch.load:
        return True
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return _top(getattr(value, "__module__", None)) in DANGER
    return False


def generated_candidates() -> list[str]:
    """Dotted paths, through the loaded modules of ftune, torch and torchao, to dangerous objects."""
    with warnings.catch_warnings():  # deprecated attributes warn when looked at
        warnings.simplefilter("ignore")
        return _walk()


def _walk() -> list[str]:
    found: list[str] = []
    for name, module in sorted(sys.modules.items()):
        if _top(name) not in trust.BUILTIN_TRUSTED or not isinstance(module, types.ModuleType):
            continue
        for attr, value in list(vars(module).items()):
            if attr.startswith("__") or not _dangerous(value):
                continue
            found.append(f"{name}.{attr}")
            if isinstance(value, types.ModuleType):
                entries = ENTRY_POINTS.get(value.__name__, [])
                found.extend(f"{name}.{attr}.{e}" for e in entries if hasattr(value, e))
    return found


CANDIDATES = generated_candidates()


def _public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


def test_the_generated_candidates_cover_the_issue_so_the_test_cannot_pass_vacuously():
    assert len(CANDIDATES) > 200, len(CANDIDATES)
    public_torch_to_os = [
        c for c in CANDIDATES if c.startswith("torch.") and _public(c) and c.endswith(".os.system")
    ]
    assert public_torch_to_os, "no public path from a torch module to os.system was generated"
    assert "torch.serialization.load" in CANDIDATES  # torch.load under its other name
    assert any(c.endswith(".subprocess.Popen") or c.endswith(".subprocess") for c in CANDIDATES)
    assert any(c.startswith("ftune.") and c.endswith(".os") for c in CANDIDATES)
    # Most are refused by their text (outside the allowlist's areas, private), the rest by what they
    # resolve to: both checks are exercised.
    by_text = [c for c in CANDIDATES if not trust.is_trusted(c)]
    assert len(by_text) > 500 and len(CANDIDATES) - len(by_text) > 10


def test_every_generated_path_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    not_refused = []
    _seen.clear()
    _watching.append(True)
    try:
        for path in CANDIDATES:
            try:
                resolve(path)
                not_refused.append(f"{path}: resolved")
            except UntrustedComponentError:
                pass
            except ImportError as e:
                not_refused.append(f"{path}: {e}")
            # The command the entry point would run, passed as the recipe passes runtime objects.
            command = (
                ["touch", str(marker)]
                if path.rsplit(".", 1)[-1] in ("Popen", "run", "check_output")
                else f"touch {marker}"
            )
            try:
                instantiate({"_component_": path}, command, _path="model")
                not_refused.append(f"{path}: built")
            except ConfigError as e:
                if "refusing" not in str(e):
                    not_refused.append(f"{path}: {e}")
    finally:
        _watching.clear()
    assert not_refused == []
    assert _seen == [] and not marker.exists()


def test_a_path_through_a_torch_module_to_os_is_refused_naming_what_it_is():
    path = next(
        c for c in CANDIDATES if c.startswith("torch.nn.") and _public(c) and c.endswith(".os.system")
    )
    assert trust.is_trusted(path)  # the text alone looks trusted (torch.nn holds modules and losses)
    with pytest.raises(ConfigError) as info:
        instantiate({"_component_": path, "command": "true"}, _path="model")
    module = path.removesuffix(".system")
    assert (
        f"model._component_: refusing {path!r}: {module!r} is the module 'os', outside the trusted packages"
        in str(info.value)
    )
    assert "trusted by the module that defines it, not by the path that reaches it" in str(info.value)


def test_the_loaders_are_refused_under_every_name():
    with pytest.raises(
        ConfigError, match=r"refusing to import 'torch\.serialization\.load'.*--trust torch\.serialization"
    ):
        load_config("smollm2/135M_lora", ["model=torch.serialization.load"])
    with pytest.raises(
        UntrustedComponentError, match=r"refusing to import 'torch\.ops\.load_library': it is outside"
    ):
        resolve("torch.ops.load_library")


def test_a_named_package_trusts_what_it_defines_not_what_it_imports(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "reexport_pkg.py").write_text(
        "from os import system\nfrom torch import load\nimport subprocess as sp\n\ndef own(x=1):\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(trust_grants, "_packages", set(trust_grants._packages))
    trust.trust_packages(["reexport_pkg"])
    try:
        assert instantiate({"_component_": "reexport_pkg.own", "x": 3}) == 3
        with pytest.raises(
            ConfigError,
            match=r"it is posix\.system, which can load or run code, so it is not trusted under any name",
        ):
            instantiate({"_component_": "reexport_pkg.system", "command": "true"}, _path="model")
        with pytest.raises(
            ConfigError, match=r"it is torch\.serialization\.load, which can load or run code"
        ):
            instantiate({"_component_": "reexport_pkg.load", "f": "x"}, _path="model")
        with pytest.raises(ConfigError, match=r"'reexport_pkg\.sp' is the module 'subprocess'"):
            instantiate({"_component_": "reexport_pkg.sp.run", "args": ["true"]}, _path="model")
    finally:
        sys.modules.pop("reexport_pkg", None)


def test_naming_the_defining_module_trusts_a_denied_loader(monkeypatch):
    monkeypatch.setattr(trust_grants, "_packages", set(trust_grants._packages))
    trust.trust_packages(["torch.serialization"])
    assert resolve("torch.serialization.load") is torch.load


def test_private_names_of_the_builtin_packages_are_refused_by_their_text():
    with pytest.raises(UntrustedComponentError, match=r"'_C' is a private name of torch.*--trust torch\._C"):
        resolve("torch._C._nn.gelu")


@pytest.mark.parametrize(
    "path",
    [
        "torch.optim.AdamW",
        "torch.nn.functional.cross_entropy",
        "torch.nn.functional.gelu",  # a C function
        "torch.nn.Linear",
        "torch.nn.CrossEntropyLoss",
        "torch.optim.lr_scheduler.LambdaLR",
        "torchao.optim.AdamW8bit",
        "torchao.quantization.Int8WeightOnlyConfig",
        "torchao.quantization.qat.Int8DynActInt4WeightQATQuantizer",
        "torch.nn",
        "ftune.training.cosine_with_warmup",
        "ftune.models.smollm2.smollm2_135m",
        "ftune.peft.apply_lora",
    ],
)
def test_ordinary_components_still_resolve(path):
    resolve(path)


def test_every_component_of_every_shipped_config_resolves():
    seen = set()
    for name in registry.CONFIGS:
        for key, dotted in components_of(load_config(name).to_dict()):
            if dotted not in seen:
                seen.add(dotted)
                resolve(dotted, key)
    assert "torch.optim.AdamW" in seen and len(seen) > 20


def test_partials_are_judged_by_the_function_they_call():
    fn = instantiate({"_component_": "torch.nn.functional.cross_entropy", "_partial_": True})
    assert isinstance(fn, functools.partial)
    assert defining_module(functools.partial(os.system, "true")) == "posix"
    assert (
        defining_module(functools.partial(functools.partial(ftune.config.instantiate)))
        == "ftune.config.instantiate"
    )
    assert defining_module(subprocess.Popen.wait) == "subprocess"  # a method of a class
    assert defining_module(torch.Tensor.add) == "torch._C"  # a method descriptor: its class
    assert defining_module(torch.nn.functional.gelu) == "torch._C._nn"
    assert defining_module(torch.float32) == "torch"  # an instance: its class
    assert defining_module(os) == "os" and defining_module(torch.ops) == "torch.ops"


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["validate", "--trust", "nosuchpkg", "smollm2/135M_lora"], "--trust"),
        (["run", "--trust", "nosuchpkg", "lora_finetune_single_device"], "--trust"),
    ],
)
def test_trusting_a_name_that_does_not_import_is_an_error(argv, where, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        f"{where}: 'nosuchpkg' is not an importable package or module, so it cannot be trusted. Accepted: the "
        "dotted name of an installed package or module, such as my_pkg or my_pkg.data."
    ) in err
    assert "remove 'nosuchpkg' from --trust" in err and "Traceback" not in err


def test_ftune_trust_naming_a_missing_package_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("FTUNE_TRUST", "torch.hub,nosuch_env_pkg")
    assert main(["validate", "smollm2/135M_lora"]) == 1
    err = capsys.readouterr().err
    assert (
        "FTUNE_TRUST (environment variable FTUNE_TRUST=torch.hub,nosuch_env_pkg): 'nosuch_env_pkg' is not an "
        "importable package or module"
    ) in err
    assert "remove 'nosuch_env_pkg' from FTUNE_TRUST" in err


def test_trusted_modules_naming_a_missing_package_is_an_error(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("seed: 1\ntrusted_modules: [torch.hub, nosuch_cfg_pkg]\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert f"trusted_modules (in {cfg}): 'nosuch_cfg_pkg' is not an importable package or module" in str(
        info.value
    )
    assert "remove 'nosuch_cfg_pkg' from trusted_modules" in str(info.value)


@pytest.mark.parametrize("name", ["torch.nosuch", "my-pkg", "torch.load", "os.path.join"])
def test_a_name_must_be_a_module_not_an_attribute_or_a_typo(name):
    with pytest.raises(ConfigError, match=rf"--trust: '{name}' is not an importable package or module"):
        trust.trust_packages([name])


def test_a_submodule_is_found_without_importing_its_package(tmp_path, monkeypatch):
    pkg = tmp_path / "lazy_pkg_t26"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (pkg / "data.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert trust.module_exists("lazy_pkg_t26.data") and not trust.module_exists("lazy_pkg_t26.nope")
    assert not (tmp_path / "imported").exists()


def test_a_config_cannot_grant_itself_trust_through_ftune_config(monkeypatch):
    monkeypatch.setattr(trust_grants, "_packages", set(trust_grants._packages))
    with pytest.raises(
        ConfigError, match=r"refusing to import 'ftune\.config\.trust\.trust_packages'.*ftune\.config"
    ):
        instantiate({"_component_": "ftune.config.trust.trust_packages", "names": ["os"]}, _path="model")
    assert "os" not in trust_grants._packages
