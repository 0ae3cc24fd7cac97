"""Which dtype is faster for this model on this machine: measured once, cached, said before the first step.

Whether bf16 beats fp32 on a CPU depends on the CPU, not on its flags alone: without native bf16
(AVX2 only) PyTorch emulates it and a product is tens to hundreds of times slower; with avx512_bf16
but no AMX, still slower than fp32; with AMX, several times faster. So the run measures it: the
matrix products of one step of *this* model (each distinct shape once, ``ftune.runtime.matmul_speed``)
in fp32 and in bf16, a second or less, cached per machine, torch version, thread count and model
shape under ``$FTUNE_HOME/cache/``. The run says which is faster here and by how much, and what the
weights (and, for a full fine-tune, gradients and AdamW state) cost in each; ``dtype=auto`` takes the
faster one whose cost fits in the memory available now.

When the dtype is set, the measurement waits until the run is about to train (the ``Reporter`` asks
for it, :func:`say_pending_advice`): a refusal of a missing checkpoint folder, a bad data file or an
output path never waits for it. A measurement made while the machine was busy is cached too, marked
so (its line says it), and reused while the machine stays busy; the first start on an idle machine
measures again and replaces it. A cache entry is read only if it is well formed (its CPU, torch
version and tokens are this run's, its times finite and plausible): anything else is ignored with
one warning and measured again. On a busy CPU the same products are then timed at each thread count
(``ftune.training.run.thread_advice``), and the run says which count is fastest now.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ftune.checkpointing.model_build import sized_line
from ftune.config import Config, instantiate
from ftune.config.loading import ftune_home
from ftune.runtime.device import get_dtype
from ftune.runtime.hardware import cpu_flags, cpu_model, dtype_name, native_bf16, startup_message
from ftune.runtime.matmul_speed import Linear, Product, model_linears, step_products, time_product
from ftune.runtime.rank import is_rank_zero
from ftune.training.run.thread_advice import say_thread_advice

logger = logging.getLogger(__name__)

# The timed products: one of each distinct shape of a step, on as many tokens as these FLOPs allow
# (about 0.1 s in fp32 on a 2-core CPU), within the bounds: enough rows for the kernels' steady rate.
PROBE_FLOPS = 30 * 10**9
MIN_TOKENS, MAX_TOKENS = 16, 512
# A bf16 product this many times slower than fp32 stops the measurement (emulated bf16 on AVX2 would
# take minutes); the ratio of the products timed so far is the answer.
SLOW_STOP = 8.0
# Not matmul_speed.json, the file of ftune versions whose entries had fewer keys: they would raise reading these.
CACHE_NAME = "dtype_speed.json"
# A CPU measurement is cached only when the 1-minute load was below this share of the cores: other
# processes' work makes matrix products slower by an amount that changes with every run.
BUSY_LOAD = 0.5
# A cached entry's times must lie in this range (seconds) and its bf16/fp32 ratio within MAX_RATIO either
# way (emulated bf16 is a few hundred times slower at most): anything else is not a measurement.
MIN_S, MAX_S, MAX_RATIO = 1e-7, 1e5, 1e3
ENTRY_KEYS = ("fp32_s", "bf16_s", "tokens", "cpu", "torch", "busy")


@dataclass(frozen=True)
class DtypeSpeed:
    """Seconds of one step's matrix products on ``tokens`` tokens in fp32 and bf16 on this machine."""

    fp32_s: float
    bf16_s: float
    tokens: int
    busy: bool = False  # timed while other processes loaded the machine: the figures are rough

    @property
    def bf16_speedup(self) -> float:
        """How many times faster bf16 is than fp32 here (below 1: slower)."""
        return self.fp32_s / self.bf16_s


