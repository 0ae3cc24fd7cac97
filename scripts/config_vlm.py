"""The image-text (VLM) configs of scripts/make_configs.py: SmolVLM-256M-Instruct LoRA and full
fine-tuning on image chats, LoRA DPO and GRPO on the synthetic image task (`ftune.datasets.image_task`),
and Llama-3.2-11B-Vision-Instruct LoRA (torchtune's llama3_2_vision/11B_lora).

An image-text folder is read whole (``checkpointer.image_text: true``) and sized by its config.json,
so the config has no model section; LoRA targets are given per part (decoder, projector, encoder);
samples with images are right-padded (``collate_fn: null``: the default collate stacks the images)
and never packed.
"""

from __future__ import annotations

from pathlib import Path

from scripts.config_vlm_inference import vlm_inference_configs

SMOLVLM_REPO = "HuggingFaceTB/SmolVLM-256M-Instruct"
SMOLVLM_FOLDER = "${ftune_home:}/models/SmolVLM-256M-Instruct"


_PEFT = (
    "peft:  # targets per part; a part left out stays frozen (vision_encoder: [q_proj, v_proj] adapts it too)\n"
    "  _component_: ftune.peft.apply_lora\n"
    "  targets:\n"
    "    decoder: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]\n"
    "    projector: [proj]\n"
    "  rank: 8\n"
    "  alpha: 16\n"
    "  dropout: 0.0\n"
    "  use_dora: false\n"
    "  quantize_base: false\n"
)


def smolvlm(method: str) -> str:
    """smolvlm/256M_<method>: "lora" (LoRA on the text decoder and the projector, the vision encoder
    frozen) or "full" (every weight of every part trains)."""
    lora = method == "lora"
    title = (
        "LoRA on image-text chats (decoder and projector; the vision encoder frozen)"
        if lora
        else "full fine-tune on image-text chats (vision encoder, projector and decoder)"
    )
    return (
        f"# SmolVLM-256M-Instruct: {title}.\n"
        "#\n"
        "# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):\n"
        f"#   ftune download {SMOLVLM_REPO}\n"
        "# Run:\n"
        f"#   ftune run {method}_finetune_single_device --config smolvlm/256M_{method}\n"
        + (
            f"#   ftune run --nproc_per_node 2 lora_finetune_distributed --config smolvlm/256M_{method}\n"
            if lora
            else ""
        )
        + f"output_dir: output/smolvlm_256M_{method}\n"
        "seed: 0\n"
        "device: cpu  # cpu, cuda, mps or auto\n"
        "dtype: bf16\n"
        "batch_size: 2\n"
        "grad_accum_steps: 4\n"
        "epochs: 1\n"
        "max_steps: null\n"
        "clip_grad_norm: 1.0\n"
        "save_every_n_steps: 500\n"
        "run_val_every_n_steps: null\n"
        "max_val_batches: null\n"
        "compile: false\n"
        "activation_checkpointing: true  # the vision encoder's layers and the decoder's\n"
        "log_every_n_steps: 1\n"
        "\n"
        "# model: none: config.json sizes the image-text model (vision encoder, projector, text decoder)\n"
        "tokenizer:\n"
        "  _component_: ftune.tokenizers.HFTokenizer\n"
        f"  path: {SMOLVLM_FOLDER}\n"
        "  max_seq_len: 2048\n"
        "checkpointer:\n"
        "  _component_: ftune.checkpointing.HFCheckpointer\n"
        f"  checkpoint_dir: {SMOLVLM_FOLDER}\n"
        f"  hf_repo_id: {SMOLVLM_REPO}\n"
        "  image_text: true  # read the folder whole: vision encoder, projector and text decoder\n"
        "  output_dir: ${output_dir}\n"
        "  resume_from_checkpoint: null  # auto: continue from the newest complete step folder\n"
        "  keep_last_n_checkpoints: 2\n" + (_PEFT if lora else "") + "\n"
        "dataset:  # chats with image parts; any hub id or local file (json, jsonl, parquet): dataset.source=...\n"
        "  _component_: ftune.datasets.multimodal_chat_dataset\n"
        "  source: HuggingFaceH4/llava-instruct-mix-vsft\n"
        "  image_transform: idefics3  # SmolVLM's tiles, resizing and normalisation (its processor's defaults)\n"
        "  packed: false  # samples with images are never packed\n"
        "dataset_val: null\n"
        "collate_fn: null  # right-pad the text, stack the images (ftune.data.padded_collate_vision)\n"
        "loss:  # cross-entropy in sequence chunks: never the full fp32 logits\n"
        "  _component_: ftune.training.ChunkedCrossEntropyLoss\n"
        "  num_chunks: 8\n"
        "optimizer:\n"
        "  _component_: torch.optim.AdamW\n"
        f"  lr: {'1.0e-4' if lora else '1.0e-5'}\n"
        "  weight_decay: 0.01\n"
        "  fused: true  # one vectorised pass over all parameters (docs/benchmarks.md: optimizer step)\n"
        "lr_scheduler:\n"
        "  _component_: ftune.training.cosine_with_warmup\n"
        "  num_warmup_steps: 100\n"
        "metric_logger:\n"
        "  _component_: ftune.training.DiskLogger\n"
        "  log_dir: ${output_dir}/logs\n"
    )


