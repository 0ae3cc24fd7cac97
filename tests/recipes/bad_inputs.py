"""The bad-input catalogue: commands a new user gets wrong, and what ftune must say about each.

Each `Case` is one command line (run in-process by tests/recipes/test_bad_inputs.py) and the
fragments its error must contain: what is wrong, where (key, file:line, option), what was given,
and how to fix it. `setup` names a function of `SETUPS` that writes the bad file the case uses.
Placeholders: {tmp} the case's own folder, {ckpt} a copy of the tiny checkpoint, {tiny} the overrides that
point a shipped config at the tiny checkpoint and demo data, {busy_port} a port that another socket holds
while the case runs. docs/errors.md is generated from this table by scripts/make_errors_doc.py.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    argv: tuple[str, ...]
    what: str  # names what is wrong
    where: str  # the key, file:line, option or rank
    given: str  # what was given
    fix: str  # how to fix it
    setup: str | None = None


LORA = ("run", "lora_finetune_single_device", "{tiny}")
FULL = ("run", "full_finetune_single_device", "{tiny}")
V = ("validate", "smollm2/135M_lora")
GRPO = ("run", "lora_grpo_single_device", "{tiny}", "group_size=2", "max_new_tokens=4", "max_steps=1")
DATA = ("~dataset", "dataset._component_=ftune.datasets.instruct_dataset")  # replaces the demo dataset
# The tiny Qwen3-MoE of the `moe_ckpt` setup, in place of the tiny checkpoint's model.
MOE_SIZES = dict(moe_intermediate_dim=32, num_experts=8, top_k=2, head_dim=16)
MOE = (
    "model=ftune.models.qwen3_moe.qwen3_moe",
    *(f"model.{k}={v}" for k, v in MOE_SIZES.items()),
    "checkpointer.checkpoint_dir={tmp}/moe",
    "tokenizer.path={tmp}/moe",
    "peft.targets=[q_proj,v_proj,experts]",
)


def _c(id, group, argv, what, where, given, fix, setup=None):
    return Case(id, group, tuple(argv), what, where, given, fix, setup)


# fmt: off
CASES: list[Case] = [
    # config file
    _c('config-missing', 'config file', ('validate', 'nope/7B_lora'), 'no such file and no shipped config', "--config 'nope/7B_lora'", 'nope/7B_lora', 'ftune ls'),
    _c('config-typo-name', 'config file', ('validate', 'smollm2/135M_lorra'), 'no such file', '--config', '135M_lorra', "Did you mean 'smollm2/135M_lora'?"),
    _c('yaml-syntax', 'config file', ('validate', '{tmp}/bad.yaml'), 'YAML syntax error', 'bad.yaml:3:4', "did not find expected ',' or ']'", 'Fix the file at that line', 'yaml_syntax'),
    _c('yaml-tab', 'config file', ('validate', '{tmp}/tab.yaml'), 'YAML syntax error', 'tab.yaml:2:', 'tab character', 'indentation', 'yaml_tab'),
    _c('yaml-top-list', 'config file', ('validate', '{tmp}/list.yaml'), 'the top level must be a mapping', 'list.yaml', 'ListConfig', 'mapping of keys', 'yaml_list'),
    _c('yaml-unknown-key', 'config file', ('validate', '{tmp}/typo.yaml', '--recipe', 'lora_finetune_single_device'), 'unknown key', 'typo.yaml', 'batchsize', "Did you mean 'batch_size'?", 'yaml_typo'),
    _c('yaml-wrong-type', 'config file', ('validate', '{tmp}/type.yaml', '--recipe', 'lora_finetune_single_device'), 'expected int', 'type.yaml', "'four'", 'batch_size', 'yaml_type'),
    _c('yaml-bad-interpolation', 'config file', ('validate', '{tmp}/interp.yaml'), "Interpolation key 'nowhere' not found", 'output_dir', 'interp.yaml', 'must name another key of the config', 'yaml_interp'),
    _c('yaml-run-bad-file', 'config file', ('run', 'lora_finetune_single_device', '--config', '{tmp}/bad.yaml'), 'YAML syntax error', 'bad.yaml:3:4', 'flow sequence', 'Fix the file', 'yaml_syntax'),
    _c('trusted-modules-type', 'config file', ('validate', '{tmp}/trust.yaml'), 'trusted_modules: expected a list', 'trust.yaml', "'my_pkg'", '[my_pkg]', 'yaml_trust'),
    # overrides
    _c('override-no-equals', 'overrides', (*V, 'batch_size'), 'batch_size', 'override', 'batch_size', 'key=value'),
    _c('override-unknown-key', 'overrides', (*V, 'batchsize=3'), 'unknown key', 'set on the command line', 'batchsize', "Did you mean 'batch_size'?"),
    _c('override-wrong-type-int', 'overrides', (*V, 'batch_size=many'), 'expected int', 'batch_size', "'many'", '(set on the command line)'),
    _c('override-wrong-type-bool', 'overrides', (*V, 'compile=maybe'), 'expected bool', 'compile', "'maybe'", '(set on the command line)'),
    _c('override-literal', 'overrides', (*V, 'dtype=fp64'), 'expected', 'dtype', "'fp64'", 'bf16'),
    _c('override-delete-missing', 'overrides', (*V, '~dataset_vall'), "no key 'dataset_vall' to delete", 'override', '~dataset_vall', "Did you mean 'dataset_val'?"),
    _c('override-into-scalar', 'overrides', (*V, 'batch_size.x=1'), 'not a mapping', 'batch_size', 'batch_size.x=1', 'cannot be set'),
    _c('override-epochs-negative', 'overrides', (*V, 'epochs=-1'), 'must be >= 1', 'epochs', '-1', 'max_steps'),
    _c('override-save-zero', 'overrides', (*V, 'save_every_n_steps=0'), 'must be >= 1 or null', 'save_every_n_steps', 'got 0', 'null saves only at the end'),
    _c('override-log-zero', 'overrides', (*V, 'log_every_n_steps=0'), 'must be >= 1', 'log_every_n_steps', 'got 0', '(set on the command line)'),
    _c('override-val-zero', 'overrides', (*V, 'run_val_every_n_steps=0'), 'must be >= 1 or null', 'run_val_every_n_steps', 'got 0', 'null'),
    _c('override-grad-accum-zero', 'overrides', (*V, 'grad_accum_steps=0'), 'must be >= 1', 'grad_accum_steps', 'got 0', '1 means no accumulation'),
    _c('override-clip-zero', 'overrides', (*V, 'clip_grad_norm=0'), 'must be > 0 or null', 'clip_grad_norm', '0', 'no clipping'),
    _c('override-oib-accum', 'overrides', (*V, 'optimizer_in_backward=true', 'grad_accum_steps=2'), 'needs grad_accum_steps=1', 'optimizer_in_backward', 'grad_accum_steps=2', 'Set grad_ac'),
    _c('override-seed-type', 'overrides', (*V, 'seed=abc'), 'expected int', 'seed', "'abc'", '(set on the command line)'),
    _c('override-max-steps-type', 'overrides', (*V, 'max_steps=1.5'), 'expected', 'max_steps', '1.5', '(set on the command line)'),
    _c('override-bad-interp', 'overrides', (*V, 'output_dir=${nope}'), "Interpolation key 'nope' not found", 'output_dir', 'set on the command line', 'must name another key'),
    _c('override-section-null', 'overrides', (*V, 'optimizer=null'), 'required section is null', 'optimizer', 'null', 'give it a _component_'),
    _c('override-section-deleted', 'overrides', (*V, '~optimizer'), 'required section is missing', 'optimizer', 'optimizer', 'add `optimizer: {_component_: ...}`'),
    _c('override-section-scalar', 'overrides', (*V, 'optimizer=3'), 'expected a mapping with a _component_', 'optimizer', '3', '_component_'),
    _c('override-lm-eval-limit', 'overrides', ('validate', 'eval', 'lm_eval_limit=0'), 'must be >= 1 or null', 'lm_eval_limit', 'got 0', 'lm_eval_limit=null'),
    # components
    _c('component-arg-typo', 'components', (*V, 'optimizer.weight_decy=0.1'), "has no argument 'weight_decy'", 'optimizer.weight_decy', 'weight_decy', "Did you mean 'weight_decay'?"),
    _c('component-arg-type', 'components', (*V, 'optimizer.lr=fast'), 'expects float', 'optimizer.lr', "'fast'", 'Set optimizer.lr to a value of that type'),
    _c('component-missing-module', 'components', (*V, 'model=ftune.models.nope.builder'), 'cannot import', 'model._component_', 'ftune.models.nope.builder', 'ftune.models'),
    _c('component-missing-attr', 'components', (*V, 'model=ftune.models.smollm2.smollm2_9000b'), "has no attribute 'smollm2_9000b'", 'model._component_', 'smollm2_9000b', 'ftune.models.smollm2'),
    _c('component-typo-package', 'components', (*V, 'optimizer=torhc.optim.AdamW'), "no module named 'torhc'", 'optimizer._component_', 'torhc.optim.AdamW', 'cannot import'),
    _c('component-untrusted', 'components', (*V, 'model=subprocess.getoutput', 'model.cmd=touch {tmp}/owned'), "refusing to import 'subprocess.getoutput'", 'model._component_', 'set on the command line', '--trust subprocess'),
    _c('component-untrusted-run', 'components', (*LORA, 'model=subprocess.getoutput', 'model.cmd=touch {tmp}/owned'), "refusing to import 'subprocess.getoutput'", 'model._component_', 'set on the command line', 'FTUNE_TRUST=subprocess'),
    _c('component-denied-in-torch', 'components', (*V, 'model=torch.hub.load'), 'torch.hub can load or compile code', 'model._component_', 'torch.hub.load', '--trust torch.hub to'),
    _c('trust-torch-module-to-os', 'trust', (*V, 'model=torch.nn.parallel.distributed.os.system', 'model.command=touch {tmp}/owned'), "is the module 'os', outside the trusted packages", 'model._component_', "'torch.nn.parallel.distributed.os'", "name it by its own package's path"),
    _c('trust-loader-other-name', 'trust', (*LORA, 'model=torch.serialization.load', 'model.f={tmp}/x.pt'), 'torch.serialization can load or compile code', 'model._component_', "'torch.serialization.load'", '--trust torch.serialization'),
    _c('trust-missing-package', 'trust', ('run', '--trust', 'nosuchpkg', *LORA[1:]), "'nosuchpkg' is not an importable package or module", '--trust:', 'nosuchpkg', "remove 'nosuchpkg' from --trust"),
    _c('component-required-arg', 'components', (*V, '~lr_scheduler.num_warmup_steps'), 'required by ftune.training.cosine_with_warmup', 'lr_scheduler.num_warmup_steps', 'not set', 'lr_scheduler.num_warmup_steps=<value>'),
    _c('component-peft-rank-type', 'components', (*V, 'peft.rank=abc'), 'expects int', 'peft.rank', "'abc'", 'Set peft.rank'),
    _c('component-literal-arg', 'components', ('validate', '{tmp}/chat.yaml'), 'expects Literal', 'dataset.conversation_style', "'yaml'", 'Set dataset.conversation_style', 'chat_style'),
    # checkpoints
    _c('ckpt-missing-dir', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/nowhere'), 'does not exist', 'nowhere', 'nowhere', 'ftune download'),
    _c('ckpt-truncated', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'model.safetensors', 'model.safetensors', 'model.safetensors', 'download', 'ckpt_truncated'),
    _c('ckpt-wrong-arch', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'Unsupported architecture', 'config.json', 'gpt2', 'LlamaForCausalLM', 'ckpt_wrong_arch'),
    _c('model-sized-without-config-json', 'checkpoints', (*V, '~model', 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'must size the model', 'model: no model section (set on the command line)', "config.json' does not exist", 'model._component_=', 'ckpt_no_config'),
    _c('ckpt-no-config-json', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'is missing, so the model family is unknown', 'config.json', 'config.json', 'model_type=<family>', 'ckpt_no_config'),
    _c('ckpt-config-json-corrupt', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'cannot parse', 'config.json', 'JSON', 'config.json', 'ckpt_bad_json'),
    _c('ckpt-sharded-missing-shard', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'missing', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json', 'model-00002-of-00002.safetensors', 'ckpt_missing_shard'),
    _c('ckpt-layers-disagree', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'disagrees with the weights next to it', 'config.json', 'num_hidden_layers is 3 there, 2 in the model', 'Fix config.json', 'ckpt_layers'),
    _c('ckpt-wrong-model-size', 'checkpoints', (*LORA, 'model.num_layers=3'), 'disagrees with the model built from', 'config.json', 'num_hidden_layers is 2 there, 3 in the model', 'Fix config.json'),
    _c('ckpt-wrong-width', 'checkpoints', (*LORA, 'model.intermediate_dim=96'), 'disagrees with the model built from', 'config.json', 'intermediate_size is 128 there, 96 in the model', 'point checkpointer.checkpoint_dir / the model section'),
    _c('ckpt-rope-base-differs', 'checkpoints', (*LORA, 'model.rope_base=500000.0'), 'disagrees with the model built from', 'config.json', 'rope_theta is 100000.0 there, 500000.0 in the model (model.rope_base)', "Set each model argument named in parentheses to config.json's value"),
    _c('ckpt-rope-parameters-differs', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt', 'model.rope_base=10000.0'), 'disagrees with the model built from', '{tmp}/ckpt/config.json', 'rope_parameters.rope_theta is 100000.0 there, 10000.0 in the model (model.rope_base)', 'or leave the model section out of the config (`~model` on the command line)', 'ckpt_rope_parameters'),
    _c('ckpt-wrong-dtype', 'checkpoints', (*LORA, 'checkpointer.checkpoint_dir={tmp}/ckpt'), 'integer dtype where the model has floating weights', 'tok_embeddings.weight', 'checkpoint has int8', 'use the unquantized', 'ckpt_int_weights'),
    _c('ckpt-resume-missing', 'checkpoints', (*LORA, 'checkpointer.resume_from_checkpoint={tmp}/step_9'), 'does not exist', 'resume_from_checkpoint', 'step_9', 'resume_from_checkpoint=auto'),
    _c('ckpt-resume-incomplete', 'checkpoints', (*LORA, 'checkpointer.resume_from_checkpoint={tmp}/out/step_2'), 'is incomplete', 'step_2', 'no', 'resume_from_checkpoint=auto', 'incomplete_step'),
    # tokenizers
    _c('tokenizer-missing', 'tokenizers', (*LORA, 'tokenizer.path={tmp}/none'), 'does not exist', 'none', 'none', 'tokenizer'),
    _c('tokenizer-corrupt', 'tokenizers', (*LORA, 'tokenizer.path={tmp}/tok/tokenizer.json'), 'tokenizer.json', 'tokenizer.json', 'tokenizer.json', 'tokenizer', 'tok_corrupt'),
    _c('tokenizer-seq-len-type', 'tokenizers', (*V, 'tokenizer.max_seq_len=long'), 'expects', 'tokenizer.max_seq_len', "'long'", 'Set tokenizer.max_seq_len'),
    _c('kd-tokenizer-mismatch', 'tokenizers', ('run', 'knowledge_distillation_single_device', '{tiny}', '~teacher_model', 'teacher_checkpointer.checkpoint_dir={ckpt}', 'teacher_tokenizer.path={tmp}/teacher_tok'), 'do not share a vocabulary', 'teacher_tokenizer.path', '2 ids map to different tokens', 'pick a teacher of the student', 'kd_tok_swapped'),
    # datasets
    _c('data-missing', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/none.jsonl'), 'does not exist', 'none.jsonl', 'none.jsonl', 'Check the path'),
    _c('data-empty', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/empty.jsonl'), 'is empty', 'empty.jsonl', 'no training examples', "Point the dataset's source", 'data_empty'),
    _c('data-broken-line', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/broken.jsonl'), 'not valid JSON', 'broken.jsonl:2', '{"input": "a", "output":', 'fix or delete that line', 'data_broken'),
    _c('data-not-object', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/list.jsonl'), 'not an object', 'list.jsonl:1', 'a JSON list', 'must be one JSON object', 'data_list'),
    _c('data-missing-column', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/cols.jsonl'), "has no column(s) ['input', 'output']", 'cols.jsonl', "its columns are ['question', 'answer']", "column_map={'input': 'question'}", 'data_columns'),
    _c('data-overlong', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/long.jsonl'), 'have no labelled token', 'the first 8 training samples', '64 tokens at most', 'raise tokenizer.max_seq_len', 'data_long'),
    _c('data-not-utf8', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/latin.jsonl'), 'not UTF-8', 'latin.jsonl:8', '0xe9', 'UTF-8', 'data_latin'),
    _c('data-bad-suffix', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/data.xlsx'), "has suffix '.xlsx'", 'data.xlsx', '.xlsx', 'Convert the file', 'data_xlsx'),
    _c('data-builder-no-files', 'datasets', (*LORA, *DATA, 'dataset.source=json'), 'needs data_files', 'json', 'json', 'data_files=path/to/file'),
    _c('data-chat-style', 'datasets', (*V, '~dataset', 'dataset._component_=ftune.datasets.chat_dataset', 'dataset.source=x.jsonl', 'dataset.conversation_style=yaml'), 'expects Literal', 'dataset.conversation_style', "'yaml'", 'Set dataset.conversation_style'),
    # launches
    _c('launch-nproc-zero', 'launches', ('run', '--nproc_per_node', '0', 'dist_check'), 'must be an integer >= 1', '--nproc_per_node', "'0'", '--nproc_per_node 2'),
    _c('launch-nproc-abc', 'launches', ('run', '--nproc_per_node', 'abc', 'dist_check'), 'must be an integer >= 1', '--nproc_per_node', "'abc'", '--nproc_per_node 2'),
    _c('launch-nproc-negative', 'launches', ('run', '--nproc_per_node=-2', 'dist_check'), 'must be an integer >= 1', '--nproc_per_node', "'-2'", 'auto'),
    _c('launch-single-device-recipe', 'launches', ('run', '--nproc_per_node', '2', 'lora_finetune_single_device'), 'runs on one device', '--nproc_per_node 2', 'lora_finetune_single_device', 'Use lora_finetune_distributed'),
    _c('launch-qlora-distributed', 'launches', ('run', '--nproc_per_node', '2', 'lora_dpo_distributed', '--config', 'smollm2/135M_lora_dpo', 'peft.quantize_base=true'), 'is QLoRA', 'peft.quantize_base', 'true', 'run QLoRA with lora_finetune_distributed'),
    _c('launch-bad-config-before-ranks', 'launches', ('run', '--nproc_per_node', '2', 'full_finetune_distributed', 'batchsize=2'), 'unknown key', 'batchsize', 'set on the command line', "Did you mean 'batch_size'?"),
    _c('launch-busy-port', 'launches', ('run', '--nproc_per_node', '2', '--master_port', '{busy_port}', 'dist_check'), 'could not start', 'the distributed launch of dist_check.py', 'port: {busy_port}', 'pass a free --master_port'),
    _c('launch-dead-rank', 'launches', ('run', '--nproc_per_node', '2', 'dist_check', 'fail_rank=1'), 'distributed run of dist_check.py failed', 'rank 1', 'rank 1 fails on purpose (fail_rank=1)', "The rank's own error is printed above"),
    _c('launch-hung-rank', 'launches', ('run', '--nproc_per_node', '2', 'dist_check', 'hang_rank=1', 'dist_timeout_s=3'), 'waited more than dist_timeout_s=3 s for the other ranks', 'rank 0', 'Timed out waiting 3000ms', 'raise the timeout, e.g. dist_timeout_s=6'),
    # data (checked before the model loads)
    _c('validate-pref-missing-rejected', 'data', ('validate', 'smollm2/135M_lora_dpo', 'dataset.source={tmp}/pairs.jsonl'), "no 'rejected'", 'pairs.jsonl:2', "the record's keys: ['chosen', 'prompt']", "dataset.column_map={'rejected': '<your column>'}", 'pref_no_rejected'),
    _c('pref-missing-rejected', 'data', ('run', 'lora_dpo_single_device', 'dataset.source={tmp}/pairs.jsonl'), "no 'rejected'", 'pairs.jsonl:2', "the record's keys: ['chosen', 'prompt']", "dataset.column_map={'rejected': '<your column>'}", 'pref_no_rejected'),
    _c('pref-empty-answer', 'data', ('run', 'lora_dpo_single_device', 'dataset.source={tmp}/pairs.jsonl'), "'chosen' is empty", 'pairs.jsonl:3', '1 record(s) cannot train', 'write the answer or delete the record', 'pref_empty'),
    _c('pref-val-no-prompt', 'data', ('run', 'lora_dpo_single_device', 'dataset_val.source={tmp}/val.jsonl', 'dataset_val.split=train'), "the prompt 'prompt' is needed", 'val.jsonl:1', 'but it is missing', "dataset.column_map={'prompt': '<your column>'}", 'pref_no_prompt'),
    # online RL (GRPO)
    _c('grpo-group-size-one', 'online RL', ('validate', 'smollm2/135M_lora_grpo', 'group_size=1'), 'group_size: must be >= 2', 'group_size', 'got 1', 'Typical: 4 to 16'),
    _c('grpo-greedy', 'online RL', ('validate', 'smollm2/135M_lora_grpo', 'temperature=0.0'), 'temperature: must be a finite number > 0', 'temperature', 'got 0.0', 'Typical: 0.7 to 1.0'),
    _c('grpo-reward-weights', 'online RL', (*GRPO, 'rewards.weights={right: 1.0}'), 'give one weight per reward', 'rewards.weights', "not a reward: ['right']", "missing: ['correct']"),
    _c('grpo-reward-raises', 'online RL', (*GRPO, 'rewards.rewards.correct.field=reference'), "reward 'correct' on completion 1", 'completion 1 of', 'raised KeyError', 'Fix the reward or the data it reads'),
    _c('grpo-dr-grpo-length', 'online RL', ('validate', 'smollm2/135M_lora_grpo', 'loss.loss_type=dr_grpo', 'loss.max_completion_length=7'), "Dr. GRPO's constant", 'loss.max_completion_length', 'got 7', 'loss.max_completion_length: ${max_new_tokens}'),
    _c('grpo-kl-estimator', 'online RL', ('validate', 'smollm2/135M_lora_grpo', 'loss.kl_estimator=k1'), "expects Literal['k3', 'k3_ratio']", 'loss.kl_estimator', "got 'k1'", 'Set loss.kl_estimator to a value of that type'),
    _c('config-of-other-recipe', 'data', ('run', 'full_finetune_single_device', '--config', 'smollm2/135M_full_dpo'), 'is a full_dpo config', '--config', 'smollm2/135M_full_dpo', 'Run `ftune run full_dpo_distributed --config smollm2/135M_full_dpo`'),
    _c('dataset-of-other-kind', 'data', ('run', 'lora_dpo_single_device', '~dataset', 'dataset._component_=ftune.datasets.alpaca_dataset'), 'gives supervised examples', 'dataset._component_', 'ftune.datasets.alpaca_dataset', 'Use ftune.datasets.preference_dataset'),
    _c('resume-lora-folder-full-run', 'data', ('run', 'full_finetune_single_device', 'checkpointer.resume_from_checkpoint={tmp}/lora/step_2'), 'is a step folder of a LoRA run', 'checkpointer.resume_from_checkpoint', '{tmp}/lora/step_2', 'point checkpointer.checkpoint_dir at {tmp}/lora/step_2/merged', 'lora_step_folder'),
    _c('resume-sft-folder-dpo-run', 'data', ('run', 'lora_dpo_single_device', 'checkpointer.output_dir={tmp}/lora', 'checkpointer.resume_from_checkpoint=auto'), 'is a step folder of a supervised run', 'checkpointer.resume_from_checkpoint', 'written by lora_finetune_single_device', 'To continue that run, use lora_finetune_single_device', 'lora_step_folder'),
    # values (range-checked at config time)
    _c('value-lora-rank-zero', 'values', ('run', 'lora_finetune_single_device', 'peft.rank=0'), 'must be an int >= 1', 'peft.rank', 'got 0', 'peft.rank=8'),
    _c('value-lora-alpha-negative', 'values', ('run', 'lora_finetune_single_device', 'peft.alpha=-1'), 'must be a finite number > 0', 'peft.alpha', 'got -1', 'peft.alpha=16'),
    _c('value-lora-dropout', 'values', ('run', 'lora_finetune_single_device', 'peft.dropout=1.5'), 'must be in [0, 1)', 'peft.dropout', 'got 1.5', 'peft.dropout=0.05'),
    _c('value-max-seq-len-zero', 'values', ('run', 'lora_finetune_single_device', 'tokenizer.max_seq_len=0'), 'must be an int >= 1 or null', 'tokenizer.max_seq_len', 'got 0', 'tokenizer.max_seq_len=2048'),
    _c('value-seed-negative', 'values', ('run', 'full_finetune_single_device', 'seed=-1'), 'must be an int in [0, 4294967295]', 'seed', 'got -1', 'seed=42'),
    _c('value-lr-zero', 'values', ('run', 'lora_finetune_single_device', 'optimizer.lr=0'), 'must be a finite number > 0', 'optimizer.lr', 'got 0', 'Typical values'),
    _c('value-beta-infinite', 'values', ('run', 'lora_dpo_single_device', 'loss.beta=.inf'), 'must be a finite number > 0', 'loss.beta', 'got inf', 'DPO commonly uses 0.1'),
    _c('value-warmup-negative', 'values', (*V, 'lr_scheduler.num_warmup_steps=-1'), 'must be >= 0', 'lr_scheduler.num_warmup_steps', 'got -1', '0: no warmup'),
    _c('value-dist-timeout-tiny', 'values', ('run', '--nproc_per_node', '2', 'dist_check', 'dist_timeout_s=0.01'), 'must be a finite number of seconds >= 1', 'dist_timeout_s', 'got 0.01', 'The default is 1800'),
    _c('value-top-p-zero', 'values', ('run', 'generate', 'prompt=hi', 'top_p=0'), 'must be in (0, 1] or null', 'top_p', 'got 0', 'no nucleus filtering'),
    _c('value-nonfinite-loss', 'values', (*FULL, 'optimizer.lr=1e30', 'clip_grad_norm=null', 'max_steps=4'), 'Non-finite loss or gradient at step', 'at step', 'loss=', 'lower optimizer.lr'),
    # outputs
    _c('output-dir-is-file', 'outputs', (*LORA, 'output_dir={tmp}/taken', 'max_steps=1'), 'Not a directory', '{tmp}/taken', 'taken', 'a part of this path is a file, not a folder', 'output_file'),
    _c('output-parent-is-file', 'outputs', (*LORA, 'output_dir={tmp}/taken/sub', 'max_steps=1'), 'Not a directory', '{tmp}/taken/sub', 'taken/sub', 'Point output_dir at a folder', 'output_file'),
    _c('convert-output-exists', 'outputs', ('convert', 'torchtune-config', '{tmp}/tt.yaml', '-o', '{tmp}/mine.yaml'), 'already exists; ftune does not overwrite it', '-o/--output', '{tmp}/mine.yaml', 'Pass --force to replace it', 'tt_config'),
    _c('convert-output-is-input', 'outputs', ('convert', 'torchtune-config', '{tmp}/tt.yaml', '-o', '{tmp}/tt.yaml', '--force'), 'is the input config', '-o/--output', "'{tmp}/tt.yaml'", 'refuses even with --force', 'tt_config'),
    _c('quantize-output-is-checkpoint', 'outputs', ('run', 'quantize', '--config', 'quantization', 'checkpointer.checkpoint_dir={ckpt}', 'output_dir={ckpt}'), 'ftune never writes where it reads a model', 'output_dir', "output_dir '{ckpt}' is checkpoint_dir '{ckpt}'", 'Set output_dir to another folder'),
    _c('train-output-inside-checkpoint', 'outputs', (*FULL, 'output_dir={ckpt}/runs/full', 'max_steps=1'), 'is inside checkpoint_dir', 'output_dir', "'{ckpt}/runs/full'", 'a folder that contains it is fine'),
    _c('quantize-output-inside-adapter', 'outputs', ('run', 'quantize', '--config', 'quantization', 'checkpointer.checkpoint_dir={ckpt}', 'adapter_dir={tmp}/ckpt', 'output_dir={tmp}/ckpt/q'), 'ftune never writes where it reads a model', 'output_dir', "'{tmp}/ckpt/q' is inside adapter_dir", 'Set output_dir to another folder', 'ckpt_copy'),
    _c('eval-output-file-on-heldout', 'outputs', ('run', 'eval', '--config', 'eval', 'checkpointer.checkpoint_dir={ckpt}', 'heldout_file={tmp}/held.jsonl', 'output_file={tmp}/held.jsonl'), 'ftune never writes where it reads', 'output_file', "'{tmp}/held.jsonl' is heldout_file", 'Set output_file to a file outside the inputs', 'heldout_file'),
    _c('kd-output-inside-teacher', 'outputs', ('run', 'knowledge_distillation_single_device', '{tiny}', '~teacher_model', 'teacher_checkpointer.checkpoint_dir={tmp}/ckpt', 'output_dir={tmp}/ckpt/kd', 'max_steps=1'), 'is inside checkpoint_dir', 'output_dir', "'{tmp}/ckpt/kd'", 'Set output_dir to another folder', 'ckpt_copy'),
    # subcommands
    _c('cmd-unknown', 'subcommands', ('valdate',), "unknown command 'valdate'", 'valdate', 'valdate', "Did you mean 'validate'?"),
    _c('run-unknown-recipe', 'subcommands', ('run', 'lora_finetune_single_devic'), 'no such recipe', 'lora_finetune_single_devic', 'lora_finetune_single_devic', "Did you mean 'lora_finetune_single_device'?"),
    _c('run-missing-py', 'subcommands', ('run', '{tmp}/mine.py'), 'does not exist', 'mine.py', 'mine.py', 'recipe file'),
    _c('run-no-recipe', 'subcommands', ('run', '--nproc_per_node', '2'), 'no recipe given', 'ftune run', 'ftune run', 'usage'),
    _c('run-copied-no-config', 'subcommands', ('run', '{tmp}/my_check.py'), 'no config given', '--config', 'no config given', '--config <name|path>', 'copied_recipe'),
    _c('run-unknown-option', 'subcommands', ('run', 'lora_finetune_single_device', '--confg', 'x'), "unknown option '--confg'", '--confg', '--confg', '--config <name|path>'),
    _c('run-trust-no-value', 'subcommands', ('run', 'lora_finetune_single_device', '--trust'), '--trust needs a value', '--trust', '--trust', '--trust my_pkg'),
    _c('validate-unknown-recipe', 'subcommands', (*V, '--recipe', 'lora'), 'no such recipe', "--recipe 'lora'", 'lora', "Give a shipped recipe's name"),
    _c('cat-unknown-config', 'subcommands', ('cat', 'smollm2/135M_lorra'), 'no such file', '--config', '135M_lorra', 'Did you mean'),
    _c('cat-bad-override', 'subcommands', ('cat', 'smollm2/135M_lora', '~nokey'), "no key 'nokey' to delete", 'override', '~nokey', 'delete'),
    _c('cp-unknown', 'subcommands', ('cp', 'lora_finetune_single_devic', '{tmp}'), 'neither a recipe nor a shipped config', 'lora_finetune_single_devic', 'lora_finetune_single_devic', 'Did you mean'),
    _c('cp-existing-file', 'subcommands', ('cp', 'dist_check', '{tmp}/mine.py'), 'already exists', 'mine.py', 'mine.py', 'Pass --force', 'existing_file'),
    _c('cp-missing-parent', 'subcommands', ('cp', 'dist_check', '{tmp}/a/b/c.py'), 'does not exist', 'a/b', 'a/b', '--make-parents'),
    _c('convert-unknown', 'subcommands', ('convert', 'gguf', 'nosuchmodel'), 'does not exist', 'GGUF file nosuchmodel', 'nosuchmodel', '`smollm2` (the quickstart model'),
]
# fmt: on


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def _copy_ckpt(tmp: Path, ckpt: Path) -> Path:
    dest = tmp / "ckpt"
    shutil.copytree(ckpt, dest)
    return dest


def _edit_config_json(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _rope_parameters_layout(tmp, ckpt):
    """The tiny checkpoint with its config.json in transformers 5's layout: RoPE under rope_parameters."""
    folder = _copy_ckpt(tmp, ckpt)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {"rope_theta": config.pop("rope_theta"), "rope_type": "default"}
    (folder / "config.json").write_text(json.dumps(config))


