"""dtype advice (ftune.training.run.dtype_advice): measured once per machine and model, cached, and `auto` picks
the faster dtype that fits. The timer is replaced here (no timed assertions); what is checked is the arithmetic,
the cache, the early stop on emulated bf16 and the choice."""

import json

import pytest
import torch

from ftune.config import load_config
from ftune.runtime.matmul_speed import Linear, Product, step_products
from ftune.training.run import dtype_advice as da


@pytest.fixture(autouse=True)
def _idle(monkeypatch):
    """These tests replace the timer; the busy-machine check (thread_advice) would time for real."""
    monkeypatch.setattr(da, "say_thread_advice", lambda products, device: None)


def _fake_timer(fp32_per_gflop: float, bf16_per_gflop: float, calls: list):
    def time_product(p: Product, dtype: torch.dtype, *, device=None, repeats: int = 3) -> float:
        calls.append((p, dtype))
        per = fp32_per_gflop if dtype == torch.float32 else bf16_per_gflop
        return per * (p.flops // p.count) / 1e9

    return time_product


def test_the_measurement_weights_each_shape_by_its_count(monkeypatch):
    calls = []
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.25, calls))
    products = step_products([Linear(64, 128, trains=True)] * 3, 32)
    speed = da.measure_speed(products, torch.device("cpu"), tokens=32)
    flops = sum(p.flops for p in products)  # 3 layers of one shape: counted 3 times, timed once a round
    assert speed.fp32_s == pytest.approx(flops / 1e9) and speed.bf16_s == pytest.approx(flops / 4e9)
    assert speed.bf16_speedup == pytest.approx(4.0) and speed.tokens == 32
    assert len(calls) == 2 * 2 * len(products)  # two rounds, both dtypes, each distinct product once


def test_emulated_bf16_stops_at_the_first_slow_products_and_extrapolates(monkeypatch):
    calls = []
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 100.0, calls))
    products = step_products([Linear(64, 128, trains=True), Linear(256, 512, trains=True)], 32)
    speed = da.measure_speed(products, torch.device("cpu"), tokens=32)
    assert speed.bf16_speedup == pytest.approx(0.01)
    bf16_calls = [p for p, d in calls if d == torch.bfloat16]
    assert len(bf16_calls) == 2  # the largest product once a round, then no more bf16 products
    assert bf16_calls[0].flops // bf16_calls[0].count == max(p.flops // p.count for p in products)


def test_the_cache_keeps_a_quiet_measurement(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.5, calls))
    products = step_products([Linear(64, 128, trains=False)], 16)
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    first, cached = da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16)
    n = len(calls)
    again, cached_again = da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16)
    assert (cached, cached_again) == (False, True) and again == first and len(calls) == n
    (entry,) = json.loads((tmp_path / da.CACHE_NAME).read_text()).values()
    assert entry == {
        "fp32_s": first.fp32_s, "bf16_s": first.bf16_s, "tokens": 16,
        "cpu": da._where(torch.device("cpu")), "torch": torch.__version__, "busy": False,
    }  # fmt: skip
    monkeypatch.setattr(
        da.os, "getloadavg", lambda: (99.0, 0.0, 0.0)
    )  # a quiet figure serves a busy start too
    assert da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16) == (first, True)
    other_model = step_products([Linear(64, 256, trains=False)], 16)
    _, cached = da.cached_speed(other_model, torch.device("cpu"), tmp_path, tokens=16)
    assert not cached  # another model's shapes are measured anew


def test_a_busy_machine_measures_once_and_an_idle_one_measures_again(monkeypatch, tmp_path, caplog):
    """37.6: a busy machine does not make every start pay for the measurement; its figure is marked busy,
    said to be rough, and replaced on the first idle start."""
    calls = []
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.5, calls))
    products = step_products([Linear(64, 128, trains=False)], 16)
    monkeypatch.setattr(da.os, "getloadavg", lambda: (99.0, 0.0, 0.0))
    busy, cached = da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16)
    assert not cached and busy.busy and "cached marked busy" in caplog.text
    n = len(calls)
    assert da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16) == (busy, True)
    assert len(calls) == n  # the second busy start reuses it
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    quiet, cached = da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16)
    assert not cached and not quiet.busy and len(calls) > n
    (entry,) = json.loads((tmp_path / da.CACHE_NAME).read_text()).values()
    assert entry["busy"] is False
    line = da.advice(busy, 1.0, 0.5, requested="fp32", chosen=torch.float32, what="base weights")
    assert "dtype=fp32 as set" in line


