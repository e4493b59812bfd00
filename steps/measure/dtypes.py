"""The inputs' dtype as an axis of the measurements (issue 47): fp32, fp16, bf16.

No TVM, no GPU: how a 16-bit operand is held on the host, converted exactly to float64 for the
reference, and what a 16-bit result is held to.

- **Host storage.** fp32 and fp16 are numpy's float32 and float16. numpy has no bfloat16, so a
  bf16 operand is carried as its bit patterns in a uint16 array (``ml_dtypes`` is not needed,
  here or on the GPU machine): ``tvm.runtime.Tensor.copyfrom`` takes those bytes for a
  ``bfloat16`` tensor, and a bf16 output is read back through a ``uint16`` view of it.
- **Exact conversion.** A bf16 value is the top half of the float32 of the same value, so
  ``bits << 16`` viewed as float32 is exact, and float32 -> float64 is exact; fp16 -> float64 is
  exact in numpy. The float64 reference is the product of the very 16-bit inputs the kernel
  read.
- **Tolerance** (derived in docs/sixteen-bit.md): a 16-bit C carries its store's rounding, at
  most the unit roundoff u per entry (bf16 2^-8, fp16 2^-11), so at most u in the relative
  Frobenius norm (typically ~0.4u); the products of two 16-bit values are exact in fp32, and
  the fp32 sum is given ACCUMULATION_ALLOWANCE. TOLERANCE = u + allowance, rounded up.
"""

from __future__ import annotations

import numpy as np

from schedules.config import DTYPES

NAMES = tuple(DTYPES)  # ("fp32", "fp16", "bf16")
SIXTEEN_BIT = tuple(d for d in NAMES if d != "fp32")

# Unit roundoff of round-to-nearest: 2^-p for p significand bits (the implicit one included).
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
# What the fp32 accumulation may add to a 16-bit result's error, relative: 100x the fp32 steps'
# whole tolerance (1e-5), and above K * 2^-25, the drift of an accumulator that truncates (as
# tensor cores' adders may) instead of rounding, for K up to 2^15 additions into one sum.
ACCUMULATION_ALLOWANCE = 1e-3
# The bound a 16-bit kernel's relative Frobenius error against float64 is held to (NaN never
# passes): u + ACCUMULATION_ALLOWANCE, rounded up (bf16 4.9e-3 -> 5e-3, fp16 1.49e-3 -> 1.5e-3).
TOLERANCE = {"fp16": 1.5e-3, "bf16": 5e-3}

STORAGE = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}  # numpy dtype on the host
BF16_NAN = 0x7FC0


def check(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(NAMES)}")
    return dtype


def tvm_dtype(dtype: str) -> str:
    """'bf16' -> 'bfloat16': the dtype TVM's tensors and kernels are declared with."""
    return DTYPES[check(dtype)]


def bf16_bits(x) -> np.ndarray:
    """float32 values -> bf16 bit patterns (uint16), rounded to nearest, ties to even; NaN stays
    a (quiet) NaN, ±inf stays ±inf, a value past bf16's largest finite one rounds to inf."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(BF16_NAN) | ((bits >> 16).astype(np.uint16) & np.uint16(0x8000)), rounded)


def bf16_to_float32(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def from_float32(x, dtype: str) -> np.ndarray:
    """float32 values in the host storage of `dtype`, rounded to nearest (even)."""
    check(dtype)
    if dtype == "bf16":
        return bf16_bits(x)
    return np.asarray(x, dtype=np.float32).astype(STORAGE[dtype])


def to_float64(array, dtype: str) -> np.ndarray:
    """Host storage of `dtype` -> float64, exactly (every fp32, fp16 and bf16 value is a double)."""
    check(dtype)
    if dtype == "bf16":
        return bf16_to_float32(array).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def random_operands(M: int, N: int, K: int, rng: np.random.Generator, dtype: str = "fp32"):
    """A [M, K], B [K, N]: uniform in [-1, 1), drawn in float32 and rounded to `dtype`."""
    a = rng.uniform(-1.0, 1.0, size=(M, K)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=(K, N)).astype(np.float32)
    if dtype == "fp32":
        return a, b
    return from_float32(a, dtype), from_float32(b, dtype)


def reference(a, b, dtype: str = "fp32") -> np.ndarray:
    """The float64 product of the operands as the kernel reads them."""
    return to_float64(a, dtype) @ to_float64(b, dtype)


def nan_filled(shape, dtype: str = "fp32") -> np.ndarray:
    """An output poisoned with NaN, in the host storage of `dtype`."""
    if check(dtype) == "bf16":
        return np.full(shape, BF16_NAN, dtype=np.uint16)
    return np.full(shape, np.nan, dtype=STORAGE[dtype])


def zeros(shape, dtype: str = "fp32") -> np.ndarray:
    return np.zeros(shape, dtype=STORAGE[check(dtype)])


def to_device(tvm, array: np.ndarray, dtype: str, dev):
    """A host array (storage of `dtype`) as a TVM tensor of `dtype` on `dev`."""
    return tvm.runtime.empty(array.shape, tvm_dtype(dtype), dev).copyfrom(np.ascontiguousarray(array))


def from_device(tensor, dtype: str) -> np.ndarray:
    """A TVM tensor of `dtype` back in the host storage (bf16 through a uint16 view: no ml_dtypes)."""
    if check(dtype) == "bf16":
        return tensor._create_view(tuple(tensor.shape), "uint16").numpy()
    return tensor.numpy()


def tolerance(dtype: str) -> float:
    """The relative error a 16-bit result is held to (TOLERANCE); fp32's is the step's own."""
    return TOLERANCE[check(dtype)]
