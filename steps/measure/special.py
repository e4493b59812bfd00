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

16-bit inputs (``--dtype``, issue 47) have classes of their own (SIXTEEN_BIT_CLASSES), drawn in
float32 and rounded to the dtype. bf16 has fp32's exponent range and 8 bits: products near
2^120 and sums that overflow fp32 and bf16 (near 2^127), products near 2^-120 and below fp32's
and bf16's normal range (2^-126), rows spanning 2^120, zeros, inf and NaN. fp16 has 11 bits and
a narrow range: a column at 65504 (its largest) whose sums cross it, products whose sums overflow
to inf (the store rounds past 65520 to inf), subnormal outputs (below 2^-14, down to 2^-24) and
subnormal inputs, zeros, inf and NaN. A 16-bit C is scored against the float64 product of the
16-bit operands, and its NaN / inf pattern against that product *rounded to the dtype*: an
entry whose exact value is beyond the dtype's largest is inf in a correct 16-bit C, as in
cuBLAS's. The relative error is over the entries the rounded product has finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import dtypes

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
    # True: fp32 partial sums pass fp32's largest value where the whole sum may not, so where
    # C is inf depends on the order of the sum, and cuBLAS's own pattern can differ from the
    # rounded float64 product's (bf16's scale 2^63: differs on the H100 at 1024^3, 2026-11-27,
    # and on the H200 at 256^3, 2026-11-28). The contract already asks nothing of a step where
    # cuBLAS differs; this says where the yardstick itself is not expected to match.
    order_dependent: bool = False

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

FP16_MAX = 65504.0


def _fp16_max(rng, M, N, K):
    """Four columns of A at +-65504 (fp16's largest), each met by a row of ones in B: per row of
    A, columns 3 and 4 at s * 65504 (a partial sum of 131008, which only an fp32 accumulator
    holds), column 5 at -s * 65504 (taking it back) and column 6 at t * 65504 with t random: the
    exact sum is +-131008 plus the rest where t = s (inf once stored: past 65520 the store rounds
    to inf) and the rest alone where t = -s (finite). A 16-bit accumulator gives inf everywhere."""
    a, b = _uniform(rng, (M, K)), _uniform(rng, (K, N))
    s, t = (np.where(rng.random(M) < 0.5, -FP16_MAX, FP16_MAX).astype(np.float32) for _ in range(2))
    a[:, 3], a[:, 4], a[:, 5], a[:, 6] = s, s, -s, t
    b[3:7] = 1.0
    return a, b


def _sums_near_fp16_max(rng, M, N, K):
    """Both operands uniform times a scale that puts the sums' spread at 65504 for this K (each
    sum ~ scale^2 sqrt(K / 9)): about a third of C past fp16's largest, inf once stored."""
    scale = float(np.sqrt(3 * FP16_MAX / np.sqrt(K)))
    return _uniform(rng, (M, K), scale), _uniform(rng, (K, N), scale)


def _subnormal_inputs(rng, M, N, K):
    """A in fp16's subnormals (|a| < 2^-14), B near 2^10: products near 2^-6, normal. A kernel
    that flushes subnormal inputs returns zeros."""
    return _uniform(rng, (M, K), 2.0**-15), _uniform(rng, (K, N), 2.0**10)


SIXTEEN_BIT_CLASSES: dict = {
    "bf16": (
        DataClass("scale 2^60", "both operands uniform in [-1, 1) x 2^60: products near 2^120, fp32's and bf16's "
                  "upper range", _scaled(60)),
        DataClass("scale 2^63", "x 2^63: products near 2^126, sums past 2^128 overflow fp32 and bf16 to inf", _scaled(63),
                  order_dependent=True),
        DataClass("scale 2^-60", "x 2^-60: products near 2^-120", _scaled(-60)),
        DataClass("scale 2^-66", "x 2^-66: products near 2^-132, below fp32's and bf16's smallest normal (2^-126)",
                  _scaled(-66)),
        DataClass("rows 2^-60..2^60", "each row of A at its own power of two from 2^-60 to 2^60", _rows),
        DataClass("exact zeros", "half of A zero, two zero rows of A, a zero column of B", _zeros),
        DataClass("inf and NaN", "+inf and -inf in A, NaN in B, a zero where A's +inf meets B", _nonfinite),
    ),
    "fp16": (
        DataClass("fp16 max", "columns of A at +-65504 (fp16's largest) met by ones: partial sums of 131008 an "
                  "fp32 sum holds; half the outputs past 65504 (inf), half cancelling (finite)", _fp16_max),
        DataClass("sums near 65504", "uniform operands scaled so the sums spread to 65504: a third of C past it, "
                  "inf once stored", _sums_near_fp16_max),
        DataClass("scale 2^-10", "x 2^-10: products near 2^-20, outputs in fp16's subnormals (below 2^-14)",
                  _scaled(-10)),
        DataClass("scale 2^-12", "x 2^-12: products near 2^-24, outputs near fp16's smallest subnormal",
                  _scaled(-12)),
        DataClass("subnormal inputs", "A in fp16's subnormals (below 2^-14), B near 2^10: normal products",
                  _subnormal_inputs),
        DataClass("exact zeros", "half of A zero, two zero rows of A, a zero column of B", _zeros),
        DataClass("inf and NaN", "+inf and -inf in A, NaN in B, a zero where A's +inf meets B", _nonfinite),
    ),
}


