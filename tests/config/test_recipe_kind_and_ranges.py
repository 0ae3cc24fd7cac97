"""Refused before the model loads: values that cannot train, a config or step folder of another kind of run,
preference records that cannot train. All from the config, the data file and a folder listing."""

import json
import re
import subprocess
import sys

import pytest
import torch

from ftune import registry
from ftune.cli.fast_check import check_data_files, fast_check, fast_problems
from ftune.config import ConfigError, load_config
from ftune.config.recipe_kind import check_resume_folder, recipe_kind_problems, recorded_kind
from ftune.config.run_config import load_run_config
from ftune.settings import DistCheckSettings, GenerateSettings
from ftune.training import FullSettings, LoRASettings

RECIPES = registry.RECIPES


@pytest.mark.parametrize(
    "config, override, message",
    [
        ("smollm2/135M_lora", "optimizer.lr=0", r"optimizer.lr: must be a finite number > 0, got 0: "),
        (
            "smollm2/135M_lora",
            "optimizer.lr=-1e-4",
            r"optimizer.lr: must be a finite number > 0, got -0.0001",
        ),
        ("smollm2/135M_lora", "optimizer.lr=.nan", r"optimizer.lr: must be a finite number > 0, got nan"),
        ("smollm2/135M_lora_dpo", "loss.beta=.inf", r"loss.beta: must be a finite number > 0, got inf"),
        ("smollm2/135M_lora_dpo", "loss.beta=0", r"loss.beta: must be a finite number > 0, got 0"),
        ("smollm2/135M_lora_dpo", "loss.gamma=.inf", r"loss.gamma: must be a finite number .* got inf"),
        (
            "smollm2/135M_lora",
            "lr_scheduler.num_warmup_steps=-1",
            r"num_warmup_steps: must be >= 0 .* got -1",
        ),
        (
            "smollm2/135M_lora",
            "dist_timeout_s=0.01",
            r"dist_timeout_s: must be a finite number of seconds >= 1",
        ),
        (
            "smollm2/135M_lora",
            "dist_timeout_s=.inf",
            r"dist_timeout_s: must be a finite number of seconds >= 1",
        ),
    ],
)
def test_values_that_cannot_train_are_config_errors(config, override, message):
    with pytest.raises(ConfigError, match=message + r".*\(set on the command line\)"):
        load_config(config, [override]).settings(LoRASettings)


def test_sane_values_pass_and_dist_check_shares_the_timeout_rule():
    load_config("smollm2/135M_lora_dpo", ["optimizer.lr=1e-5", "loss.beta=2.0"]).settings(LoRASettings)
    load_config("smollm2/135M_full", ["dist_timeout_s=1"]).settings(FullSettings)
    with pytest.raises(ConfigError, match="dist_timeout_s: must be a finite number of seconds >= 1, got 0.5"):
        load_config("dist_check", ["dist_timeout_s=0.5"]).settings(DistCheckSettings)


@pytest.mark.parametrize(
    "recipe, config, message",
    [
        (
            "full_finetune_single_device",
            "smollm2/135M_full_dpo",
            r"--config: smollm2/135M_full_dpo is a full_dpo",
        ),
        ("lora_finetune_single_device", "smollm2/135M_lora_dpo", r"Run `ftune run lora_dpo_single_device"),
        (
            "lora_dpo_single_device",
            "smollm2/135M_lora",
            r"is a lora config \(for lora_finetune_single_device",
        ),
    ],
)
def test_a_config_of_another_recipe_is_named(recipe, config, message):
    problems = fast_problems(load_config(config, []), RECIPES[recipe].file)
    assert problems and re.search(message, problems[0]), problems


def test_a_dataset_of_the_other_kind_is_named():
    sft = load_config(
        "smollm2/135M_lora_dpo", ["~dataset", "dataset._component_=ftune.datasets.alpaca_dataset"]
    )
    (problem,) = recipe_kind_problems(sft, RECIPES["lora_dpo_single_device"].file)
    assert problem.startswith("dataset._component_: ftune.datasets.alpaca_dataset gives supervised examples")
    pairs = load_config(
        "smollm2/135M_lora", ["~dataset", "dataset._component_=ftune.datasets.preference_dataset"]
    )
    (problem,) = recipe_kind_problems(pairs, RECIPES["lora_finetune_single_device"].file)
    assert (
        "gives preference pairs (chosen, rejected), and lora_finetune_single_device trains on supervised"
        in problem
    )
    for recipe in RECIPES.values():  # every shipped recipe accepts its default config
        assert recipe_kind_problems(load_config(recipe.default_config, []), recipe.file) == [], recipe.name


def _step(folder, *, lora: bool, recipe: str | None, kind: str | None):
    folder.mkdir(parents=True)
    if lora:
        (folder / "adapter_model.safetensors").write_bytes(b"x")
    state = {"step": 2, "optimizer": {"state": {0: {"m": torch.zeros(2)}}}}
    if recipe is not None:
        state = {"ftune_recipe": recipe, "ftune_recipe_kind": kind, **state}
    torch.save(state, folder / "recipe_state.pt")
    (folder / ".complete").write_text(json.dumps({"complete": True}))
    return folder