def _entry(**change):
    entry = {"fp32_s": 0.1, "bf16_s": 0.05, "tokens": 16, "cpu": da._where(torch.device("cpu"))}
    return {**entry, "torch": torch.__version__, "busy": False, **change}


# 37.4: every one of these was a traceback (ZeroDivisionError, TypeError) or steered dtype=auto.
POISONED = {
    "zero": (_entry(fp32_s=0), "are not both finite times"),
    "string": (_entry(bf16_s="x"), "are not both finite times"),
    "null": (_entry(fp32_s=None), "are not both finite times"),
    "list": (_entry(bf16_s=[1]), "are not both finite times"),
    "bool": (_entry(fp32_s=True), "are not both finite times"),
    "negative": (_entry(bf16_s=-1.0), "are not both finite times"),
    "nan": (_entry(bf16_s=float("nan")), "are not both finite times"),
    "inf": (_entry(fp32_s=float("inf")), "are not both finite times"),
    "absurd": (_entry(fp32_s=1e300), "are not both finite times"),
    "absurd-ratio": (_entry(fp32_s=10.0, bf16_s=1e-6), "beyond the 1000x"),
    "other-tokens": (_entry(tokens=17), "tokens=17, and this run times 16"),
    "string-tokens": (_entry(tokens="16"), "tokens='16', and this run times 16"),
    "other-cpu": (_entry(cpu="Intel Xeon [amx_bf16] 2 threads"), "it was measured on 'Intel Xeon"),
    "other-torch": (_entry(torch="1.0.0"), "with torch '1.0.0', not here"),
    "busy-not-bool": (_entry(busy="no"), "busy='no' is not true or false"),
    "old-schema": ({"fp32_s": 0.1, "bf16_s": 0.05, "tokens": 16}, "its keys are"),
    "not-a-mapping": ([0.1, 0.05, 16], "the entry is a list, not a mapping"),
}


@pytest.mark.parametrize("case", POISONED)
def test_a_poisoned_cache_entry_is_ignored_with_one_line_and_measured_again(
    case, monkeypatch, tmp_path, caplog
):
    entry, reason = POISONED[case]
    calls = []
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.5, calls))
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    products = step_products([Linear(64, 128, trains=False)], 16)
    key = da._machine_key(products, torch.device("cpu"))
    (tmp_path / da.CACHE_NAME).write_text(json.dumps({key: entry, "another machine": {"x": 1}}))
    speed, cached = da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16)
    assert not cached and calls and speed.bf16_speedup == pytest.approx(2.0)  # measured, not the poison
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"ignoring this machine's entry in the dtype-speed cache {tmp_path / da.CACHE_NAME}" in line
    assert reason in line and line.endswith("measuring again")
    written = json.loads((tmp_path / da.CACHE_NAME).read_text())
    assert da.entry_problem(written[key], tokens=16, where=da._where(torch.device("cpu"))) is None
    assert written["another machine"] == {"x": 1}  # others' entries are left as they were


@pytest.mark.parametrize("text", ["[1, 2]", "3", "null", "{not json"])
def test_a_cache_file_that_is_not_an_object_is_ignored_with_one_line(text, monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.5, []))
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    (tmp_path / da.CACHE_NAME).write_text(text)
    products = step_products([Linear(64, 128, trains=False)], 16)
    _, cached = da.cached_speed(products, torch.device("cpu"), tmp_path, tokens=16)
    assert not cached
    (line,) = [r.getMessage() for r in caplog.records]
    assert (
        line.startswith("ignoring the") and "dtype-speed cache" in line and line.endswith("measuring again")
    )
    assert isinstance(json.loads((tmp_path / da.CACHE_NAME).read_text()), dict)  # replaced by a good one


