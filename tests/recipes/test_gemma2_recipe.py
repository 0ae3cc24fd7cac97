"""The shipped gemma2/2B_lora config trains a tiny Gemma 2 through lora_finetune_single_device, its
loss on the model's soft-capped logits: the first step's logged loss equals transformers'
Gemma2ForCausalLM cross-entropy on that step's batch, and a mutant whose head drops the cap fails."""

import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ftune import config, data, training
from ftune.config import load_config
from ftune.modules.transformer import OutputHead, TransformerDecoder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from conftest import overrides_for  # noqa: E402 - tests/recipes
from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper

transformers = pytest.importorskip("transformers")

CONFIG = "gemma2/2B_lora"
# TINY_HF's gemma2 at the tiny tokenizer's vocabulary: final logits capped at 3, attention at 4.
SIZES = dict(
    vocab_size=320,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=64,
    intermediate_dim=96,
    head_dim=16,
    sliding_window=6,
    query_pre_attn_scalar=24,
    attn_logit_softcap=4.0,
    final_logit_softcap=3.0,
)
RUN = ["collate_fn=null", "optimizer.lr=3e-3", "lr_scheduler.num_warmup_steps=0"]  # right-padded rows
# The config's Alpaca (hub data) replaced by the demo task that the tiny overrides point at.
DEMO_DATA = [
    "dataset._component_=ftune.datasets.demo_dataset",
    "~dataset.source",
    "dataset_val._component_=ftune.datasets.demo_dataset",
    "dataset_val.split=heldout",
]


@pytest.fixture(scope="module")
def gemma2_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gemma2") / "ckpt"
    build_tiny_hf("gemma2", vocab_size=SIZES["vocab_size"], max_position_embeddings=512).save_pretrained(
        folder
    )
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_checkpoint / name, folder / name)
    return folder


def _overrides(ckpt: Path) -> list[str]:
    return [
        "model=ftune.models.gemma2.gemma2",
        *[f"model.{k}={v}" for k, v in SIZES.items()],
        f"checkpointer.checkpoint_dir={ckpt}",
        f"tokenizer.path={ckpt}",
        *DEMO_DATA,
        *RUN,
    ]


def _first_batch_loss_in_transformers(ckpt: Path, cfg) -> float:
    """The recipe's first batch, built as the recipe builds it, scored by transformers' model."""
    s = cfg.settings(training.LoRASettings)
    tokenizer = config.instantiate(cfg.tokenizer)
    collate = training.build_collate(cfg.collate_fn, tokenizer.pad_id)
    loader = data.build_dataloader(
        config.instantiate(cfg.dataset, tokenizer),
        batch_size=s.batch_size,
        collate_fn=collate,
        shuffle=s.shuffle,
        seed=s.seed,
    )
    batch = next(iter(loader))
    hf = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    with torch.no_grad():  # right padding: a pad only follows the positions that are scored
        logits = hf(batch["tokens"]).logits[:, :-1]  # (b, s - 1, vocab), capped by transformers
    labels = batch["labels"][:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100).item()


def check_trains_on_capped_logits(run_recipe, ckpt: Path, tmp_path: Path) -> None:
    rows, out = run_recipe("lora_finetune_single_device", CONFIG, *_overrides(ckpt), "max_steps=4")
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    cfg = load_config(CONFIG, [*overrides_for(CONFIG, ckpt, tmp_path / "demo", out), *_overrides(ckpt)])
    assert losses[0] == pytest.approx(_first_batch_loss_in_transformers(ckpt, cfg), rel=1e-5)


def test_gemma2_lora_trains_on_its_soft_capped_logits(run_recipe, gemma2_checkpoint, tmp_path):
    check_trains_on_capped_logits(run_recipe, gemma2_checkpoint, tmp_path)


def test_a_head_without_the_cap_fails_the_check(run_recipe, gemma2_checkpoint, tmp_path, monkeypatch):
    uncapped = property(lambda self: OutputHead(self.tok_embeddings.weight, None))
    monkeypatch.setattr(TransformerDecoder, "head", uncapped)
    with pytest.raises(AssertionError):
        check_trains_on_capped_logits(run_recipe, gemma2_checkpoint, tmp_path)
