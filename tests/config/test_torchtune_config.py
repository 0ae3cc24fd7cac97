"""`ftune convert torchtune-config` over every config torchtune 0.6.1 ships for a recipe and family ftune has.

The configs come from the torchtune==0.6.1 wheel itself (`pip download --no-deps`, cached in
pytest's cache folder), never from the repository. Each in-scope config must convert with a
report entry for every one of its keys, nothing unsupported except the listed exceptions, and
validate against its ftune recipe; docs/migrating-from-torchtune.md must be what the converter's
table and this run render.
"""

import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ftune.cli.convert import main as convert_main
from ftune.cli.main import main as ftune_main
from ftune.cli.validate import NO_RECIPE, validate
from ftune.config import ConfigError
from ftune.torchtune import convert_torchtune_config, infer_recipe, leaf_keys, load_torchtune_yaml
from ftune.torchtune import docs as torchtune_docs
from ftune.torchtune.corpus import CONFIGS_PREFIX, read_wheel_configs
from ftune.torchtune.table import RECIPES as TABLE_RECIPES

WHEEL = "torchtune-0.6.1-py3-none-any.whl"
# Configs that do not convert completely, and the one reason each: this list is the documented one.
# (lora_finetune_distributed's 4 qlora configs were the last exceptions until it ran QLoRA.)
# (llama3_2_vision/11B_generation_v2's image prompt was the last until generate took images.)
EXCEPTIONS: dict[str, str] = {}


@pytest.fixture(scope="session")
def torchtune_configs(request):
    cache = Path(request.config.cache.mkdir("torchtune-0.6.1-wheel"))
    if not (cache / WHEEL).is_file():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "torchtune==0.6.1", "-d", str(cache)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not (cache / WHEEL).is_file():
            pytest.skip(f"pip could not download torchtune==0.6.1 (the test corpus): {proc.stderr[-500:]}")
    return cache / WHEEL, read_wheel_configs(cache / WHEEL)


@pytest.fixture(scope="session")
def corpus(torchtune_configs):
    _, configs = torchtune_configs
    return configs, torchtune_docs.run_corpus(configs)


def test_corpus_is_every_config_of_ftune_recipes_and_families(corpus):
    configs, results = corpus
    assert len(configs) == 156  # the wheel's recipes/configs/**.yaml
    # 86 + qwen2 15 + gemma 9 + code_llama2 4 + phi3 6 + phi4 6 + gemma2 12 + llama3_2_vision 11 + llama2's
    # generation_v2 (dev/generate_v2, generate's config with log_level) + PPO 1
    assert len(results) == 151
    assert {r.recipe for r in results} == {
        "full_finetune_single_device",
        "full_finetune_distributed",
        "lora_finetune_single_device",
        "lora_finetune_distributed",
        "qat_distributed",
        "qat_lora_finetune_distributed",
        "lora_dpo_single_device",
        "lora_dpo_distributed",
        "full_dpo_distributed",
        "knowledge_distillation_single_device",
        "knowledge_distillation_distributed",
        "eleuther_eval",
        "generate",
        "dev/generate_v2",
        "quantize",
        "ppo_full_finetune_single_device",
    }


def test_every_config_converts_with_every_key_reported_and_validates(corpus):
    configs, results = corpus
    by_path = {c.path: c for c in configs}
    failures = {}
    for r in results:
        expected = EXCEPTIONS.get(r.path)
        got = sorted({u.detail.split(";")[0] for u in r.unsupported})
        if r.problems or got != ([expected] if expected else []):
            failures[r.path] = (got, r.problems)
    assert not failures, failures
    for r in results:  # the report names each key of the torchtune config exactly once
        tt = by_path[r.path].data
        report = [k.key for k in convert_torchtune_config(tt, recipe=r.recipe).report]
        assert sorted(report) == sorted(leaf_keys(tt)), r.path


def test_recipe_is_inferred_from_the_content(corpus):
    configs, results = corpus
    by_path = {c.path: c for c in configs}
    for r in results:
        inferred = infer_recipe(by_path[r.path].data)
        ours = TABLE_RECIPES[r.recipe]  # dev/generate_v2's configs are generate's
        assert TABLE_RECIPES[inferred].split("_")[0] == ours.split("_")[0], (r.path, inferred, r.recipe)


def test_migration_doc_is_the_rendered_table_and_corpus(corpus):
    configs, results = corpus
    doc = torchtune_docs.DOC.read_text(encoding="utf-8")
    assert doc == torchtune_docs.render(configs, results), (
        "docs/migrating-from-torchtune.md is stale: regenerate it with "
        "`python -m ftune.torchtune.docs --wheel <torchtune-0.6.1 wheel> --write`"
    )
    assert f"**{len(results) - len(EXCEPTIONS)} of {len(results)} " in doc
    for path in EXCEPTIONS:
        assert f"- `{path}`" in doc


