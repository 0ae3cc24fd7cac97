"""GGUF K-quants: ftune's own numpy encoders of llama.cpp's Q4_K, Q5_K and Q6_K blocks.

    data = quantize_k(weights, GGMLType.Q4_K)     # float32 (rows, cols), cols % 256 == 0 -> uint8 bytes

A K-quant super-block holds 256 values. Q4_K and Q5_K split it into 8 sub-blocks of 32 that each
store `value ~ d * sc * q - dmin * m` (q of 4 or 5 bits; sc and m of 6 bits, scaled by the block's
fp16 `d` and `dmin`); Q6_K into 16 sub-blocks of 16 storing `value ~ d * sc * (q - 32)` (q of 6
bits, sc a signed byte). The byte layouts, per block:

    Q4_K  d fp16 | dmin fp16 | scales 12 | qs 128              (144 bytes, 4.5 bits a weight)
    Q5_K  d fp16 | dmin fp16 | scales 12 | qh 32 | qs 128      (176 bytes, 5.5 bits)
    Q6_K  ql 128 | qh 64 | scales 16 (int8) | d fp16           (210 bytes, 6.5625 bits)

How the scales are chosen is llama.cpp's reference quantizer (what `llama-quantize` runs when no
importance matrix is given), re-derived here: Q4_K/Q5_K fit each sub-block's scale and minimum by
weighted least squares over a grid of 21 (Q4_K) or 16 (Q5_K) candidate inverse scales, weights
`rms(sub-block) + |x|`, each candidate measured from the best minimum found so far; Q6_K tries 19 candidate scales, weights `x**2`. Then the sub-block scales are
themselves quantized against the block's largest and the values re-rounded with the stored scales.

Byte equality with llama.cpp is the goal, so the arithmetic is float32 in llama.cpp's order: every
sum is accumulated element by element in sequence (`seq_sum`, never numpy's pairwise sum), products
keep C's left-to-right grouping, rounding is half to even (llama.cpp's `nearest_int` trick does the
same), and fp16 conversions round to nearest even. The work is vectorised across sub-blocks: arrays
are laid out (position in sub-block, sub-block), so a sequential sum is 31 whole-row additions.
"""

from __future__ import annotations

import gguf
import numpy as np

GGMLType = gguf.GGMLQuantizationType

QK_K = 256
BLOCK_BYTES = {GGMLType.Q4_K: 144, GGMLType.Q5_K: 176, GGMLType.Q6_K: 210}
_CHUNK = 1 << 10  # super-blocks encoded at once: 1 MB arrays stay in cache (3x faster than 8 MB ones)

F32 = np.float32