def test_a_poisoned_cache_does_not_steer_auto(monkeypatch, tmp_path, capsys):
    """The cache's entry rewritten to claim bf16 a million times faster, then to a negative bf16 time: auto
    follows the measurement (bf16 2x slower, then 4x faster), not the file."""
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path))
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(da, "available_gib", lambda device: None)
    cfg = load_config("recipes/configs/smollm2/135M_full.yaml")
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 2.0, []))
    assert da.resolve_dtype("auto", cfg, torch.device("cpu")) == torch.float32  # writes the cache
    path = tmp_path / "cache" / da.CACHE_NAME
    for poison, bf16_per_gflop, expected in ((1e-6, 2.0, torch.float32), (-1.0, 0.25, torch.bfloat16)):
        entries = json.loads(path.read_text())
        path.write_text(json.dumps({k: {**v, "bf16_s": v["fp32_s"] * poison} for k, v in entries.items()}))
        monkeypatch.setattr(da, "time_product", _fake_timer(1.0, bf16_per_gflop, []))
        assert da.resolve_dtype("auto", cfg, torch.device("cpu")) == expected
    err = capsys.readouterr().err
    assert "dtype=auto chose fp32" in err and "dtype=auto chose bf16" in err


def test_probe_tokens_keep_big_models_within_the_budget():
    small = da.probe_tokens([Linear(576, 576, True), Linear(576, 49152, True)])
    big = da.probe_tokens([Linear(4096, 14336, True), Linear(4096, 128256, True)])
    assert da.MIN_TOKENS <= big < small <= da.MAX_TOKENS


@pytest.mark.parametrize(("speedup", "free", "expected"), [
    (4.0, None, torch.bfloat16),  # bf16 faster: auto takes it
    (0.5, 100.0, torch.float32),  # bf16 slower (no AMX, or emulated): fp32
    (0.5, 1.5, torch.bfloat16),  # fp32 faster but its 2 GiB of state do not fit: bf16 (1 GiB)
])  # fmt: skip
def test_auto_takes_the_faster_dtype_that_fits(monkeypatch, tmp_path, capsys, speedup, free, expected):
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path))
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 1.0 / speedup, []))
    monkeypatch.setattr(da, "available_gib", lambda device: free)
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    cfg = load_config("recipes/configs/smollm2/135M_full.yaml")
    assert da.resolve_dtype("auto", cfg, torch.device("cpu")) == expected
    err = capsys.readouterr().err
    name = "bf16" if expected == torch.bfloat16 else "fp32"
    assert f"in {name}\n" in err and f"dtype=auto chose {name}" in err
    assert "fp32 2.00 GiB, bf16 1.00 GiB" in err  # 135M parameters: weights, grads, AdamW's two moments
    faster = "bf16 4.0x faster than fp32" if speedup > 1 else "bf16 2.0x slower than fp32"
    assert faster in err
    if free == 1.5:
        assert "needs more than the 1.5 GiB available" in err


def test_a_set_dtype_is_kept_and_the_advice_says_what_would_be_faster(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path))
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.25, []))
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    cfg = load_config("recipes/configs/smollm2/135M_lora.yaml")
    assert da.resolve_dtype("fp32", cfg, torch.device("cpu")) == torch.float32
    assert "measured here" not in capsys.readouterr().err  # a set dtype's advice waits for the Reporter
    da.say_pending_advice()
    err = capsys.readouterr().err
    assert "base weights: fp32 0.50 GiB, bf16 0.25 GiB" in err  # LoRA: only the base's weights
    assert "dtype=fp32 as set; dtype=bf16 (or auto) would be faster here." in err
    with pytest.raises(ValueError, match="Unknown dtype 'fp8'"):
        da.resolve_dtype("fp8", cfg, torch.device("cpu"))


def test_the_busy_machine_check_follows_the_advice_with_the_same_products(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(da, "time_product", _fake_timer(1.0, 0.25, calls))
    monkeypatch.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    checked = []
    monkeypatch.setattr(da, "say_thread_advice", lambda products, device: checked.append((products, device)))
    da.resolve_dtype("fp32", load_config("recipes/configs/smollm2/135M_lora.yaml"), torch.device("cpu"))
    assert checked == []  # with the advice, when the run is about to train
    da.say_pending_advice()
    assert len(checked) == 1 and checked[0][1] == torch.device("cpu")
    assert {p for p, _ in calls} == set(checked[0][0])  # the products the dtype advice timed
