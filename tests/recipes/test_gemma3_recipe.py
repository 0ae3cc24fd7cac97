"""The shipped gemma3/270M_lora config runs the LoRA recipe end to end on a tiny Gemma 3 checkpoint,
and the adapter it saves loads with `peft` onto transformers' Gemma3ForCausalLM with the same logits."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ftune.checkpointing import load_hf
from ftune.models import CONVERTERS
from ftune.models.gemma3 import gemma3
from ftune.peft import apply_lora, from_peft

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

SIZES = dict(
    vocab_size=320,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=64,
    intermediate_dim=128,
    head_dim=16,
    sliding_window=8,
    query_pre_attn_scalar=16,
    sliding_window_pattern=2,
)


def _tiny_gemma3(folder: Path, tokenizer_from: Path) -> Path:
    folder.mkdir(parents=True)
    torch.manual_seed(0)
    model = gemma3(**SIZES, max_seq_len=512)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.1 if not name.endswith("norm.weight") else 0.2)
    save_file(CONVERTERS["gemma3"].ftune_to_hf(model.state_dict()), folder / "model.safetensors")
    config = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "vocab_size": SIZES["vocab_size"],
        "hidden_size": SIZES["embed_dim"],
        "intermediate_size": SIZES["intermediate_dim"],
        "num_hidden_layers": SIZES["num_layers"],
        "num_attention_heads": SIZES["num_heads"],
        "num_key_value_heads": SIZES["num_kv_heads"],
        "head_dim": SIZES["head_dim"],
        "sliding_window": SIZES["sliding_window"],
        "query_pre_attn_scalar": SIZES["query_pre_attn_scalar"],
        "sliding_window_pattern": SIZES["sliding_window_pattern"],
        "max_position_embeddings": 512,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_from / name, folder / name)
    return folder


def test_gemma3_lora_config_trains_and_its_adapter_loads_in_peft(
    run_recipe, tiny_checkpoint, tmp_path: Path
) -> None:
    ckpt = _tiny_gemma3(tmp_path / "gemma", tiny_checkpoint)
    rows, out = run_recipe(
        "lora_finetune_single_device",
        "gemma3/270M_lora",
        "model=ftune.models.gemma3.gemma3",
        *[f"model.{k}={v}" for k, v in SIZES.items()],
        f"checkpointer.checkpoint_dir={ckpt}",
        f"tokenizer.path={ckpt}",
        "max_steps=3",
    )
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    step = out / "step_3"
    assert (step / "adapter_model.safetensors").is_file() and (step / "adapter_config.json").is_file()

    base = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    theirs = peft.PeftModel.from_pretrained(base, step).eval()
    ours = load_hf(ckpt).eval()
    apply_lora(
        ours,
        targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        rank=16,
        alpha=32.0,
    )
    ours.load_state_dict(from_peft(load_file(step / "adapter_model.safetensors"), "gemma3"), strict=False)
    tokens = torch.randint(0, SIZES["vocab_size"], (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        trained, reference = ours(tokens), theirs(tokens).logits
        untrained = load_hf(ckpt).eval()(tokens)  # the base model, no adapters
    assert (trained - untrained).abs().max() > 1e-4  # three steps moved the adapters
    assert (trained - reference).abs().max() <= 1e-4