def _truncate(tmp, ckpt):
    path = _copy_ckpt(tmp, ckpt) / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def _missing_shard(tmp, ckpt):
    from safetensors.torch import load_file, save_file

    folder = _copy_ckpt(tmp, ckpt)
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    keys = sorted(state)
    first = {k: state[k] for k in keys[: len(keys) // 2]}
    save_file(first, str(folder / "model-00001-of-00002.safetensors"))
    weight_map = {
        k: "model-00001-of-00002.safetensors" if k in first else "model-00002-of-00002.safetensors"
        for k in keys
    }
    _write(folder / "model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": weight_map}))


def _int_weights(tmp, ckpt):
    from safetensors.torch import load_file, save_file

    folder = _copy_ckpt(tmp, ckpt)
    state = load_file(str(folder / "model.safetensors"))
    save_file(
        {k: (v * 100).to(__import__("torch").int8) for k, v in state.items()},
        str(folder / "model.safetensors"),
    )


def _incomplete_step(tmp, ckpt):
    _write(tmp / "out" / "step_2" / "adapter_model.safetensors", b"partial")


def _kd_tok_swapped(tmp, ckpt):
    """The tiny checkpoint's tokenizer with its two last ids traded: same size, different tokens."""
    data = json.loads((ckpt / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    _write(tmp / "teacher_tok" / "tokenizer.json", json.dumps(data))
    shutil.copy(ckpt / "tokenizer_config.json", tmp / "teacher_tok" / "tokenizer_config.json")


# A torchtune 0.6.1 full fine-tune config, for `ftune convert torchtune-config`.
_TT_CONFIG = """output_dir: /tmp/torchtune/full
model: {_component_: torchtune.models.llama3_2.llama3_2_1b}
tokenizer: {_component_: torchtune.models.llama3.llama3_tokenizer, path: /tmp/tokenizer.model}
checkpointer: {_component_: torchtune.training.FullModelHFCheckpointer, checkpoint_dir: /tmp/m, checkpoint_files: [model.safetensors], output_dir: /tmp/o, model_type: LLAMA3_2}
dataset: {_component_: torchtune.datasets.alpaca_cleaned_dataset}
optimizer: {_component_: torch.optim.AdamW, lr: 2e-5}
loss: {_component_: torchtune.modules.loss.CEWithChunkedOutputLoss}
"""
_PAIR = '{"prompt": "q", "chosen": "a", "rejected": "b"}\n'


def _lora_step_folder(tmp, ckpt):
    """A complete step folder of a LoRA SFT run (listing and recipe_state.pt's leading keys only)."""
    torch = __import__("torch")
    folder = tmp / "lora" / "step_2"
    _write(folder / "adapter_model.safetensors", b"not read")
    state = {"ftune_recipe": "lora_finetune_single_device", "ftune_recipe_kind": "supervised", "step": 2}
    torch.save(state, folder / "recipe_state.pt")
    _write(folder / ".complete", '{"complete": true, "step": 2}')


def _moe_ckpt(tmp, ckpt):
    """A tiny Qwen3-MoE checkpoint (the tiny checkpoint's widths and tokenizer, 8 experts, top 2)."""
    import torch
    from safetensors.torch import save_file

    from ftune.models import CONVERTERS
    from ftune.models.qwen3_moe import qwen3_moe

    base = json.loads((ckpt / "config.json").read_text())
    sizes = dict(vocab_size=base["vocab_size"], num_layers=base["num_hidden_layers"])
    sizes.update(embed_dim=base["hidden_size"], num_heads=base["num_attention_heads"])
    sizes.update(num_kv_heads=base["num_key_value_heads"])
    torch.manual_seed(0)
    model = qwen3_moe(**sizes, **MOE_SIZES, intermediate_dim=base["intermediate_size"], max_seq_len=512)
    folder = tmp / "moe"
    folder.mkdir()
    weights = CONVERTERS["qwen3_moe"].ftune_to_hf(model.state_dict())
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        **{k: base[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")},
        **{k: base[k] for k in ("num_attention_heads", "num_key_value_heads")},
        "head_dim": MOE_SIZES["head_dim"],
        "moe_intermediate_size": MOE_SIZES["moe_intermediate_dim"],
        "num_experts": MOE_SIZES["num_experts"],
        "num_experts_per_tok": MOE_SIZES["top_k"],
        "norm_topk_prob": True,
        "max_position_embeddings": 512,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ckpt / name, folder / name)


SETUPS = {
    "moe_ckpt": _moe_ckpt,
    "kd_tok_swapped": _kd_tok_swapped,
    "yaml_syntax": lambda tmp, ckpt: _write(tmp / "bad.yaml", "batch_size: 4\nmodel: [unclosed\n  x: 1\n"),
    "yaml_tab": lambda tmp, ckpt: _write(tmp / "tab.yaml", "batch_size: 4\n\tmodel: 1\n"),
    "yaml_list": lambda tmp, ckpt: _write(tmp / "list.yaml", "- a\n- b\n"),
    "yaml_typo": lambda tmp, ckpt: _write(tmp / "typo.yaml", "batchsize: 4\n"),
    "yaml_type": lambda tmp, ckpt: _write(tmp / "type.yaml", "batch_size: four\n"),
    "yaml_interp": lambda tmp, ckpt: _write(tmp / "interp.yaml", "output_dir: ${nowhere}/out\n"),
    "yaml_trust": lambda tmp, ckpt: _write(tmp / "trust.yaml", "trusted_modules: my_pkg\n"),
    "chat_style": lambda tmp, ckpt: _write(
        tmp / "chat.yaml",
        "model: {_component_: ftune.models.smollm2.smollm2_135m}\n"
        "dataset: {_component_: ftune.datasets.chat_dataset, source: x.jsonl, conversation_style: yaml}\n",
    ),
    "ckpt_truncated": _truncate,
    "ckpt_copy": _copy_ckpt,
    "heldout_file": lambda tmp, ckpt: _write(
        tmp / "held.jsonl",
        '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n',
    ),
    "ckpt_wrong_arch": lambda tmp, ckpt: _edit_config_json(
        _copy_ckpt(tmp, ckpt), model_type="gpt2", architectures=["GPT2LMHeadModel"]
    ),
    "ckpt_no_config": lambda tmp, ckpt: (_copy_ckpt(tmp, ckpt) / "config.json").unlink(),
    "ckpt_bad_json": lambda tmp, ckpt: _write(
        _copy_ckpt(tmp, ckpt) / "config.json", '{"model_type": "llama",'
    ),
    "ckpt_missing_shard": _missing_shard,
    "ckpt_layers": lambda tmp, ckpt: _edit_config_json(_copy_ckpt(tmp, ckpt), num_hidden_layers=3),
    "ckpt_rope_parameters": _rope_parameters_layout,
    "ckpt_int_weights": _int_weights,
    "incomplete_step": _incomplete_step,
    "tok_corrupt": lambda tmp, ckpt: _write(tmp / "tok" / "tokenizer.json", '{"version": "1.0", "model": '),
    "data_empty": lambda tmp, ckpt: _write(tmp / "empty.jsonl", ""),
    "data_broken": lambda tmp, ckpt: _write(
        tmp / "broken.jsonl",
        '{"input": "a", "output": "b"}\n{"input": "a", "output":\n{"input": "c", "output": "d"}\n',
    ),
    "data_list": lambda tmp, ckpt: _write(tmp / "list.jsonl", '["input", "output"]\n'),
    "data_columns": lambda tmp, ckpt: _write(tmp / "cols.jsonl", '{"question": "a", "answer": "b"}\n' * 4),
    "data_long": lambda tmp, ckpt: _write(
        tmp / "long.jsonl", (json.dumps({"input": "word " * 400, "output": "b"}) + "\n") * 8
    ),
    "data_latin": lambda tmp, ckpt: _write(
        tmp / "latin.jsonl", b'{"input": "a", "output": "b"}\n' * 7 + b'{"input": "caf\xe9", "output": "b"}\n'
    ),
    "data_xlsx": lambda tmp, ckpt: _write(tmp / "data.xlsx", b"PK\x03\x04"),
    "output_file": lambda tmp, ckpt: _write(tmp / "taken", "a file, not a folder"),
    "copied_recipe": lambda tmp, ckpt: _write(
        tmp / "my_check.py", "from ftune import config\n\ndef main(cfg):\n    pass\n\nconfig.run(main)\n"
    ),
    "existing_file": lambda tmp, ckpt: _write(tmp / "mine.py", "# my edits\n"),
    "tt_config": lambda tmp, ckpt: (
        _write(tmp / "tt.yaml", _TT_CONFIG),
        _write(tmp / "mine.yaml", "# my edits\n"),
    ),
    "pref_no_rejected": lambda tmp, ckpt: _write(
        tmp / "pairs.jsonl", _PAIR + '{"prompt": "q", "chosen": "2024-01-01"}\n'
    ),
    "pref_empty": lambda tmp, ckpt: _write(
        tmp / "pairs.jsonl", _PAIR * 2 + '{"prompt": "q", "chosen": " ", "rejected": "b"}\n'
    ),
    "pref_no_prompt": lambda tmp, ckpt: _write(tmp / "val.jsonl", '{"chosen": "a", "rejected": "b"}\n'),
    "lora_step_folder": _lora_step_folder,
}
# More CASES and SETUPS: issue 37's outputs and records, 39's agents, 40's images, 41's rewards and PPO, 43's, GGUF imatrix.
for _part in ("outputs", "records", "agent", "images", "rewards", "ppo", "parallel", "gguf"):
    exec(Path(__file__).with_name(f"bad_inputs_{_part}.py").read_text())
