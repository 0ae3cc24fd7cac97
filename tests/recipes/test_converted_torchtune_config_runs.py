"""A converted torchtune config is not only valid: the recipe runs it (on the tiny checkpoint).

The torchtune config below is torchtune 0.6.1's qwen2_5/0.5B_lora_single_device.yaml in shape
(same sections and keys). Only what ties it to the real model and data is overridden: the
architecture, tokenizer, checkpoint folder and dataset (to the tiny offline ones) and the
device, and the run length; the converted settings, peft section, optimizer, scheduler, loss and logger
run as converted.
"""

from ftune.torchtune import convert_torchtune_config, load_torchtune_yaml, render_yaml

TT = """
output_dir: /tmp/torchtune/qwen2_5_0_5B/lora_single_device
model:
  _component_: torchtune.models.qwen2_5.lora_qwen2_5_0_5b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_rank: 32
  lora_alpha: 64
  lora_dropout: 0.0
tokenizer:
  _component_: torchtune.models.qwen2_5.qwen2_5_tokenizer
  path: /tmp/Qwen2.5-0.5B-Instruct/vocab.json
  merges_file: /tmp/Qwen2.5-0.5B-Instruct/merges.txt
  max_seq_len: null
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Qwen2.5-0.5B-Instruct
  checkpoint_files: [model.safetensors]
  recipe_checkpoint: null
  output_dir: ${output_dir}
  model_type: QWEN2
resume_from_checkpoint: False
dataset:
  _component_: torchtune.datasets.alpaca_cleaned_dataset
  packed: False
seed: null
shuffle: True
batch_size: 4
optimizer:
  _component_: torch.optim.AdamW
  fused: True
  weight_decay: 0.01
  lr: 2e-3
lr_scheduler:
  _component_: torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup
  num_warmup_steps: 100
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
epochs: 1
max_steps_per_epoch: null
gradient_accumulation_steps: 2
compile: False
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: ${output_dir}/logs
log_every_n_steps: 1
log_peak_memory_stats: True
device: cuda
dtype: bf16
enable_activation_checkpointing: True
enable_activation_offloading: False
profiler:
  _component_: torchtune.training.setup_torch_profiler
  enabled: False
"""


def test_converted_lora_config_trains_and_saves_a_peft_adapter(tmp_path, tiny_checkpoint, demo_dir):
    import importlib.util
    import json

    from tiny_checkpoint import SIZES

    from ftune import registry
    from ftune.config import load_config

    conversion = convert_torchtune_config(load_torchtune_yaml(TT))
    assert conversion.recipe == "lora_finetune_single_device" and not conversion.unsupported
    path = tmp_path / "0.5B_lora.yaml"
    path.write_text(render_yaml(conversion, "0.5B_lora_single_device.yaml"))
    out = tmp_path / "out"
    overrides = [  # the tiny model and data instead of Qwen2.5-0.5B and alpaca; the rest as converted
        "model=ftune.models.smollm2.smollm2",
        *[f"model.{k}={v}" for k, v in SIZES.items()],
        "model.max_seq_len=512",
        "tokenizer=ftune.models.smollm2.smollm2_tokenizer",
        f"tokenizer.path={tiny_checkpoint}",
        "tokenizer.max_seq_len=64",
        f"checkpointer.checkpoint_dir={tiny_checkpoint}",
        "checkpointer.model_type=smollm2",
        "dataset=ftune.datasets.demo_dataset",
        "~dataset.source",
        f"dataset.data_dir={demo_dir}",
        "dataset.n_train=64",
        "dataset.n_heldout=16",
        f"output_dir={out}",
        "device=cpu",
        "dtype=fp32",
        "max_steps=3",
        "lr_scheduler.num_warmup_steps=1",  # 100 would exceed the 3 steps (ftune refuses that)
        "progress_bar=false",
    ]
    cfg = load_config(path, overrides)
    spec = importlib.util.spec_from_file_location(
        "converted_recipe", registry.RECIPES[conversion.recipe].file
    )
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    recipe.main(cfg)

    logs = [
        json.loads(line)
        for f in sorted((out / "logs").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    losses = [row["loss"] for row in logs if "loss" in row]
    assert len(losses) == 3 and losses[-1] < losses[0]
    adapter = json.loads((out / "step_3" / "adapter_config.json").read_text())
    assert adapter["r"] == 32 and adapter["lora_alpha"] == 64
    assert sorted(adapter["target_modules"]) == sorted(
        ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # save_adapter_weights_only: false (torchtune's default, written by the converter) also saves the merged model
    assert (out / "step_3" / "merged" / "model.safetensors").is_file()
