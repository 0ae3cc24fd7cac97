import pytest
from omegaconf import OmegaConf

from ftune.config import ConfigError, load_config
from ftune.config.overrides import parse_override

YAML = """
seed: 0
output_dir: out
tag: abc
model:
  _component_: ftune_test_targets.tiny_model
  dim: 8
optimizer:
  _component_: torch.optim.SGD
  lr: 0.1
targets: [q_proj, v_proj]
path: ${output_dir}/logs
"""


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(YAML)
    return path


def test_key_value_types(cfg_file):
    cfg = load_config(cfg_file, ["seed=3", "optimizer.lr=1e-4", "tag=hello", "output_dir=elsewhere"])
    assert cfg.seed == 3 and isinstance(cfg.seed, int)
    assert cfg.optimizer.lr == pytest.approx(1e-4)
    assert cfg.tag == "hello"
    assert cfg.path == "elsewhere/logs"  # interpolation sees the override


def test_exponent_floats_are_floats_at_any_depth_and_quoted_ones_strings(cfg_file):
    cfg = load_config(
        cfg_file, ["optimizer={_component_: torch.optim.SGD, lr: 1e-30, betas: [9e-1, '1e-4']}"]
    )
    assert cfg.optimizer.lr == 1e-30 and list(cfg.optimizer.betas) == [0.9, "1e-4"]
    assert load_config(cfg_file, ["tag='2e5'"]).tag == "2e5"


def test_a_component_shorthand_marks_only_its_component_as_set_on_the_command_line(cfg_file):
    cfg = load_config(cfg_file, ["optimizer=torch.optim.SGD"])
    assert cfg.where("optimizer._component_") == "set on the command line"
    assert cfg.where("optimizer.lr") == f"in {cfg_file}"  # still the file's


def test_list_and_nested_new_key(cfg_file):
    cfg = load_config(cfg_file, ["targets=[q_proj,k_proj,v_proj]", "model.extra.depth=2"])
    assert list(cfg.targets) == ["q_proj", "k_proj", "v_proj"]
    assert cfg.model.extra.depth == 2


def test_delete(cfg_file):
    cfg = load_config(cfg_file, ["~optimizer", "~model.dim"])
    assert "optimizer" not in cfg
    assert "dim" not in cfg.model


def test_component_shorthand_sets_component(cfg_file):
    cfg = load_config(cfg_file, ["model=ftune.models.smollm2.smollm2_135m"])
    assert cfg.model._component_ == "ftune.models.smollm2.smollm2_135m"
    assert cfg.model.dim == 8  # the other arguments stay


def test_quoted_numbers_stay_strings(cfg_file):
    cfg = load_config(cfg_file, ['tag="0001"', "seed=0001"])
    assert cfg.tag == "0001" and isinstance(cfg.tag, str)
    assert cfg.seed == 1


def test_null_and_bool(cfg_file):
    cfg = load_config(cfg_file, ["tag=null", "seed=true"])
    assert cfg.tag is None and cfg.seed is True


def test_overridden_keys_are_tracked(cfg_file):
    cfg = load_config(cfg_file, ["optimizer.lr=1"])
    assert cfg.where("optimizer.lr") == "set on the command line"
    assert cfg.where("seed") == f"in {cfg_file}"


@pytest.mark.parametrize(
    "text, message",
    [
        ("batch_size", r"override 'batch_size': expected key=value .*there is no '='"),
        ("=4", r"override '=4': the key before '=' is empty"),
        ("targets=[a,b", r"override 'targets=\[a,b': unbalanced brackets or quotes"),
        ("a..b=1", r"override 'a..b=1': 'a..b' is not a dotted key"),
        ("~", r"override '~': '~' must be followed by a dotted key"),
        ("x={a: [1}", r"unbalanced brackets"),
    ],
)
def test_malformed_overrides(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_override(text)


def test_delete_missing_key_suggests(cfg_file):
    with pytest.raises(
        ConfigError, match=r"there is no key 'optimzer' to delete. Did you mean 'optimizer'\?"
    ):
        load_config(cfg_file, ["~optimzer"])


def test_all_override_errors_reported_at_once(cfg_file):
    with pytest.raises(ConfigError) as e:
        load_config(cfg_file, ["nope", "=1", "ok=1"])
    assert len(e.value.problems) == 2
    assert "2 problem(s)" in str(e.value)


def test_broken_interpolation_is_a_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: ${missing_key}\n")
    with pytest.raises(
        ConfigError,
        match=r"a: Interpolation key 'missing_key' not found \(in .*c\.yaml\)\. A \$\{\.\.\.\} reference",
    ):
        load_config(path)


def test_unknown_config_name_suggests():
    with pytest.raises(
        ConfigError, match=r"no shipped config of that name. Did you mean 'smollm2/135M_lora'\?"
    ):
        load_config("smollm2/135M_lorra")


def test_ftune_home_resolver(tmp_path, monkeypatch):
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path / "home"))
    path = tmp_path / "c.yaml"
    path.write_text("d: ${ftune_home:}/models/x\n")
    assert OmegaConf.to_container(load_config(path).node)["d"] == f"{tmp_path}/home/models/x"
