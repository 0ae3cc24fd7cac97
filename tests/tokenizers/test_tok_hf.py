"""HF tokenizer.json backend: encode vs `tokenizers`, chat templates vs transformers.apply_chat_template."""

from __future__ import annotations

import json

import pytest
import tokenizers
from tiny_tokenizer_files import CHATML_TEMPLATE, chatml_config, train_hf_tokenizer
from transformers import AutoTokenizer

from ftune.data.messages import Message
from ftune.models.qwen2_5._tokenizer import qwen2_5_tokenizer
from ftune.models.smollm2._tokenizer import smollm2_tokenizer
from ftune.tokenizers.base import Tokenizer
from ftune.tokenizers.formats import Llama3Format
from ftune.tokenizers.hf import HFTokenizer

TEXTS = ["Hello world", "The quick brown fox.\n\nNumbers 12345", "ünï©ode ✓", "", "a <|im_end|> inside"]

CONVERSATIONS = [
    [Message("user", "What is the capital of France?", masked=True), Message("assistant", "Paris.")],
    [
        Message("system", "You are terse.", masked=True),
        Message("user", "Hello world", masked=True),
        Message("assistant", "Hi."),
        Message("user", "The fox?", masked=True),
        Message("assistant", " It jumps over the lazy dog. ✓\n"),
    ],
    [Message("user", "tokenizers split text", masked=False), Message("assistant", "into pieces")],
]

# A Llama-3-style template: uses bos_token, trims content, raises on a bad role, has a generation block.
HEADER_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unsupported role ' + message['role']) }}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n\n"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim }}<|im_end|>"
    "{% endgeneration %}{% else %}{{ message['content'] | trim }}<|im_end|>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n\n{% endif %}"
)


def as_dicts(messages: list[Message]) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in messages]


def hf_ids(reference, messages, **kwargs) -> list[int]:
    out = reference.apply_chat_template(as_dicts(messages), tokenize=True, return_dict=True, **kwargs)
    return list(out["input_ids"])


def test_encode_decode_match_tokenizers(hf_dir):
    tok = HFTokenizer(hf_dir)
    assert isinstance(tok, Tokenizer)
    raw = tokenizers.Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    eos, pad = raw.token_to_id("<|im_end|>"), raw.token_to_id("<|endoftext|>")
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.stop_tokens) == (None, eos, pad, [eos])
    assert tok.vocab_size == raw.get_vocab_size() == 300
    for text in TEXTS:
        ids = raw.encode(text, add_special_tokens=False).ids
        assert tok.encode(text) == [*ids, eos]  # no BOS: the config has none
        assert tok.encode(text, add_eos=False) == ids
        assert tok.decode(ids, skip_special_tokens=False) == raw.decode(ids, skip_special_tokens=False)
        assert tok.decode(tok.encode(text)) == raw.decode(ids)


def test_bos_follows_the_post_processor_like_transformers(tmp_path):
    folder = train_hf_tokenizer(tmp_path / "bos", chatml_config(bos_token="<s>"), post_bos=True)
    tok, reference = HFTokenizer(folder), AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert tok.bos_id == reference.bos_token_id
    for text in TEXTS:
        assert tok.encode(text, add_eos=False) == reference(text)["input_ids"]
    no_post = train_hf_tokenizer(tmp_path / "nobos", chatml_config(bos_token="<s>"))
    assert HFTokenizer(no_post).bos_id is None  # bos_token set, but nothing prepends it
    assert HFTokenizer(no_post, add_bos=True).encode("hi", add_eos=False)[0] == tok.bos_id
    explicit = train_hf_tokenizer(tmp_path / "cfg", chatml_config(bos_token="<s>", add_bos_token=True))
    assert HFTokenizer(explicit).bos_id == tok.bos_id


