"""What each torchtune 0.6.1 config key and component becomes in ftune: the converter's one table.

`ftune convert torchtune-config` reads only this table (plus a few value rules in
`convert.py` and `methods.py`), and docs/migrating-from-torchtune.md is rendered from it, so the page
cannot drift from what the converter does. A key is either mapped (to the ftune key named here),
covered (ftune needs no key for it: the reason says why), or unsupported (the reason says what
ftune lacks). Nothing is dropped without one of the three.

Pure data: importing this module imports neither torch nor torchtune (ftune.registry is pure Python).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftune import registry

# torchtune recipe -> ftune recipe (one ftune config serves the single-device and distributed recipe).
RECIPES: dict[str, str] = {
    "full_finetune_single_device": "full_finetune_single_device",
    "full_finetune_distributed": "full_finetune_distributed",
    "lora_finetune_single_device": "lora_finetune_single_device",
    "lora_finetune_distributed": "lora_finetune_distributed",
    "qat_distributed": "qat_distributed",
    "qat_single_device": "qat_single_device",
    "qat_lora_finetune_distributed": "qat_lora_finetune_distributed",
    "lora_dpo_single_device": "lora_dpo_single_device",
    "lora_dpo_distributed": "lora_dpo_distributed",
    "full_dpo_distributed": "full_dpo_distributed",
    "knowledge_distillation_single_device": "knowledge_distillation_single_device",
    "knowledge_distillation_distributed": "knowledge_distillation_distributed",
    "generate": "generate",
    "dev/generate_v2": "generate",  # its configs differ from generate's in log_level and the prompt's image
    "quantize": "quantize",
    "eleuther_eval": "eval",
    "ppo_full_finetune_single_device": "ppo_full_finetune_single_device",
}
# The torchtune recipes whose ftune recipe distils (tagged [kd] in ftune/registry/recipes.py): their configs have a teacher.
KD_RECIPES = tuple(tt for tt, ours in RECIPES.items() if "kd" in registry.RECIPES[ours].tags)

# torchtune recipes ftune has no counterpart for yet, with what to do instead.
MISSING_RECIPES: dict[str, str] = {}
# The torchtune recipes whose model section is `policy_model` (PPO's), ftune's `model`.
POLICY_RECIPES = ("ppo_full_finetune_single_device",)

# torchtune model family (torchtune.models.<family>) -> ftune family (ftune.models.<family>).
FAMILIES: dict[str, str] = {
    "llama2": "llama2",
    "llama3": "llama3",
    "llama3_1": "llama3_1",
    "llama3_2": "llama3_2",
    "llama3_3": "llama3_1",  # Llama 3.3 70B is Llama 3.1 70B's architecture and tokenizer
    "qwen2_5": "qwen2_5",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "code_llama2": "code_llama2",
    "phi3": "phi3",
    "phi4": "phi4",
    "llama3_2_vision": "llama3_2_vision",
}
# Builder names that differ beyond the family prefix (after lora_/qlora_ and _base/_instruct are removed).
BUILDER_RENAMES: dict[str, str] = {"llama3_3_70b": "llama3_1_70b", "phi3_mini": "phi3_3_8b"}
# torchtune names the instruct and base variants of some Qwen2.5 sizes. ftune's builders have the
# instruct release's sizes; the base release differs only in max_seq_len (131072: ftune's rope
# tables stop at 32768) for these, and also in norm_eps (1e-5) for 14B and up, which do not map.
BUILDER_SUFFIXES: dict[str, str] = {
    "qwen2_5_1_5b_instruct": "",
    "qwen2_5_7b_instruct": "",
    "qwen2_5_14b_instruct": "",
    "qwen2_5_32b_instruct": "",
    "qwen2_5_72b_instruct": "",
    "qwen2_5_1_5b_base": "ftune's builder has the instruct release's max_seq_len 32768 (the base's is 131072)",
    "qwen2_5_7b_base": "ftune's builder has the instruct release's max_seq_len 32768 (the base's is 131072)",
}

# LoRA: torchtune attention module names -> ftune linear names (ftune uses Hugging Face's).
LORA_ATTN_MODULES: dict[str, str] = {
    "q_proj": "q_proj",
    "k_proj": "k_proj",
    "v_proj": "v_proj",
    "output_proj": "o_proj",
}
LORA_MLP = ("gate_proj", "up_proj", "down_proj")  # apply_lora_to_mlp: torchtune's w1, w3, w2
LORA_ARGS: dict[str, str] = {  # builder argument -> ftune.peft.apply_lora argument
    "lora_rank": "rank",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "use_dora": "use_dora",
    "quantize_base": "quantize_base",
}


@dataclass(frozen=True)
class Key:
    """A top-level scalar: its ftune key (None: covered or unsupported) and the note shown to the user."""

    target: str | None
    note: str = ""
    supported: bool = True


SETTINGS: dict[str, Key] = {
    "output_dir": Key("output_dir", "/tmp/torchtune/<run> becomes output/<run>"),
    "seed": Key("seed", "null (torchtune: a random seed) becomes 0: ftune runs are always seeded"),
    "device": Key("device"),
    "dtype": Key("dtype"),
    "epochs": Key("epochs"),
    "batch_size": Key("batch_size"),
    "shuffle": Key("shuffle"),
    "clip_grad_norm": Key("clip_grad_norm"),
    "compile": Key("compile"),
    "log_every_n_steps": Key("log_every_n_steps"),
    "gradient_accumulation_steps": Key("grad_accum_steps"),
    "enable_activation_checkpointing": Key("activation_checkpointing"),
    "enable_activation_offloading": Key("activation_offloading", "GPU-only in ftune: a CPU run refuses it"),
    "optimizer_in_bwd": Key("optimizer_in_backward"),
    "fsdp_cpu_offload": Key("fsdp_cpu_offload"),
    "max_steps_per_epoch": Key(
        "max_steps", "a cap per epoch in torchtune, a total in ftune: equal for one epoch (or null)"
    ),
    "resume_from_checkpoint": Key(
        "checkpointer.resume_from_checkpoint", "true becomes auto (the newest complete step folder)"
    ),
    "save_adapter_weights_only": Key("checkpointer.save_adapter_weights_only"),
    "log_peak_memory_stats": Key(None, "ftune logs peak memory (peak_memory_gib) at every logged step"),
    "low_cpu_ram": Key(None, "ftune always builds on the meta device and memory-maps the weights"),
    "custom_sharded_layers": Key(
        None, "ftune's FSDP2 wrapping shards each decoder layer and the embeddings/output itself"
    ),
    "tensor_parallel_dim": Key(
        "tensor_parallel_dim",
        "a dp x tp device mesh as torchtune's (the full-weight distributed recipes; LoRA and QAT refuse it)",
    ),
    "tensor_parallel_plan": Key(
        None, "ftune's plan is base_llama_tp_plan's: q/k/v and gate/up by columns, o and down by rows"
    ),
    "enable_kv_cache": Key(None, "ftune always decodes with a KV cache (generate, and eval's generation)"),
    "log_level": Key(None, "ftune logs at INFO, the level torchtune's configs set"),
    "max_new_tokens": Key("max_new_tokens"),
    "temperature": Key("temperature"),
    "top_k": Key("top_k"),
    "top_p": Key("top_p"),
}
# Nested torchtune sections that hold plain keys.
NESTED_SETTINGS: dict[str, Key] = {
    "fsdp.cpu_offload": Key("fsdp_cpu_offload"),
    "prompt.user": Key("prompt"),
    "prompt.system": Key("system"),
}
# Keys of one torchtune recipe's configs (elsewhere they mean something else, or nothing).
RECIPE_SETTINGS: dict[str, dict[str, Key]] = {
    "eleuther_eval": {
        "tasks": Key("lm_eval_tasks"),
        "limit": Key("lm_eval_limit", "examples per task (ftune's limit caps the held-out records)"),
        "max_seq_length": Key("lm_eval_max_length"),
        "include_path": Key("lm_eval_include_path"),
    },
    **{r: {"kd_ratio": Key("loss.kd_ratio", "an argument of ftune.training.KDLoss")} for r in KD_RECIPES},
    "ppo_full_finetune_single_device": {
        **{k: Key(k) for k in "ppo_epochs ppo_batch_size max_generated_tokens min_response_length".split()},
        **{k: Key(k) for k in "penalise_no_eos reward_penalty stop_token_ids kl_coeff gamma lmbda".split()},
        "whiten_rewards": Key(
            None, "torchtune 0.6.1's PPO recipe reads it and never uses it (nor does ftune's)"
        ),
    },
}
# torchtune sections that become another ftune section: KD's KL loss is ftune's one `loss` (KDLoss).
SECTION_INTO: dict[str, str] = {"kd_loss": "loss"}


@dataclass(frozen=True)
class Component:
    """A torchtune `_component_` and its ftune counterpart.

    Attributes:
        target: the ftune `_component_` (None when the section becomes top-level keys).
        args: torchtune argument -> ftune argument (same value).
        covered: torchtune arguments ftune needs no equivalent for, with the reason.
        set_args: ftune arguments the converter adds (e.g. the dataset source an alias implied).
        covered_only_as: arguments that are covered only with this value (else unsupported).
        note: shown next to the mapping.
    """

    target: str | None
    args: dict[str, str] = field(default_factory=dict)
    covered: dict[str, str] = field(default_factory=dict)
    set_args: dict[str, object] = field(default_factory=dict)
    covered_only_as: dict[str, object] = field(default_factory=dict)
    note: str = ""


_FILES = "ftune finds the weight files in checkpoint_dir itself (index, shards, or .bin)"
_CKPT = Component(
    "ftune.checkpointing.HFCheckpointer",
    args={"checkpoint_dir": "checkpoint_dir", "output_dir": "output_dir", "model_type": "model_type"},
    covered={
        "checkpoint_files": _FILES,
        "recipe_checkpoint": "resume_from_checkpoint=auto finds recipe_state.pt in the newest step folder",
        "adapter_checkpoint": "resume_from_checkpoint=auto finds the adapter in the newest step folder",
        "should_load_recipe_state": "resume_from_checkpoint decides it",
        "safe_serialization": "ftune always writes safetensors",
    },
    note="model_type becomes the ftune family name",
)
_DISK = {"log_dir": "log_dir", "filename": "filename"}
_PROFILER_ARGS = (
    "output_dir cpu cuda xpu profile_memory with_stack record_shapes with_flops wait_steps warmup_steps "
    "active_steps num_cycles"
).split()
_QUANT = {"groupsize": "group_size"}
# torchtune passes data_files and name on to load_dataset (**load_dataset_kwargs), as ftune's source does.
_PREFERENCE = {
    k: k for k in "source column_map train_on_input new_system_prompt split data_files name".split()
}

COMPONENTS: dict[str, Component] = {
    "torchtune.training.FullModelHFCheckpointer": _CKPT,
    "torchtune.training.FullModelMetaCheckpointer": Component(
        "ftune.checkpointing.MetaCheckpointer", args=_CKPT.args, covered=_CKPT.covered, note=_CKPT.note
    ),
    "torchtune.training.FullModelTorchTuneCheckpointer": Component(
        "ftune.checkpointing.NativeCheckpointer", args=_CKPT.args, covered=_CKPT.covered, note=_CKPT.note
    ),
    "torchtune.datasets.multimodal.the_cauldron_dataset": Component(
        "ftune.datasets.the_cauldron_dataset",
        args={k: k for k in "subset packed split train_on_input".split()},
        set_args={"image_transform": "mllama"},
        note="the Cauldron subset as image chats, tiled as Llama 3.2 Vision's processor tiles",
    ),
    "torchtune.datasets.alpaca_dataset": Component(
        "ftune.datasets.alpaca_dataset",
        args={"packed": "packed", "train_on_input": "train_on_input", "source": "source", "split": "split"},
    ),
    "torchtune.datasets.alpaca_cleaned_dataset": Component(
        "ftune.datasets.alpaca_dataset",
        args={"packed": "packed", "train_on_input": "train_on_input", "split": "split"},
        set_args={"source": "yahma/alpaca-cleaned"},
        note="alpaca_dataset with source yahma/alpaca-cleaned",
    ),
    "torchtune.modules.loss.CEWithChunkedOutputLoss": Component(
        "ftune.training.ChunkedCrossEntropyLoss",
        args={"num_output_chunks": "num_chunks", "ignore_index": "ignore_index"},
        set_args={"num_chunks": 8},
        note="8 chunks, torchtune's default",
    ),
    "torch.nn.CrossEntropyLoss": Component("ftune.training.CrossEntropyLoss"),
    "torchtune.rlhf.loss.DPOLoss": Component(
        "ftune.training.DPOLoss",
        args={"beta": "beta", "label_smoothing": "label_smoothing"},
        set_args={"loss_type": "sigmoid", "beta": 0.1, "label_smoothing": 0.0, "num_chunks": 8},
        note="loss_type sigmoid (DPO on summed log-probabilities, as torchtune's); torchtune's defaults "
        "beta 0.1 and label_smoothing 0 are written out; the labelled tokens go to the vocabulary in 8 chunks",
    ),
    "torchtune.modules.loss.ForwardKLWithChunkedOutputLoss": Component(
        "ftune.training.KDLoss",
        args={"num_output_chunks": "num_chunks", "ignore_index": "ignore_index"},
        set_args={"num_chunks": 8},
        note="the loss section: KDLoss mixes kd_ratio (torchtune's top-level key, default 0.5) of this KL "
        "with the cross-entropy of torchtune's loss section; its KL adds the teacher's entropy, a constant "
        "torchtune leaves out (the same gradients)",
    ),
    "torchtune.rlhf.loss.PPOLoss": Component(
        "ftune.training.PPOLoss",
        args={k: k for k in ("epsilon", "value_clip_range", "value_coeff")},
        set_args={"epsilon": 0.1, "value_clip_range": 0.2, "value_coeff": 0.1},
        note="the same clipped policy and value losses; torchtune's defaults (epsilon 0.1, value_clip_range 0.2, "
        "value_coeff 0.1) are written out",
    ),
    "torchtune.rlhf.loss.RSOLoss": Component(
        "ftune.training.DPOLoss",
        args={"gamma": "beta"},
        set_args={"loss_type": "hinge", "beta": 0.1, "num_chunks": 8},
        note="loss_type hinge: RSO's max(0, 1 - beta h) on DPO's log-ratio margin h; torchtune's gamma is "
        "ftune's beta (default 0.1, written out); the labelled tokens go to the vocabulary in 8 chunks",
    ),
    "torchtune.modules.loss.ReverseKLWithChunkedOutputLoss": Component(
        "ftune.training.KDLoss",
        args={"num_output_chunks": "num_chunks", "ignore_index": "ignore_index"},
        set_args={"num_chunks": 8, "kl": "reverse"},
        note="the loss section with kl reverse: KL(student || teacher), mixed with the cross-entropy by "
        "kd_ratio as the forward KL is",
    ),
    "torchtune.modules.loss.SymmetricKLWithChunkedOutputLoss": Component(
        "ftune.training.KDLoss",
        args={
            "num_output_chunks": "num_chunks",
            "ignore_index": "ignore_index",
            "sym_kd_ratio": "sym_kd_ratio",
        },
        set_args={"num_chunks": 8, "kl": "symmetric", "sym_kd_ratio": 0.5},
        note="the loss section with kl symmetric: sym_kd_ratio (torchtune's default 0.5, written out) of the "
        "forward KL plus the rest of the reverse KL; the forward part adds the teacher's entropy, a constant "
        "torchtune leaves out (the same gradients)",
    ),
    "torch.optim.AdamW": Component(
        "torch.optim.AdamW",
        args={k: k for k in "lr betas eps weight_decay amsgrad fused foreach".split()},
    ),
    "torch.optim.SGD": Component(
        "torch.optim.SGD", args={k: k for k in "lr momentum weight_decay nesterov".split()}
    ),
    "bitsandbytes.optim.PagedAdamW": Component(
        "torch.optim.AdamW",
        args={k: k for k in "lr betas eps weight_decay".split()},
        note="same update; bitsandbytes' paging (CUDA unified memory) has no ftune equivalent",
    ),
    "bitsandbytes.optim.PagedAdamW8bit": Component(
        "torchao.optim.AdamW8bit",
        args={k: k for k in "lr betas eps weight_decay".split()},
        note="torchao's block-wise 8-bit AdamW state (no paging); see glossary low_precision_optimizers",
    ),
    "bitsandbytes.optim.AdamW8bit": Component(
        "torchao.optim.AdamW8bit",
        args={k: k for k in "lr betas eps weight_decay".split()},
        note="torchao's block-wise 8-bit AdamW state",
    ),
    "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup": Component(
        "ftune.training.cosine_with_warmup",
        args={"num_warmup_steps": "num_warmup_steps"},
        covered={"num_cycles": "0.5 (half a cosine, down to 0) is ftune's schedule"},
        covered_only_as={"num_cycles": 0.5},
        note="ftune refuses num_warmup_steps above the run's total steps (lower it for short runs)",
    ),
    "torchtune.training.lr_schedulers.get_linear_schedule_with_warmup": Component(
        "ftune.training.linear_with_warmup", args={"num_warmup_steps": "num_warmup_steps"}
    ),
    "torchtune.training.lr_schedulers.get_constant_schedule_with_warmup": Component(
        "ftune.training.constant_with_warmup", args={"num_warmup_steps": "num_warmup_steps"}
    ),
    "torchtune.training.metric_logging.DiskLogger": Component("ftune.training.DiskLogger", args=_DISK),
    "torchtune.training.metric_logging.StdoutLogger": Component("ftune.training.StdoutLogger"),
    "torchtune.training.metric_logging.TensorBoardLogger": Component(
        "ftune.training.TensorBoardLogger", args={"log_dir": "log_dir"}
    ),
    "torchtune.training.metric_logging.WandBLogger": Component(
        "ftune.training.WandBLogger",
        args={k: k for k in "project entity name log_dir".split()},
    ),
    "torchtune.training.setup_torch_profiler": Component(
        None,
        args={"enabled": "profile"},
        covered={k: "the profiler is off (enabled: false)" for k in _PROFILER_ARGS},
        note="a flag in ftune: profile=true records wait 1, warmup 1, active 2 steps into output_dir/profile",
    ),
    "torchtune.training.quantization.Int8DynActInt4WeightQATQuantizer": Component(
        "ftune.quantization.Int8DynActInt4Weight", args=_QUANT
    ),
    "torchtune.training.quantization.Int4WeightOnlyQATQuantizer": Component(
        "ftune.quantization.Int4WeightOnly",
        args=_QUANT,
        covered={"inner_k_tiles": "torchao picks the layout"},
    ),
    "torchtune.training.quantization.Int8DynActInt4WeightQuantizer": Component(
        "ftune.quantization.Int8DynActInt4Weight", args=_QUANT
    ),
    "torchtune.training.quantization.Int4WeightOnlyQuantizer": Component(
        "ftune.quantization.Int4WeightOnly",
        args=_QUANT,
        covered={"inner_k_tiles": "torchao picks the layout"},
    ),
    "torchtune.models.llama3.base_llama_tp_plan": Component(
        None, note="ftune's plan is this one: q/k/v and gate/up by columns, o and down by rows"
    ),
    "torchtune.datasets.preference_dataset": Component("ftune.datasets.preference_dataset", args=_PREFERENCE),
    "torchtune.datasets.hh_rlhf_helpful_dataset": Component(
        "ftune.datasets.preference_dataset",
        args=_PREFERENCE,
        set_args={"source": "RLHFlow/HH-RLHF-Helpful-standard"},
        note="preference_dataset with source RLHFlow/HH-RLHF-Helpful-standard (conversations in chosen, rejected)",
    ),
    "torchtune.datasets.stack_exchange_paired_dataset": Component(
        "ftune.datasets.preference_dataset",
        args={k: v for k, v in _PREFERENCE.items() if k != "new_system_prompt"},  # not an argument of it
        set_args={
            "source": "lvwerra/stack-exchange-paired",
            "data_files": "data/rl/**",
            "column_map": {"prompt": "question", "chosen": "response_j", "rejected": "response_k"},
        },
        note="preference_dataset with torchtune's source, columns and folder (its data_dir data/rl, which "
        "`datasets` documents as data_files data/rl/**)",
    ),
}
# torchtune components ftune has no counterpart for, with the reason.
UNSUPPORTED_COMPONENTS: dict[str, str] = {}

# Tokenizer arguments, for every family's tokenizer builder.
TOKENIZER_ARGS: dict[str, str] = {"path": "path", "vocab_path": "path", "max_seq_len": "max_seq_len"}
TOKENIZER_COVERED: dict[str, str] = {
    "merges_file": "ftune reads vocabulary and merges from the model folder's tokenizer.json",
    "merges_path": "ftune reads vocabulary and merges from the model folder's tokenizer.json",
    "prompt_template": "null: the model's own chat format, which ftune's tokenizer applies",
    "special_tokens_path": "null: the model's own special tokens",
}
