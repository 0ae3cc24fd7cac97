"""The rows of the feature matrix: every feature's name and what it does, in the matrix's order.

A new feature lands here, with its cell in every training recipe (`ftune.registry.cells`), its check,
its mutant and its glossary section (CONTRIBUTING.md, "Adding a feature"). Pure Python, no torch.
"""

from __future__ import annotations

# Feature names: each has a section in docs/glossary.md (a test checks it).
FEATURES: dict[str, str] = {
    "grad_accumulation": "several micro-batches per optimizer step, token-normalised",
    "grad_clipping": "clip the global gradient norm",
    "compile": "torch.compile per decoder layer and of the loss",
    "activation_checkpointing": "recompute each decoder layer's activations in backward",
    "activation_offloading": "keep each decoder layer's saved activations in CPU memory until backward",
    "low_precision_optimizers": "AdamW with bf16, 8-bit or 4-bit optimizer state",
    "optimizer_in_backward": "step each parameter's optimizer inside backward",
    "chunked_loss": "cross-entropy in sequence chunks, never the full fp32 logits",
    "custom_collate": "a collate function chosen in the config",
    "packing": "pack samples into fixed-length rows with a document mask",
    "padding_free": "a batch's samples end to end in one row: no compute on padding",
    "validation": "loss on dataset_val every run_val_every_n_steps",
    "step_checkpointing": "save every save_every_n_steps, prune with keep_last_n_checkpoints",
    "resume": "exact resume: same losses as an uninterrupted run",
    "metric_logging": "stdout, JSONL, TensorBoard, Weights & Biases loggers",
    "profiler": "torch.profiler traces behind a flag",
    "lora": "low-rank adapters, saved in PEFT's format",
    "qlora": "LoRA over an NF4-quantized frozen base",
    "dora": "weight-decomposed LoRA",
    "qat": "quantization-aware training with torchao fake quantization",
    "learned_ranges": "QAT trains its weight scales (torchao range learning); saved, resumed, converted with",
    "fsdp2": "shard parameters, gradients and optimizer state across ranks",
    "cpu_offload": "keep sharded parameters and optimizer state on CPU (FSDP2)",
    "tensor_parallel": "split each layer's projections over the tp ranks of a dp x tp mesh (FSDP2 over dp)",
    "context_parallel": "split each sequence over the cp ranks of a dp x cp mesh, keys and values exchanged",
    "quantization": "post-training quantization or QAT convert with torchao",
    "kv_cache": "KV-cache decoding",
    "chat_template": "the model's own chat template",
    "knowledge_distillation": "(1 - kd_ratio) CE + kd_ratio KL(teacher || student), chunked, frozen teacher",
    "reward_model": "a scalar head on the last real token, Bradley-Terry loss; saved as a sequence classifier",
    "ppo": "PPO with a value model: KL-penalised rewards, GAE advantages, clipped policy and value losses",
    "mixture_of_experts": "MoE models (Qwen3-MoE, Mixtral): the balancing loss of the policy's forward, once",
    "multi_turn": "conversations with an environment on the KV cache; only the model's tokens trained",
    "off_policy_correction": "rollouts sampled beside training by a worker, stale by a bounded number of steps, "
    "with truncated importance weights",
    "images": "image-text models: the images through the vision encoder and projector into the loss",
}
