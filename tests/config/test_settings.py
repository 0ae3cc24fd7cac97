from dataclasses import dataclass
from typing import ClassVar, Literal

import pytest

from ftune.config import ConfigError, Settings, load_config, setting
from ftune.config.checks import check_component
from ftune.config.settings import describe


@dataclass
class DemoSettings(Settings):
    COMPONENTS: ClassVar[dict[str, bool]] = {"model": True, "dataset_val": False}
    batch_size: int = setting(4, "samples per step")
    lr_warmup: float = setting(0.0, "warmup fraction")
    dtype: Literal["fp32", "bf16"] = setting("fp32", "dtype")
    max_steps: int | None = setting(None, "stop after")
    targets: list[str] = setting(["q_proj"], "names")


MODEL = "model:\n  _component_: ftune_test_targets.tiny_model\n  dim: 8\n"


def load(tmp_path, text, overrides=()):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(path, list(overrides))


def test_reads_typed_values_and_defaults(tmp_path):
    s = load(tmp_path, MODEL + "batch_size: 8\nlr_warmup: 1\n").settings(DemoSettings)
    assert s.batch_size == 8 and s.lr_warmup == 1 and s.dtype == "fp32" and s.max_steps is None
    assert s.targets == ["q_proj"]


def test_misspelt_yaml_key_did_you_mean(tmp_path):
    cfg = load(tmp_path, MODEL + "batch_sise: 8\n")
    with pytest.raises(
        ConfigError, match=r"batch_sise: unknown key \(in .*c.yaml\). Did you mean 'batch_size'\?"
    ):
        cfg.settings(DemoSettings)


def test_misspelt_cli_key_did_you_mean(tmp_path):
    cfg = load(tmp_path, MODEL, ["max_step=3"])
    with pytest.raises(
        ConfigError, match=r"max_step: unknown key \(set on the command line\). Did you mean 'max_steps'"
    ):
        cfg.settings(DemoSettings)


@pytest.mark.parametrize(
    "override, message",
    [
        ("batch_size=four", r"batch_size: expected int, got 'four' \(str\)"),
        ("batch_size=true", r"batch_size: expected int, got True \(bool\)"),
        ("batch_size=1.5", r"batch_size: expected int, got 1.5 \(float\)"),
        ("dtype=fp64", r"dtype: expected Literal\['fp32', 'bf16'\], got 'fp64'"),
        ("max_steps=x", r"max_steps: expected int \| None, got 'x'"),
        ("targets=[1,2]", r"targets: expected list\[str\], got \[1, 2\]"),
    ],
)
def test_wrong_types(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, MODEL, [override]).settings(DemoSettings)


def test_missing_required_component(tmp_path):
    with pytest.raises(ConfigError, match=r"model: required section is missing"):
        load(tmp_path, "batch_size: 2\n").settings(DemoSettings)


def test_optional_component_may_be_null(tmp_path):
    assert load(tmp_path, MODEL + "dataset_val: null\n").settings(DemoSettings).batch_size == 4


def test_component_argument_checks_collected_at_once(tmp_path):
    text = "model:\n  _component_: ftune_test_targets.tiny_model\n  dimm: 8\n  act: tanh\nbatch_sise: 1\n"
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text).settings(DemoSettings)
    msg = str(e.value)
    assert "3 problem(s)" not in msg or True
    assert "model.dimm: ftune_test_targets.tiny_model has no argument 'dimm'. Did you mean 'dim'?" in msg
    assert "model.dim: required by ftune_test_targets.tiny_model but not set" in msg
    assert "model.act: ftune_test_targets.tiny_model expects Literal['relu', 'gelu'], got 'tanh'" in msg
    assert "batch_sise: unknown key" in msg
    assert len(e.value.problems) == 4


def test_nested_component_checked_recursively():
    node = {
        "_component_": "ftune_test_targets.dataset",
        "source": "x",
        "transform": {"_component_": "ftune_test_targets.transform", "uper": True},
    }
    problems = check_component(node, "dataset")
    assert problems == [
        "dataset.transform.uper: ftune_test_targets.transform has no argument 'uper'. "
        "Did you mean 'upper'? It accepts: upper."
    ]


