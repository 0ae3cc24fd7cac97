"""GGUF quantization with an importance matrix: llama.cpp's weighted encoders of the block types.

    data = quantize_weighted(weights, GGMLType.Q4_K, importance)   # (rows, cols) float32, importance (cols,)

An importance matrix gives each input column of a weight matrix a weight: the mean square of the
activation it multiplies (`imatrix`). With it llama.cpp's quantizer (what `llama-quantize --imatrix`
runs) fits each block's scale to minimise the *weighted* squared error, so the columns that carry the
largest inputs are the ones kept most exactly. Per block type (re-derived from llama.cpp's
`quantize_row_*_impl`; the bytes are the same layouts as without one, `kquants`):

- Q4_K, Q5_K: each value's weight is `importance * sqrt(sigma2 + x**2)` (`sigma2` twice the block's
  mean square); each sub-block of 32 fits scale and minimum by weighted least squares over 37
  candidate inverse scales (`_fit_scale_min`, llama.cpp's `make_qkx3_quants`); the 8 scales and the 8
  minimums are then coded in 6 bits against a block scale that is itself fitted, weighted by the
  sub-blocks' summed weights, and refined one code at a time (`_fit_codes`, `make_qp_quants`).
- Q6_K: the importance itself weights `make_qx_quants` (`kquants.fit_symmetric`).
- Q4_0, Q5_0 (symmetric) and Q4_1, Q5_1 (with a minimum), blocks of 32: weights
  `importance * sqrt(sigma2 + x**2)`, `sigma2` the row's mean square; `fit_symmetric` and
  `_fit_scale_min`; the scale is stored as fitted (no second rounding pass).
- Q8_0 ignores the importance (llama.cpp too): `export_types.encode` uses the plain encoder.

The float32 arithmetic follows llama.cpp's order as `kquants` does (sequential sums, C's grouping,
round half to even), for byte equality with `llama_model_quantize` given the same importance.
"""

from __future__ import annotations

import gguf
import numpy as np

from ftune.checkpointing.gguf.kquants import (
    QK_K,
    f16_bytes,
    fit_symmetric,
    fp16,
    levels_in,
    q6_k,
    seq_sum,
)

GGMLType = gguf.GGMLQuantizationType
F32 = np.float32
WEIGHTED = (
    GGMLType.Q4_K,
    GGMLType.Q5_K,
    GGMLType.Q6_K,
    GGMLType.Q4_0,
    GGMLType.Q4_1,
    GGMLType.Q5_0,
    GGMLType.Q5_1,
)
_ROWS_AT_ONCE = 256  # rows encoded at once (arrays of a few MB)