def test_recorded_kind_reads_the_leading_keys_only(tmp_path):
    assert recorded_kind(
        _step(tmp_path / "a", lora=False, recipe="x", kind="preference") / "recipe_state.pt"
    ) == (
        "x",
        "preference",
    )
    assert recorded_kind(_step(tmp_path / "b", lora=False, recipe="mine", kind=None) / "recipe_state.pt") == (
        "mine",
        None,
    )
    assert recorded_kind(_step(tmp_path / "c", lora=False, recipe=None, kind=None) / "recipe_state.pt") == (
        None,
        None,
    )
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 torn")
    assert recorded_kind(tmp_path / "torn.pt") == (None, None)


def test_resume_from_a_folder_of_another_kind_is_refused(tmp_path):
    lora = _step(
        tmp_path / "out" / "step_2", lora=True, recipe="lora_finetune_single_device", kind="supervised"
    )
    full = load_config("smollm2/135M_full", [f"checkpointer.resume_from_checkpoint={lora}"])
    with pytest.raises(
        ConfigError, match=r"is a step folder of a LoRA run .* trains every weight .*/step_2/merged"
    ):
        check_resume_folder(full, RECIPES["full_finetune_single_device"].file)
    dpo = load_config(
        "smollm2/135M_lora_dpo",
        [f"checkpointer.output_dir={tmp_path / 'out'}", "checkpointer.resume_from_checkpoint=auto"],
    )
    with pytest.raises(
        ConfigError, match=r"a supervised run \(written by lora_finetune_single_device\), and lora_dpo"
    ):
        check_resume_folder(dpo, RECIPES["lora_dpo_single_device"].file)
    sft = load_config("smollm2/135M_lora", [f"checkpointer.resume_from_checkpoint={lora}"])
    check_resume_folder(sft, RECIPES["lora_finetune_single_device"].file)  # its own kind: accepted
    full_folder = _step(tmp_path / "full" / "step_1", lora=False, recipe=None, kind=None)  # an old folder
    with pytest.raises(
        ConfigError, match=r"a full fine-tune, written by an earlier run, and lora_finetune_single"
    ):
        check_resume_folder(
            load_config("smollm2/135M_lora", [f"checkpointer.resume_from_checkpoint={full_folder}"]),
            RECIPES["lora_finetune_single_device"].file,
        )


def test_fast_check_reads_the_preference_file_before_the_recipe(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n{"prompt": "q", "chosen": "a"}\n')
    with pytest.raises(ValueError, match=rf"{path}:2: no 'rejected'"):
        dpo = RECIPES["lora_dpo_single_device"].file
        fast_check(load_run_config(dpo, [f"dataset.source={path}"]), dpo)
    mapped = load_config(
        "smollm2/135M_lora_dpo", [f"dataset.source={path}", "dataset.column_map={rejected: chosen}"]
    )
    check_data_files(mapped)  # mapped to a column every line has


def test_data_and_resume_checks_run_without_torch(tmp_path):
    """What `ftune run` checks before the recipe: the data files and the resume folder, torch not imported."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "q", "chosen": "a", "rejected": ""}\n')
    script = (
        "import sys\n"
        "from ftune import registry\n"
        "from ftune.cli.fast_check import fast_check\n"
        "from ftune.config.run_config import load_run_config\n"
        "for recipe, args in [\n"
        f"    ('lora_dpo_single_device', ['dataset.source={pairs}']),\n"
        f"    ('lora_finetune_single_device', ['dataset.source={tmp_path}/none.jsonl']),\n"
        f"    ('lora_finetune_single_device', ['dataset.source={pairs.with_suffix('.xlsx')}']),\n"
        "]:\n"
        "    try:\n"
        "        file = registry.RECIPES[recipe].file\n"
        "        fast_check(load_run_config(file, args), file)\n"
        "    except (ValueError, FileNotFoundError) as e:\n"
        "        print(type(e).__name__, str(e).splitlines()[-1])\n"
        "assert 'torch' not in sys.modules and 'datasets' not in sys.modules, 'imported torch or datasets'\n"
    )
    pairs.with_suffix(".xlsx").write_bytes(b"PK")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[0]
        == f"ValueError   {pairs}:1: 'rejected' is empty: an empty answer gives DPO nothing to score; write the answer or delete the record."
    )
    assert (
        lines[1].startswith("FileNotFoundError Dataset source")
        and "none.jsonl' looks like a local path" in lines[1]
    )
    assert lines[2].startswith("ValueError Dataset source") and "has suffix '.xlsx'" in lines[2]


@pytest.mark.parametrize(
    "override, message",
    [
        ("temperature=-0.5", r"temperature: must be a finite number >= 0, got -0.5"),
        ("top_p=1.5", r"top_p: must be in \(0, 1\] or null .* got 1.5"),
        ("top_k=0", r"top_k: must be >= 1 or null .* got 0"),
        ("max_new_tokens=0", r"max_new_tokens: must be >= 1, got 0"),
    ],
)
def test_sampling_values_are_checked_at_config_time(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("generation", ["prompt=hi", override]).settings(GenerateSettings)
    load_config("generation", ["prompt=hi", "temperature=0.7", "top_p=1.0", "top_k=5"]).settings(
        GenerateSettings
    )