def probe_tokens(linears: list[Linear]) -> int:
    """Tokens for the timed products: as many as :data:`PROBE_FLOPS` allows for one of each distinct
    shape (forward and both gradients), between :data:`MIN_TOKENS` and :data:`MAX_TOKENS`."""
    distinct = {(x.in_features, x.out_features) for x in linears}
    per_token = sum(6 * i * o for i, o in distinct)
    return max(MIN_TOKENS, min(MAX_TOKENS, PROBE_FLOPS // per_token))


def measure_speed(products: list[Product], device: torch.device, *, tokens: int) -> DtypeSpeed:
    """Time each distinct product in fp32 and in bf16, alternating, twice; weight each by its count.

    The best of both rounds counts, so a burst of other work on the machine inflates neither dtype
    alone. Products are timed largest first; once bf16 has taken :data:`SLOW_STOP` times fp32's time
    on the products so far (emulated bf16 would take minutes), the rest of bf16 is that ratio of fp32.
    """
    order = sorted(products, key=lambda p: p.flops // p.count, reverse=True)
    fp32 = [float("inf")] * len(order)
    bf16 = [float("inf")] * len(order)
    timed = len(order)  # products timed in bf16
    for _ in range(2):
        for i, p in enumerate(order):
            fp32[i] = min(fp32[i], time_product(p, torch.float32, device=device, repeats=1))
            if i < timed:
                bf16[i] = min(bf16[i], time_product(p, torch.bfloat16, device=device, repeats=1))
                if sum(bf16[: i + 1]) > SLOW_STOP * sum(fp32[: i + 1]):
                    timed = i + 1
    ratio = sum(bf16[:timed]) / sum(fp32[:timed])
    bf16 = bf16[:timed] + [t * ratio for t in fp32[timed:]]
    counts = [p.count for p in order]
    return DtypeSpeed(
        fp32_s=sum(t * c for t, c in zip(fp32, counts)),
        bf16_s=sum(t * c for t, c in zip(bf16, counts)),
        tokens=tokens,
    )


def _where(device: torch.device) -> str:
    """The processor a measurement belongs to: the GPU's name, or the CPU's model, flags and thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} [{' '.join(sorted(cpu_flags() or []))}] {torch.get_num_threads()} threads"


def _machine_key(products: list[Product], device: torch.device) -> str:
    """What a measurement depends on: the processor, torch, the thread count and the model's shapes."""
    shapes = hashlib.sha256(repr(products).encode()).hexdigest()[:16]
    return f"{_where(device)} | torch {torch.__version__} | {device.type} | shapes {shapes}"


def _seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and MIN_S <= value <= MAX_S


def entry_problem(entry: object, *, tokens: int, where: str) -> str | None:
    """What is wrong with a cache entry for this run (None: it is a measurement this run can use).

    Accepted: a mapping of exactly :data:`ENTRY_KEYS`, ``fp32_s``/``bf16_s`` finite seconds within
    [:data:`MIN_S`, :data:`MAX_S`] whose ratio is within :data:`MAX_RATIO` either way, ``tokens``
    this run's probe size, ``cpu`` and ``torch`` this machine's and this torch's, ``busy`` a bool.
    """
    if not isinstance(entry, dict):
        return f"the entry is a {type(entry).__name__}, not a mapping"
    if sorted(entry) != sorted(ENTRY_KEYS):
        return f"its keys are {sorted(entry)}, not {sorted(ENTRY_KEYS)} (written by another ftune version?)"
    fp32, bf16 = entry["fp32_s"], entry["bf16_s"]
    if not (_seconds(fp32) and _seconds(bf16)):
        return (
            f"fp32_s={fp32!r} and bf16_s={bf16!r} are not both finite times between {MIN_S:g} and {MAX_S:g} s"
        )
    if not 1 / MAX_RATIO <= bf16 / fp32 <= MAX_RATIO:
        return f"bf16_s/fp32_s = {bf16 / fp32:g}, beyond the {MAX_RATIO:g}x a measurement can give"
    if entry["tokens"] != tokens or isinstance(entry["tokens"], bool):
        return f"tokens={entry['tokens']!r}, and this run times {tokens}"
    if entry["cpu"] != where or entry["torch"] != torch.__version__:
        return f"it was measured on {entry['cpu']!r} with torch {entry['torch']!r}, not here with torch {torch.__version__}"
    if not isinstance(entry["busy"], bool):
        return f"busy={entry['busy']!r} is not true or false"
    return None


def _read_entries(path: Path) -> dict:
    """The cache file's entries ({} when it is missing, unreadable or not a JSON object: said once)."""
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        logger.warning("ignoring the unreadable dtype-speed cache %s (%s); measuring again", path, e)
        return {}
    if not isinstance(entries, dict):
        logger.warning(
            "ignoring the dtype-speed cache %s: it holds a JSON %s, not an object of measurements; measuring again",
            path, type(entries).__name__,
        )  # fmt: skip
        return {}
    return entries


def _machine_busy(device: torch.device) -> tuple[bool, str]:
    """Whether other work loads the CPU now (the 1-minute load above :data:`BUSY_LOAD` of the cores), and the figures."""
    if device.type != "cpu":
        return False, ""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: take the machine to be quiet
        return False, ""
    cores = os.cpu_count() or 1
    return load > BUSY_LOAD * cores, f"load {load:.1f} on {cores} cores"


def cached_speed(
    products: list[Product], device: torch.device, cache_dir: Path, *, tokens: int
) -> tuple[DtypeSpeed, bool]:
    """The measured speeds, from ``cache_dir``'s file when this machine measured this model before.

    An entry that does not pass :func:`entry_problem` is ignored with one warning. An entry measured
    on a busy machine is used while the machine is busy, and measured again once it is idle.

    Returns:
        ``(speed, cached)``; a new measurement is written back, marked busy or not (a cache that cannot
        be written is logged and skipped: the run goes on).
    """
    path = cache_dir / CACHE_NAME
    key = _machine_key(products, device)
    entries = _read_entries(path)
    busy, load = _machine_busy(device)
    if key in entries:
        entry = entries[key]
        problem = entry_problem(entry, tokens=tokens, where=_where(device))
        if problem is not None:
            logger.warning(
                "ignoring this machine's entry in the dtype-speed cache %s: %s; measuring again",
                path,
                problem,
            )
        elif busy or not entry["busy"]:  # a busy figure is replaced on the first idle start
            return DtypeSpeed(entry["fp32_s"], entry["bf16_s"], entry["tokens"], entry["busy"]), True
    speed = measure_speed(products, device, tokens=tokens)
    if busy:
        speed = DtypeSpeed(speed.fp32_s, speed.bf16_s, speed.tokens, busy=True)
        logger.warning(
            "the machine was busy while ftune timed fp32 against bf16 (%s): the figures are cached marked busy, "
            "reused while it stays busy, and measured again on the first start on an idle machine", load,
        )  # fmt: skip
    entries[key] = {
        "fp32_s": speed.fp32_s, "bf16_s": speed.bf16_s, "tokens": speed.tokens,
        "cpu": _where(device), "torch": torch.__version__, "busy": speed.busy,
    }  # fmt: skip
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1))
        tmp.replace(path)
    except OSError as e:
        logger.warning("could not write the dtype-speed cache %s (%s); the next run measures again", path, e)
    return speed, False


def state_gib(num_params: int, dtype: torch.dtype, *, full: bool) -> float:
    """GiB of the weights, and for a full fine-tune also their gradients and AdamW's two moments."""
    size = torch.empty((), dtype=dtype).element_size()
    return num_params * size * (4 if full else 1) / 2**30


def available_gib(device: torch.device) -> float | None:
    """Memory free for the run now: CUDA's free memory, or /proc/meminfo's MemAvailable; None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / 2**30
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        return None
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return None


def advice(
    speed: DtypeSpeed, fp32_gib: float, bf16_gib: float, *, requested: str, chosen: torch.dtype, what: str
) -> str:
    """The measured line: which dtype is faster here and by how much, what each costs, and what was chosen."""
    ratio = speed.bf16_speedup
    faster = (
        f"bf16 {ratio:.1f}x faster than fp32" if ratio >= 1 else f"bf16 {1 / ratio:.1f}x slower than fp32"
    )
    name = dtype_name(chosen)
    line = (
        f"measured here, this model's matrix products run {faster} ({speed.fp32_s * 1e3:.0f} vs "
        f"{speed.bf16_s * 1e3:.0f} ms for a step of {speed.tokens} tokens); {what}: fp32 {fp32_gib:.2f} GiB, bf16 {bf16_gib:.2f} GiB. "
    )
    if requested == "auto":
        return line + f"dtype=auto chose {name}."
    best = "bf16" if ratio >= 1 else "fp32"
    if name in ("fp32", "bf16") and name != best:
        return line + f"dtype={name} as set; dtype={best} (or auto) would be faster here."
    return line + f"dtype={name} as set."


def resolve_dtype(name: str, cfg: Config, device: torch.device) -> torch.dtype:
    """The run's dtype: ``name``, or for ``"auto"`` the faster of fp32 and bf16 here that fits.

    Rank zero prints the start-up line (device, threads, dtype) and the measured advice
    (:func:`advice`), and in a distributed run (call it after ``init_distributed``) decides
    ``auto`` for every rank; the other ranks measure nothing. The model is built on the meta
    device from ``cfg.model`` for its shapes (no weights are read); ``cfg`` having a ``peft``
    section means only adapters train. A set dtype needs no measurement to be decided: its advice
    is measured and said by :func:`say_pending_advice` (the ``Reporter`` calls it when the run is
    about to train), so whatever the run refuses before that is refused without waiting for it.

    Args:
        name: the ``dtype`` setting: fp32, bf16, fp16 or auto.
        cfg: the run's config.
        device: the run's device.

    Raises:
        ValueError: for an unknown dtype name.
    """
    fixed = None if name == "auto" else get_dtype(name, device)  # an unknown name fails before measuring
    if not is_rank_zero():  # a set dtype is the same on every rank; "auto" comes from rank zero
        return fixed if fixed is not None else _from_rank_zero(None)
    _pending.clear()
    if fixed is not None:
        print(f"ftune: {_startup_line(device, fixed, cfg)}", file=sys.stderr, flush=True)
        _pending.append(lambda: _decide_and_say(name, fixed, cfg, device))
        return fixed
    return _from_rank_zero(_decide_and_say(name, None, cfg, device, startup=True))


def _startup_line(device: torch.device, dtype: torch.dtype, cfg: Config) -> str:
    """The start-up line, and for a model sized by its checkpoint (no model section) the family and
    sizes its config.json gives: ``running on cpu (...) in fp32; model: smollm2 (30 layers, ...), as
    '.../config.json' says (no model section in the config).``"""
    said = [
        f"{section}: {line}"
        for section, node in getattr(cfg, "sized", {}).items()
        if (line := sized_line(node.checkpoint_dir)) is not None
    ]
    return "; ".join([startup_message(device, dtype), *said]) + ("." if said else "")


# The advice a run with a set dtype has still to say (rank zero, at most one): see say_pending_advice.
_pending: list[Callable[[], object]] = []


def say_pending_advice() -> None:
    """Measure (or read the cache) and say the advice of the run whose set dtype :func:`resolve_dtype`
    returned without it; nothing when there is none (``auto``, another rank, said already)."""
    while _pending:
        _pending.pop()()


def _from_rank_zero(dtype: torch.dtype | None) -> torch.dtype:
    """Rank zero's ``dtype`` on every rank of a distributed run (as it is without one)."""
    decided = [dtype]
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.broadcast_object_list(decided, src=0)
    return decided[0]


def _choose(speed: DtypeSpeed, need: dict[torch.dtype, float], free: float | None) -> tuple[torch.dtype, str]:
    """``auto``: the faster of fp32 and bf16 whose memory ``need`` fits in ``free`` GiB, and a note on why not
    the faster one (``""`` when it is)."""
    order = [torch.bfloat16, torch.float32] if speed.bf16_speedup >= 1 else [torch.float32, torch.bfloat16]
    fitting = [d for d in order if free is None or need[d] <= free]
    if not fitting:
        note = f" (neither fits in the {free:.1f} GiB available now: bf16 is the smaller; expect to run out of memory)"
        return torch.bfloat16, note
    if fitting[0] != order[0]:
        return fitting[0], f" (the faster one needs more than the {free:.1f} GiB available now)"
    return fitting[0], ""


def _decide_and_say(
    name: str, fixed: torch.dtype | None, cfg: Config, device: torch.device, *, startup: bool = False
) -> torch.dtype:
    """Measure (or read the cache), decide ``auto`` (``fixed`` None), print the advice line (after the
    start-up line when ``startup``)."""
    with torch.device("meta"):
        model = instantiate(cfg.model, _path="model")
    full = "peft" not in cfg
    linears = model_linears(model, trains=full)
    tokens = probe_tokens(linears)
    products = step_products(linears, tokens)
    num_params = sum(p.numel() for p in model.parameters())
    del model
    speed, _ = cached_speed(products, device, Path(ftune_home()) / "cache", tokens=tokens)
    need = {d: state_gib(num_params, d, full=full) for d in (torch.float32, torch.bfloat16)}
    dtype, note = (fixed, "") if fixed is not None else _choose(speed, need, available_gib(device))
    what = "weights, gradients and AdamW state" if full else "base weights"
    line = advice(speed, need[torch.float32], need[torch.bfloat16], requested=name, chosen=dtype, what=what)
    lines = [line.removesuffix(".") + note + "."]
    if dtype == torch.bfloat16 and native_bf16(device) is False:
        lines[0] += " This CPU has no native bf16 instructions: PyTorch emulates bf16."
    if speed.busy:
        lines[0] += " (Timed while the machine was busy: rough figures, timed again on the first idle start.)"
    if startup:
        lines.insert(0, _startup_line(device, dtype, cfg))
    for text in lines:
        print(f"ftune: {text}", file=sys.stderr, flush=True)
    say_thread_advice(products, device)  # on a busy CPU: which thread count is fastest now
    return dtype