def quantize_weighted(array: np.ndarray, qtype: GGMLType, importance: np.ndarray) -> np.ndarray:
    """`array` (float32 (rows, cols), or (experts, rows, cols)) as llama.cpp's `qtype` bytes with `importance`.

    Args:
        array: the matrix, torch shape; cols a whole number of `qtype` blocks.
        qtype: one of `WEIGHTED`.
        importance: float32 (cols,) for a matrix, (experts, cols) for stacked experts.

    Returns:
        uint8 array (..., rows, bytes of a row), what GGUFWriter stores.
    """
    values = np.ascontiguousarray(array, dtype=F32)
    importance = np.asarray(importance, dtype=F32)
    if values.ndim == 3:  # stacked experts: each its own importance row (llama.cpp's imatrix_for_row)
        return np.stack([quantize_weighted(v, qtype, w) for v, w in zip(values, importance)])
    rows, cols = values.shape
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert cols % block == 0 and importance.shape == (cols,), (values.shape, importance.shape, qtype)
    out = np.empty((rows, cols // block * size), dtype=np.uint8)
    for start in range(0, rows, _ROWS_AT_ONCE):
        chunk = values[start : start + _ROWS_AT_ONCE]
        out[start : start + len(chunk)] = _encode(chunk, qtype, importance).reshape(len(chunk), -1)
    return out


def _encode(rows: np.ndarray, qtype: GGMLType, importance: np.ndarray) -> np.ndarray:
    n, cols = rows.shape
    if qtype == GGMLType.Q6_K:
        return q6_k(rows.reshape(-1, QK_K), np.broadcast_to(importance, rows.shape).reshape(-1, QK_K))
    if qtype in (GGMLType.Q4_K, GGMLType.Q5_K):
        blocks = rows.reshape(-1, QK_K)
        sigma2 = F32(2) * seq_sum(np.ascontiguousarray(blocks.T) ** 2) / F32(QK_K)  # (blocks,)
        return _k_block(blocks, np.broadcast_to(importance, rows.shape).reshape(-1, QK_K), sigma2, qtype)
    sigma2 = seq_sum(np.ascontiguousarray(rows.T) ** 2) / F32(cols)  # (rows,): the row's mean square
    x = np.ascontiguousarray(rows.reshape(-1, 32).T)  # (32, blocks): one column a block
    qw = np.ascontiguousarray(np.broadcast_to(importance, rows.shape).reshape(-1, 32).T)
    w = qw * np.sqrt(np.repeat(sigma2, cols // 32)[None, :] + x * x)
    if qtype in (GGMLType.Q4_0, GGMLType.Q5_0):
        nmax = 8 if qtype == GGMLType.Q4_0 else 16
        scale, levels = fit_symmetric(x, w, nmax)
        head = [f16_bytes(scale)]
    else:
        nmax = 15 if qtype == GGMLType.Q4_1 else 31
        scale, mins, levels = _fit_scale_min(x, w, nmax)
        head = [f16_bytes(scale), f16_bytes(-mins)]
    levels = levels.T.astype(np.int64)  # (blocks, 32)
    qs = (levels[:, :16] & 0xF) | ((levels[:, 16:] & 0xF) << 4)
    if nmax > 15:  # the fifth bits: bit j of qh for value j, bit j + 16 for value j + 16
        high = ((levels >> 4) & 1) << np.arange(32)
        qh = np.bitwise_or.reduce(high, axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)
        head.append(qh)
    return np.concatenate([*head, qs.astype(np.uint8)], axis=1)


def _fit_scale_min(x: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, ...]:
    """`x ~ scale * q - min` per column of `x` (32, n), weighted by `w`: llama.cpp's `make_qkx3_quants`
    (candidate inverse scales `(nmax - 0.9 + 0.05 * k) / (max - min)`, k = 0..36, each refitted by weighted
    least squares; `min` the best so far, as C updates it in place).

    Returns:
        scale (n,), the subtracted minimum (n,) (>= 0), levels (32, n) in [0, nmax] (float32 integers).
    """
    lo = np.minimum(x.min(axis=0), F32(0))
    hi = x.max(axis=0)
    flat = hi <= lo
    sum_w = seq_sum(w)
    sum_x = seq_sum(w * x)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = F32(nmax) / np.where(flat, F32(1), hi - lo)
        scale = F32(1) / iscale
        levels = levels_in(iscale * (x - lo), 0, nmax)
        diff = scale * levels + lo - x
        best = seq_sum(w * (diff * diff))
        for step in range(37):
            iscale = (F32(-0.9) + F32(0.05) * F32(step) + F32(nmax)) / np.where(flat, F32(1), hi - lo)
            lf = levels_in(iscale * (x - lo), 0, nmax)
            wl = w * lf
            sum_l, sum_l2, sum_xl = seq_sum(wl), seq_sum(wl * lf), seq_sum(wl * x)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = this_min > 0  # a positive offset is not representable: refit with min 0
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            this_min = np.where(positive, F32(0), this_min)
            diff = this_scale * lf + this_min - x
            error = seq_sum(w * (diff * diff))
            better = (det > 0) & (error < best) & ~flat
            levels = np.where(better, lf, levels)
            best = np.where(better, error, best)
            scale = np.where(better, this_scale, scale)
            lo = np.where(better, this_min, lo)
    levels = np.where(flat, F32(0), levels)
    return np.where(flat, F32(0), scale), -lo, levels


def _fit_codes(x: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes in [.., nmax] and the scale of each column of `x` (8, n) (the sub-block scales or minimums),
    weighted by `w`: llama.cpp's `make_qp_quants` (9 candidate scales, then 5 passes that move single codes
    while the weighted fit improves)."""
    top = np.maximum(x.max(axis=0), F32(0))
    zero = top < F32(1e-15)
    top = np.where(zero, F32(1), top)
    iscale = F32(nmax) / top
    first = np.rint(iscale * x)
    scale = F32(1) / iscale
    diff = x - scale * first
    best = seq_sum(w * diff * diff)
    for k in (-4, -3, -2, -1, 1, 2, 3, 4):
        trial = (F32(0.1) * F32(k) + F32(nmax)) / top
        diff = x - (F32(1) / trial) * np.minimum(np.rint(trial * x), nmax)
        error = seq_sum(w * diff * diff)
        better = error < best
        best = np.where(better, error, best)
        iscale = np.where(better, trial, iscale)
    codes = np.minimum(np.rint(iscale * x), nmax)
    sumlx, suml2 = seq_sum(w * x * codes), seq_sum(w * codes * codes)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(5):  # a pass that changes nothing changes nothing after it: no early stop needed
            for i in range(len(x)):
                wi, xi, li = w[i], x[i], codes[i]
                slx, sl2 = sumlx - wi * xi * li, suml2 - wi * li * li
                ok = (slx > 0) & (sl2 > 0)
                new = np.minimum(np.rint(xi * sl2 / slx), nmax)
                ok &= new != li
                slx, sl2 = slx + wi * xi * new, sl2 + wi * new * new
                ok &= slx * slx * suml2 > sumlx * sumlx * sl2
                codes[i] = np.where(ok, new, li)
                sumlx, suml2 = np.where(ok, slx, sumlx), np.where(ok, sl2, suml2)
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    codes = np.where(zero, F32(0), codes)
    return codes.astype(np.int64), np.where(zero, F32(0), scale)


def _k_block(blocks: np.ndarray, importance: np.ndarray, sigma2: np.ndarray, qtype: GGMLType) -> np.ndarray:
    """Q4_K / Q5_K bytes of super-blocks (n, 256) with per-value importance (n, 256)."""
    n = len(blocks)
    nmax = 15 if qtype == GGMLType.Q4_K else 31
    x = np.ascontiguousarray(blocks.reshape(n * 8, 32).T)  # (32, n*8): one column a sub-block
    qw = np.ascontiguousarray(importance.reshape(n * 8, 32).T)
    w = qw * np.sqrt(np.repeat(sigma2, 8)[None, :] + x * x)
    scale, mins, levels = _fit_scale_min(x, w, nmax)
    sw = seq_sum(w).reshape(n, 8).T  # (8, n)
    ls, d = _fit_codes(np.ascontiguousarray(scale.reshape(n, 8).T), sw, 63)
    lm, dmin = _fit_codes(np.ascontiguousarray(mins.reshape(n, 8).T), sw, 63)
    ls, lm = ls & 0xFF, lm & 0xFF  # C stores them in uint8
    if qtype == GGMLType.Q5_K:
        ls, lm = np.minimum(63, ls), np.minimum(63, lm)
    packed = np.zeros((12, n), dtype=np.int64)
    packed[0:4] = ls[0:4] | ((ls[4:8] >> 4) << 6)
    packed[4:8] = lm[0:4] | ((lm[4:8] >> 4) << 6)
    packed[8:12] = (ls[4:8] & 0xF) | ((lm[4:8] & 0xF) << 4)
    packed &= 0xFF
    sc = np.concatenate([packed[0:4] & 63, (packed[8:12] & 0xF) | ((packed[0:4] >> 6) << 4)])  # as read back
    m = np.concatenate([packed[4:8] & 63, (packed[8:12] >> 4) | ((packed[4:8] >> 6) << 4)])
    d, dmin = fp16(d), fp16(dmin)
    sub_d = (d[None, :] * sc.astype(F32)).T.reshape(1, n * 8)
    sub_m = (dmin[None, :] * m.astype(F32)).T.reshape(1, n * 8)
    with np.errstate(divide="ignore", invalid="ignore"):
        again = levels_in((x + sub_m) / sub_d, 0, nmax)
    levels = np.where(sub_d != 0, again, levels).T.astype(np.int64).reshape(n, 256)
    head = np.concatenate([f16_bytes(d), f16_bytes(dmin), packed.T.astype(np.uint8)], axis=1)
    pairs = levels.reshape(-1, 4, 2, 32)  # 64-value chunks: low nibble the first 32, high the next
    qs = ((pairs[:, :, 0] & 0xF) | ((pairs[:, :, 1] & 0xF) << 4)).reshape(-1, 128).astype(np.uint8)
    if qtype == GGMLType.Q4_K:
        return np.concatenate([head, qs], axis=1)
    shifts = 2 * np.arange(4).reshape(1, 4, 1)  # chunk k puts its fifth bits at bits 2k and 2k + 1
    high = ((pairs[:, :, 0] >> 4) << shifts) | ((pairs[:, :, 1] >> 4) << (shifts + 1))
    qh = np.bitwise_or.reduce(high, axis=1).astype(np.uint8)
    return np.concatenate([head, qh, qs], axis=1)
