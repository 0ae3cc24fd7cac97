"""The two configs benchmarks/vs_torchtune.py runs: torchtune 0.6.1's and ftune's, set to the same workload.

Shared by both: the model folder (SmolLM2-135M-Instruct, HF layout), the pre-tokenised rows
(vs_torchtune_data.pretokenized), batch size, no shuffling, AdamW with the same lr and weight
decay, a cosine schedule without warm-up, gradient clipping at 1.0, one log line a step on stdout,
fp32 or bf16, compile off or on, LoRA rank 8 / alpha 16 on q_proj and v_proj. Everything else is
each tool's own default (torchtune's chunked cross-entropy, ftune's shipped smollm2 config).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
LR = {"full": 5e-5, "lora": 1e-3}  # ftune's smollm2/135M_full and 135M_lora optimizer.lr
WEIGHT_DECAY = 0.01
LORA = {"rank": 8, "alpha": 16.0, "targets": ["q_proj", "v_proj"]}
RECIPE = {"full": "full_finetune_single_device", "lora": "lora_finetune_single_device"}


def torchtune_model(hf_config: dict[str, Any], method: str) -> dict[str, Any]:
    """torchtune's llama3_2 builder with the HF folder's dimensions (SmolLM2 is a llama with tied embeddings).

    scale_factor=1 turns torchtune's Llama-3 RoPE scaling into plain RoPE (every frequency is
    divided by 1), which is what SmolLM2 uses (`rope_scaling: null`).
    """
    c = hf_config
    if c.get("rope_scaling") is not None:
        raise ValueError(
            f"rope_scaling {c['rope_scaling']!r} is not mapped to torchtune's builder; got a model with it"
        )
    model = {
        "vocab_size": c["vocab_size"],
        "num_layers": c["num_hidden_layers"],
        "num_heads": c["num_attention_heads"],
        "num_kv_heads": c["num_key_value_heads"],
        "embed_dim": c["hidden_size"],
        "max_seq_len": c["max_position_embeddings"],
        "intermediate_dim": c["intermediate_size"],
        "norm_eps": c["rms_norm_eps"],
        "rope_base": int(c["rope_theta"]),
        "scale_factor": 1,
        "tie_word_embeddings": c["tie_word_embeddings"],
    }
    if method == "full":
        return {"_component_": "torchtune.models.llama3_2.llama3_2", **model}
    return {
        "_component_": "torchtune.models.llama3_2.lora_llama3_2",
        "lora_attn_modules": LORA["targets"],
        "apply_lora_to_mlp": False,
        "apply_lora_to_output": False,
        "lora_rank": LORA["rank"],
        "lora_alpha": LORA["alpha"],
        "lora_dropout": 0.0,
        **model,
    }


def torchtune_config(
    method: str, model_dir: Path, rows: Path, out: Path, *, steps: int, batch: int, dtype: str, compile_: bool
) -> dict[str, Any]:
    hf = json.loads((model_dir / "config.json").read_text())
    cfg = {
        "output_dir": str(out),
        "model": torchtune_model(hf, method),
        "tokenizer": {
            "_component_": "vs_torchtune_data.torchtune_tokenizer",
            "path": str(model_dir),
            "pad_id": hf["pad_token_id"],
        },
        "checkpointer": {
            "_component_": "torchtune.training.FullModelHFCheckpointer",
            "checkpoint_dir": str(model_dir),
            "checkpoint_files": ["model.safetensors"],
            "recipe_checkpoint": None,
            "output_dir": str(out),
            "model_type": "LLAMA3_2",
        },
        "resume_from_checkpoint": False,
        "dataset": {"_component_": "vs_torchtune_data.pretokenized", "path": str(rows), "packed": False},
        "seed": 0,
        "shuffle": False,
        "batch_size": batch,
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": LR[method], "weight_decay": WEIGHT_DECAY},
        "lr_scheduler": {
            "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
            "num_warmup_steps": 0,
        },
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
        "epochs": 1,
        "max_steps_per_epoch": steps,
        "gradient_accumulation_steps": 1,
        "clip_grad_norm": 1.0,
        "compile": compile_,
        "optimizer_in_bwd": False,
        "metric_logger": {"_component_": "torchtune.training.metric_logging.StdoutLogger"},
        "log_every_n_steps": 1,
        "log_peak_memory_stats": False,
        "device": "cpu",
        "dtype": dtype,
        "enable_activation_checkpointing": False,
        "enable_activation_offloading": False,
        "profiler": {"_component_": "torchtune.training.setup_torch_profiler", "enabled": False},
    }
    if method == "lora":
        cfg["save_adapter_weights_only"] = False
    return cfg


def ftune_config(
    method: str, rows: Path, out: Path, *, steps: int, batch: int, dtype: str, compile_: bool
) -> dict[str, Any]:
    """ftune's shipped smollm2/135M_<method> config with the shared settings put in."""
    shipped = REPO / "recipes" / "configs" / "smollm2" / f"135M_{method}.yaml"
    cfg = yaml.safe_load(shipped.read_text())
    data = {"_component_": "vs_torchtune_data.pretokenized", "path": str(rows)}
    cfg |= {
        "output_dir": str(out),
        "dtype": dtype,
        "batch_size": batch,
        "max_steps": steps,
        "shuffle": False,
        "compile": compile_,
        "clip_grad_norm": 1.0,
        "save_every_n_steps": None,
        "run_val_every_n_steps": None,
        "progress_bar": False,
        "log_every_n_steps": 1,
        "dataset": data,
        "dataset_val": data,
        "metric_logger": {"_component_": "ftune.training.StdoutLogger"},
    }
    cfg["optimizer"] |= {"lr": LR[method], "weight_decay": WEIGHT_DECAY}
    cfg["lr_scheduler"]["num_warmup_steps"] = 0
    if method == "lora":
        cfg["peft"] |= {"targets": LORA["targets"], "rank": LORA["rank"], "alpha": LORA["alpha"]}
    return cfg


def write_yaml(cfg: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path
