"""DPO, GRPO and KD on a tiny Qwen3-MoE, Mixtral and Gemma 2, from the shipped configs, on one device.

Each (family, method) runs 2 steps of its shipped config (tests/recipes/family_methods.py: the tiny
transformers folders and the overrides). A mixture-of-experts run logs `aux_loss` at every step,
and its balancing term is counted once: at step 1 the policy equals its reference (LoRA's B is zero,
the full reference is the same weights), so DPO's pair loss is exactly log 2 and GRPO's ~0, and the
logged loss is that plus `router_aux_loss_coef * aux_loss`, not twice the term. A Gemma 2 run builds
its models with the final-logit cap (the log-probabilities on capped logits equal transformers':
tests/models/test_logps_parity.py). Every run moves the weights: each LoRA B leaves zero (the
experts' adapters included), a full run changes the saved weights (the routers' included).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import load_recipe
from family_methods import (
    AUX_COEF,
    FAMILIES,
    GEMMA2_CAP,
    METHODS,
    MOE,
    SINGLE,
    config_of,
    folders_of,
    make_folders,
    overrides,
    write_data,
)
from run_logs import read_log
from safetensors.torch import load_file
from spies import models_run

from ftune.config import load_config

pytestmark = pytest.mark.usefixtures("one_thread")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family -> the root of its tiny folders (built on first use) and of the data files."""
    root = tmp_path_factory.mktemp("families")
    write_data(root / "data")
    built: set[str] = set()

    def get(family: str) -> Path:
        if family not in built:
            make_folders(family, root)
            built.add(family)
        return root

    return get


def run(tiny, family: str, method: str, out: Path, *extra: str):
    """(logged step rows, the models the run built, output_dir)."""
    cfg = load_config(config_of(family, method), [*overrides(family, method, tiny(family), out), *extra])
    with models_run() as models:
        load_recipe(SINGLE[method]).main(cfg)
    return [row for row in read_log(out) if "loss" in row], models, out


def assert_weights_moved(step_dir: Path, base: Path, lora: bool) -> None:
    if lora:
        adapters = load_file(str(step_dir / "adapter_model.safetensors"))
        b = {k: v for k, v in adapters.items() if "lora_B" in k}
        assert b and all(v.abs().max() > 0 for v in b.values()), [k for k, v in b.items() if not v.any()]
        return
    saved, before = load_file(str(step_dir / "model.safetensors")), load_file(str(base / "model.safetensors"))
    assert saved.keys() == before.keys()
    moved = {k for k in saved if not torch.equal(saved[k], before[k])}
    assert moved, "no weight changed"
    routers = {k for k in saved if k.endswith("mlp.gate.weight")}
    assert routers <= moved, sorted(routers - moved)


CASES = [(family, method) for family in FAMILIES for method in METHODS]


@pytest.mark.parametrize("family, method", CASES)
def test_two_steps_from_the_shipped_config(tiny, tmp_path, family, method):
    rows, models, out = run(tiny, family, method, tmp_path / "out")
    losses = [row["loss"] for row in rows]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), losses
    if family in MOE:
        aux = [row["aux_loss"] for row in rows]
        # top_k (2) for perfectly even routing, up to num_experts (8) when every token picks the same two.
        assert all(1.9 < a < 8.0 for a in aux), aux
        if method != "kd":  # the policy is its reference at step 1: log 2 (DPO), ~0 (GRPO), + coef * aux
            at_start = math.log(2) if method.endswith("dpo") else 0.0
            assert losses[0] == pytest.approx(at_start + AUX_COEF * aux[0], abs=1e-5), (losses, aux)
    else:
        assert all("aux_loss" not in row for row in rows)
        assert models and all(m.head.softcap == GEMMA2_CAP for m in models)  # student and teacher
    student, _ = folders_of(family, tiny(family))
    assert_weights_moved(out / "step_2", student, lora=method.startswith("lora"))


@pytest.mark.parametrize("kl", ["reverse", "symmetric"])
def test_kd_reverse_and_symmetric_on_gemma2_and_qwen3_moe(tiny, tmp_path, kl):
    """Both KL directions read both capped heads (Gemma 2); a Qwen3-MoE student logs its aux loss."""
    kind = [f"loss.kl={kl}", *(["loss.sym_kd_ratio=0.5"] if kl == "symmetric" else [])]
    forward, _, _ = run(tiny, "gemma2", "kd", tmp_path / "forward")
    rows, models, _ = run(tiny, "gemma2", "kd", tmp_path / kl, *kind)
    losses = [row["loss"] for row in rows]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert losses[0] != pytest.approx(forward[0]["loss"], rel=1e-4)  # another divergence
    assert all(m.head.softcap == GEMMA2_CAP for m in models)
    moe, _, _ = run(tiny, "qwen3_moe", "kd", tmp_path / f"moe_{kl}", *kind)
    assert all(1.9 < row["aux_loss"] < 8.0 and math.isfinite(row["loss"]) for row in moe)
