"""One check per registry feature: run a recipe with the feature on and assert its EFFECT.

A check that only compares losses with the feature off passes when the feature does nothing, so
each one asserts what the feature changes (bytes saved for backward, compiled graphs that ran,
NF4 weights, the largest logits tensor, gradients freed inside backward, ...) and, where the
feature must not change the numbers, that it does not. tests/recipes/mutants.py replaces each
feature's code with a no-op and requires the check to fail (tests/recipes/test_mutation.py).

Shared by the single-device and distributed tests. Each check gets
`run(*overrides, output_dir=...) -> (logs, output_dir)` for one recipe and config.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from features_agent import multi_turn, off_policy_correction
from features_grpo import padding_free_rollouts
from features_images import images
from features_methods import (
    VOCAB,
    knowledge_distillation,
    learned_ranges,
    mixture_of_experts,
    qat,
    qat_lora_base,
    qat_off,
)
from features_parallel import context_parallel, tensor_parallel
from features_ppo import ppo
from features_rewards import reward_model
from run_logs import _assert_same_weights, _column, _weights, losses, read_log  # noqa: F401 - read_log: re-exported
from spies import (
    LargestVocabTensor,
    backward_calls,
    models_run,
    saved_activation_bytes,
    torch_compile,
)

from ftune.checkpointing.atomic import is_complete

# The backend of the compile check: the torchrun driver sets "eager" (see tests/recipes/dist_driver.py).
COMPILE_BACKEND = "aot_eager"


def grad_accumulation(run, tmp_path):
    one, _ = run("max_steps=2", "batch_size=4", "grad_accum_steps=1", output_dir=tmp_path / "one")
    two, _ = run("max_steps=2", "batch_size=2", "grad_accum_steps=2", output_dir=tmp_path / "two")
    # Token-normalised: 2 micro-batches of 2 are exactly one batch of 4 (same samples, same order).
    assert _column(two, "tokens_trained") == _column(one, "tokens_trained"), "a step did not see 4 samples"
    # abs: a GRPO loss is ~0 at ratio 1 (advantages sum to 0 per group); its gradient is not.
    assert losses(two) == pytest.approx(losses(one), rel=1e-5, abs=1e-6)
    assert _column(two, "grad_norm") == pytest.approx(_column(one, "grad_norm"), rel=1e-4)


def grad_clipping(run, tmp_path):
    clip = 0.01
    # The whole optimizer node is replaced, not just its _component_: an option a shipped config adds
    # to its AdamW (fused: true, betas, weight decay) must not reach plain SGD and change this check.
    sgd = ("max_steps=1", "lr_scheduler.num_warmup_steps=0")
    # The starting weights: lr 1e-30 moves no float32 weight (lr 0 is refused as a config error).
    _, base = run(*sgd, "optimizer={_component_: torch.optim.SGD, lr: 1e-30}", output_dir=tmp_path / "zero")
    logs, out = run(
        *sgd,
        "optimizer={_component_: torch.optim.SGD, lr: 1.0}",
        f"clip_grad_norm={clip}",
        output_dir=tmp_path / "clip",
    )
    assert logs[0]["grad_norm"] > 10 * clip  # the reported norm is the one before clipping
    before, after = _weights(base / "step_1"), _weights(out / "step_1")
    delta = math.sqrt(sum(float((after[k] - before[k]).double().pow(2).sum()) for k in after))
    assert delta == pytest.approx(clip, rel=1e-3), "SGD with lr 1: the update must be the clipped gradient"


def compile(run, tmp_path, backend=None):
    """Every decoder layer and the loss run as compiled graphs, and the step equals eager.

    The default run compiles with `aot_eager`: dynamo captures each layer's graph and AOTAutograd
    splits forward and backward exactly as for inductor, without inductor's C++ code generation
    (minutes on 2 CPU cores). test_features_single_device.py runs inductor itself under -m slow.
    One step and one loss chunk keep every shape static: one graph per compiled function.
    """
    fixed = ("max_steps=1", "loss.num_chunks=1")
    eager, _ = run(*fixed, output_dir=tmp_path / "eager")
    with torch_compile(backend or COMPILE_BACKEND) as compiled, models_run() as models:
        logs, _ = run(*fixed, "compile=true", output_dir=tmp_path / "compiled")
    by_target = {id(c.target): c for c in compiled}
    for i, layer in enumerate(models[-1].layers):
        record = by_target.get(id(layer))
        assert record is not None, f"decoder layer {i} was never passed to torch.compile"
        assert record.runs >= record.calls >= 1, f"layer {i}: {record.calls} calls ran {record.runs} graphs"
    loss = [c for c in compiled if hasattr(c.target, "chunk_loss")]
    assert loss and all(c.runs >= c.calls >= 1 for c in loss), f"the loss did not run compiled: {loss}"
    assert losses(logs) == pytest.approx(losses(eager), rel=1e-5)
    assert _column(logs, "grad_norm") == pytest.approx(_column(eager, "grad_norm"), rel=1e-4)


def activation_checkpointing(run, tmp_path):
    with saved_activation_bytes() as plain_bytes:
        plain, _ = run("max_steps=2", output_dir=tmp_path / "plain")
    with saved_activation_bytes() as ac_bytes:
        ac, out = run("max_steps=2", "activation_checkpointing=true", output_dir=tmp_path / "ac")
    # The layers' activations are recomputed in backward, not kept: most saved bytes go.
    assert ac_bytes[0] < 0.5 * plain_bytes[0], (
        f"saved for backward: {ac_bytes[0]} B with AC, {plain_bytes[0]} B without"
    )
    assert _column(ac, "grad_norm") == pytest.approx(_column(plain, "grad_norm"), rel=1e-6)  # same gradients
    assert losses(ac) == pytest.approx(losses(plain), rel=1e-6)
    assert not any("checkpoint" in k for k in _weights(out / "step_2"))  # no wrapper prefixes in the keys


def optimizer_in_backward(run, tmp_path):
    plain = ("max_steps=2", "clip_grad_norm=null", "lr_scheduler.num_warmup_steps=0")  # step 1 moves too
    normal, a = run(*plain, output_dir=tmp_path / "normal")
    with models_run() as models, backward_calls(models) as calls:
        bwd, b = run(*plain, "optimizer_in_backward=true", output_dir=tmp_path / "bwd")
    assert len(calls) == 2, f"{len(calls)} backward calls for 2 steps"
    for call in calls:  # stepped and freed inside backward: no gradient outlives it
        assert call.grads_left == 0, f"{call.grads_left} of {call.params} gradients left after backward"
        assert call.params_changed == call.params, (
            f"{call.params_changed} of {call.params} stepped in backward"
        )
    assert losses(bwd) == pytest.approx(losses(normal), rel=1e-5)  # the same update as optimizer.step()
    _assert_same_weights(_weights(b / "step_2"), _weights(a / "step_2"), rtol=1e-5)


def low_precision_optimizers(run, tmp_path):
    from ftune.checkpointing import load_recipe_state

    def moments(out):
        state = load_recipe_state(out / "step_1")["optimizer"]["state"]
        return [v for s in state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]

    fp32, a = run("max_steps=2", "save_every_n_steps=1", output_dir=tmp_path / "fp32")
    bf16, b = run(
        "max_steps=2",
        "save_every_n_steps=1",
        "optimizer=ftune.training.AdamWBf16State",
        "~optimizer.fused",
        output_dir=tmp_path / "bf16",
    )
    assert {t.dtype for t in moments(a)} == {torch.float32}
    assert {t.dtype for t in moments(b)} == {torch.bfloat16}  # half the bytes of fp32 AdamW's moments
    assert losses(bf16)[0] == losses(fp32)[0]  # same model and batch before the first update
    assert losses(bf16)[1] == pytest.approx(losses(fp32)[1], rel=1e-3)  # then AdamW's update, nearly


def chunked_loss(run, tmp_path):
    """The largest fp32 (tokens, vocab) tensor shrinks by the number of chunks; the loss is plain CE's."""
    plain_ce = ("loss._component_=ftune.training.CrossEntropyLoss", "~loss.num_chunks")
    with LargestVocabTensor(VOCAB) as plain_spy:
        plain, _ = run("max_steps=2", *plain_ce, output_dir=tmp_path / "plain")
    with LargestVocabTensor(VOCAB) as chunked_spy:
        chunked, _ = run("max_steps=2", "loss.num_chunks=8", output_dir=tmp_path / "chunked")
    assert plain_spy.rows >= 16, f"plain cross-entropy made no full logits? largest {plain_spy.rows} rows"
    assert chunked_spy.rows * 4 <= plain_spy.rows, (
        f"8 chunks: largest fp32 logits tensor has {chunked_spy.rows} token rows, plain CE {plain_spy.rows}"
    )
    assert losses(chunked) == pytest.approx(losses(plain), rel=1e-5)


