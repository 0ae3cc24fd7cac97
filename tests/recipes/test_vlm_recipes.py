"""The shipped SmolVLM configs train an image-text model end to end with the images in the forward:
a tiny random Idefics3 folder written by transformers, a local jsonl of chats with Pillow-drawn
images. smolvlm/256M_lora: the loss falls every step, and the adapter folder loads in peft on
transformers' Idefics3ForConditionalGeneration with the logits of ftune's merged model.
smolvlm/256M_full: the loss falls, and every part (encoder, projector, decoder, head) changed.
The distributed siblings, as a world of one, give the single-device losses."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import load_recipe
from PIL import Image, ImageDraw
from run_logs import losses, read_log

from ftune.checkpointing import load_hf
from ftune.checkpointing.readers import read_safetensors
from ftune.config import load_config
from ftune.data import Idefics3ImageTransform, padded_collate_vision
from ftune.datasets import multimodal_chat_dataset
from ftune.tokenizers import HFTokenizer

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.usefixtures("one_thread")

_ASSETS = "ftune_tests_vision_assets"  # the tokenizer with Idefics3's image tokens (tests/data)
if _ASSETS not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _ASSETS, Path(__file__).parents[1] / "data" / "vision_assets.py"
    )
    sys.modules[_ASSETS] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_ASSETS])
vlm_tokenizer_folder = sys.modules[_ASSETS].vlm_tokenizer_folder

# The tiny tower: 16 px tiles of 4 x 4 patches, pixel-shuffled by 2 -> 4 tokens a tile; a 32 px image
# is cut into 2 x 2 tiles plus the global image (20 image tokens).
TRANSFORM = {"longest_edge": 32, "tile_size": 16, "image_seq_len": 4}
COLOURS = {"red": (220, 30, 40), "green": (20, 190, 60), "blue": (30, 60, 220), "yellow": (230, 210, 30)}
STEPS = 6


def _folder(path: Path, fit_vocab: bool = False) -> tuple[Path, int]:
    """A tiny random Idefics3 folder (save_pretrained) with the test tokenizer; (folder, <image> id).
    `fit_vocab`: the model's vocabulary is the tokenizer's (no id a sampler could draw that the
    tokenizer cannot decode), else 448 (padded, as published models pad theirs)."""
    tokenizer_dir = vlm_tokenizer_folder(path / "tok", "idefics3")
    tokenizer = HFTokenizer(tokenizer_dir)
    image_id = tokenizer.token_to_id("<image>")
    text = transformers.LlamaConfig(
        vocab_size=tokenizer.vocab_size if fit_vocab else 448,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    vision = dict(
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=16,
        patch_size=4,
    )
    config = transformers.Idefics3Config(
        text_config=text.to_dict(), vision_config=vision, scale_factor=2, image_token_id=image_id
    )
    torch.manual_seed(0)
    model = transformers.Idefics3ForConditionalGeneration(config).float()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    folder = path / "SmolVLM-tiny"
    model.save_pretrained(folder)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, folder / f.name)
    return folder, image_id


def _data(path: Path) -> Path:
    """Two chats, each a drawn disc on grey and its colour as the answer."""
    records = []
    for i, (name, rgb) in enumerate(list(COLOURS.items())[:2]):
        image = Image.new("RGB", (32, 32), (128, 128, 128))
        ImageDraw.Draw(image).ellipse((6 + i, 6, 26, 26 - i), fill=rgb)
        image.save(path / f"{name}.png")
        question = [
            {"type": "image", "image": f"{name}.png"},
            {"type": "text", "text": "What colour is the disc?"},
        ]
        answer = [{"type": "text", "text": f"It is {name}."}]
        records.append(
            {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}
        )
    data = path / "discs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    return data


def _train(
    method: str, folder: Path, data: Path, out: Path, lr: float, *extra: str, recipe: str | None = None
) -> list[float]:
    """Run smolvlm/256M_<method> for STEPS steps on the tiny folder and the drawn chats; the step losses."""
    transform = [f"dataset.image_transform.{k}={v}" for k, v in TRANSFORM.items()]
    cfg = load_config(
        f"smolvlm/256M_{method}",
        [
            f"tokenizer.path={folder}",
            "tokenizer.max_seq_len=256",
            f"checkpointer.checkpoint_dir={folder}",
            f"dataset.source={data}",
            "~dataset.image_transform",
            "dataset.image_transform._component_=ftune.data.Idefics3ImageTransform",
            *transform,
            f"output_dir={out}",
            "dtype=fp32",
            "batch_size=2",  # one batch: both chats, every step
            "grad_accum_steps=1",
            "epochs=100",
            f"max_steps={STEPS}",
            "activation_checkpointing=false",
            "save_every_n_steps=null",
            "progress_bar=false",
            f"optimizer.lr={lr}",
            "optimizer.fused=false",
            "lr_scheduler.num_warmup_steps=0",
            *extra,
        ],
    )
    load_recipe(recipe or f"{method}_finetune_single_device").main(cfg)
    got = losses(read_log(out))
    assert len(got) == STEPS and all(math.isfinite(x) for x in got)
    # The same batch every step, at a high lr: every step lowers the loss.
    assert all(b < a for a, b in zip(got, got[1:])) and got[-1] < got[0] - 0.05, got
    return got


def test_lora_on_images_trains_and_peft_loads_the_adapters(tmp_path: Path) -> None:
    folder, image_id = _folder(tmp_path)
    data = _data(tmp_path)
    out = tmp_path / "out"
    # save_adapter_weights_only=false: also the merged folder, to compare with
    _train("lora", folder, data, out, 3.0e-2, "checkpointer.save_adapter_weights_only=false")

    # An image row as the recipe saw it: the tokens and the tiles of the first chat.
    tokenizer = HFTokenizer(folder, max_seq_len=256)
    sample = multimodal_chat_dataset(
        tokenizer, source=str(data), image_transform=Idefics3ImageTransform(**TRANSFORM)
    )[0]
    batch = padded_collate_vision([sample], tokenizer.pad_id)
    tokens, pixel_values = batch["tokens"], batch["pixel_values"]  # (1, s), (5, 3, 16, 16)
    assert int((tokens == image_id).sum()) == 4 * pixel_values.shape[0] == 20

    step = out / f"step_{STEPS}"
    base = transformers.Idefics3ForConditionalGeneration.from_pretrained(folder).float().eval()
    with torch.no_grad():
        before = base(input_ids=tokens, pixel_values=pixel_values[None]).logits
        adapted = peft.PeftModel.from_pretrained(base, step).eval()
        theirs = adapted(input_ids=tokens, pixel_values=pixel_values[None]).logits
    # PEFT wraps the decoder's modules that hold adapters, not the encoder's q/k/v of the same names.
    wrapped = {n for n, m in adapted.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)}
    held = {k.rsplit(".", 2)[0] for k in read_safetensors(step / "adapter_model.safetensors")}
    assert wrapped == held and wrapped
    with torch.no_grad():
        ours = load_hf(step / "merged", image_text=True).eval()(tokens, pixel_values)
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert (theirs - before).abs().max().item() > 1e-2  # the adapters trained


def test_full_fine_tune_on_images_trains_every_part(tmp_path: Path) -> None:
    folder, _ = _folder(tmp_path)
    out = tmp_path / "out"
    _train("full", folder, _data(tmp_path), out, 1.0e-2)
    base = transformers.Idefics3ForConditionalGeneration.from_pretrained(folder).state_dict()
    trained = transformers.Idefics3ForConditionalGeneration.from_pretrained(
        out / f"step_{STEPS}"
    ).state_dict()
    part = {k: k.split(".")[1] if k.startswith("model.") else k.split(".")[0] for k in base}
    changed = {part[k] for k in base if not torch.equal(base[k], trained[k])}
    assert changed == {"vision_model", "connector", "text_model", "lm_head"}, changed


@pytest.mark.parametrize("method, lr", [("lora", 3.0e-2), ("full", 1.0e-2)])
def test_the_distributed_recipes_at_world_size_one_give_the_single_device_losses(
    method, lr, tmp_path, monkeypatch
):
    """The distributed siblings run the same forward line: as a world of one (the recipe file is what
    torchrun would run on each rank), their losses equal the single-device run's."""
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    folder, _ = _folder(tmp_path)
    data = _data(tmp_path)
    one = _train(method, folder, data, tmp_path / "one", lr)
    dist = _train(method, folder, data, tmp_path / "dist", lr, recipe=f"{method}_finetune_distributed")
    assert max(abs(a - b) for a, b in zip(one, dist)) <= 1e-5, (one, dist)
