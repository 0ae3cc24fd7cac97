"""The step's matrix products (ftune.runtime.matmul_speed): the same FLOPs as the benchmarks' formula, timed."""

import sys
from pathlib import Path

import torch

from ftune.models.smollm2 import smollm2_135m
from ftune.modules.transformer import OutputHead
from ftune.runtime.matmul_speed import Linear, Product, model_linears, step_products, time_products

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import vs_torchtune_measure as measure  # noqa: E402

SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152,
                "num_attention_heads": 9, "num_key_value_heads": 3}  # fmt: skip


def _attention_flops(tokens: int, seq_len: int) -> int:
    return 6 * 30 * 576 * seq_len * tokens


def test_the_products_of_a_step_have_the_benchmark_formulas_flops():
    with torch.device("meta"):
        model = smollm2_135m()
    tokens, seq_len = 2048, 512
    full = step_products(model_linears(model, trains=True), tokens)
    lora = step_products(
        model_linears(model, trains=False, lora_rank=8, lora_targets=("q_proj", "v_proj")), tokens
    )
    expected_full = measure.flops_per_step(SMOLLM2_135M, "full", 4, seq_len) - _attention_flops(
        tokens, seq_len
    )
    expected_lora = measure.flops_per_step(SMOLLM2_135M, "lora", 4, seq_len) - _attention_flops(
        tokens, seq_len
    )
    assert sum(p.flops for p in full) == expected_full
    assert sum(p.flops for p in lora) == expected_lora
    # 30 layers x 7 projections + the tied output projection, forward + input + weight gradient.
    assert sum(p.count for p in full) == 3 * (30 * 7 + 1)
    # frozen: no weight gradient; 2 adapted layers a block x 6 thin products
    assert sum(p.count for p in lora) == 2 * (30 * 7 + 1) + 6 * 30 * 2


def test_an_untied_output_projection_is_counted_once():
    model = torch.nn.Module()
    model.proj = torch.nn.Linear(8, 4)
    model.output = torch.nn.Linear(4, 32)
    model.head = OutputHead(model.output.weight, None)
    linears = model_linears(model, trains=True)
    assert linears == [Linear(8, 4, True), Linear(4, 32, True)]


def test_timing_multiplies_a_shape_by_its_count():
    one = Product(64, 64, 64, 1)
    many = Product(64, 64, 64, 1000)
    t1, t1000 = time_products([one], torch.float32), time_products([many], torch.float32)
    assert t1 > 0 and t1000 > 0
    assert t1000 / t1 > 100  # the count multiplies; the best of repeats of one shape is each's unit
    assert step_products([Linear(8, 4, trains=False)], 16) == [
        Product(16, 4, 8, 1, False, False),
        Product(16, 8, 4, 1, False, True),
    ]


def test_timing_leaves_the_global_random_stream_alone():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    time_products([Product(8, 8, 8, 1, a_t=True)], torch.float32)
    assert torch.equal(torch.rand(4), expected)