def custom_collate(run, tmp_path):
    from recipe_test_components import CALLS

    before = CALLS["collate"]
    logs, _ = run(
        "max_steps=2",
        "collate_fn._component_=recipe_test_components.counting_collate",
        "collate_fn._partial_=true",
        "collate_fn.pad_id=0",
        output_dir=tmp_path / "c",
    )
    assert CALLS["collate"] > before, "the config's collate_fn was never called"
    assert len(logs) == 2 and all(r["tokens"] % 16 == 0 for r in logs)  # its padding, not the default's


def packing(run, tmp_path):
    # The tiny model's samples are 41-53 tokens: rows of 128 hold two or three of them.
    plain, _ = run("max_steps=2", output_dir=tmp_path / "plain")
    packed, _ = run(
        "max_steps=2", "dataset.packed=true", "dataset.max_seq_len=128", output_dir=tmp_path / "p"
    )
    assert _column(packed, "tokens") == [4 * 128, 4 * 128]  # fixed-shape rows (global batch x 128)
    # Several documents per row: a packed batch of 4 rows holds far more answers than 4 samples.
    per_step = [p / u for p, u in zip(_column(packed, "tokens_trained"), _column(plain, "tokens_trained"))]
    assert all(r >= 2 for r in per_step), f"labelled tokens per step, packed / unpacked: {per_step}"


