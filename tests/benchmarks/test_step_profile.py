"""The pure part of benchmarks/step_profile.py: which bucket a profiled operator's time goes to."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import step_profile  # noqa: E402


@pytest.mark.parametrize(
    ("name", "region", "bucket"),
    [
        ("aten::mm", "forward", "matmul"),
        ("aten::addmm_", "forward", "matmul"),  # the fused loss's weight-gradient accumulation
        ("aten::mm", "optimizer", "matmul"),  # a product counts as one wherever it runs
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "forward", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "backward", "attention"),
        ("aten::_softmax", "forward", "loss"),
        ("_LinearCrossEntropy", "forward", "loss"),
        ("aten::_log_softmax_backward_data", "backward", "loss"),
        ("aten::lerp_", "optimizer", "optimizer"),
        ("aten::linalg_vector_norm", "optimizer", "optimizer"),  # clipping runs in the optimizer region
        ("aten::mul", "backward", "other"),
        ("aten::silu", "forward", "other"),
    ],
)
def test_category(name, region, bucket):
    assert step_profile.category(name, region) == bucket
