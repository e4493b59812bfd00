"""fp32's special values: the data classes of ``python -m steps.special``, and how one output is
scored against float64.

Each class is a pair of operands that probes one corner of fp32, at the run's square size
unless the class names its own shape:

- ``scale 2^e``: both operands uniform in [-1, 1) times 2^e, so the products sit near 2^(2e):
  from 2^120 down to 2^-140, below the smallest normal fp32 (2^-126), where fp32 keeps
  only a subnormal's few bits and a kernel that flushes subnormals returns zeros;
- ``rows 2^-60..2^60``: every row of A at its own power of two, one matrix spanning 2^120;
- ``exact zeros``: half of A's entries zero, two rows of A and a column of B all zero;
- ``fp32 max``: a column of A at +-3.4e38, the largest fp32, beside ordinary values;
- ``inf and NaN``: +inf and -inf in A, NaN in B, and where A's infinities meet B, values that
  are exact in TF32 (1/8ths, which a 3xTF32 split leaves without a small half) and a zero;
- ``K 2^16``, ``long K``: 16 x 16 x 2^16 and 2^20, one long sum per output;
- ``tiny x huge`` (a limit, not held to the bar): A near 2^-120, B near 2^100, products near
  2^-20. fp32 keeps A's 24 bits; TF32's subnormals stop at 2^-136, so a 3xTF32 split keeps
  about 2^-120 / 2^-136 = 2^16 of A's precision: a limit of the format, measured.

``score`` compares an output with the float64 product of the same fp32 operands: the relative
error over the entries float64 gives as finite (a NaN or inf there makes it inf), and whether
the positions of NaN, +inf and -inf are float64's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

FP32_MAX = float(np.finfo(np.float32).max)
LONG_K_SHAPE = (16, 16, 1 << 20)
MEDIUM_K_SHAPE = (16, 16, 1 << 16)


@dataclass(frozen=True)
class DataClass:
    name: str
    what: str
    make: Callable  # (rng, M, N, K) -> (A, B), fp32
    shape: tuple[int, int, int] | None = None  # None: the run's square size
    held_to_bar: bool = True  # False: a limit the suite measures and reports, not a bar

    def shape_for(self, size: int) -> tuple[int, int, int]:
        return self.shape if self.shape is not None else (size, size, size)


def _uniform(rng, shape, scale=1.0) -> np.ndarray:
    return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32)


def _scaled(e: int) -> Callable:
    def make(rng, M, N, K):
        return _uniform(rng, (M, K), 2.0**e), _uniform(rng, (K, N), 2.0**e)
    return make


def _rows(rng, M, N, K):
    a = _uniform(rng, (M, K)) * (2.0 ** rng.integers(-60, 61, size=(M, 1)))
    return a.astype(np.float32), _uniform(rng, (K, N))


def _zeros(rng, M, N, K):
    a, b = _uniform(rng, (M, K)), _uniform(rng, (K, N))
    a[rng.random((M, K)) < 0.5] = 0.0
    a[[1, M // 2]] = 0.0
    b[:, N // 3] = 0.0
    return a, b


def _fp32_max(rng, M, N, K):
    a, b = _uniform(rng, (M, K)), _uniform(rng, (K, N))
    a[:, 3] = np.where(rng.random(M) < 0.5, -FP32_MAX, FP32_MAX).astype(np.float32)
    return a, b


# Where the infinities and the NaN go (row, column), kept inside the smallest size the suite takes.
POS_INF, NEG_INF, NAN_AT = (5, 7), (9, 2), (4, 11)
ZERO_AT = (POS_INF[1], 13)  # B's entry that meets A's +inf: inf * 0 = NaN, as in fp32


def _nonfinite(rng, M, N, K):
    a, b = _uniform(rng, (M, K)), _uniform(rng, (K, N))
    a[POS_INF], a[NEG_INF], b[NAN_AT] = np.inf, -np.inf, np.nan
    # A's +inf meets row 7 of B: make it TF32-exact (multiples of 1/8), with one exact zero.
    b[POS_INF[1]] = np.round(b[POS_INF[1]] * 8) / 8
    b[ZERO_AT] = 0.0
    return a, b


def _tiny_huge(rng, M, N, K):
    return _uniform(rng, (M, K), 2.0**-120), _uniform(rng, (K, N), 2.0**100)


SCALES = (60, 30, 0, -30, -60, -64, -70)
CLASSES: tuple[DataClass, ...] = tuple(
    DataClass(f"scale 2^{e}", f"both operands uniform in [-1, 1) x 2^{e}: products near 2^{2 * e}", _scaled(e))
    for e in SCALES
) + (
    DataClass("rows 2^-60..2^60", "each row of A at its own power of two from 2^-60 to 2^60", _rows),
    DataClass("exact zeros", "half of A zero, two zero rows of A, a zero column of B", _zeros),
    DataClass("fp32 max", "a column of A at +-3.4e38 (fp32's largest), the rest uniform", _fp32_max),
    DataClass("inf and NaN", "+inf and -inf in A, NaN in B; TF32-exact values and a zero where A's +inf meets B",
              _nonfinite),
    DataClass("K 2^16", "16 x 16 x 2^16, uniform: a long sum per output", _scaled(0), shape=MEDIUM_K_SHAPE),
    DataClass("long K", "16 x 16 x 2^20, uniform: one long sum per output", _scaled(0), shape=LONG_K_SHAPE),
    DataClass("tiny x huge", "A near 2^-120, B near 2^100: products near 2^-20 from operands near fp32's "
              "lower end (a limit of TF32's range, measured, not held to the bar)", _tiny_huge, held_to_bar=False),
)
BY_NAME = {c.name: c for c in CLASSES}


def operands(data_class: DataClass, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The class's operands at the run's size: fresh for each seed, the same for every
    implementation of one run (each is scored against cuBLAS on these very values)."""
    M, N, K = data_class.shape_for(size)
    return data_class.make(np.random.default_rng(seed), M, N, K)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The float64 product: exact products, a sum rounded 2^29 times more finely than fp32's,
    and IEEE's inf / NaN rules (inf * 0 and inf - inf are NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return a.astype(np.float64) @ b.astype(np.float64)


