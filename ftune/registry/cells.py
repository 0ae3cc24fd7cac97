"""Every cell of the feature matrix, in groups: each recipe's entry (`ftune.registry.recipes`) is a
union of these (``{**SFT_COMMON, **LORA, **SINGLE, ...}``), so a cell is declared here only, once
for every recipe that shares it. A cell is `YES` or a reason in one of the states of
`ftune.registry.states`; the features (the matrix's rows) are `ftune.registry.features`.

The groups, in order: what every supervised recipe shares, then what one axis of the matrix changes
(LoRA or full, one device or FSDP2, QAT, optimizer in backward), then each recipe kind's own (DPO,
KD, GRPO), then the recipes that do not train. Pure Python, no torch.
"""

from __future__ import annotations

from ftune.registry.states import YES, gpu_only, na, unchecked

_OFFLOAD = gpu_only(
    "moves saved activations from GPU to CPU memory; a CPU run has nothing to offload to "
    "and refuses it (the test machines have no GPU)"
)
_NOT_RM = na("trains a language model: train a reward model with reward_model_single_device / _distributed")
_NOT_PPO = na("not PPO: PPO with a value model is ppo_full_finetune_single_device")
SFT_COMMON = {
    "reward_model": _NOT_RM,
    "ppo": _NOT_PPO,
    "grad_accumulation": YES,
    "grad_clipping": YES,
    "compile": YES,
    "activation_checkpointing": YES,
    "activation_offloading": _OFFLOAD,
    "chunked_loss": YES,
    "low_precision_optimizers": YES,
    "custom_collate": YES,
    "packing": YES,
    "padding_free": YES,
    "validation": YES,
    "step_checkpointing": YES,
    "resume": YES,
    "metric_logging": YES,
    "profiler": YES,
    "knowledge_distillation": na(
        "no teacher: distil with knowledge_distillation_single_device / _distributed"
    ),
    "mixture_of_experts": YES,
    "multi_turn": na(
        "supervised: conversations come from the data; agents train with lora_grpo_agent_single_device"
    ),
    "off_policy_correction": na(
        "supervised: nothing is sampled; rollouts beside training: lora_grpo_agent_single_device"
    ),
    "images": YES,  # an image-text folder (checkpointer.image_text) and multimodal_chat_dataset
}
NOT_LORA = {
    "lora": na("full fine-tune: every weight trains"),
    "qlora": na("full fine-tune: the base is not frozen"),
    "dora": na("full fine-tune: every weight trains"),
}
LORA = {"lora": YES, "qlora": YES, "dora": YES}
SINGLE = {
    "fsdp2": na("one device: nothing to shard"),
    "tensor_parallel": na("one device: nothing to split"),
    "context_parallel": na("one device: nothing to split"),
    "cpu_offload": na("one device: FSDP2's offload needs the distributed recipe"),
}
DIST = {
    "fsdp2": YES,
    "tensor_parallel": YES,
    "context_parallel": YES,
    "cpu_offload": gpu_only(
        "FSDP2's CPU offload moves parameters and optimizer state off the accelerator; on a CPU-only "
        "machine (the test machines) they are on the CPU already and the setting changes nothing"
    ),
}
# Tensor parallel splits plain nn.Linear projections: what wraps them is refused (after DIST).
_TP_LORA = (
    "a LoRA layer reads its whole base weight (merged, NF4 paths) where tensor parallel's hooks see "
    "only nn.Linear; context_parallel_dim splits long sequences with LoRA"
)
SPLIT_LORA = {"tensor_parallel": na(_TP_LORA), "context_parallel": YES}
SPLIT_QAT = {
    "tensor_parallel": na(
        "torchao's fake-quantized linears: a row-wise split layer's input is split by columns, and the "
        "per-token int8 scale of its activations needs the whole row (an exchange FakeQuantizedLinear "
        "does not make); context_parallel_dim splits long sequences with QAT"
    ),
    "context_parallel": YES,
}
NO_QAT = {
    "qat": na("use qat_single_device or qat_distributed"),
    "learned_ranges": na("no QAT: use qat_single_device or qat_distributed"),
}
QAT = {
    "qat": YES,
    "learned_ranges": YES,
    "images": YES,  # the quantizer fake-quantizes the encoder's and the projector's linears too
}
# QAT + LoRA: plain LoRA adapters over the fake-quantized frozen base.
QAT_LORA = {
    "lora": YES,
    "qlora": na("the frozen base is fake-quantized for QAT; storing it as NF4 would quantize it twice"),
    "dora": na("QAT + LoRA trains plain LoRA adapters over the fake-quantized base"),
    "qat": YES,
    "learned_ranges": na(
        "LoRA trains its adapters only, and the adapter checkpoint has no place for ranges: "
        "quantizer.learn_ranges=true is refused with a message"
    ),
    "images": YES,  # LoRA over a fake-quantized base: the encoder's linears are fake-quantized too
}
OPT_BWD = {"optimizer_in_backward": YES}
NO_OPT_BWD_DIST = {
    "optimizer_in_backward": na(
        "FSDP2 reduces gradients after backward; stepping inside it would use unreduced grads"
    )
}
# Preference tuning (DPO). What is checked for a DPO run is ✓; what runs but is not checked is
# `unchecked`; what cannot apply is n/a.
DPO_UNCHECKED = (
    "runs in the DPO recipes (the same lines as the SFT recipes), but is not checked on a DPO run: "
    "the DPO runs in the test suite are kept to the features DPO changes or must not break"
)
DPO_COMMON = {
    "reward_model": _NOT_RM,
    "ppo": _NOT_PPO,
    "knowledge_distillation": na(
        "preference tuning has no teacher: distil with the knowledge_distillation recipes"
    ),
    "multi_turn": na("preference pairs come from the data; agents train with lora_grpo_agent_single_device"),
    "off_policy_correction": na(
        "preference tuning samples nothing; rollouts beside training: lora_grpo_agent_single_device"
    ),
    "grad_accumulation": YES,
    "grad_clipping": YES,
    "compile": unchecked(f"{DPO_UNCHECKED} (compile_loss compiles DPOLoss.chunk_loss)"),
    "activation_checkpointing": unchecked(DPO_UNCHECKED),
    "activation_offloading": _OFFLOAD,
    "chunked_loss": unchecked(
        f"{DPO_UNCHECKED}: DPOLoss projects the labelled tokens in loss.num_chunks blocks"
    ),
    "low_precision_optimizers": unchecked(DPO_UNCHECKED),
    "custom_collate": unchecked(
        f"{DPO_UNCHECKED}; a collate_fn must keep padded_collate_preference's layout (chosen rows, then rejected)"
    ),
    "packing": na("pairs are scored whole; dataset.packed=true is refused: padding_free packs each batch"),
    "padding_free": YES,  # padding_free_collate_preference: chosen answers, then rejected, in one row
    "validation": YES,  # training.validate over loss_on: the preference loss, rewards, log-prob accuracy
    "step_checkpointing": unchecked(DPO_UNCHECKED),
    "resume": YES,
    "metric_logging": YES,
    "profiler": unchecked(DPO_UNCHECKED),
    "qat": na("no QAT preference recipe"),
    "learned_ranges": na("no QAT preference recipe"),
    "mixture_of_experts": YES,  # a LoRA reference keeps the policy's router state: tests/training/test_router_state.py
    "images": YES,  # image-grounded pairs (smolvlm/256M_lora_dpo): the policy's log-probs see the pixels
}
DPO_LORA = {"lora": YES, "qlora": unchecked(DPO_UNCHECKED), "dora": unchecked(DPO_UNCHECKED)}
DPO_SINGLE = {"optimizer_in_backward": unchecked(DPO_UNCHECKED)}
DPO_LORA_DIST = {
    **DPO_LORA,
    "qlora": na(
        "QLoRA under FSDP2 is checked in lora_finetune_distributed only, so the launcher refuses it "
        "here; run QLoRA DPO with lora_dpo_single_device"
    ),
}
KD = {
    **SFT_COMMON,
    "chunked_loss": na(
        "the loss is KDLoss, which chunks cross-entropy and KL together: checked under knowledge_distillation"
    ),
    "knowledge_distillation": YES,
    "lora": unchecked(
        "a LoRA student is a config choice (the _kd_lora configs: a peft section), tested in "
        "tests/recipes/test_kd.py; this recipe's feature checks run the full-student config"
    ),
    "qlora": na("a LoRA student over an NF4 base is not supported: use a full or LoRA student"),
    "dora": na("the student's adapters are plain LoRA"),
    **NO_QAT,
    "images": YES,  # an image-text teacher of the student's vocabulary sees the images too
}
# Online RL (GRPO). What a GRPO run is checked for is ✓; what runs but is not checked on a GRPO run
# is `unchecked`; what cannot apply is n/a.
GRPO_UNCHECKED = (
    "runs in the GRPO recipes (the same lines as the SFT recipes), but is not checked on a GRPO run: "
    "the GRPO runs in the test suite are kept to the features GRPO changes or must not break"
)
GRPO_COMMON = {
    "reward_model": _NOT_RM,
    "ppo": _NOT_PPO,
    "knowledge_distillation": na("online RL has no teacher: distil with the knowledge_distillation recipes"),
    "multi_turn": na(
        "single-turn GRPO: one completion per prompt; conversations: lora_grpo_agent_single_device"
    ),
    "off_policy_correction": na(
        "rollouts are sampled in the step, by the current policy; beside training: lora_grpo_agent_single_device"
    ),
    "grad_accumulation": YES,
    "grad_clipping": YES,
    "compile": unchecked(GRPO_UNCHECKED),
    "activation_checkpointing": unchecked(GRPO_UNCHECKED),
    "activation_offloading": _OFFLOAD,
    "chunked_loss": unchecked(
        f"{GRPO_UNCHECKED}: GRPOLoss projects the completion tokens in loss.num_chunks blocks"
    ),
    "low_precision_optimizers": unchecked(GRPO_UNCHECKED),
    "custom_collate": unchecked(f"{GRPO_UNCHECKED}; a collate_fn must return a ftune.data.PromptBatch"),
    "packing": na("rollouts are made inside the loop, one row per completion; dataset.packed does not apply"),
    "padding_free": YES,  # padding_free: true lays a rollout's rows end to end for the update
    "validation": YES,
    "step_checkpointing": YES,
    "resume": YES,
    "metric_logging": YES,
    "profiler": unchecked(GRPO_UNCHECKED),
    "qat": na("no QAT RL recipe"),
    "learned_ranges": na("no QAT RL recipe"),
    "mixture_of_experts": YES,  # a LoRA reference keeps the policy's router state: tests/training/test_router_state.py
    "optimizer_in_backward": na(
        "a reused rollout's clipped ratio needs the step to end before the weights change; refused with a message"
    ),
    "images": YES,  # image prompts (smolvlm/256M_lora_grpo): the update's gradient sees the pixels
}
GRPO_LORA = {"lora": YES, "qlora": unchecked(GRPO_UNCHECKED), "dora": unchecked(GRPO_UNCHECKED)}
# The agent recipe: conversations with an environment, and rollouts beside training.
AGENT = {
    "multi_turn": YES,
    "off_policy_correction": YES,
    "images": na("the environment's turns are text; image prompts train with lora_grpo_single_device"),
}
GRPO_LORA_DIST = {
    **GRPO_LORA,
    "qlora": na(
        "QLoRA under FSDP2 is checked in lora_finetune_distributed only, so the launcher refuses it "
        "here; run QLoRA GRPO with lora_grpo_single_device"
    ),
}
# Reward models (the reward_model recipes): full, or LoRA with a peft section. What a reward-model run
# is checked for is ✓; what runs but is not checked on one is `unchecked`; what cannot apply is n/a.
RM_UNCHECKED = (
    "runs in the reward_model recipes (the same lines as the SFT recipes), but is not checked on a "
    "reward-model run: those runs in the test suite are kept to the features a reward model changes or "
    "must not break"
)
RM_COMMON = {
    "reward_model": YES,
    "ppo": _NOT_PPO,
    "multi_turn": na("pairs come from the data; agents train with lora_grpo_agent_single_device"),
    "off_policy_correction": na("no rollouts: a reward model trains on fixed pairs"),
    "knowledge_distillation": na(
        "a reward model has no teacher: distil with the knowledge_distillation recipes"
    ),
    "grad_accumulation": YES,
    "grad_clipping": YES,
    "compile": unchecked(f"{RM_UNCHECKED} (the decoder layers and RewardLoss compile)"),
    "activation_checkpointing": YES,
    "activation_offloading": _OFFLOAD,
    "chunked_loss": na(
        "a reward model projects one hidden state a row to one score: there are no vocabulary logits to chunk"
    ),
    "low_precision_optimizers": unchecked(RM_UNCHECKED),
    "custom_collate": unchecked(
        f"{RM_UNCHECKED}; a collate_fn must keep padded_collate_preference's layout (chosen rows, then rejected)"
    ),
    "packing": na("pairs are scored as whole rows, each at its last token; dataset.packed=true is refused"),
    "padding_free": na("pairs are scored as whole rows: chosen rows, then rejected (right-padded)"),
    "validation": YES,  # training.validate over loss_on: val_loss, val_accuracy, val_margin, val_*_reward
    "step_checkpointing": YES,
    "resume": YES,
    "metric_logging": YES,
    "profiler": unchecked(RM_UNCHECKED),
    "qat": na("no QAT reward-model recipe"),
    "learned_ranges": na("no QAT reward-model recipe"),
    "mixture_of_experts": unchecked(
        f"{RM_UNCHECKED} (reward_loss adds the balancing loss, as every loss helper)"
    ),
    "lora": YES,  # the _lora_rm configs: adapters and the score head (peft's modules_to_save) train
    "qlora": unchecked(RM_UNCHECKED),
    "dora": unchecked(RM_UNCHECKED),
    "images": na("a reward model scores text pairs; image-grounded pairs train with the DPO recipes"),
}
RM_SINGLE = {"optimizer_in_backward": unchecked(RM_UNCHECKED)}
RM_DIST = {
    **NO_OPT_BWD_DIST,
    "qlora": na(
        "QLoRA under FSDP2 is checked in lora_finetune_distributed only, so the launcher refuses it here; run "
        "a QLoRA reward model with reward_model_single_device"
    ),
}
# PPO (ppo_full_finetune_single_device): torchtune 0.6.1's PPO recipe. What a PPO run is checked for is
# ✓; what runs but is not checked on a PPO run is `unchecked`; what cannot apply is n/a.
PPO_UNCHECKED = (
    "runs in the PPO recipe (the same lines as the SFT recipes), but is not checked on a PPO run: the PPO "
    "runs in the test suite are kept to what PPO changes or must not break"
)
PPO = {
    "ppo": YES,  # tests/recipes/features_ppo.py: the KL penalty, the value clip and GAE's lambda
    "reward_model": na(
        "uses a frozen reward model (reward_checkpointer); train one with reward_model_single_device"
    ),
    "knowledge_distillation": na("online RL has no teacher: distil with the knowledge_distillation recipes"),
    "multi_turn": na("one response a prompt; conversations: lora_grpo_agent_single_device"),
    "off_policy_correction": na("trajectories are sampled in the step, by the current policy"),
    "grad_accumulation": unchecked(PPO_UNCHECKED),
    "grad_clipping": unchecked(PPO_UNCHECKED),
    "compile": unchecked(PPO_UNCHECKED),
    "activation_checkpointing": unchecked(PPO_UNCHECKED),
    "activation_offloading": _OFFLOAD,
    "chunked_loss": unchecked(f"{PPO_UNCHECKED}: the response tokens are projected in blocks"),
    "low_precision_optimizers": unchecked(PPO_UNCHECKED),
    "custom_collate": unchecked(f"{PPO_UNCHECKED}; a collate_fn must return a ftune.data.PromptBatch"),
    "packing": na(
        "trajectories are made inside the loop, one row per response; dataset.packed does not apply"
    ),
    "padding_free": na("a trajectory's rows are prompt + response, right-padded"),
    "validation": unchecked(PPO_UNCHECKED),
    "step_checkpointing": unchecked(PPO_UNCHECKED),
    "resume": unchecked(PPO_UNCHECKED),
    "metric_logging": unchecked(PPO_UNCHECKED),
    "profiler": unchecked(PPO_UNCHECKED),
    "qat": na("no QAT RL recipe"),
    "learned_ranges": na("no QAT RL recipe"),
    "mixture_of_experts": unchecked(PPO_UNCHECKED),
    "optimizer_in_backward": YES,  # each step's forwards run before its backward (grad_accum_steps 1)
    "images": na("PPO's reward and value models read text; image prompts train with lora_grpo_single_device"),
}
# The recipes that do not train: a cell for each feature they offer, none for the training features.
GENERATE = {"kv_cache": YES, "chat_template": YES, "lora": YES, "quantization": YES}
QUANTIZE = {"quantization": YES, "qat": YES, "learned_ranges": YES}
EVAL = {"kv_cache": YES, "lora": YES, "quantization": YES}
DIST_CHECK = {
    "fsdp2": na("a launch check: it shards nothing"),
    "tensor_parallel": na("a launch check: it splits nothing"),
    "context_parallel": na("a launch check: it splits nothing"),
}