LLAMA_VISION_REPO = "meta-llama/Llama-3.2-11B-Vision-Instruct"
LLAMA_VISION_FOLDER = "${ftune_home:}/models/Llama-3.2-11B-Vision-Instruct"


def llama3_2_vision_lora() -> str:
    """llama3_2_vision/11B_lora: torchtune 0.6.1's llama3_2_vision/11B_lora (rank 8, alpha 16, q/v/o and
    the MLPs, the encoder adapted, lr 1e-4, batch 2 x 8, bf16), with one difference: ftune's targets
    are leaf names per part, so the decoder's self-attention layers get adapters too where torchtune
    adapts only the cross-attention (fusion) layers and keeps the self-attention ones frozen."""
    mlp = "gate_proj, up_proj, down_proj"
    return (
        "# Llama-3.2-11B-Vision-Instruct: LoRA on image-text chats (decoder with its cross-attention layers,\n"
        "# projector and vision encoder), as torchtune 0.6.1's llama3_2_vision/11B_lora.\n"
        "#\n"
        "# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models; a gated repository):\n"
        f"#   ftune download {LLAMA_VISION_REPO}\n"
        "# Run:\n"
        "#   ftune run --nproc_per_node 2 lora_finetune_distributed --config llama3_2_vision/11B_lora\n"
        "#   ftune run lora_finetune_single_device --config llama3_2_vision/11B_lora\n"
        "output_dir: output/llama3_2_vision_11B_lora\n"
        "seed: 0\n"
        "device: auto  # cpu, cuda, mps or auto\n"
        "dtype: bf16\n"
        "batch_size: 2\n"
        "grad_accum_steps: 8\n"
        "epochs: 1\n"
        "max_steps: null\n"
        "clip_grad_norm: 1.0\n"
        "save_every_n_steps: 500\n"
        "run_val_every_n_steps: null\n"
        "max_val_batches: null\n"
        "compile: false\n"
        "activation_checkpointing: true  # the vision encoder's layers and the decoder's\n"
        "log_every_n_steps: 1\n"
        "\n"
        "# model: none: config.json sizes the model (ftune.models.llama3_2_vision.llama3_2_vision_11b)\n"
        "tokenizer:\n"
        "  _component_: ftune.tokenizers.HFTokenizer\n"
        f"  path: {LLAMA_VISION_FOLDER}\n"
        "  max_seq_len: 8192\n"
        "checkpointer:\n"
        "  _component_: ftune.checkpointing.HFCheckpointer\n"
        f"  checkpoint_dir: {LLAMA_VISION_FOLDER}\n"
        f"  hf_repo_id: {LLAMA_VISION_REPO}\n"
        "  image_text: true  # read the folder whole: vision encoder, projector and text decoder\n"
        "  output_dir: ${output_dir}\n"
        "  resume_from_checkpoint: null  # auto: continue from the newest complete step folder\n"
        "  keep_last_n_checkpoints: 2\n"
        "peft:  # targets per part (leaf names: the decoder's self- and cross-attention layers alike)\n"
        "  _component_: ftune.peft.apply_lora\n"
        "  targets:\n"
        f"    decoder: [q_proj, v_proj, o_proj, {mlp}]\n"
        "    projector: [proj]\n"
        "    vision_encoder: [q_proj, v_proj, o_proj, fc1, fc2]\n"
        "  rank: 8\n"
        "  alpha: 16\n"
        "  dropout: 0.0\n"
        "  use_dora: false\n"
        "  quantize_base: false\n"
        "\n"
        "dataset:  # chats with image parts; any hub id or local file (json, jsonl, parquet): dataset.source=...\n"
        "  _component_: ftune.datasets.multimodal_chat_dataset\n"
        "  source: HuggingFaceH4/llava-instruct-mix-vsft\n"
        "  image_transform: mllama  # 560 px tiles, up to 4 (its processor's defaults)\n"
        "  packed: false  # samples with images are never packed\n"
        "dataset_val: null\n"
        "collate_fn: null  # right-pad the text, stack the tiles, the cross-attention mask (padded_collate_vision)\n"
        "loss:  # cross-entropy in sequence chunks: never the full fp32 logits\n"
        "  _component_: ftune.training.ChunkedCrossEntropyLoss\n"
        "  num_chunks: 8\n"
        "optimizer:\n"
        "  _component_: torch.optim.AdamW\n"
        "  lr: 1.0e-4\n"
        "  weight_decay: 0.01\n"
        "  fused: true  # one vectorised pass over all parameters (docs/benchmarks.md: optimizer step)\n"
        "lr_scheduler:\n"
        "  _component_: ftune.training.cosine_with_warmup\n"
        "  num_warmup_steps: 100\n"
        "metric_logger:\n"
        "  _component_: ftune.training.DiskLogger\n"
        "  log_dir: ${output_dir}/logs\n"
    )


