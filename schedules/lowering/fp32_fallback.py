"""An fp32 fallback for the outputs 3xTF32 cannot be trusted with: a lowering pass, after the schedule.

3xTF32 (step 14) splits each operand x into big = tf32(x) and small = x - big, and sums three
TF32 products on the tensor core. Two kinds of output come out wrong where fp32 is right:

- **NaN where fp32 has +-inf.** An infinite x gives big = inf and small = inf - inf = NaN, so
  every output an infinity reaches is NaN, where fp32 (SGEMM, float64) gives +-inf wherever the
  sum is not inf - inf or inf * 0. A split that keeps infinities out of the small products costs
  two instructions per fragment register in the hot loop: measured on the H100 (2026-11-24,
  clamping big to the largest finite TF32), 70.4 -> 63.9 TFLOP/s at 2048^3 and 71.1 -> 66.1 at
  4096^3, in alternating rounds.
- **Tiny outputs.** The tensor core truncates each mma's result to fp32 (toward zero); below
  fp32's smallest normal, 2^-126, that is a whole subnormal ulp, 2^-149, per mma, where SGEMM's
  FFMA rounds to nearest. An output takes at most 3 * ceil(K / 8) such truncations (three
  products per 8-k step), so its error from them is at most that many 2^-149, whatever its
  size: relative to an output of 2^-124 times that count or more, under 2^-25, below fp32's own
  rounding; under it, up to whole units of the output's last bits. Measured (H100, 2026-11-24,
  operands scaled by 2^-64 so that every product is subnormal): 1.3e-6 where SGEMM gives 6.3e-7.

So the kernel keeps its loop as it is and checks its result where it writes it: each thread,
after storing its values of C to global memory, reads them back from the shared tile they came
from (one test per stored vector, then per lane where that test fires), and any value that is
NaN, or non-zero and under the tiny bound, it computes again as a plain fp32 dot product on the
CUDA cores, C[i, j] = sum_k A[i, k] * B[k, j] (serial FFMA, round to nearest, subnormals kept,
inputs straight from global memory), and stores that instead. So:

- an output that fp32 makes +-inf (an infinity meets finite values, or finite products
  overflow) is +-inf, with fp32's sign; one that fp32 makes NaN (a NaN input, inf * 0,
  inf - inf) is NaN;
- an output under the bound is SGEMM's serial sum; exact zeros are left alone (a zero row or
  column, common in padded data, would otherwise be recomputed; a sum the truncations took to
  exactly zero is under 3 * ceil(K / 8) * 2^-149, where SGEMM's own absolute error is of the
  same order);
- every other output costs, per stored vector, a shared-memory re-read, a few integer tests and
  one branch, in the epilogue only.

No hot-loop instruction is added. The price is for inputs that need it: outputs that are NaN or
tiny are recomputed one thread at a time (K serial FFMA with uncoalesced loads of B each), far
slower than the kernel where many are, and fp32-accurate.

TensorIR's schedule primitives cannot add a data-dependent branch with a loop inside to a
scheduled block, so this is a TIR pass over the lowered kernel, run first among the device
finalization passes (as schedules/lowering/one_barrier.py's). It finds the stores of the final output
(the global buffer "C") whose value is a load from shared memory, and the global inputs "A" and
"B"; M, N and K come from the three flat sizes (M*K, K*N, M*N).
"""

from __future__ import annotations

import math

import numpy as np

import tvm
from tvm import tirx

from . import pipelines

_OUTPUT, _LEFT, _RIGHT = "C", "A", "B"


def _global_buffers(body) -> dict:
    """The kernel's global buffers declared at its top, by name."""
    found = {}
    for stmt in pipelines.statements(body):
        if isinstance(stmt, tirx.DeclBuffer) and stmt.buffer.scope() == "global":
            found[stmt.buffer.name] = stmt.buffer
    return found


def _lanes(expr) -> int:
    return expr.ty.dtype.lanes


def _lane(expr, lane):
    """The scalar expression of lane `lane` (an int or a loop variable) of a vector index (Ramp,
    Broadcast, their sums)."""
    if _lanes(expr) == 1:
        return expr
    if isinstance(expr, tirx.Ramp):
        return expr.base + expr.stride * lane
    if isinstance(expr, tirx.Broadcast):
        return expr.value
    if isinstance(expr, (tirx.Add, tirx.Sub, tirx.Mul)):
        return type(expr)(_lane(expr.a, lane), _lane(expr.b, lane))
    raise ValueError(f"fp32_fallback: cannot take a lane of {type(expr).__name__} {expr}")


