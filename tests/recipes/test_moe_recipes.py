"""A tiny Qwen3-MoE trains through the SFT recipes: its load-balancing loss is added to the training
loss (mean CE + coef * aux), logged as `aux_loss`, counted over real tokens only, and reaches the
gradient (a mutant that drops the term fails the check)."""

import shutil
import sys
from pathlib import Path

import pytest
import torch

from ftune.models.qwen3_moe import qwen3_moe
from ftune.training import CrossEntropyLoss, on_device
from ftune.training.step import token_loss as token_loss_module
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import labelled_positions, real_tokens
from ftune.training.step.token_loss import token_loss

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper

transformers = pytest.importorskip("transformers")

# The tiny checkpoint's tokenizer (vocab 320), Qwen3-MoE's layout: 8 experts, top 2, every layer MoE.
SIZES = dict(
    vocab_size=320,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=64,
    intermediate_dim=128,
    moe_intermediate_dim=32,
    num_experts=8,
    top_k=2,
    head_dim=16,
)
COEF = 0.5  # large, so that the term moves the weights visibly in a step
LORA = ["peft.targets=[q_proj,v_proj,experts]"]


def make_tiny_moe(folder: Path, tokenizer_from: Path, coef: float = COEF) -> Path:
    """A transformers Qwen3-MoE folder (config.json, safetensors) with the tiny checkpoint's tokenizer."""
    hf = build_tiny_hf(
        "qwen3_moe",
        vocab_size=SIZES["vocab_size"],
        intermediate_size=SIZES["intermediate_dim"],
        head_dim=SIZES["head_dim"],
        max_position_embeddings=512,
        router_aux_loss_coef=coef,
    )
    hf.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_from / name, folder / name)
    return folder


def moe_overrides(ckpt: Path, coef: float = COEF) -> list[str]:
    return [
        "model=ftune.models.qwen3_moe.qwen3_moe",
        *[f"model.{k}={v}" for k, v in SIZES.items()],
        f"model.aux_loss_coef={coef}",
        f"checkpointer.checkpoint_dir={ckpt}",
        f"tokenizer.path={ckpt}",
    ]


@pytest.fixture(scope="module")
def tiny_moe(tiny_checkpoint, tmp_path_factory) -> Path:
    return make_tiny_moe(tmp_path_factory.mktemp("moe") / "ckpt", tiny_checkpoint)


def _column(rows, key):
    return [row[key] for row in rows if "loss" in row]


@pytest.mark.parametrize(
    "recipe, config, extra",
    [
        ("lora_finetune_single_device", "smollm2/135M_lora", LORA),
        ("full_finetune_single_device", "smollm2/135M_full", []),
    ],
)
def test_moe_trains_and_logs_its_aux_loss(run_recipe, tiny_moe, recipe, config, extra):
    rows, out = run_recipe(
        recipe, config, *moe_overrides(tiny_moe), *extra, "max_steps=6", "optimizer.lr=3e-3"
    )
    losses, aux = _column(rows, "loss"), _column(rows, "aux_loss")
    assert len(losses) == len(aux) == 6
    assert losses[-1] < losses[0] - 0.1, losses
    # top_k (2) for perfectly even routing, up to num_experts (8) when every token picks the same two.
    assert all(1.9 < a < 8.0 for a in aux), aux
    assert (out / "step_6").is_dir()


def check_aux_term_reaches_training(run, tmp_path: Path, ckpt: Path) -> None:
    """One full fine-tuning step with the coefficient on and off: the logged loss differs by exactly
    coef * aux, and the router weights the step leaves differ (the term reached the gradient)."""
    runs = {}
    for coef in (COEF, 0.0):
        rows, out = run(
            "full_finetune_single_device",
            "smollm2/135M_full",
            *moe_overrides(ckpt, coef),
            "max_steps=1",
            "lr_scheduler.num_warmup_steps=0",  # else the first step's learning rate is 0
            output_dir=tmp_path / f"coef_{coef}",
        )
        weights = batch_loss_weights(out / "step_1")
        runs[coef] = (_column(rows, "loss")[0], _column(rows, "aux_loss")[0], weights)
    (on_loss, on_aux, on_w), (off_loss, off_aux, off_w) = runs[COEF], runs[0.0]
    assert on_aux == pytest.approx(off_aux, rel=1e-6)  # the same forward: logged either way
    assert on_loss == pytest.approx(off_loss + COEF * on_aux, rel=1e-5)
    router = [k for k in on_w if k.endswith("mlp.gate.weight")]
    assert router and all(not torch.equal(on_w[k], off_w[k]) for k in router)


def batch_loss_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_aux_term_reaches_the_gradient(run_recipe, tiny_moe, tmp_path):
    check_aux_term_reaches_training(run_recipe, tmp_path, tiny_moe)