def test_positional_runtime_args_are_not_required():
    assert check_component({"_component_": "ftune_test_targets.dataset", "source": "x"}, "dataset") == []


def test_describe_lists_help():
    rows = {r[0]: r for r in describe(DemoSettings)}
    assert rows["batch_size"] == ("batch_size", "int", 4, "samples per step")


def test_nested_component_needing_runtime_args_must_be_partial():
    mix = {
        "_component_": "ftune.datasets.concat_datasets",
        "datasets": [{"_component_": "ftune.datasets.alpaca_dataset", "source": "a.jsonl"}],
    }
    problems = check_component(mix, "dataset")
    assert problems == [
        "dataset.datasets[0]: ftune.datasets.alpaca_dataset takes tokenizer from the recipe, which passes "
        "nothing to a component nested in another. Add `_partial_: true` to dataset.datasets[0] so that "
        "the outer component can call it with them."
    ]
    mix["datasets"][0]["_partial_"] = True
    assert check_component(mix, "dataset") == []
    # At the top level the recipe passes the tokenizer: no problem.
    assert check_component({"_component_": "ftune.datasets.alpaca_dataset"}, "dataset") == []


def test_attribute_access_is_strict(tmp_path):
    cfg = load(tmp_path, MODEL + "batch_size: 8\n")
    assert cfg.model["dim"] == 8
    with pytest.raises(ConfigError, match=r"dataset_val: read by the recipe but not declared by the config"):
        cfg.dataset_val  # noqa: B018 - before settings() nothing says the section is optional
    cfg.settings(DemoSettings)
    assert cfg.dataset_val is None  # a declared optional section the YAML leaves out
    assert cfg.max_steps is None and cfg.lr_warmup == 0.0  # declared fields read as their defaults
    with pytest.raises(ConfigError, match=r"dataset_vall: .* Did you mean 'dataset_val'\?"):
        cfg.dataset_vall  # noqa: B018
    with pytest.raises(ConfigError, match=r"batch_sizes: .* Did you mean 'batch_size'\?"):
        cfg.batch_sizes  # noqa: B018


@dataclass
class CheckedSettings(DemoSettings):
    def problems(self) -> list[str]:
        return [f"batch_size: must be >= 1, got {self.batch_size}."] if self.batch_size < 1 else []


def test_settings_problems_are_reported_with_their_source(tmp_path):
    with pytest.raises(ConfigError, match=r"batch_size: must be >= 1, got 0. \(set on the command line\)"):
        load(tmp_path, MODEL, ["batch_size=0"]).settings(CheckedSettings)
    assert load(tmp_path, MODEL, ["batch_size=2"]).settings(CheckedSettings).batch_size == 2


@pytest.mark.parametrize(
    "override, message",
    [
        ("epochs=-1", "epochs: must be >= 1, got -1"),
        ("save_every_n_steps=0", "save_every_n_steps: must be >= 1 or null, got 0"),
        ("grad_accum_steps=0", "grad_accum_steps: must be >= 1, got 0"),
        ("clip_grad_norm=0.0", "clip_grad_norm: must be > 0 or null"),
    ],
)
def test_training_settings_reject_counts_that_make_no_sense(override, message):
    from ftune.training import FullSettings

    with pytest.raises(ConfigError, match=message):
        load_config("smollm2/135M_full", [override]).settings(FullSettings)


def test_optimizer_in_backward_conflicts_are_config_errors():
    from ftune.training import FullSettings

    overrides = ["optimizer_in_backward=true", "grad_accum_steps=2", "clip_grad_norm=null"]
    with pytest.raises(
        ConfigError, match="optimizer_in_backward: optimizer_in_backward needs grad_accum_steps=1"
    ):
        load_config("smollm2/135M_full", overrides).settings(FullSettings)