@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_chat_template_matches_apply_chat_template(hf_dir, conversation):
    tok = HFTokenizer(hf_dir)
    reference = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    assert tok.render(conversation) == reference.apply_chat_template(as_dicts(conversation), tokenize=False)
    tokens, mask = tok.tokenize_messages(conversation, add_eos=False)
    assert tokens == hf_ids(reference, conversation)
    assert len(mask) == len(tokens)
    expected_trained = "".join(
        f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in conversation if not m.masked
    )
    if not conversation[0].masked and conversation[0].role != "system":  # owns the default system prompt
        expected_trained = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" + expected_trained
    trained = tok.decode([t for t, m in zip(tokens, mask) if not m], skip_special_tokens=False)
    assert trained == expected_trained
    with_eos, eos_mask = tok.tokenize_messages(conversation)
    assert with_eos == tokens + [tok.eos_id] and eos_mask == mask + [True]


def test_generation_prompt_matches_and_is_masked(hf_dir):
    tok = HFTokenizer(hf_dir)
    reference = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    msgs = CONVERSATIONS[1][:4]
    tokens, mask = tok.tokenize_messages(msgs, add_eos=False, add_generation_prompt=True)
    assert tokens == hf_ids(reference, msgs, add_generation_prompt=True)
    tail = tok.encode("<|im_start|>assistant\n", add_eos=False)
    assert tokens[-len(tail) :] == tail and all(mask[-len(tail) :])


def test_header_template_with_bos_generation_block_and_jinja_file(tmp_path):
    folder = train_hf_tokenizer(tmp_path / "hdr", chatml_config(bos_token="<s>", chat_template=None))
    (folder / "chat_template.jinja").write_text(HEADER_TEMPLATE)
    tok = HFTokenizer(folder)
    reference = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    for conversation in CONVERSATIONS:
        tokens, mask = tok.tokenize_messages(conversation, add_eos=False)
        assert tokens == hf_ids(reference, conversation)
        assert tokens[0] == tok.token_to_id("<s>") and mask[0] == conversation[0].masked
    with pytest.raises(
        ValueError,
        match=r"chat template in .*chat_template.jinja rejected the conversation with "
        r"roles \['user', 'tool'\]: Unsupported role tool",
    ):
        tok.tokenize_messages([Message("user", "hi"), Message("tool", "42")])


def test_chatml_fallback_without_template(tmp_path):
    folder = train_hf_tokenizer(tmp_path / "plain", chatml_config(chat_template=None))
    tok = HFTokenizer(folder)
    reference = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    plain_chatml = CHATML_TEMPLATE.replace("You are a helpful assistant.", "").split("{% endif %}", 1)[1]
    plain_chatml = "{% for message in messages %}" + plain_chatml
    for conversation in CONVERSATIONS:
        tokens, mask = tok.tokenize_messages(conversation, add_eos=False)
        assert tokens == hf_ids(reference, conversation, chat_template=plain_chatml)
    with pytest.raises(ValueError, match="renders no chat template: it has none"):
        tok.render(CONVERSATIONS[0])


def test_prompt_format_override_and_missing_special_token(hf_dir):
    tok = HFTokenizer(hf_dir, prompt_format=Llama3Format())
    with pytest.raises(
        ValueError,
        match=r"Llama3Format needs the token '<\|start_header_id\|>', but it is not a "
        r"single token in the vocabulary of .*tokenizer.json",
    ):
        tok.tokenize_messages(CONVERSATIONS[0])


def test_truncation_and_family_builders(hf_dir):
    for build in (qwen2_5_tokenizer, smollm2_tokenizer):
        tok = build(hf_dir / "tokenizer.json", max_seq_len=12)
        tokens, mask = tok.tokenize_messages(CONVERSATIONS[0])
        full, full_mask = build(hf_dir).tokenize_messages(CONVERSATIONS[0])
        assert len(tokens) == 12 and tokens[:11] == full[:11] and tokens[-1] == tok.eos_id and mask[-1]
        assert mask[:11] == full_mask[:11]