def test_a_mutant_that_drops_the_term_fails_the_check(run_recipe, tiny_moe, tmp_path, monkeypatch):
    def logged_not_added(model, batch, loss):  # the metric stays, the term leaves the loss
        kept = model.aux_loss(real_tokens(batch)) * loss.count
        return Loss(loss.sum, loss.count, {**loss.metrics, "aux_loss": Metric.ratio(kept, loss.count)})

    monkeypatch.setattr(token_loss_module, "with_aux_loss", logged_not_added)
    with pytest.raises(AssertionError):
        check_aux_term_reaches_training(run_recipe, tmp_path, tiny_moe)


def _padded_batch(pad: int) -> dict[str, torch.Tensor]:
    """Two rows, the second right-padded by `pad` positions (pad id 0, labels -100)."""
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, SIZES["vocab_size"], (2, 12), generator=gen)
    labels = tokens.clone()
    labels[:, :3] = -100  # a prompt: real tokens without a label
    if pad:
        tokens[1, -pad:], labels[1, -pad:] = 0, -100
    return {"tokens": tokens, "labels": labels}


def test_aux_loss_counts_real_tokens_as_transformers_does_with_an_attention_mask():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    torch.manual_seed(0)
    model = qwen3_moe(**SIZES, max_seq_len=64, aux_loss_coef=COEF).eval()
    batch = on_device(_padded_batch(pad=5), torch.device("cpu"))
    real = real_tokens(batch)
    assert real.tolist() == [[True] * 12, [True] * 7 + [False] * 5]
    with torch.no_grad():
        hidden = model.hidden(batch.tokens)
        loss = token_loss(CrossEntropyLoss(), model, hidden, batch)
        ce, n = CrossEntropyLoss()(model.head, hidden, batch.labels)
    expected = load_balancing_loss_func(
        tuple(model.router_logits()), SIZES["num_experts"], SIZES["top_k"], attention_mask=real.long()
    )
    aux = loss.metrics["aux_loss"].value()
    assert loss.count == n
    assert aux == pytest.approx(expected.item(), rel=1e-6)
    assert (loss.sum / n).item() == pytest.approx((ce / n + COEF * expected).item(), rel=1e-6)
    unmasked = load_balancing_loss_func(tuple(model.router_logits()), SIZES["num_experts"], SIZES["top_k"])
    assert abs(unmasked.item() - expected.item()) > 1e-4  # the padding would have counted


def test_coefficient_zero_leaves_the_loss_and_still_logs():
    torch.manual_seed(0)
    model = qwen3_moe(**SIZES, max_seq_len=64, aux_loss_coef=0.0)
    batch = on_device(_padded_batch(pad=0), torch.device("cpu"))
    hidden = model.hidden(batch.tokens)
    loss = token_loss(CrossEntropyLoss(), model, hidden, batch)
    labels, rows = labelled_positions(batch.labels, hidden, ignore_index=-100)  # what token_loss projects
    ce, _ = CrossEntropyLoss()(model.head, rows, labels)
    assert torch.equal(loss.sum, ce) and loss.metrics["aux_loss"].value() > 0


def test_aux_term_gradient_equals_autograd_of_ce_plus_coef_aux():
    torch.manual_seed(0)
    model = qwen3_moe(**SIZES, max_seq_len=64, aux_loss_coef=COEF)
    batch = on_device(_padded_batch(pad=4), torch.device("cpu"))
    loss = token_loss(CrossEntropyLoss(), model, model.hidden(batch.tokens), batch)
    (loss.sum / loss.count).backward()
    got = model.layers[0].mlp.gate.weight.grad.clone()
    model.zero_grad()
    logits = model(batch.tokens)
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, SIZES["vocab_size"]), batch.labels.reshape(-1))
    (ce + COEF * model.aux_loss(real_tokens(batch))).backward()
    torch.testing.assert_close(got, model.layers[0].mlp.gate.weight.grad, rtol=1e-5, atol=1e-7)
    assert got.abs().sum() > 0


def test_activation_checkpointing_keeps_the_losses_and_aux(run_recipe, tiny_moe, tmp_path):
    """The recompute in backward replaces each block's router logits: the aux term, computed in the
    forward, must not change (and its gradient flows through the recomputed graph)."""
    figures = {}
    for ac in ("false", "true"):
        rows, _ = run_recipe(
            "full_finetune_single_device",
            "smollm2/135M_full",
            *moe_overrides(tiny_moe),
            "max_steps=3",
            "lr_scheduler.num_warmup_steps=0",
            "optimizer.lr=3e-3",
            f"activation_checkpointing={ac}",
            output_dir=tmp_path / ac,
        )
        figures[ac] = [(row["loss"], row["aux_loss"]) for row in rows if "loss" in row]
    assert len(figures["true"]) == 3 and figures["true"] == figures["false"]
