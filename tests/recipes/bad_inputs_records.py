"""Bad-input cases of issue 37 items 1, 2, 4 and 5: trust, record types, data files, limits, targets, QAT.

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