def nonfinite_pattern(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.isnan(x), np.isposinf(x), np.isneginf(x)


def score(out: np.ndarray, ref: np.ndarray) -> dict:
    """rel_err: ‖out − ref‖ / ‖ref‖ over the entries where ref is finite (inf when out is NaN or
    inf at any of them); pattern_equal: NaN, +inf and -inf exactly where ref has them."""
    finite = np.isfinite(ref)
    pattern_equal = all(np.array_equal(x, y) for x, y in zip(nonfinite_pattern(out), nonfinite_pattern(ref)))
    o, r = out[finite].astype(np.float64), ref[finite]
    if not np.all(np.isfinite(o)):
        rel_err = float("inf")
    else:
        norm = float(np.linalg.norm(r))
        rel_err = float(np.linalg.norm(o - r)) / norm if norm > 0 else float(np.linalg.norm(o))
    return {"rel_err": rel_err, "pattern_equal": bool(pattern_equal),
            "nonfinite": int(np.count_nonzero(~np.isfinite(out))), "ref_nonfinite": int(np.count_nonzero(~finite))}


def run_cublas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """cuBLAS SGEMM, strict fp32 (the harness's cublasGemmEx), C poisoned with NaN first."""
    import cupy as cp

    from . import harness

    M, N = a.shape[0], b.shape[1]
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.full((M, N), cp.nan, dtype=cp.float32)
    cp.cuda.runtime.deviceSynchronize()  # the copies and the fill ran on CuPy's default stream
    gemm = harness.CublasGemm(da, db, dc)
    try:
        gemm()
        gemm.stream.synchronize()
    finally:
        gemm.close()
    return cp.asnumpy(dc)


class StepKernels:
    """Each step built once per shape and loaded on device 0; ``run`` is one call on the
    operands given, C poisoned with NaN."""

    def __init__(self, arch: str):
        import tvm

        self.tvm, self.arch, self.dev = tvm, arch, tvm.cuda(0)
        self._libs: dict = {}

    def run(self, step, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        import schedules

        M, K = a.shape
        N = b.shape[1]
        key = (step.number, M, N, K)
        if key not in self._libs:
            self._libs[key] = schedules.build(step, M, N, K, arch=self.arch)
        tensor = lambda x: self.tvm.runtime.tensor(x, self.dev)  # noqa: E731
        c = tensor(np.full((M, N), np.nan, dtype=np.float32))
        self._libs[key]["main"](tensor(a), tensor(b), c)
        self.dev.sync()
        return c.numpy()
