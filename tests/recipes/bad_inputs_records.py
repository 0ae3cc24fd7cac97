"""Bad-input cases of issue 37 items 1, 2, 4, 5 and 6: trust, record types, data files, limits, targets, QAT.

Run by bad_inputs.py inside its own namespace (`_c`, `CASES`, `SETUPS`, `_write`, `LORA`, `GRPO`,
`DATA`, `MOE`, `_moe_ckpt`, `_lora_step_folder` come from there), so the catalogue stays one list.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

# fmt: off
_PROMPTS = ('~dataset', 'dataset._component_=ftune.datasets.prompt_dataset', 'dataset.source={tmp}/p.jsonl')
CASES += [  # noqa: F821
    _c('trust-torch-outside-allowlist', 'trust', (*V, 'metric_logger={_component_: torch.utils.collect_env.run, command: touch {tmp}/owned}'), 'outside the parts of torch a config may call without --trust', 'metric_logger._component_', "'torch.utils.collect_env.run'", '--trust torch.utils.collect_env'),  # noqa: F821
    _c('trust-config-grants-itself', 'trust', (*V, 'trusted_modules=[posix]', 'model=posix.system', 'model.command=touch {tmp}/owned'), 'a config cannot grant itself trust', 'trusted_modules', "['posix']", '`--trust posix`'),  # noqa: F821
    _c('trust-ftune-writer', 'trust', (*V, 'metric_logger={_component_: ftune.checkpointing.write_json, path: {tmp}/owned, obj: 1}'), 'none of the kinds a config may call without --trust', 'metric_logger._component_', 'write_json', '--trust ftune.checkpointing'),  # noqa: F821
    _c('data-content-null', 'datasets', (*LORA, *DATA, 'dataset.source={tmp}/null.jsonl'), 'not text', '{tmp}/null.jsonl row 3', "column 'input' is null", 'write it as a JSON string', 'data_null_input'),  # noqa: F821
    _c('chat-content-number', 'datasets', (*LORA, '~dataset', 'dataset._component_=ftune.datasets.chat_dataset', 'dataset.conversation_style=openai', 'dataset.source={tmp}/chat.jsonl'), 'not text', '{tmp}/chat.jsonl row 2', 'messages[0].content is an int (7)', 'write it as a JSON string', 'chat_number'),  # noqa: F821
    _c('data-files-not-json', 'datasets', (*LORA, *DATA, 'dataset.source=json', 'dataset.data_files={tmp}/notes.txt'), 'not valid JSON', '{tmp}/notes.txt:1', "'hello world'", 'read the file with its own builder', 'notes_txt'),  # noqa: F821
    _c('kto-one-label', 'data', ('run', 'lora_dpo_single_device', '~dataset', 'dataset._component_=ftune.datasets.kto_dataset', 'dataset.source={tmp}/kto.jsonl', '~loss', 'loss._component_=ftune.training.KTOLoss'), 'KTO needs both kinds', "KTO dataset {tmp}/kto.jsonl ('label')", '5 desirable (true) and 0 undesirable (false)', 'Add records of the missing kind', 'kto_one_label'),  # noqa: F821
    _c('kto-batch-of-one', 'data', ('run', 'lora_dpo_single_device', '--config', 'smollm2/135M_lora_kto', 'batch_size=1'), 'KTO estimates its KL term from the other answers of each batch', 'batch_size', '1 with a KTO dataset', 'Set batch_size=2 or more'),  # noqa: F821
    _c('grpo-prompt-number', 'online RL', (*GRPO, *_PROMPTS), 'record(s) cannot be used', '{tmp}/p.jsonl:2', 'prompt[0].content is an int (5), not text', 'write it as a JSON string', 'prompt_number'),  # noqa: F821
    _c('grpo-answer-null', 'online RL', (*GRPO, *_PROMPTS), "the sample's 'answer' is null, not a reference answer", '{tmp}/p.jsonl:3', "read by the reward 'correct'", 'write the answer in the data or delete the record', 'answer_null'),  # noqa: F821
    _c('grpo-reward-backtracks', 'online RL', (*GRPO, 'max_new_tokens=16', "rewards.rewards.correct={_component_: ftune.rewards.RegexMatch, pattern: '(.+)+Z'}", 'rewards.time_limit_s=0.5'), 'ran longer than rewards.time_limit_s=0.5 s and was stopped', "reward 'correct' on completion 1 of", 'completion ', 'Fix the reward, or raise rewards.time_limit_s'),  # noqa: F821
    _c('chat-template-loops', 'tokenizers', (*LORA, 'tokenizer._component_=ftune.tokenizers.HFTokenizer', 'tokenizer.path={tmp}/tok', 'tokenizer.template_time_limit_s=0.5'), 'ran longer than tokenizer.template_time_limit_s=0.5 s', 'the chat template in {tmp}/tok/chat_template.jinja', "roles ['user', 'assistant']", 'Fix the template', 'loops_template'),  # noqa: F821
    _c('max-seq-len-beyond-positions', 'values', (*LORA, 'tokenizer.max_seq_len=1000000000000'), "is more than the model's 512 positions", 'tokenizer.max_seq_len', '1000000000000 tokens', 'Set tokenizer.max_seq_len=512 or less'),  # noqa: F821
    _c('lora-target-typo-moe', 'values', ('validate', 'smollm2/135M_lora', '{tiny}', *MOE, 'peft.targets=[q_proj,v_proj,expert]'), "targets ['expert'] match no nn.Linear", 'peft.targets', 'mixture-of-experts layers', 'Fix peft.targets', 'moe_ckpt'),  # noqa: F821
    _c('quantize-qat-on-lora-adapter', 'values', ('run', 'quantize', '--config', 'quantization', 'checkpointer.checkpoint_dir={ckpt}', 'adapter_dir={tmp}/lora/step_2', 'qat=true', 'output_dir={tmp}/q'), 'which trains without QAT', "adapter_dir '{tmp}/lora/step_2'", 'written by lora_finetune_single_device', 'Set qat=false', 'lora_step_folder'),  # noqa: F821
]
# fmt: on

_ROW = '{"input": "a", "output": "b"}\n'
_TURN = '{"messages": [{"role": "user", "content": %s}, {"role": "assistant", "content": "a"}]}\n'
_PROMPT = '{"prompt": %s, "answer": %s}\n'
_LOOPS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{{ messages[0]['content'] }}"

SETUPS.update(  # noqa: F821
    {
        "data_null_input": lambda tmp, ckpt: _write(
            tmp / "null.jsonl", _ROW * 2 + '{"input": null, "output": "b"}\n' + _ROW * 5
        ),  # noqa: F821
        "chat_number": lambda tmp, ckpt: _write(
            tmp / "chat.jsonl", _TURN % '"q"' + _TURN % "7" + _TURN % '"q"' * 6
        ),  # noqa: F821
        "notes_txt": lambda tmp, ckpt: _write(tmp / "notes.txt", "hello world\n"),  # noqa: F821
        "kto_one_label": lambda tmp, ckpt: _write(
            tmp / "kto.jsonl", '{"prompt": "q", "completion": "a", "label": true}\n' * 5
        ),  # noqa: F821
        "prompt_number": lambda tmp, ckpt: _write(
            tmp / "p.jsonl", _PROMPT % ('"q"', '"a"') + _PROMPT % ('[{"role": "user", "content": 5}]', '"a"')
        ),  # noqa: F821
        "answer_null": lambda tmp, ckpt: _write(
            tmp / "p.jsonl", _PROMPT % ('"q"', '"a"') * 2 + _PROMPT % ('"q"', "null")
        ),  # noqa: F821
        "loops_template": lambda tmp, ckpt: (
            [
                _write(tmp / "tok" / name, (ckpt / name).read_bytes())  # noqa: F821
                for name in ("tokenizer.json", "tokenizer_config.json")
            ]
            and _write(tmp / "tok" / "chat_template.jinja", _LOOPS)
        ),  # noqa: F821
    }
)

# Issue 37 item 6: refusals from the config, the arguments or a folder listing, before torch
# (tests/cli/test_fast_refusals.py checks that torch is not imported by each).
_GGUF = ("export", "gguf")
# fmt: off
CASES += [  # noqa: F821
    _c('grpo-loss-epsilon', 'online RL', (*GRPO, 'loss.epsilon=-1'), 'epsilon must be in (0, 1)', 'loss.epsilon', 'got -1', 'TRL uses 0.2'),  # noqa: F821
    _c('grpo-loss-epsilon-high', 'online RL', (*GRPO, 'loss.epsilon_high=0'), 'epsilon_high must be > 0 or null', 'loss.epsilon_high', 'got 0', 'DAPO uses 0.28'),  # noqa: F821
    _c('grpo-loss-beta', 'online RL', (*GRPO, 'loss.beta=-1'), 'beta must be >= 0', 'loss.beta', 'got -1', 'DeepSeek-R1 uses 0.001'),  # noqa: F821
    _c('grpo-loss-type', 'online RL', (*GRPO, 'loss.loss_type=ppo'), "loss_type must be one of ['grpo', 'dapo', 'dr_grpo']", 'loss.loss_type', "got 'ppo'", "['grpo', 'dapo', 'dr_grpo']"),  # noqa: F821
    _c('grpo-dr-grpo-null-length', 'online RL', (*GRPO, 'loss.loss_type=dr_grpo'), "Dr. GRPO's constant normaliser", 'loss.max_completion_length', 'max_completion_length None', "set it to the rollout's max new tokens"),  # noqa: F821
    _c('grpo-time-limit-negative', 'online RL', (*GRPO, 'rewards.time_limit_s=-1'), 'must be a finite number of seconds > 0', 'rewards.time_limit_s', 'got -1', 'rewards.time_limit_s=null'),  # noqa: F821
    _c('grpo-weights-all-zero', 'online RL', (*GRPO, 'rewards.weights.correct=0'), 'all zero', 'rewards.weights', "{'correct': 0}", 'give at least one reward a non-zero weight'),  # noqa: F821
    _c('grpo-reward-bad-regex', 'online RL', (*GRPO, "rewards.rewards.correct={_component_: ftune.rewards.RegexMatch, pattern: '(a'}"), 'is not a valid regular expression', 'rewards.rewards.correct', "pattern '(a'", 'missing ), unterminated subpattern'),  # noqa: F821
    _c('grpo-reward-negative-tolerance', 'online RL', ('validate', 'smollm2/135M_lora_grpo', 'rewards.rewards.correct={_component_: ftune.rewards.NumericAnswer, field: answer, tolerance: -1}'), 'tolerance must be a finite number >= 0', 'rewards.rewards.correct', 'got -1', '(set on the command line)'),  # noqa: F821
    _c('grpo-supervised-dataset', 'online RL', (*GRPO, '~dataset', 'dataset._component_=ftune.datasets.alpaca_dataset'), 'gives supervised examples, and lora_grpo_single_device samples completions of prompts', 'dataset._component_', 'ftune.datasets.alpaca_dataset', 'Use ftune.datasets.prompt_dataset'),  # noqa: F821
    _c('sft-prompt-dataset', 'data', (*LORA, '~dataset', 'dataset._component_=ftune.datasets.prompt_dataset'), 'gives prompts for online RL (no answer to train on)', 'dataset._component_', 'ftune.datasets.prompt_dataset', 'or run a recipe for online RL from prompts (lora_grpo_single_device'),  # noqa: F821
    _c('resume-grpo-folder-sft-run', 'data', (*LORA, 'checkpointer.output_dir={tmp}/grpo', 'checkpointer.resume_from_checkpoint=auto'), 'is a step folder of an online RL run', 'checkpointer.resume_from_checkpoint', 'written by lora_grpo_single_device', 'To continue that run, use lora_grpo_single_device', 'grpo_step_folder'),  # noqa: F821
    _c('resume-sft-folder-grpo-run', 'online RL', (*GRPO, 'checkpointer.output_dir={tmp}/lora', 'checkpointer.resume_from_checkpoint=auto'), 'lora_grpo_single_device is an online RL recipe', 'checkpointer.resume_from_checkpoint', 'a supervised run (written by lora_finetune_single_device)', 'with a fresh optimizer', 'lora_step_folder'),  # noqa: F821
    _c('log-dir-below-file', 'outputs', (*LORA, 'metric_logger.log_dir={tmp}/notes.txt/logs'), 'lies below the file', 'metric_logger.log_dir', "'{tmp}/notes.txt/logs'", 'Point metric_logger.log_dir at a folder', 'notes_file'),  # noqa: F821
    _c('export-type-unknown', 'export', (*_GGUF, '{ckpt}', '{tmp}/m.gguf', '--type', 'iq4_xs'), 'is not a GGUF type ftune writes', '--type', "'iq4_xs'", 'Accepted: f32, f16, bf16, q8_0, q6_k, q5_k_m, q5_k_s, q4_k_m, q4_k_s, q4_0'),  # noqa: F821
    _c('export-not-gguf', 'export', (*_GGUF, '{ckpt}', '{tmp}/m.bin', '--type', 'q8_0'), 'does not end in .gguf', 'output', "'{tmp}/m.bin'", 'Give a file name such as m.gguf'),  # noqa: F821
    _c('export-model-missing', 'export', (*_GGUF, '{tmp}/nowhere', '{tmp}/m.gguf', '--type', 'q8_0'), 'does not exist or is not a folder', 'model folder', "'{tmp}/nowhere'", 'Pass a folder with config.json'),  # noqa: F821
    _c('export-model-no-config', 'export', (*_GGUF, '{tmp}/grpo', '{tmp}/m.gguf', '--type', 'q8_0'), 'holds no config.json', "model folder '{tmp}/grpo'", "it holds ['step_2']", 'Pass a Hugging Face layout folder', 'grpo_step_folder'),  # noqa: F821
    _c('export-model-is-adapter', 'export', (*_GGUF, '{tmp}/grpo/step_2', '{tmp}/m.gguf', '--type', 'q8_0'), 'holds a LoRA/DoRA adapter, not a whole model', "'{tmp}/grpo/step_2'", 'adapter', '--adapter {tmp}/grpo/step_2', 'grpo_step_folder'),  # noqa: F821
    _c('export-adapter-empty', 'export', (*_GGUF, '{ckpt}', '{tmp}/m.gguf', '--type', 'q8_0', '--adapter', '{tmp}/grpo'), 'holds no adapter_model.safetensors', "--adapter '{tmp}/grpo'", "it holds ['step_2']", 'Pass a step folder of a LoRA run', 'grpo_step_folder'),  # noqa: F821
    _c('export-output-exists', 'export', (*_GGUF, '{ckpt}', '{tmp}/old.gguf', '--type', 'q8_0'), 'already exists; ftune does not overwrite it', "output '{tmp}/old.gguf'", 'old.gguf', 'Pass --force to replace it', 'old_gguf'),  # noqa: F821
    _c('export-output-in-model', 'export', (*_GGUF, '{ckpt}', '{ckpt}/m.gguf', '--type', 'q8_0'), 'ftune never writes where it reads a model', "output '{ckpt}/m.gguf' is inside the model folder", '{ckpt}', 'Write the .gguf file outside the input folders'),  # noqa: F821
    _c('export-llava-no-mmproj', 'export', (*_GGUF, '{tmp}/llava', '{tmp}/llava.gguf', '--type', 'f16'), 'has no llama.cpp projector (mmproj) file', '{tmp}/llava/config.json', "a 'llava' image-text model", 'export a text-only checkpoint of it', 'llava_folder'),  # noqa: F821
]
# fmt: on


def _grpo_step_folder(tmp, ckpt):
    """A complete LoRA GRPO step folder saved when GRPO folders recorded the kind 'supervised'."""
    folder = tmp / "grpo" / "step_2"
    _write(folder / "adapter_model.safetensors", b"not read")  # noqa: F821
    state = {"ftune_recipe": "lora_grpo_single_device", "ftune_recipe_kind": "supervised", "step": 2}
    __import__("torch").save(state, folder / "recipe_state.pt")
    _write(folder / ".complete", '{"complete": true, "step": 2}')  # noqa: F821


SETUPS["grpo_step_folder"] = _grpo_step_folder  # noqa: F821
SETUPS["old_gguf"] = lambda tmp, ckpt: _write(tmp / "old.gguf", b"GGUF an earlier export")  # noqa: F821


def _llava_folder(tmp, ckpt):
    """A LLaVA-style image-text folder (a SigLIP tower on the tiny checkpoint's text model): its listing
    and config.json only, which the refusal reads."""
    text = __import__("json").loads((ckpt / "config.json").read_text())
    config = {
        "model_type": "llava",
        "text_config": text,
        "vision_config": {"model_type": "siglip_vision_model"},
    }
    _write(tmp / "llava" / "config.json", __import__("json").dumps(config))  # noqa: F821
    _write(tmp / "llava" / "model.safetensors", b"not read")  # noqa: F821


SETUPS["llava_folder"] = _llava_folder  # noqa: F821