def quantize_k(array: np.ndarray, qtype: GGMLType) -> np.ndarray:
    """`array` (float32, rows of whole 256-value blocks) as llama.cpp's `qtype` bytes, one row a row.

    Args:
        array: float32 values, shape (..., cols) with cols % 256 == 0.
        qtype: Q4_K, Q5_K or Q6_K.

    Returns:
        uint8 array of shape (..., cols // 256 * block bytes), what GGUFWriter stores.
    """
    values = np.ascontiguousarray(array, dtype=F32)
    assert values.shape[-1] % QK_K == 0, (values.shape, qtype)  # callers fall back first (export_types)
    encode = {GGMLType.Q4_K: _q4_k, GGMLType.Q5_K: _q5_k, GGMLType.Q6_K: q6_k}[qtype]
    blocks = values.reshape(-1, QK_K)
    out = np.empty((len(blocks), BLOCK_BYTES[qtype]), dtype=np.uint8)
    for start in range(0, len(blocks), _CHUNK):
        out[start : start + _CHUNK] = encode(blocks[start : start + _CHUNK])
    return out.reshape(*values.shape[:-1], values.shape[-1] // QK_K * BLOCK_BYTES[qtype])


def seq_sum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0 in sequence, in float32: C's `for (i...) s += a[i]`, vectorised over axis 1."""
    total = a[0].copy()
    for row in a[1:]:
        total += row
    return total


def rint(a: np.ndarray) -> np.ndarray:
    """llama.cpp's `nearest_int`: round half to even, as an int32."""
    return np.rint(a).astype(np.int32)


def levels_in(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """`nearest_int` clamped to [lo, hi], kept in float32 (exact: small integers) for the sums."""
    return np.clip(np.rint(a), lo, hi)


def fp16(a: np.ndarray) -> np.ndarray:
    """Round float32 to fp16 (nearest even) and back: the value llama.cpp stores and reads."""
    return a.astype(np.float16).astype(F32)


def _fit_scale_min(x: np.ndarray, nmax: int, rmin: float, nstep: int) -> tuple[np.ndarray, ...]:
    """Scale, minimum and levels of each column of `x` (32, n): llama.cpp's `make_qkx2_quants`.

    The levels `q` in [0, nmax] approximate `x ~ scale * q - min_`; candidate inverse scales
    `(rmin + 0.1 * step + nmax) / (max - min)` are each refitted by weighted least squares and the one
    with the smallest weighted squared error is kept; `min` is the best one so far (C updates it in
    place); with a fixed minimum 13 of the 16 probe rows of the goldens came out different.

    Returns:
        scale (n,), the subtracted minimum (n,) (>= 0) and the levels (32, n) (float32 integers).
    """
    sum_x2 = seq_sum(x * x)
    av_x = np.sqrt(sum_x2 / F32(32))
    w = av_x + np.abs(x)  # (32, n)
    lo = first_lo = np.minimum(x.min(axis=0), F32(0))
    hi = x.max(axis=0)
    flat = hi == lo
    span = np.where(flat, F32(1), hi - lo)
    sum_w = seq_sum(w)
    sum_x = seq_sum(w * x)
    shifted = x - lo
    iscale = F32(nmax) / span
    scale = F32(1) / iscale
    levels = levels_in(iscale * shifted, 0, nmax)
    diff = scale * levels + lo - x
    best = seq_sum(w * (diff * diff))
    lf, wl, tmp = (np.empty_like(x) for _ in range(3))  # reused buffers: the loop runs nstep + 1 times
    with np.errstate(divide="ignore", invalid="ignore"):
        for step in range(nstep + 1):
            # llama.cpp refits `min` in place: later candidates start from the best minimum so far
            iscale = (F32(rmin) + F32(0.1) * F32(step) + F32(nmax)) / np.where(flat, F32(1), hi - lo)
            np.subtract(x, lo, out=shifted)
            np.clip(np.rint(np.multiply(iscale, shifted, out=lf), out=lf), 0, nmax, out=lf)
            np.multiply(w, lf, out=wl)
            sum_l = seq_sum(wl)
            sum_l2 = seq_sum(np.multiply(wl, lf, out=tmp))
            sum_xl = seq_sum(np.multiply(wl, x, out=tmp))
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = this_min > 0  # a positive offset is not representable: refit with min 0
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            this_min = np.where(positive, F32(0), this_min)
            np.multiply(this_scale, lf, out=tmp)  # diff = this_scale * l + this_min - x, as C groups it
            tmp += this_min
            tmp -= x
            tmp *= tmp
            tmp *= w  # w * diff**2
            error = seq_sum(tmp)
            better = (det > 0) & (error < best)
            np.copyto(levels, lf, where=better)
            best = np.where(better, error, best)
            scale = np.where(better, this_scale, scale)
            lo = np.where(better, this_min, lo)
    levels = np.where(flat, F32(0), levels)  # llama.cpp returns at once for a constant sub-block
    scale = np.where(flat, F32(0), scale)
    return scale, -np.where(flat, first_lo, lo), levels


def _scale_codes(values: np.ndarray, largest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """6-bit codes of per-sub-block `values` (8, n) against the block's `largest` (n,), and fp16 `d`."""
    with np.errstate(divide="ignore"):
        inverse = np.where(largest > 0, F32(63) / largest, F32(0))
    codes = np.minimum(63, rint(inverse * values) & 0xFF)  # C stores the int in a uint8, then caps
    return codes, fp16(largest / F32(63))


def _k_block(blocks: np.ndarray, nmax: int, rmin: float, nstep: int) -> tuple[np.ndarray, ...]:
    """The shared Q4_K/Q5_K work on super-blocks (n, 256): d, dmin, 12 scale bytes, levels (n, 256)."""
    n = len(blocks)
    x = np.ascontiguousarray(blocks.reshape(n * 8, 32).T)  # (32, n*8): one column a sub-block
    scale, mins, levels = _fit_scale_min(x, nmax, rmin, nstep)
    scale, mins = scale.reshape(n, 8), mins.reshape(n, 8)
    max_scale = np.maximum(scale.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    ls, d = _scale_codes(scale.T, max_scale)  # (8, n)
    lm, dmin = _scale_codes(mins.T, max_min)
    packed = np.zeros((12, n), dtype=np.int32)
    packed[0:4] = ls[0:4] | ((ls[4:8] >> 4) << 6)
    packed[4:8] = lm[0:4] | ((lm[4:8] >> 4) << 6)
    packed[8:12] = (ls[4:8] & 0xF) | ((lm[4:8] & 0xF) << 4)
    # Re-round every value with the scales as stored (sub-blocks whose scale rounds to 0 keep the fit's).
    sub_d = (d[None, :] * ls.astype(F32)).T.reshape(1, n * 8)  # (1, n*8)
    sub_m = (dmin[None, :] * lm.astype(F32)).T.reshape(1, n * 8)
    with np.errstate(divide="ignore", invalid="ignore"):
        again = levels_in((x + sub_m) / sub_d, 0, nmax)
    levels = np.where(sub_d != 0, again, levels)
    levels = levels.T.astype(np.int32).reshape(n, 256)
    head = np.concatenate([f16_bytes(d), f16_bytes(dmin), packed.T.astype(np.uint8)], axis=1)
    return head, levels


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    head, levels = _k_block(blocks, nmax=15, rmin=-1.0, nstep=20)
    pairs = levels.reshape(-1, 4, 2, 32)  # 64-value chunks: low nibble the first 32, high the next
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([head, qs.astype(np.uint8)], axis=1)


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    head, levels = _k_block(blocks, nmax=31, rmin=-0.5, nstep=15)
    pairs = levels.reshape(-1, 4, 2, 32)
    qs = ((pairs[:, :, 0] & 0xF) | ((pairs[:, :, 1] & 0xF) << 4)).reshape(-1, 128)
    shifts = 2 * np.arange(4).reshape(1, 4, 1)  # chunk k puts its fifth bits at bits 2k and 2k + 1
    high = ((pairs[:, :, 0] >> 4) << shifts) | ((pairs[:, :, 1] >> 4) << (shifts + 1))
    qh = np.bitwise_or.reduce(high, axis=1)  # (n, 32)
    return np.concatenate([head, qh.astype(np.uint8), qs.astype(np.uint8)], axis=1)


def fit_symmetric(
    x: np.ndarray, w: np.ndarray | None = None, nmax: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """Scale and levels (in [0, 2 * nmax), nmax is zero) of each column of `x` (k, n): `make_qx_quants`
    with weights `w` (default x**2, as without an importance matrix), trying inverse scales
    -(nmax + 0.1 * k) / max for k in -9..9."""
    n = x.shape[1]
    amax_at = np.abs(x).argmax(axis=0)  # the first largest |x|, as C's strict `>` scan finds
    peak = x[amax_at, np.arange(n)]
    zero = np.abs(peak) < F32(1e-15)
    peak = np.where(zero, F32(1), peak)
    w = x * x if w is None else w
    wx = w * x

    def trial(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        q = levels_in(iscale * x, -nmax, nmax - 1)
        return q, seq_sum(wx * q), seq_sum(w * q * q)

    levels, sumlx, suml2 = trial(F32(-nmax) / peak)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0))
        best = scale * sumlx
        for k in [*range(-9, 0), *range(1, 10)]:
            q, sumlx, suml2 = trial(-(F32(nmax) + F32(0.1) * F32(k)) / peak)
            better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            levels = np.where(better, q, levels)
            scale = np.where(better, sumlx / suml2, scale)
            best = np.where(better, scale * sumlx, best)
    return np.where(zero, F32(0), scale), np.where(zero, F32(0), levels + nmax)


def q6_k(blocks: np.ndarray, importance: np.ndarray | None = None) -> np.ndarray:
    """Q6_K bytes of super-blocks (n, 256); `importance` (n, 256): an importance matrix's weights."""
    n = len(blocks)
    x = np.ascontiguousarray(blocks.reshape(n * 16, 16).T)  # (16, n*16)
    w = None if importance is None else np.ascontiguousarray(importance.reshape(n * 16, 16).T)
    scale, levels = fit_symmetric(x, w)
    scale = scale.reshape(n, 16)
    first_max = np.abs(scale).argmax(axis=1)
    max_scale = scale[np.arange(n), first_max]
    empty = np.abs(max_scale) < F32(1e-15)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(empty, F32(0), F32(-128) / np.where(empty, F32(1), max_scale))
        d = fp16(np.where(empty, F32(0), F32(1) / iscale))
    codes = np.minimum(127, rint(iscale[:, None] * scale))  # (n, 16), within [-128, 127]
    sub_d = (d[:, None] * codes.astype(F32)).reshape(1, n * 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        again = levels_in(x / sub_d, -32, 31) + 32
    levels = np.where(sub_d != 0, again, levels).T.astype(np.int32).reshape(n, 2, 4, 32)  # 128-value halves
    a, b, c, e = (levels[:, :, i] for i in range(4))
    ql = np.concatenate([(a & 0xF) | ((c & 0xF) << 4), (b & 0xF) | ((e & 0xF) << 4)], axis=2)
    qh = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6)
    out = np.concatenate(
        [
            ql.reshape(n, 128).astype(np.uint8),
            qh.reshape(n, 64).astype(np.uint8),
            codes.astype(np.int8).view(np.uint8),
            f16_bytes(d),
        ],
        axis=1,
    )
    out[empty] = 0  # llama.cpp zeroes a block whose values are all (near) zero
    return out


def f16_bytes(values: np.ndarray) -> np.ndarray:
    """(n,) float32 -> (n, 2) little-endian fp16 bytes."""
    return values.astype("<f2").view(np.uint8).reshape(-1, 2)