class _Fallback:
    """Builds the fallback of one output element, given its flat index into C."""

    def __init__(self, a, b, c):
        self.a, self.b, self.c = a, b, c
        mk, kn, mn = (int(x.shape[0]) for x in (a, b, c))
        m = math.isqrt(mk * mn // kn)
        if m * m * kn != mk * mn or mk % m or mn % m:
            raise ValueError(f"fp32_fallback: A, B, C sizes {mk}, {kn}, {mn} are not M*K, K*N, M*N")
        self.M, self.K, self.N = m, mk // m, mn // m

    def element(self, flat) -> tirx.Stmt:
        """acc = sum_k A[i, k] * B[k, j] in fp32 FFMA order; C[flat] = acc."""
        i = tirx.floordiv(flat, self.N)
        j = tirx.floormod(flat, self.N)
        acc = tvm.tirx.decl_buffer((1,), "float32", name="fp32_fallback", scope="local")
        k = tirx.Var("k", "int32")
        zero = tirx.IntImm("int32", 0)
        total = tirx.BufferLoad(acc, [zero])
        step = tirx.BufferStore(acc, tvm.tirx.call_pure_extern(
            "float32", "fmaf", tirx.BufferLoad(self.a, [i * self.K + k]),
            tirx.BufferLoad(self.b, [k * self.N + j]), total), [zero])
        return tirx.SeqStmt([
            tirx.AllocBuffer(acc),
            tirx.BufferStore(acc, tirx.FloatImm("float32", 0.0), [zero]),
            tirx.For(k, zero, tirx.IntImm("int32", self.K), tirx.ForKind.SERIAL, step),
            tirx.BufferStore(self.c, total, [flat]),
        ])


def tiny_bound(K: int) -> float:
    """The smallest |C| whose tensor-core truncations (at most 3 * ceil(K / 8) of 2^-149 each, in
    the subnormal range) stay under 2^-25 of it: 2^-124 times that count, rounded up to a power
    of two. K = 1024: 2^-115; K = 2^20: 2^-105."""
    truncations = 3 * -(-K // 8)
    return 2.0 ** ((truncations - 1).bit_length() - 124)


def tiny_bound_bits(K: int) -> int:
    """tiny_bound(K) as fp32 bits: what a kernel compares |x|'s bits with."""
    return int(np.float32(tiny_bound(K)).view(np.uint32))


def _magnitude_bits(x):
    """|x|'s bits as an unsigned integer: ordered as |x| is, NaN above +inf (0x7F800000). Read
    from the bits, a test no compiler flag can fold away, as it may fold x != x."""
    return tirx.bitwise_and(tirx.reinterpret("uint32", x), tirx.const(0x7FFFFFFF, "uint32"))


def _needs_fp32(x, tiny_bits: int):
    """x is NaN, or 0 < |x| < the tiny bound: (|x| - 1) wraps around for |x| = 0."""
    u = _magnitude_bits(x)
    nan = u > tirx.const(0x7F800000, "uint32")
    tiny = (u - tirx.const(1, "uint32")) < tirx.const(tiny_bits - 1, "uint32")
    return tirx.Or(nan, tiny)


def _checked_store(store: tirx.BufferStore, fallback: _Fallback, tiny_bits: int) -> tirx.Stmt | None:
    """The store, then one test over its lanes (re-read from shared memory) and, where that fires,
    a loop over the lanes: where a lane's value needs fp32, the fallback for that element. One
    test per vector keeps the common case to a few integer ops and a branch; one loop, not one
    branch per lane, keeps the fallback's code once per store, so the epilogue stays small beside
    the kernel's unrolled main loop."""
    value = store.value
    if not (isinstance(value, tvm.ir.TensorLoad) and value.source.scope().startswith("shared")):
        return None

    def stored(lane):
        return tirx.BufferLoad(value.source, [_lane(value.indices[0], lane)])

    lanes = _lanes(value)
    lane = tirx.Var("lane", "int32")
    check = tirx.IfThenElse(_needs_fp32(stored(lane), tiny_bits), fallback.element(_lane(store.indices[0], lane)), None)
    if lanes == 1:
        return tirx.SeqStmt([store, check])
    any_lane = _needs_fp32(stored(0), tiny_bits)
    for other in range(1, lanes):
        any_lane = tirx.Or(any_lane, _needs_fp32(stored(other), tiny_bits))
    loop = tirx.For(lane, tirx.IntImm("int32", 0), tirx.IntImm("int32", lanes), tirx.ForKind.SERIAL, check)
    return tirx.SeqStmt([store, tirx.IfThenElse(any_lane, loop, None)])


def add_fallback(body):
    """The kernel body with every checked store of C; unchanged where C, A or B is not found."""
    buffers = _global_buffers(body)
    if not all(name in buffers for name in (_OUTPUT, _LEFT, _RIGHT)):
        return body
    output = buffers[_OUTPUT]
    fallback = _Fallback(buffers[_LEFT], buffers[_RIGHT], output)
    tiny_bits = tiny_bound_bits(fallback.K)

    def visit(node):
        if isinstance(node, tirx.BufferStore) and node.buffer.same_as(output):
            return _checked_store(node, fallback, tiny_bits)
        return None

    return pipelines.rewrite(body, visit)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="Fp32Fallback")
def fp32_fallback_pass(func, mod, ctx):
    return func.with_body(add_fallback(func.body))
