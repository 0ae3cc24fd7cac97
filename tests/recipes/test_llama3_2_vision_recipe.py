"""The shipped llama3_2_vision/11B_lora config trains a Llama 3.2 Vision model end to end: a tiny random
MllamaForConditionalGeneration folder written by transformers (tests/recipes/tiny_vlm_folders.py), the drawn-disc chats of
test_vlm_recipes.py tiled by `MllamaImageTransform`. The loss falls every step, the adapters reach the
decoder's self- and cross-attention layers, the encoder and the projector, and the merged step folder
loads in transformers with ftune's logits."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import load_recipe
from run_logs import losses, read_log
from test_vlm_recipes import _data
from tiny_vlm_folders import llama3_2_vision

from ftune.checkpointing import load_hf
from ftune.config import load_config
from ftune.data import MllamaImageTransform, padded_collate_vision
from ftune.datasets import multimodal_chat_dataset
from ftune.tokenizers import HFTokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS, TILE = 4, 8


def test_lora_config_trains_on_images_and_transformers_loads_the_merge(tmp_path: Path) -> None:
    folder, data, out = llama3_2_vision(tmp_path)[0], _data(tmp_path), tmp_path / "out"
    cfg = load_config(
        "llama3_2_vision/11B_lora",
        [
            f"tokenizer.path={folder}",
            "tokenizer.max_seq_len=256",
            f"checkpointer.checkpoint_dir={folder}",
            "checkpointer.save_adapter_weights_only=false",
            f"dataset.source={data}",
            "~dataset.image_transform",
            "dataset.image_transform._component_=ftune.data.MllamaImageTransform",
            f"dataset.image_transform.tile_size={TILE}",
            f"output_dir={out}",
            "device=cpu",
            "dtype=fp32",
            "batch_size=2",
            "grad_accum_steps=1",
            "epochs=100",
            f"max_steps={STEPS}",
            "activation_checkpointing=false",
            "save_every_n_steps=null",
            "progress_bar=false",
            "optimizer.lr=3.0e-2",
            "optimizer.fused=false",
            "lr_scheduler.num_warmup_steps=0",
        ],
    )
    load_recipe("lora_finetune_single_device").main(cfg)
    got = losses(read_log(out))
    assert len(got) == STEPS and all(math.isfinite(x) for x in got)
    assert all(b < a for a, b in zip(got, got[1:])), got

    tokenizer = HFTokenizer(folder, max_seq_len=256)
    sample = multimodal_chat_dataset(
        tokenizer, source=str(data), image_transform=MllamaImageTransform(tile_size=TILE)
    )[0]
    b = padded_collate_vision([sample], tokenizer.pad_id)
    base = transformers.MllamaForConditionalGeneration.from_pretrained(folder).float().eval()
    merged = transformers.MllamaForConditionalGeneration.from_pretrained(out / f"step_{STEPS}" / "merged")
    theirs_in = {
        "input_ids": b["tokens"],
        "pixel_values": b["pixel_values"][None],
        "aspect_ratio_ids": b["aspect_ratio_ids"][None],
        "aspect_ratio_mask": b["aspect_ratio_mask"][None],
        "cross_attention_mask": b["cross_attention_mask"],
    }
    keys = ("aspect_ratio_ids", "aspect_ratio_mask", "cross_attention_mask")
    with torch.no_grad():
        ours = load_hf(out / f"step_{STEPS}" / "merged", image_text=True).eval()(
            b["tokens"], b["pixel_values"], **{k: b[k] for k in keys}
        )
        theirs = merged.float().eval()(**theirs_in).logits
        before = base(**theirs_in).logits
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert (theirs - before).abs().max().item() > 1e-2  # the adapters trained
