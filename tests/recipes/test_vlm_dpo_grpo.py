"""DPO and GRPO with images, on a tiny random Idefics3 folder (transformers' save) and the synthetic
image task (`ftune.datasets.image_task`):

- DPO: a micro-batch's loss, as the recipe's ``loss_on`` computes it (policy with adapters, reference
  with them off, both through ``model.hidden(batch.tokens, **batch.model_inputs)``), equals the sigmoid
  DPO loss computed by hand from each model's logits with the images, and changes when the images do;
- GRPO: a rollout samples with the prompts' images, its training rows carry each row's images, and
  the policy's and the reference's log-probabilities of the completions change when the images do;
- the shipped configs smolvlm/256M_lora_dpo and smolvlm/256M_lora_grpo run 2 steps on the tiny model,
  and their distributed recipes as a world of one give the same losses.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import load_recipe
from run_logs import losses, read_log
from test_vlm_recipes import TRANSFORM, _folder

from ftune import training
from ftune.checkpointing import load_hf
from ftune.config import load_config
from ftune.data import Idefics3ImageTransform, collate_prompts, padded_collate_preference
from ftune.datasets import image_task_preference_dataset, image_task_prompt_dataset
from ftune.peft import adapters_disabled, apply_lora
from ftune.rewards import ExactMatch, RewardSet
from ftune.tokenizers import HFTokenizer
from ftune.training.methods.off_policy import shift_logps

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
BETA = 0.5


def _policy(folder: Path) -> torch.nn.Module:
    """The tiny VLM with LoRA on the decoder and the projector, its adapters moved off zero."""
    model = load_hf(folder, image_text=True).float()
    apply_lora(model, targets={"decoder": ["q_proj", "v_proj"], "projector": ["proj"]}, rank=4, alpha=8)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_(0.0, 0.5)
    return model.eval()


def _row_logps(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each row's summed log-probability of its labelled tokens, from the full logits (by hand)."""
    logits = model(batch["tokens"], batch["pixel_values"])[:, :-1].float()  # (rows, s-1, vocab)
    labels = batch["labels"][:, 1:]
    logps = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    return (logps * (labels != -100)).sum(-1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("vlm")
    folder, _ = _folder(path, fit_vocab=True)
    return folder, path / "task", HFTokenizer(folder, max_seq_len=256)


def test_dpo_loss_with_images_is_the_hand_computed_one_and_depends_on_the_images(tiny) -> None:
    folder, task, tokenizer = tiny
    transform = Idefics3ImageTransform(**TRANSFORM)
    data = image_task_preference_dataset(
        tokenizer, data_dir=str(task), image_transform=transform, n_train=4, n_heldout=2, size=32
    )
    raw = padded_collate_preference([data[0], data[1]], tokenizer.pad_id)
    assert raw["pixel_values"].shape[0] == 2 * 2 * 5  # 2 pairs x 2 answers x (4 tiles + the global image)
    assert raw["image_sample"].tolist() == [r for r in range(4) for _ in range(5)]
    model = _policy(folder)
    reference = training.ReferenceModel.adapters_off(model)
    loss_fn = training.DPOLoss("sigmoid", beta=BETA, num_chunks=2)

    def loss_on(raw: dict[str, torch.Tensor]) -> training.Loss:  # the recipe's loss_on
        batch = training.on_device(raw, CPU)
        reference_logps = reference.row_logps(loss_fn, batch)
        hidden = model.hidden(batch.tokens, **batch.model_inputs)
        return training.preference_loss(loss_fn, model, hidden, batch, reference_logps)

    with torch.no_grad():
        got = loss_on(raw)
        policy = _row_logps(model, raw)
        with adapters_disabled(model):
            ref = _row_logps(model, raw)
        margin = (policy[:2] - ref[:2]) - (policy[2:] - ref[2:])
        expected = -F.logsigmoid(BETA * margin).sum()
        assert got.count == 2 and abs(got.sum.item() - expected.item()) <= 1e-4, (got.sum, expected)
        # The same pairs after other pictures (noise): another loss, float noise being ~1e-6 here.
        noise = torch.randn(raw["pixel_values"].shape, generator=torch.Generator().manual_seed(0))
        other = loss_on({**raw, "pixel_values": noise})
    assert abs(other.sum.item() - got.sum.item()) > 1e-3, (other.sum, got.sum)


def test_grpo_rollouts_sample_with_the_images_and_the_update_sees_them(tiny) -> None:
    folder, task, tokenizer = tiny
    transform = Idefics3ImageTransform(**TRANSFORM)
    data = image_task_prompt_dataset(
        tokenizer, data_dir=str(task), image_transform=transform, n_train=4, n_heldout=2, size=32
    )
    item = data[0]
    assert set(item["sample"]) == {"task", "answer"} and "<image>" not in item["prompt"]
    prompts = collate_prompts([data[0], data[1]])
    assert prompts.image_sample.tolist() == [0] * 5 + [1] * 5
    model = _policy(folder)
    reference = training.ReferenceModel.adapters_off(model)
    loss_fn = training.GRPOLoss(
        "grpo", epsilon=0.2, epsilon_high=None, beta=0.04, max_completion_length=None, num_chunks=2
    )
    sampling = training.Sampling(
        group_size=3, max_new_tokens=4, temperature=1.0, top_k=None, top_p=None,
        stop_ids=tuple(tokenizer.stop_tokens), pad_id=tokenizer.pad_id, seed=0,
    )  # fmt: skip
    rewards = RewardSet({"correct": ExactMatch("answer")}, weights={"correct": 1.0})

    rollout = training.sample_rollout(model, prompts, sampling, epoch=0)
    scores = training.score_rollout(rewards, tokenizer, prompts, rollout)
    batch = training.rollout_batch(
        rollout, scores, loss_fn, policy=model, reference=reference, device=CPU,
        scale_rewards=True, keep_old_logps=True,
    )  # fmt: skip
    # Six rows (2 prompts x 3), each with its prompt's 5 tiles; the forward sees them.
    assert batch.image_sample.tolist() == [r for r in range(6) for _ in range(5)]
    assert torch.equal(batch.pixel_values[:5], prompts.pixel_values[:5])
    assert torch.equal(batch.pixel_values[15:20], prompts.pixel_values[5:])
    assert set(batch.model_inputs) >= {"pixel_values"}
    # The update's forward on the rows gives the log-probabilities the rollout sampled with.
    trained = batch.labels != -100
    sampled = shift_logps(rollout.training_batch()["old_logps"])
    assert trained.sum() > 0 and torch.allclose(batch.old_logps[trained], sampled[trained], atol=1e-4)
    # Another picture: the same completions score otherwise (policy and reference both see images).
    swapped = training.RolloutBatch(
        batch.tokens, batch.labels, None, None, advantages=batch.advantages, old_logps=None, ref_logps=None,
        temperature=batch.temperature, metrics={}, pixel_values=batch.pixel_values.flip(0),
        image_sample=batch.image_sample,
    )  # fmt: skip
    assert not torch.allclose(
        reference.token_logps(loss_fn, swapped, 1.0)[trained], batch.ref_logps[trained], atol=1e-4
    )
    with torch.no_grad():
        hidden = model.hidden(swapped.tokens, **swapped.model_inputs)
        now = loss_fn.token_logps(model.head, hidden, swapped.labels)
    assert not torch.allclose(now[trained], batch.old_logps[trained], atol=1e-4)


def _run(config: str, recipe: str, folder: Path, task: Path, out: Path, *extra: str) -> list[float]:
    transform = [
        f"{s}.image_transform.{k}={v}" for s in ("dataset", "dataset_val") for k, v in TRANSFORM.items()
    ]
    cfg = load_config(
        config,
        [
            f"tokenizer.path={folder}",
            "tokenizer.max_seq_len=256",
            f"checkpointer.checkpoint_dir={folder}",
            *(f"{s}.data_dir={task}" for s in ("dataset", "dataset_val")),
            *(
                f"{s}.{k}={v}"
                for s in ("dataset", "dataset_val")
                for k, v in (("n_train", 8), ("n_heldout", 2), ("size", 32))
            ),
            "~dataset.image_transform",
            "~dataset_val.image_transform",
            "dataset.image_transform._component_=ftune.data.Idefics3ImageTransform",
            "dataset_val.image_transform._component_=ftune.data.Idefics3ImageTransform",
            *transform,
            f"output_dir={out}",
            "dtype=fp32",
            "batch_size=2",
            "grad_accum_steps=1",
            "max_steps=2",
            "activation_checkpointing=false",
            "save_every_n_steps=null",
            "run_val_every_n_steps=2",
            "max_val_batches=1",
            "progress_bar=false",
            "optimizer.fused=false",
            "lr_scheduler.num_warmup_steps=0",
            *extra,
        ],
    )
    load_recipe(recipe).main(cfg)
    got = losses(read_log(out))
    assert len(got) == 2 and all(math.isfinite(x) for x in got), got
    return got


@pytest.mark.parametrize(
    "config, recipe, extra, logged",
    [
        ("smolvlm/256M_lora_dpo", "lora_dpo", ("optimizer.lr=1e-2",), "val_logps/reference_accuracy"),
        ("smolvlm/256M_lora_grpo", "lora_grpo", ("group_size=2", "max_new_tokens=3"), "rewards/correct/mean"),
    ],
)
def test_the_shipped_configs_run_and_the_distributed_recipe_as_a_world_of_one_agrees(
    config, recipe, extra, logged, tiny, tmp_path, monkeypatch
) -> None:
    """The shipped config runs 2 steps with validation and saves the adapters; the distributed sibling
    (the recipe file torchrun would run on each rank) gives the same losses with the images."""
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    folder, _, _ = tiny
    task = tmp_path / "task"  # _run's sizes (8 + 2 at 32 px), not the fixture task's 4 + 2
    one = _run(config, f"{recipe}_single_device", folder, task, tmp_path / "one", *extra)
    assert any(logged in row for row in read_log(tmp_path / "one")), read_log(tmp_path / "one")
    assert (tmp_path / "one" / "step_2" / "adapter_model.safetensors").is_file()
    dist = _run(config, f"{recipe}_distributed", folder, task, tmp_path / "dist", *extra)
    assert max(abs(a - b) for a, b in zip(one, dist)) <= 1e-5, (one, dist)
