"""A tiny SmolLM2-architecture checkpoint in HF layout, built offline and seeded, for recipe tests.

`make_tiny_checkpoint(folder)` writes config.json, model.safetensors, tokenizer.json and
tokenizer_config.json (a byte-level BPE trained on the demo task's text, ChatML template), so a
recipe runs the shipped smollm2 configs on it with the overrides in `TINY_OVERRIDES`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

SIZES = dict(vocab_size=320, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=128)
# The knowledge-distillation tests' teacher: wider than the student, same tokenizer and vocabulary.
TEACHER_SIZES = {**SIZES, "embed_dim": 96, "intermediate_dim": 192}
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from ftune.datasets.demo import generate_demo_examples

    corpus = [f"user\n{e.prompt}\nassistant\n{e.answer}" for e in generate_demo_examples(400, seed=123)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=SIZES["vocab_size"],
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHATML,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def make_tiny_checkpoint(folder: Path, seed: int = 0, sizes: dict[str, int] = SIZES) -> Path:
    """Write the tiny checkpoint (of `sizes`, e.g. TEACHER_SIZES) into `folder` (created) and return it."""
    from ftune.models import CONVERTERS
    from ftune.models.smollm2 import smollm2

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = smollm2(**sizes, max_seq_len=512)
    with torch.no_grad():  # HF-like init; non-trivial norms, so that a wrong norm weight shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.1)
    hf = CONVERTERS["smollm2"].ftune_to_hf(model.state_dict())
    save_file({k: v.contiguous() for k, v in hf.items()}, str(folder / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": sizes["vocab_size"],
        "hidden_size": sizes["embed_dim"],
        "intermediate_size": sizes["intermediate_dim"],
        "num_hidden_layers": sizes["num_layers"],
        "num_attention_heads": sizes["num_heads"],
        "num_key_value_heads": sizes["num_kv_heads"],
        "max_position_embeddings": 512,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _tokenizer(folder)
    return folder


def tiny_overrides(checkpoint: Path, data_dir: Path, output_dir: Path) -> list[str]:
    """Overrides that point a shipped smollm2 config at the tiny checkpoint (fast, fp32, quiet)."""
    return [
        "model=ftune.models.smollm2.smollm2",
        *[f"model.{k}={v}" for k, v in SIZES.items()],
        "model.max_seq_len=512",
        f"tokenizer.path={checkpoint}",
        "tokenizer.max_seq_len=64",
        f"checkpointer.checkpoint_dir={checkpoint}",
        f"dataset.data_dir={data_dir}",
        f"dataset_val.data_dir={data_dir}",
        "dataset.n_train=64",
        "dataset.n_heldout=16",
        "dataset_val.n_train=64",
        "dataset_val.n_heldout=16",
        f"output_dir={output_dir}",
        "progress_bar=false",
        "dtype=fp32",
        "device=cpu",
        "save_every_n_steps=null",
        "run_val_every_n_steps=null",
        "lr_scheduler.num_warmup_steps=1",
    ]


def kd_overrides(teacher: Path) -> list[str]:
    """Overrides that point a shipped smollm2 KD config's teacher sections at a tiny teacher checkpoint."""
    return [
        "teacher_model=ftune.models.smollm2.smollm2",
        *[f"teacher_model.{k}={v}" for k, v in TEACHER_SIZES.items()],
        "teacher_model.max_seq_len=512",
        f"teacher_tokenizer.path={teacher}",
        f"teacher_checkpointer.checkpoint_dir={teacher}",
    ]


def make_talkative_checkpoint(folder: Path, tiny: Path) -> Path:
    """The tiny checkpoint with <|im_end|> (id 2) made likely, so that a random model ends its turns and an
    agent's conversation goes on past its first turn (tests/assets/tiny_grpo.py's AGENT_TINY)."""
    import shutil

    from safetensors.torch import load_file

    folder.mkdir(parents=True, exist_ok=True)
    for f in tiny.iterdir():
        shutil.copy(f, folder / f.name)
    weights = load_file(folder / "model.safetensors")
    weights["model.embed_tokens.weight"][2] *= 12.0  # tied: the output row of <|im_end|> too
    save_file(weights, str(folder / "model.safetensors"))
    return folder
