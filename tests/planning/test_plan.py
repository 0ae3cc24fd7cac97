"""How the plan adds its terms up (sharding, checkpointing, methods), and which settings it says make a run fit."""

import dataclasses

import pytest
import torch

from ftune.config import load_config
from ftune.planning import Parallelism, Workload, plan, plan_config, shape_of, terms, what_fits
from ftune.planning.plan import CPU_ALLOCATOR_SHARE, CPU_RUNTIME_GIB, model_of
from ftune.planning.shapes import GIB, ModelShape

SHAPE = ModelShape(
    num_layers=30, embed_dim=576, q_dim=576, kv_dim=192, ffn_dim=1536, num_heads=9, vocab_size=49152,
    params=134_515_008, trainable=134_515_008,
)  # fmt: skip
WORK = Workload(method="sft", rows=4, seq=512, dtype=torch.float32, batch_size=4)


def test_a_full_step_is_weights_optimizer_activations_loss_and_the_overheads():
    p = plan(SHAPE, WORK)
    acts = 30 * terms.layer_activation_bytes(SHAPE, 4, 512, 4)
    loss = terms.loss_bytes(SHAPE, 2048, 8, trains_output=True)
    assert p.terms["weights"] == SHAPE.params * 4
    assert p.terms["optimizer state"] == SHAPE.params * 8  # AdamW: two fp32 moments
    assert p.terms["activations"] == acts
    assert p.terms["loss blocks"] == loss
    # the layers' gradients fit in the room of the activations freed: only the embedding's adds
    assert p.terms["gradients (beyond the activations freed)"] == 49152 * 576 * 4
    assert p.terms["runtime (Python, torch, data)"] == CPU_RUNTIME_GIB * GIB
    # a share of all the transient memory, the blocks glibc maps (the loss's 48 MiB blocks of logits,
    # the embedding's 108 MiB gradient) as much as those its heap serves
    assert p.terms["allocator (CPU heap)"] == pytest.approx(CPU_ALLOCATOR_SHARE * (acts + loss))
    assert p.peak_gib == pytest.approx(sum(p.terms.values()) / GIB)


def test_fsdp_divides_weights_gradients_and_optimizer_state_by_the_world_size():
    one, four = plan(SHAPE, WORK), plan(SHAPE, WORK, Parallelism(world_size=4, fsdp=True))
    assert four.terms["weights"] == one.terms["weights"] / 4
    assert four.terms["optimizer state"] == one.terms["optimizer state"] / 4
    assert four.terms["activations"] == one.terms["activations"]  # each rank its own micro-batch
    assert four.terms["weights: one layer gathered"] == SHAPE.params * 4 / 30
    assert four.terms["weights: root gathered (embedding)"] == 49152 * 576 * 4
    # on CPU every rank also holds the whole checkpoint and the unsharded model's heap pages
    assert four.terms["checkpoint and unsharded model (before sharding)"] == 2 * SHAPE.params * 4
    gpu = plan(SHAPE, dataclasses.replace(WORK, device="cuda"), Parallelism(world_size=4, fsdp=True))
    assert "checkpoint and unsharded model (before sharding)" not in gpu.terms


def test_tensor_parallel_splits_the_layers_and_leaves_the_embedding_whole_on_each_tp_rank():
    one, six = plan(SHAPE, WORK), plan(SHAPE, WORK, Parallelism(world_size=6, fsdp=True, tp=3))  # dp=2 x tp=3
    emb = 49152 * 576 * 4  # tied: one embedding
    assert six.terms["weights"] == pytest.approx((SHAPE.params * 4 - emb) / 6 + emb / 3)
    assert six.terms["optimizer state"] == pytest.approx(2 * six.terms["weights"])  # AdamW: two moments
    assert six.terms["weights: one layer gathered"] == pytest.approx(SHAPE.params * 4 / 30 / 3)
    local = dataclasses.replace(SHAPE, q_dim=192, kv_dim=64, ffn_dim=512, num_heads=3)  # a third of each
    assert six.terms["activations"] == 30 * terms.layer_activation_bytes(local, 4, 512, 4)
    assert six.terms["activations"] < one.terms["activations"]
    assert six.terms["loss blocks"] == one.terms["loss blocks"]  # the whole batch's, on every rank
    # On CPU rank 0 reads every layer of the mapped checkpoint (it scatters their shards) and its tp
    # slice of the embedding: one copy of the layers, not FSDP2's two copies of the whole model.
    assert six.terms["checkpoint pages read (tensor parallel)"] == pytest.approx(
        SHAPE.params * 4 - emb + emb / 3
    )
    assert "checkpoint and unsharded model (before sharding)" not in six.terms


def test_context_parallel_splits_the_sequences_and_keeps_the_gathered_keys_and_values():
    one, four = (
        plan(SHAPE, WORK),
        plan(SHAPE, WORK, Parallelism(world_size=4, fsdp=True, cp=2)),
    )  # dp=2 x cp=2
    assert four.terms["weights"] == one.terms["weights"] / 4  # FSDP2 over dp x cp
    assert four.terms["activations"] == 30 * terms.layer_activation_bytes(SHAPE, 4, 256, 4)
    gathered = 30 * 2 * 4 * 256 * 192 * 4 + 4 * 512 * 576 * 4  # the other slice's k, v; all hidden states
    assert four.terms["context parallel: gathered keys, values, hidden states"] == gathered
    assert four.terms["loss blocks"] == one.terms["loss blocks"]


