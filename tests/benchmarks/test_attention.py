"""benchmarks/attention.py measures every option on a small shape, and ftune ships the fastest it recorded."""

import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import attention  # noqa: E402

from ftune.modules import cpu_attention  # noqa: E402
from ftune.modules.matmul_attention import matmul_attention  # noqa: E402

RESULTS = BENCH / "results" / "attention.json"
SMALL = ["sdpa (default dispatch)", "sdpa MATH", "sdpa EFFICIENT_ATTENTION", "ftune (shipped)",
         "ftune blocked 64", "ftune matmul 64", "ftune matmul 128 by row"]  # fmt: skip


@pytest.mark.parametrize("kind", ["causal", "documents"])
def test_measure_times_and_checks_every_option_on_a_small_shape(monkeypatch, kind: str) -> None:
    monkeypatch.setitem(attention.SHAPES, "2x128", (2, 128))
    rows = {row["option"]: row for row in attention.measure("2x128", kind, SMALL, rounds=1)}
    assert set(rows) == set(SMALL) - ({"ftune matmul 128 by row"} if kind == "causal" else set())
    assert "No viable backend" in rows["sdpa EFFICIENT_ATTENTION"]["error"]  # a CUDA-only kernel, recorded
    for name in set(rows) - {"sdpa EFFICIENT_ATTENTION"}:
        row = rows[name]
        assert row["exact"] and row["fwd_ms"] > 0 and row["fwd_bwd_ms"] > 0, row
        assert max(row["max_abs_diff"].values()) < 1e-5, row
    # 2 rows of 128 tokens, 9 heads: causal allows 128 * 129 / 2 pairs a row; 12 * 64 FLOPs a pair and head.
    if kind == "causal":
        assert rows["sdpa MATH"]["gflop_fwd_bwd"] == round(12 * 64 * 9 * 2 * 128 * 129 / 2 / 1e9, 2)


def test_matmul_blocks_equal_sdpa_under_a_one_row_document_mask() -> None:
    ids = attention.document_ids(1, 512)
    assert int(ids.max()) + 1 == attention.DOCS_PER_512
    mask = attention.document_causal_mask(ids)
    torch.manual_seed(0)
    q = torch.randn(1, 9, 512, 8, requires_grad=True)
    k, v = (torch.randn(1, 3, 512, 8, requires_grad=True) for _ in range(2))
    got = matmul_attention(q, k, v, mask, cpu_attention.key_blocks(mask, 128, split_documents=True))
    got = got.view(1, 512, 9, 8).transpose(1, 2)
    want = attention.sdpa(q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    for g, w in zip(grads, torch.autograd.grad(want.square().sum(), (q, k, v))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_kernel_table_takes_the_fastest_exact_shippable_option() -> None:
    def row(option, ms, exact=True, shape="4x512", mask="causal"):
        return {"shape": shape, "mask": mask, "option": option, "fwd_bwd_ms": ms, "exact": exact}

    rows = [row("sdpa (default dispatch)", 50), row("ftune blocked 128", 40), row("sdpa MATH", 10),
            row("ftune blocked 64", 30, exact=False), row("ftune blocked 256", 60, mask="documents")]  # fmt: skip
    assert attention.kernel_table(rows) == {
        "causal": [(1024, "blocked 128")],
        "masked": [(None, "blocked 256")],
    }


def test_the_shipped_table_is_the_results_files_fastest() -> None:
    """CPU_KERNELS equals what the results file measured fastest once it holds a full run on an idle machine;
    a plumbing or busy run is marked so (the docs quote no figure from it) and ran with today's table."""
    r = json.loads(RESULTS.read_text())
    if r["quick"] or r["contended"]:
        shipped = {kind: [tuple(entry) for entry in entries] for kind, entries in r["shipped"].items()}
        assert shipped == cpu_attention.CPU_KERNELS, "rerun python benchmarks/attention.py: the table changed"
        return
    fastest = {kind: [tuple(entry) for entry in entries] for kind, entries in r["fastest"].items()}
    assert fastest == cpu_attention.CPU_KERNELS, (
        f"benchmarks/results/attention.json measured {fastest} fastest; set CPU_KERNELS in "
        "ftune/modules/cpu_attention.py to it."
    )