def test_migration_page_commands_run_as_printed(torchtune_configs, tmp_path, monkeypatch, capsys):
    """The page's block, each command exactly as printed, on the wheel's own config: the converted
    file validates with the plain `ftune validate <file>` its header implies."""
    wheel, _ = torchtune_configs
    assert f"```bash\n{torchtune_docs.MIGRATION_BLOCK}```" in torchtune_docs.DOC.read_text(encoding="utf-8")
    commands = [shlex.split(line, comments=True) for line in torchtune_docs.MIGRATION_BLOCK.splitlines()]
    commands = [argv for argv in commands if argv]
    source = Path(commands[0][3])  # llama3_2/1B_lora_single_device.yaml, as the wheel holds it
    with zipfile.ZipFile(wheel) as z:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_bytes(z.read(f"{CONFIGS_PREFIX}{source}"))
    monkeypatch.chdir(tmp_path)
    for argv in commands:
        assert argv[0] == "ftune"
        assert ftune_main(argv[1:]) == 0, (argv, capsys.readouterr().err)
    written = (tmp_path / commands[0][-1]).read_text()
    assert "# Run: ftune run lora_finetune_single_device --config <this file>\n" in written
    assert "is valid against lora_finetune_single_device's settings." in capsys.readouterr().out


TT_LORA = """
output_dir: /tmp/torchtune/llama3_2_1B/lora
model:
  _component_: torchtune.models.llama3_2.lora_llama3_2_1b
  lora_attn_modules: [q_proj, v_proj, output_proj]
  apply_lora_to_mlp: true
  lora_rank: 8
  lora_alpha: 16
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Llama-3.2-1B-Instruct/original/tokenizer.model
  max_seq_len: null
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Llama-3.2-1B-Instruct/
  checkpoint_files: [model.safetensors]
  output_dir: ${output_dir}
  model_type: LLAMA3_2
resume_from_checkpoint: true
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
  packed: false
seed: null
shuffle: true
batch_size: 4
optimizer:
  _component_: torch.optim.AdamW
  lr: 3e-4
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
epochs: 1
max_steps_per_epoch: null
gradient_accumulation_steps: 8
device: cpu
dtype: fp32
"""


def test_values_paths_and_peft_section():
    conv = convert_torchtune_config(load_torchtune_yaml(TT_LORA))
    cfg = conv.config
    assert conv.recipe == "lora_finetune_single_device" and not conv.unsupported
    assert cfg["peft"] == {
        "_component_": "ftune.peft.apply_lora",
        "targets": ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "rank": 8,
        "alpha": 16,
        "dropout": 0.0,
        "use_dora": False,
        "quantize_base": False,
    }
    assert cfg["model"] == {"_component_": "ftune.models.llama3_2.llama3_2_1b"}
    assert cfg["tokenizer"]["_component_"] == "ftune.models.llama3_2.llama3_2_tokenizer"
    assert cfg["tokenizer"]["path"] == "${ftune_home:}/models/Llama-3.2-1B-Instruct/original/tokenizer.model"
    assert cfg["checkpointer"]["checkpoint_dir"] == "${ftune_home:}/models/Llama-3.2-1B-Instruct"
    assert cfg["checkpointer"]["model_type"] == "llama3_2"
    assert cfg["checkpointer"]["resume_from_checkpoint"] == "auto"
    assert cfg["checkpointer"]["save_adapter_weights_only"] is False  # torchtune's default, stated
    assert cfg["output_dir"] == "output/llama3_2_1B/lora"
    assert cfg["dataset"]["source"] == "yahma/alpaca-cleaned"
    assert cfg["optimizer"]["lr"] == 3e-4 and cfg["grad_accum_steps"] == 8 and cfg["seed"] == 0
    assert cfg["loss"] == {"_component_": "ftune.training.ChunkedCrossEntropyLoss", "num_chunks": 8}


def test_unknown_keys_and_arguments_are_reported_not_dropped():
    tt = load_torchtune_yaml(TT_LORA + "my_flag: 3\n")
    tt["loss"]["_component_"] = "torchtune.modules.loss.LinearCrossEntropyLoss"
    tt["optimizer"]["capturable"] = True
    tt["lr_scheduler"] = {
        "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
        "num_warmup_steps": 10,
        "num_cycles": 1.0,
    }
    tt["profiler"] = {
        "_component_": "torchtune.training.setup_torch_profiler",
        "enabled": True,
        "wait_steps": 5,
    }
    report = {r.key: r for r in convert_torchtune_config(tt).unsupported}
    assert report["my_flag"].detail == "my_flag=3: not a torchtune key the converter knows"
    assert "no ftune counterpart" in report["loss._component_"].detail
    assert report["optimizer.capturable"].detail == "torch.optim.AdamW has no argument for capturable=True"
    assert report["lr_scheduler.num_cycles"].detail.endswith("num_cycles=1.0")  # only 0.5 is ftune's cosine
    assert "wait_steps=5" in report["profiler.wait_steps"].detail  # an enabled profiler's schedule matters