def test_a_mesh_that_does_not_fit_the_world_size_is_refused():
    with pytest.raises(
        ValueError, match=r"memory plan: tensor_parallel_dim=2 does not divide the world size \(3"
    ):
        Parallelism(world_size=3, fsdp=True, tp=2)
    with pytest.raises(
        ValueError, match=r"memory plan: tensor_parallel_dim=2 and context_parallel_dim=2: one of"
    ):
        Parallelism(world_size=4, fsdp=True, tp=2, cp=2)
    with pytest.raises(
        ValueError, match=r"tensor_parallel_dim=2 does not divide the model's 9 heads, 3 key/value"
    ):
        plan(SHAPE, WORK, Parallelism(world_size=2, fsdp=True, tp=2))


def test_activation_checkpointing_keeps_layer_inputs_only():
    p = plan(SHAPE, dataclasses.replace(WORK, activation_checkpointing=True))
    assert "activations" not in p.terms
    assert p.terms["activations (checkpointed)"] == terms.checkpointed_activation_bytes(SHAPE, 4, 512, 4)
    assert p.peak_gib < plan(SHAPE, WORK).peak_gib


def test_grpo_sampling_counts_its_kv_cache_and_peaks_where_it_outgrows_the_update():
    work = Workload(method="grpo", rows=64, seq=4096, dtype=torch.float32, rollout_rows=64, rollout_len=4096,
                    activation_checkpointing=True, loss_tokens=64 * 16, batch_size=8)  # fmt: skip
    kv = terms.kv_cache_bytes(SHAPE, 64, 4096, 4)
    assert (
        f"its KV cache {kv / GIB:.2f} GiB: 30 layers x 2 x 64 rows x 4096 positions x 192"
        in plan(SHAPE, work).notes[0]
    )
    offloaded = plan(SHAPE, dataclasses.replace(work, activation_offloading=True, device="cuda"))
    assert offloaded.terms["rollout KV cache (sampling peak)"] > kv


def test_what_fits_lists_each_change_alone_then_the_helpful_ones_together():
    p = plan(SHAPE, WORK)
    memory = 2.5
    options = what_fits(p, memory, batch_size=4)
    changes = [o.change for o in options]
    assert changes[:3] == ["activation_checkpointing=true", "batch_size=2 grad_accum_steps=2",
                           "batch_size=1 grad_accum_steps=4"]  # fmt: skip
    assert changes[3].startswith("optimizer._component_=ftune.training.AdamWBf16State")
    ac = plan(SHAPE, dataclasses.replace(WORK, activation_checkpointing=True))
    assert options[0].peak_gib == round(ac.peak_gib, 2) and options[0].fits == (ac.peak_gib <= memory)
    assert all(o.fits == (o.peak_gib <= memory + 0.005) for o in options)
    together = options[-1]
    assert not any(o.fits for o in options[:-1])  # no change alone is enough: the cheapest ones together
    assert together.change == ("activation_checkpointing=true + batch_size=1 grad_accum_steps=4 + "
                               "optimizer._component_=ftune.training.AdamWBf16State ~optimizer.fused")  # fmt: skip
    assert together.fits


def test_plan_config_reads_the_recipe_settings_and_counts_the_lora_model_exactly():
    cfg = load_config("smollm2/135M_lora", ["batch_size=2", "tokenizer.max_seq_len=128", "peft.rank=8"])
    p = plan_config(cfg, "lora_finetune_single_device")
    assert (p.workload.rows, p.workload.seq, p.workload.method) == (2, 128, "sft")
    # rank 8 on 7 projections of 30 layers: 8 x (in + out) each
    per_layer = 8 * ((576 + 576) * 2 + (576 + 192) * 2 + (576 + 1536) * 3)
    assert p.shape.trainable == 30 * per_layer
    assert p.shape.params == SHAPE.params + 30 * per_layer
    assert p.terms["optimizer state"] == 30 * per_layer * 8


@pytest.mark.parametrize(
    "config, recipe, method, rows, seq",
    [
        ("smollm2/135M_lora_dpo", "lora_dpo_single_device", "dpo", 8, 256),  # chosen + rejected
        ("smollm2/135M_full_grpo", "full_grpo_single_device", "grpo", 32, 256 + 16),
    ],
)
def test_methods_read_their_rows(config, recipe, method, rows, seq):
    p = plan_config(load_config(config, ["batch_size=4"]), recipe)
    assert (p.workload.method, p.workload.rows, p.workload.seq) == (method, rows, seq)
    assert ("reference model" in p.terms) == (
        method == "grpo"
    )  # full GRPO: a frozen copy; LoRA DPO: adapters off


def test_kd_counts_the_teacher():
    cfg = load_config("smollm2/360M_to_135M_kd", [])
    p = plan_config(cfg, "knowledge_distillation_single_device")
    assert p.teacher is not None and p.teacher.num_layers == 32
    assert p.terms["teacher weights"] == shape_of_teacher_params(cfg) * 4


def shape_of_teacher_params(cfg) -> int:
    return shape_of(model_of(cfg, "teacher_model", "teacher_checkpointer", torch.float32)).params