_IMAGE_TASK = "${ftune_home:}/data/image_task"
_HEAD = (
    "seed: 0\n"
    "device: cpu  # cpu, cuda, mps or auto\n"
    "dtype: bf16\n"
    "batch_size: 2\n"
    "grad_accum_steps: 4\n"
    "epochs: 1\n"
    "max_steps: 200\n"
    "clip_grad_norm: 1.0\n"
    "save_every_n_steps: 100\n"
    "run_val_every_n_steps: 100\n"
    "max_val_batches: 4\n"
    "compile: false\n"
    "activation_checkpointing: true  # the vision encoder's layers and the decoder's\n"
    "log_every_n_steps: 1\n"
)
_MODEL = (
    "\n"
    "# model: none: config.json sizes the image-text model (vision encoder, projector, text decoder)\n"
    "tokenizer:\n"
    "  _component_: ftune.tokenizers.HFTokenizer\n"
    f"  path: {SMOLVLM_FOLDER}\n"
    "  max_seq_len: 2048\n"
    "checkpointer:\n"
    "  _component_: ftune.checkpointing.HFCheckpointer\n"
    f"  checkpoint_dir: {SMOLVLM_FOLDER}\n"
    f"  hf_repo_id: {SMOLVLM_REPO}\n"
    "  image_text: true  # read the folder whole: vision encoder, projector and text decoder\n"
    "  output_dir: ${output_dir}\n"
    "  resume_from_checkpoint: null  # auto: continue from the newest complete step folder\n"
    "  keep_last_n_checkpoints: 2\n" + _PEFT + "\n"
)
_TAIL = (
    "optimizer:\n"
    "  _component_: torch.optim.AdamW\n"
    "  lr: 1.0e-5\n"
    "  weight_decay: 0.01\n"
    "  fused: true  # one vectorised pass over all parameters (docs/benchmarks.md: optimizer step)\n"
    "lr_scheduler:\n"
    "  _component_: ftune.training.cosine_with_warmup\n"
    "  num_warmup_steps: 10\n"
    "metric_logger:\n"
    "  _component_: ftune.training.DiskLogger\n"
    "  log_dir: ${output_dir}/logs\n"
)


def _task(component: str, split: str) -> str:
    return (
        f"  _component_: ftune.datasets.{component}\n"
        f"  data_dir: {_IMAGE_TASK}\n"
        "  image_transform: idefics3  # SmolVLM's tiles, resizing and normalisation (its processor's defaults)\n"
        f"  split: {split}\n"
    )