def test_generation_config_adds_stop_tokens(tmp_path):
    folder = train_hf_tokenizer(tmp_path / "gen", chatml_config())
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    tok = HFTokenizer(folder)
    assert tok.stop_tokens == [tok.eos_id, 0]


def test_named_templates(tmp_path):
    config = chatml_config(
        chat_template=[{"name": "default", "template": CHATML_TEMPLATE}, {"name": "x", "template": "x"}]
    )
    assert HFTokenizer(train_hf_tokenizer(tmp_path / "named", config)).chat_template == CHATML_TEMPLATE
    config = chatml_config(chat_template=[{"name": "tool_use", "template": "x"}])
    with pytest.raises(
        ValueError, match=r"holds several chat templates \['tool_use'\] and none is named 'default'"
    ):
        HFTokenizer(train_hf_tokenizer(tmp_path / "unnamed", config))


def test_file_and_config_errors(tmp_path, hf_dir):
    with pytest.raises(
        FileNotFoundError,
        match=r"HFTokenizer: the folder .* holds no tokenizer file; looked for tokenizer.json",
    ):
        HFTokenizer(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"broken/tokenizer.json is not a valid HF tokenizer.json"):
        HFTokenizer(broken)
    no_eos = train_hf_tokenizer(tmp_path / "noeos", chatml_config(eos_token=None))
    with pytest.raises(
        ValueError, match=r"tokenizer_config.json: no 'eos_token' set; .*pass eos_token= to HFTokenizer"
    ):
        HFTokenizer(no_eos)
    assert HFTokenizer(no_eos, eos_token="<|endoftext|>").eos_id == 0
    no_config = train_hf_tokenizer(tmp_path / "noconfig", None)
    with pytest.raises(ValueError, match=r"\(no tokenizer_config.json in .*noconfig\): no 'eos_token' set"):
        HFTokenizer(no_config)
    unknown = train_hf_tokenizer(tmp_path / "unknown", chatml_config(pad_token="<pad>"))
    with pytest.raises(ValueError, match=r"pad_token '<pad>' is not a token of .*tokenizer.json"):
        HFTokenizer(unknown)
    with pytest.raises(
        ValueError, match=r"tokenizer_config.json: add_bos is set but no 'bos_token' is; set bos_token"
    ):
        HFTokenizer(hf_dir, add_bos=True)
    bad_json = train_hf_tokenizer(tmp_path / "badjson", None)
    (bad_json / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(
        ValueError, match=r"tokenizer_config.json holds a JSON list; expected a tokenizer config"
    ):
        HFTokenizer(bad_json)
    with pytest.raises(
        ValueError, match=r"the chat_template passed to HFTokenizer is not valid Jinja: .*line 1"
    ):
        HFTokenizer(hf_dir, chat_template="{% for m in messages %}")
    with pytest.raises(ValueError, match=r"Cannot decode ids \[300\]"):
        HFTokenizer(hf_dir).decode([300])


TOOLS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' }}{% for t in tools %}{{ t['function']['name'] + ' ' }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + "
    "m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)


def test_tools_reach_the_template_as_apply_chat_template_gives_them(hf_dir):
    """An agent's tool schemas render as transformers renders them (``apply_chat_template(tools=...)``)."""
    tools = [{"type": "function", "function": {"name": "calc", "description": "adds", "parameters": {}}}]
    conversation = [Message("user", "1+1?")]
    tok = HFTokenizer(hf_dir, chat_template=TOOLS_TEMPLATE)
    reference = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    expected = reference.apply_chat_template(
        as_dicts(conversation),
        tools=tools,
        chat_template=TOOLS_TEMPLATE,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert tok.render(conversation, add_generation_prompt=True, tools=tools) == expected
    assert expected.startswith("<|im_start|>system\nTools: calc ")
    assert "Tools" not in tok.render(conversation)  # no tools: the template's `tools` is None