def padding_free(run, tmp_path):
    flat, _ = run("max_steps=2", output_dir=tmp_path / "flat")
    if "completions/mean_length" in flat[0]:  # a GRPO recipe: padding_free=true packs its rollouts
        return padding_free_rollouts(run, tmp_path)
    # The shipped configs lay a batch's samples end to end; collate_fn=null right-pads them instead.
    padded, _ = run("max_steps=2", "collate_fn=null", output_dir=tmp_path / "padded")
    # The tiny model's samples are 41-53 tokens: right padding computes positions that hold nothing.
    # (At world size 2 a rank's samples can happen to be of one length in a step: nothing to save there.)
    flat_tokens, padded_tokens = _column(flat, "tokens"), _column(padded, "tokens")
    assert all(f <= p for f, p in zip(flat_tokens, padded_tokens)) and sum(flat_tokens) < sum(
        padded_tokens
    ), f"tokens a step: {flat_tokens} vs padded {padded_tokens}"
    assert _column(flat, "tokens_trained") == _column(padded, "tokens_trained")  # the same labelled tokens
    assert losses(flat) == pytest.approx(losses(padded), rel=1e-5)  # and the same loss


def validation(run, tmp_path):
    plain, _ = run("max_steps=3", output_dir=tmp_path / "plain")
    logs, _ = run("max_steps=3", "run_val_every_n_steps=2", "max_val_batches=2", output_dir=tmp_path / "v")
    val = {r["step"]: r["val_loss"] for r in logs if "val_loss" in r}
    assert sorted(val) == [2], f"val_loss logged at steps {sorted(val)}"
    assert math.isfinite(val[2]) and val[2] != losses(logs)[1]  # the held-out split, not the step's batch
    assert losses(logs) == losses(plain)  # evaluating leaves training (mode, RNG, data order) untouched


def step_checkpointing(run, tmp_path):
    _, out = run(
        "max_steps=3",
        "save_every_n_steps=1",
        "checkpointer.keep_last_n_checkpoints=2",
        output_dir=tmp_path / "s",
    )
    kept = sorted(p.name for p in out.glob("step_*"))
    assert kept == ["step_2", "step_3"], f"step folders: {kept}"  # step_1 pruned
    assert all(is_complete(out / k) for k in kept)
    assert (out / "step_2" / "recipe_state.pt").is_file()


def resume(run, tmp_path):
    straight, a = run("max_steps=3", output_dir=tmp_path / "a")
    first, b = run("max_steps=3", "save_every_n_steps=2", output_dir=tmp_path / "b")
    shutil.rmtree(b / "step_3", ignore_errors=True)  # every rank runs this
    shutil.rmtree(b / "logs", ignore_errors=True)
    second, _ = run("max_steps=3", "checkpointer.resume_from_checkpoint=auto", output_dir=b)
    resumed = losses(first)[:2] + losses(second)
    assert resumed == losses(straight), f"2 steps + resume + 1: {resumed}, 3 straight: {losses(straight)}"
    wa, wb = _weights(a / "step_3"), _weights(b / "step_3")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def metric_logging(run, tmp_path):
    logs, out = run("max_steps=2", output_dir=tmp_path / "m")
    assert [r["step"] for r in logs] == [1, 2], f"logged steps: {[r['step'] for r in logs]}"
    assert all({"loss", "lr", "tokens_per_second", "peak_memory_gib"} <= r.keys() for r in logs)
    assert all(math.isfinite(x) for x in losses(logs))