def classes_for(dtype: str = "fp32") -> tuple:
    """The data classes of a run with `dtype` inputs."""
    return CLASSES if dtype == "fp32" else SIXTEEN_BIT_CLASSES[dtypes.check(dtype)]


def operands(data_class: DataClass, size: int, seed: int, dtype: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    """The class's operands at the run's size: fresh for each seed, the same for every
    implementation of one run (each is scored against cuBLAS on these very values). For 16-bit
    inputs, in dtypes.py's host storage (drawn in float32, rounded to the dtype)."""
    M, N, K = data_class.shape_for(size)
    a, b = data_class.make(np.random.default_rng(seed), M, N, K)
    if dtype == "fp32":
        return a, b
    with np.errstate(over="ignore"):
        return dtypes.from_float32(a, dtype), dtypes.from_float32(b, dtype)


def reference(a: np.ndarray, b: np.ndarray, dtype: str = "fp32") -> np.ndarray:
    """The float64 product: exact products, a sum rounded 2^29 times more finely than fp32's,
    and IEEE's inf / NaN rules (inf * 0 and inf - inf are NaN). For 16-bit operands, of their
    exact float64 values."""
    with np.errstate(invalid="ignore", over="ignore"):
        return dtypes.to_float64(a, dtype) @ dtypes.to_float64(b, dtype)


def rounded_reference(ref: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 product rounded to `dtype` (back in float64): what a correctly rounded 16-bit
    C holds, inf past the dtype's largest value."""
    with np.errstate(over="ignore", invalid="ignore"):
        return dtypes.to_float64(dtypes.from_float32(ref.astype(np.float32), dtype), dtype)


def nonfinite_pattern(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.isnan(x), np.isposinf(x), np.isneginf(x)


def score(out: np.ndarray, ref: np.ndarray, dtype: str = "fp32") -> dict:
    """rel_err: ‖out − ref‖ / ‖ref‖ over the entries where ref is finite (inf when out is NaN or
    inf at any of them); pattern_equal: NaN, +inf and -inf exactly where ref has them. For a
    16-bit `out` (host storage), the pattern and the entries scored are those of ref rounded to
    the dtype (rounded_reference); the error is against ref itself."""
    if dtype != "fp32":
        out = dtypes.to_float64(out, dtype)
        expected = rounded_reference(ref, dtype)
        ref = np.where(np.isfinite(expected), ref, expected)
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


def run_cublas(a: np.ndarray, b: np.ndarray, dtype: str = "fp32") -> np.ndarray:
    """cuBLAS SGEMM, strict fp32 (the harness's cublasGemmEx), C poisoned with NaN first; for
    16-bit operands, cublasGemmEx in that dtype with fp32 compute (C in host storage)."""
    import cupy as cp

    from . import harness

    M, N = a.shape[0], b.shape[1]
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.asarray(dtypes.nan_filled((M, N), dtype))
    cp.cuda.runtime.deviceSynchronize()  # the copies and the fill ran on CuPy's default stream
    gemm = harness.CublasGemm(da, db, dc, dtype=dtype)
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

    def run(self, step, a: np.ndarray, b: np.ndarray, dtype: str = "fp32") -> np.ndarray:
        import schedules

        M, K = a.shape
        N = b.shape[1]
        key = (step.number, M, N, K, dtype)
        if key not in self._libs:
            kw = {} if dtype == "fp32" else {"dtype": dtype}
            self._libs[key] = schedules.build(step, M, N, K, arch=self.arch, **kw)
        tensor = lambda x: dtypes.to_device(self.tvm, x, dtype, self.dev)  # noqa: E731
        c = tensor(dtypes.nan_filled((M, N), dtype))
        self._libs[key]["main"](tensor(a), tensor(b), c)
        self.dev.sync()
        return dtypes.from_device(c, dtype)