def smolvlm_dpo() -> str:
    """smolvlm/256M_lora_dpo: LoRA DPO on image-grounded pairs (the image task: the answer chosen, a
    wrong answer rejected); the policy and the reference (adapters off) both see the images."""
    return (
        "# SmolVLM-256M-Instruct: LoRA DPO on image-grounded preference pairs (decoder and projector).\n"
        "#\n"
        "# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):\n"
        f"#   ftune download {SMOLVLM_REPO}\n"
        "# Run (the synthetic image task is written on first use; any image preference data:\n"
        "# dataset._component_=ftune.datasets.image_preference_dataset dataset.source=...):\n"
        "#   ftune run lora_dpo_single_device --config smolvlm/256M_lora_dpo\n"
        "#   ftune run --nproc_per_node 2 lora_dpo_distributed --config smolvlm/256M_lora_dpo\n"
        "output_dir: output/smolvlm_256M_lora_dpo\n"
        + _HEAD
        + _MODEL
        + "dataset:  # the image task's questions: "
        "the answer chosen, a wrong answer to the same question rejected\n"
        + _task("image_task_preference_dataset", "train")
        + "  packed: false  # pairs with images are never packed\n"
        "dataset_val:  # the held-out images and questions\n"
        + _task("image_task_preference_dataset", "heldout")
        + "collate_fn: null  # right-pad both answers; each row gets its pair's images\n"
        "loss:  # sigmoid (DPO), ipo, or simpo (reference-free: set gamma, e.g. 0.5, and beta ~2.0)\n"
        "  _component_: ftune.training.DPOLoss\n"
        "  loss_type: sigmoid\n"
        "  beta: 0.1\n"
        "  gamma: null  # SimPO's target margin; simpo only\n"
        "  label_smoothing: 0.0\n"
        "  num_chunks: 8  # labelled tokens go to the vocabulary in blocks: never the full fp32 logits\n"
        + _TAIL
    )


def smolvlm_grpo() -> str:
    """smolvlm/256M_lora_grpo: LoRA GRPO on the image task's questions, rewarded by exact match of the
    record's answer; rollouts sample with the images and the update's forward sees them again."""
    return (
        "# SmolVLM-256M-Instruct: LoRA GRPO on questions about images (decoder and projector).\n"
        "#\n"
        "# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):\n"
        f"#   ftune download {SMOLVLM_REPO}\n"
        "# Run (the synthetic image task is written on first use; any prompts with images:\n"
        "# dataset._component_=ftune.datasets.image_prompt_dataset dataset.source=...):\n"
        "#   ftune run lora_grpo_single_device --config smolvlm/256M_lora_grpo\n"
        "#   ftune run --nproc_per_node 2 lora_grpo_distributed --config smolvlm/256M_lora_grpo\n"
        "output_dir: output/smolvlm_256M_lora_grpo\n"
        + _HEAD.replace("batch_size: 2", "batch_size: 2  # prompts; each sampled group_size times")
        + "group_size: 8  # completions sampled per prompt\n"
        + "padding_free: false  # rollouts with images are right-padded, never packed\n"
        "max_new_tokens: 8  # the answers are one word\n"
        "temperature: 1.0  # sampling; the loss reads log-probabilities at this temperature\n"
        "top_k: null\n"
        "top_p: null\n"
        "stop_strings: []\n"
        "num_iterations: 1  # optimizer steps per rollout (> 1: PPO-style, the ratio clipped by loss.epsilon)\n"
        "scale_rewards: true  # divide advantages by the group's reward std (false: Dr. GRPO)\n"
        + _MODEL
        + "dataset:  # the image task's questions with their images; the answer in the record's field `answer`\n"
        + _task("image_task_prompt_dataset", "train")
        + "dataset_val:  # the held-out images and questions\n"
        + _task("image_task_prompt_dataset", "heldout")
        + "rewards:  # each reward sees the record (`answer`, `task`)\n"
        "  _component_: ftune.rewards.RewardSet\n"
        "  rewards:\n"
        "    correct: {_component_: ftune.rewards.ExactMatch, field: answer, ignore_case: true}\n"
        "  weights: {correct: 1.0}\n"
        "loss:\n"
        "  _component_: ftune.training.GRPOLoss\n"
        "  loss_type: grpo\n"
        "  epsilon: 0.2\n"
        "  epsilon_high: null\n"
        "  beta: 0.04  # KL to the reference (the policy with its adapters off, seeing the same images)\n"
        "  kl_estimator: k3\n"
        "  max_completion_length: null\n"
        "  num_chunks: 8\n" + _TAIL
    )


def vlm_configs(configs: Path) -> dict[Path, str]:
    """The image-text configs, by file."""
    out = {configs / "smolvlm" / f"256M_{method}.yaml": smolvlm(method) for method in ("full", "lora")}
    out[configs / "smolvlm" / "256M_lora_dpo.yaml"] = smolvlm_dpo()
    out[configs / "smolvlm" / "256M_lora_grpo.yaml"] = smolvlm_grpo()
    out[configs / "llama3_2_vision" / "11B_lora.yaml"] = llama3_2_vision_lora()
    out.update(vlm_inference_configs(configs))  # generate and eval: scripts/config_vlm_inference.py
    return out