def test_an_unknown_recipe_is_refused_with_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown torchtune recipe 'ppo_lora'; known: .*ppo_full_finetune_single_device"
    ):
        convert_torchtune_config(load_torchtune_yaml(TT_LORA), recipe="ppo_lora")


def test_a_ppo_config_converts_its_special_keys(torchtune_configs):
    """The PPO rules (ftune.torchtune.ppo): num_steps in prompts becomes max_steps in optimizer steps, the
    reference of the checkpointer's folder is covered, another folder is not."""
    _, configs = torchtune_configs
    (ppo,) = [c for c in configs if c.recipe == "ppo_full_finetune_single_device"]
    conv = convert_torchtune_config(ppo.data)
    assert conv.recipe == "ppo_full_finetune_single_device" and not conv.unsupported
    assert conv.config["max_steps"] == 10000 // 128 and conv.config["model"]["_component_"].endswith(
        "mistral_7b"
    )
    moved = {
        **ppo.data,
        "ref_policy_checkpointer": {**ppo.data["ref_policy_checkpointer"], "checkpoint_dir": "/x"},
    }
    report = {r.key: r for r in convert_torchtune_config(moved).unsupported}
    assert (
        "ftune's reference is the checkpointer's starting weights"
        in report["ref_policy_checkpointer.checkpoint_dir"].detail
    )


def test_cli_writes_a_config_that_validates_and_reports(tmp_path, capsys):
    src = tmp_path / "1B_lora_single_device.yaml"
    src.write_text(TT_LORA)
    out = tmp_path / "1B_lora.yaml"
    assert convert_main(["torchtune-config", str(src), "-o", str(out)]) == 0
    assert validate(str(out), [], "lora_finetune_single_device") == "lora_finetune_single_device"
    assert validate(str(out), []) == "lora_finetune_single_device"  # the recipe its header names
    text = out.read_text()
    assert text.startswith("# Converted from the torchtune config 1B_lora_single_device.yaml")
    assert "# covered: checkpointer.checkpoint_files:" in text
    assert "0 unsupported; it validates" in capsys.readouterr().err
    assert yaml.safe_load(text)["peft"]["rank"] == 8

    src.write_text(TT_LORA.replace("lora_llama3_2_1b", "qlora_llama3_2_1b"))  # QLoRA under FSDP2
    qlora = tmp_path / "1B_qlora.yaml"
    assert (
        convert_main(
            ["torchtune-config", str(src), "--recipe", "lora_finetune_distributed", "-o", str(qlora)]
        )
        == 0
    )
    assert validate(str(qlora), [], "lora_finetune_distributed") == "lora_finetune_distributed"
    assert validate(str(qlora), []) == "lora_finetune_distributed"  # its header: the recipe converted for
    assert yaml.safe_load(qlora.read_text())["peft"]["quantize_base"] is True
    capsys.readouterr()

    src.write_text(
        TT_LORA.replace("accumulation_steps: 8", "accumulation_steps: 1") + "optimizer_in_bwd: true\n"
    )
    assert convert_main(["torchtune-config", str(src), "--recipe", "lora_finetune_distributed"]) == 1
    err = capsys.readouterr().err
    assert "unsupported: optimizer_in_bwd: optimizer_in_backward in lora_finetune_distributed: FSDP2" in err


def test_a_config_naming_no_recipe_says_how_to_name_it(tmp_path):
    src = tmp_path / "1B_lora_single_device.yaml"
    scheduler = "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup"
    src.write_text(TT_LORA + f"lr_scheduler:\n  _component_: {scheduler}\n  num_warmup_steps: 100\n")
    out = tmp_path / "c.yaml"
    assert convert_main(["torchtune-config", str(src), "-o", str(out)]) == 0
    headless = tmp_path / "c2.yaml"  # the header's `# Run:` line removed: nothing names the recipe
    headless.write_text("".join(line for line in out.read_text().splitlines(True) if "# Run:" not in line))
    with pytest.raises(ConfigError, match=r"lr_scheduler\.num_training_steps") as e:
        validate(str(headless), [])
    assert e.value.problems[-1] == NO_RECIPE
    assert validate(str(headless), [], "lora_finetune_single_device") == "lora_finetune_single_device"