def profiler(run, tmp_path):
    _, out = run("max_steps=4", "profile=true", output_dir=tmp_path / "prof")
    traces = list((out / "profile").glob("*.json"))
    assert traces, "no trace written"
    events = json.loads(traces[0].read_text())["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 2, f"profiled steps: {sorted(steps)}"  # wait 1, warmup 1, active 2
    assert any(e.get("name") == "aten::mm" for e in events)  # the training step's matmuls are in it


# A reward model's score head trains and is saved with its adapters (PEFT's modules_to_save).
REWARD_HEAD = "score.weight"


def lora(run, tmp_path):
    with models_run() as models:
        _, out = run("max_steps=2", output_dir=tmp_path / "l")
    head = REWARD_HEAD in dict(models[-1].named_parameters())
    trainable = [n for n, p in models[-1].named_parameters() if p.requires_grad and n != REWARD_HEAD]
    assert trainable and all(".lora_" in f".{n}" for n in trainable), f"trainable: {trainable[:4]}"
    assert not head or models[-1].score.weight.requires_grad, "a reward model's head is frozen"
    saved = _weights(out / "step_2")
    adapter = [k for k in saved if not k.endswith(REWARD_HEAD)]
    assert adapter and all("lora_" in k for k in adapter), f"saved: {sorted(saved)[:4]}"  # adapter only
    assert head == any(k.endswith(REWARD_HEAD) for k in saved), f"saved: {sorted(saved)[:4]}"
    trained = [k for k, v in saved.items() if "lora_b" in k.lower() and v.abs().sum() > 0]
    assert trained, "every saved B matrix is still zero: the adapters did not train"


def qlora(run, tmp_path):
    from ftune.peft import LoRALinear
    from ftune.peft.nf4 import is_nf4

    with models_run() as models:
        logs, out = run("max_steps=2", "peft.quantize_base=true", output_dir=tmp_path / "q")
    adapted = [(n, m) for n, m in models[-1].named_modules() if isinstance(m, LoRALinear)]
    assert adapted, "no LoRA layer in the model"
    dense = [n for n, m in adapted if not is_nf4(m.weight)]
    assert not dense, f"base weights not stored as NF4: {dense[:3]}"
    # Under FSDP2 (DTensor weights), each rank holds its share of the 4-bit codes, not the whole weight.
    shards = [(n, m.weight) for n, m in adapted if hasattr(m.weight, "device_mesh")]
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        assert len(shards) == len(adapted), f"NF4 weights left unsharded: {len(adapted) - len(shards)}"
    whole = [
        n
        for n, w in shards
        if w._local_tensor.quantized_data.numel() * w.device_mesh.size() != w.numel() // 2
    ]
    assert not whole, f"NF4 codes not sharded over the ranks: {whole[:3]}"
    assert all(math.isfinite(x) for x in losses(logs))
    assert all("lora_" in k for k in _weights(out / "step_2"))


def dora(run, tmp_path):
    steps = ("max_steps=2", "lr_scheduler.num_warmup_steps=0")  # step 1 updates the weights
    plain, _ = run(*steps, output_dir=tmp_path / "lora")
    logs, out = run(*steps, "peft.use_dora=true", output_dir=tmp_path / "d")
    assert any("magnitude" in k for k in _weights(out / "step_2"))
    # B starts at zero, so step 1 is the base model for both; then the learnt magnitude changes the forward.
    assert losses(logs)[0] == pytest.approx(losses(plain)[0], rel=1e-5)
    assert losses(logs)[1] != pytest.approx(losses(plain)[1], rel=1e-6), "DoRA trained like LoRA"


def fsdp2(run, tmp_path):
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    with models_run() as models:
        logs, out = run("max_steps=2", output_dir=tmp_path)
    assert dist.get_world_size() == 2
    params = dict(models[-1].named_parameters())
    unsharded = [n for n, p in params.items() if not isinstance(p, DTensor)]
    assert not unsharded, f"parameters not sharded: {unsharded[:3]}"
    local = sum(p.to_local().numel() for p in params.values())
    assert local <= sum(p.numel() for p in params.values()) // 2 + 64, "each rank holds about half"
    assert (out / "step_2").is_dir() and all(math.isfinite(x) for x in losses(logs))


CHECKS = {
    f.__name__: f
    for f in (
        knowledge_distillation,
        qat_off,
        qat_lora_base,
        qat,
        learned_ranges,
        fsdp2,
        tensor_parallel,
        context_parallel,
        grad_accumulation,
        grad_clipping,
        compile,
        activation_checkpointing,
        optimizer_in_backward,
        chunked_loss,
        low_precision_optimizers,
        custom_collate,
        packing,
        padding_free,
        validation,
        step_checkpointing,
        resume,
        metric_logging,
        profiler,
        lora,
        qlora,
        dora,
        mixture_of_experts,
        reward_model,
        ppo,
        multi_turn,
        off_policy_correction,
        images,
    )
}
