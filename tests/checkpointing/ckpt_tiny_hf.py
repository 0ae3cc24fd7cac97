"""Tiny Hugging Face checkpoint folders, written by `transformers` itself, for the checkpointer tests.

Families: "llama3" (untied output, rope_theta 500000), "smollm2" (tied embeddings), "qwen2_5"
(q/k/v biases, tied). Each folder has config.json, generation_config.json and stand-in tokenizer
files (their content is irrelevant here, only that they are copied).
"""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TOKENIZER_FILES = {
    "tokenizer.json": '{"stand-in": "tokenizer"}',
    "tokenizer_config.json": '{"model_max_length": 64}',
    "special_tokens_map.json": '{"eos_token": "</s>"}',
    "chat_template.jinja": "{% for m in messages %}{{ m.content }}{% endfor %}",
}
VOCAB = 128


def hf_config(family: str):
    import transformers

    common = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
    )
    if family == "llama3":
        return transformers.LlamaConfig(**common, tie_word_embeddings=False, rope_theta=500000.0)
    if family == "smollm2":
        return transformers.LlamaConfig(**common, tie_word_embeddings=True, rope_theta=10000.0)
    if family == "qwen2_5":
        return transformers.Qwen2Config(**common, tie_word_embeddings=True, rope_theta=10000.0)
    raise KeyError(family)


def hf_model(family: str, seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(family), dtype=torch.float32).eval()
    with torch.no_grad():  # HF initialises norms to 1 and biases to 0: make every tensor distinctive
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


def write_hf_folder(
    folder: Path, family: str, *, shards: int = 1, fmt: str = "safetensors", seed: int = 0
) -> Path:
    """save_pretrained, then optionally re-split into `shards` files or rewrite as pytorch_model*.bin."""
    model = hf_model(family, seed)
    model.save_pretrained(folder)
    for name, text in TOKENIZER_FILES.items():
        (folder / name).write_text(text)
    if shards == 1 and fmt == "safetensors":
        return folder
    sd = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = list(sd)
    ext = "safetensors" if fmt == "safetensors" else "bin"
    prefix = "model" if fmt == "safetensors" else "pytorch_model"
    if shards == 1:
        torch.save(sd, folder / "pytorch_model.bin")
        return folder
    weight_map = {}
    per = -(-len(keys) // shards)
    for i in range(shards):
        name = f"{prefix}-{i + 1:05d}-of-{shards:05d}.{ext}"
        part = {k: sd[k] for k in keys[i * per : (i + 1) * per]}
        save_file(part, folder / name) if ext == "safetensors" else torch.save(part, folder / name)
        weight_map.update(dict.fromkeys(part, name))
    total = sum(t.numel() * t.element_size() for t in sd.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / f"{prefix}.{ext}.index.json").write_text(json.dumps(index))
    return folder


def ftune_model(folder: Path):
    from ftune.models import model_from_hf_config

    _, model = model_from_hf_config(json.loads((folder / "config.json").read_text()), dtype=torch.float32)
    return model.eval()


def assert_same_tensors(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert torch.equal(a[k], b[k]), k
