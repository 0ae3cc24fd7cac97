"""What tensor and context parallel refuse, before anything runs, each in one message: a grid that does
not fit the world size, both at once, LoRA with tensor parallel, a recipe without the split, heads or
widths the tensor-parallel ranks do not divide, layers without a plan, image inputs."""

from types import SimpleNamespace

import pytest
import torch

from ftune.cli.main import main
from ftune.cli.validate import validate
from ftune.config.errors import ConfigError
from ftune.models.smollm2 import smollm2
from ftune.modules.context_exchange import ContextSplit
from ftune.peft import apply_lora
from ftune.settings.dist import mesh_problems, parallel_dims_problems
from ftune.training.features.context_parallel import whole_sequences
from ftune.training.features.tensor_parallel import tensor_parallel

SIZES = dict(vocab_size=32, num_layers=1, num_heads=4, num_kv_heads=2, embed_dim=16, intermediate_dim=32)
FULL_DIST = ["run", "--nproc_per_node", "3", "full_finetune_distributed"]


class _Mesh:
    """Stands for a tensor-parallel DeviceMesh of `n` ranks: the checks read only its size."""

    def __init__(self, n: int) -> None:
        self.n = n

    def size(self) -> int:
        return self.n


def _model():
    with torch.device("meta"):
        return smollm2(**SIZES, max_seq_len=32)


def test_a_grid_that_does_not_divide_the_world_size_names_both_and_the_fix():
    (problem,) = mesh_problems(3, tensor_parallel_dim=2, context_parallel_dim=1)
    assert problem.startswith("tensor_parallel_dim=2 does not divide the world size (3 processes)")
    assert "Launch a multiple of 2 processes (--nproc_per_node)" in problem
    assert mesh_problems(4, tensor_parallel_dim=2, context_parallel_dim=1) == []


def test_the_launcher_refuses_the_grid_before_any_rank_starts(capsys):
    assert main([*FULL_DIST, "tensor_parallel_dim=2"]) == 1
    err = capsys.readouterr().err
    assert "tensor_parallel_dim=2 does not divide the world size (3 processes)" in err
    assert "Traceback" not in err


def test_tensor_and_context_parallel_at_once_are_refused():
    (problem,) = parallel_dims_problems(2, 2)
    assert "one of the two at a time" in problem and "Set one of them to 1" in problem
    with pytest.raises(ConfigError, match="tensor_parallel_dim=2 and context_parallel_dim=2: one of the two"):
        validate("smollm2/135M_full", ["tensor_parallel_dim=2", "context_parallel_dim=2"], files=False)
    with pytest.raises(ConfigError, match=r"context_parallel_dim: must be an int >= 1, got 0"):
        validate("smollm2/135M_full", ["context_parallel_dim=0"], files=False)


def test_lora_refuses_tensor_parallel_with_the_reason():
    with pytest.raises(
        ConfigError, match=r"tensor_parallel_dim: 2 with LoRA: a LoRA layer computes its frozen"
    ):
        validate("smollm2/135M_lora", ["tensor_parallel_dim=2"], "lora_finetune_distributed", files=False)
    validate("smollm2/135M_lora", ["context_parallel_dim=2"], "lora_finetune_distributed", files=False)


def test_a_distributed_recipe_without_the_split_is_refused_by_the_launcher(capsys):
    argv = ["run", "--nproc_per_node", "2", "qat_distributed", "--config", "smollm2/135M_qat_full"]
    assert main([*argv, "tensor_parallel_dim=2"]) == 1
    err = capsys.readouterr().err
    assert (
        "tensor_parallel_dim: 2 (set on the command line) asks for tensor parallel, and qat_distributed "
        "does not run it: torchao's fake-quantized linears" in err
    )
    assert "run it with full_finetune_distributed or full_dpo_distributed" in err


def test_tensor_parallel_with_a_peft_section_is_refused_by_the_launcher(capsys):
    # reward_model_distributed splits full weights; its LoRA config (a peft section) cannot be split.
    argv = [
        "run",
        "--nproc_per_node",
        "2",
        "reward_model_distributed",
        "--config",
        "smollm2/135M_demo_lora_rm",
    ]
    assert main([*argv, "tensor_parallel_dim=2"]) == 1
    err = capsys.readouterr().err
    assert "tensor_parallel_dim: 2 (set on the command line) with a peft section (in " in err
    assert "a LoRA layer reads its whole base weight. Set tensor_parallel_dim=1" in err
    assert "remove the peft section: ~peft" in err


def test_heads_the_tensor_parallel_ranks_do_not_divide():
    with pytest.raises(
        ValueError, match=r"tensor_parallel_dim=4 does not divide num_kv_heads \(2\) of layers.0"
    ):
        tensor_parallel(_model(), _Mesh(4))
    with pytest.raises(ValueError, match=r"tensor_parallel_dim=3 does not divide num_heads \(4\)"):
        tensor_parallel(_model(), _Mesh(3))


def test_a_lora_layer_has_no_plan():
    model = _model()
    apply_lora(model, targets=["q_proj"], rank=2, alpha=4)
    with pytest.raises(
        ValueError, match=r"this model has layers.0: q_proj is a LoRALinear. Set tensor_parallel_dim=1"
    ):
        tensor_parallel(model, _Mesh(2))


def test_context_parallel_refuses_image_embeddings_and_decoding():
    split = ContextSplit.__new__(ContextSplit)  # the checks read only the rank count
    split.size = 2
    with pytest.raises(ValueError, match=r"this forward has images, .* Set context_parallel_dim=1"):
        split.check(images=True, caches=False)
    with pytest.raises(ValueError, match=r"this forward has KV caches \(decoding\)"):
        split.check(images=False, caches=True)


def test_a_rollout_lifts_the_sequence_split_and_puts_it_back():
    # Decoding on the KV cache (a GRPO rollout) runs whole sequences; the update's forwards split again.
    model, group = _model(), object()
    model.context_split = SimpleNamespace(group=group)
    for layer in model.layers:
        layer.attn.context_group = group
    split = model.context_split
    with pytest.raises(RuntimeError, match="inside"), whole_sequences(model):
        assert model.context_split is None
        assert all(layer.attn.context_group is None for layer in model.layers)
        raise RuntimeError("inside")
    assert model.context_split is split
    assert all(layer.attn.context_group is group for layer in model.layers)
