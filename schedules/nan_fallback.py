"""An fp32 fallback for the outputs 3xTF32 makes NaN: a lowering pass, after the schedule.

3xTF32 (step 14) splits each operand x into big = tf32(x) and small = x - big. An infinite x
gives big = inf and small = inf - inf = NaN, so every output that an infinity reaches comes out
NaN, where fp32 (SGEMM, float64) gives +-inf wherever the sum is not inf - inf or inf * 0. A
split that keeps infinities out of the small products costs two instructions per fragment
register in the hot loop: measured on the H100 (2026-11-24, clamping big to the largest finite
TF32), 70.4 -> 63.9 TFLOP/s at 2048^3 and 71.1 -> 66.1 at 4096^3, in alternating rounds.

Instead, the kernel keeps its loop as it is and checks its result where it writes it: each
thread, after storing its values of C to global memory, reads them back from the shared tile
they came from, and for any that is NaN computes that one output again as a plain fp32 dot
product on the CUDA cores, C[i, j] = sum_k A[i, k] * B[k, j] (serial FFMA, inputs straight from
global memory), and stores that instead. So:

- an output that fp32 makes +-inf (an infinity meets finite values, or finite products
  overflow) is +-inf, with fp32's sign;
- an output that fp32 makes NaN (a NaN input, inf * 0, inf - inf) is NaN;
- a finite output costs one shared-memory load and one compare, in the epilogue only.

Every non-finite pattern then is fp32's own, and no hot-loop instruction is added. The price
is for NaN-heavy inputs: a C full of NaN recomputes every output one thread at a time
(K serial FFMA with uncoalesced loads of B each), orders of magnitude slower than the kernel,
and still correct.

TensorIR's schedule primitives cannot add a data-dependent branch with a loop inside to a
scheduled block, so this is a TIR pass over the lowered kernel, run first among the device
finalization passes (as schedules/one_barrier.py's). It finds the stores of the final output
(the global buffer "C") whose value is a load from shared memory, and the global inputs "A" and
"B"; M, N and K come from the three flat sizes (M*K, K*N, M*N).
"""

from __future__ import annotations

import math

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
    raise ValueError(f"nan_fallback: cannot take a lane of {type(expr).__name__} {expr}")


class _Fallback:
    """Builds the fallback of one output element, given its flat index into C."""

    def __init__(self, a, b, c):
        self.a, self.b, self.c = a, b, c
        mk, kn, mn = (int(x.shape[0]) for x in (a, b, c))
        m = math.isqrt(mk * mn // kn)
        if m * m * kn != mk * mn or mk % m or mn % m:
            raise ValueError(f"nan_fallback: A, B, C sizes {mk}, {kn}, {mn} are not M*K, K*N, M*N")
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


def _is_nan(x):
    """x is NaN, read from its bits (exponent all ones, mantissa not zero): a test no compiler
    flag can fold away, as it may fold x != x."""
    bits = tirx.bitwise_and(tirx.reinterpret("uint32", x), tirx.const(0x7FFFFFFF, "uint32"))
    return bits > tirx.const(0x7F800000, "uint32")


def _checked_store(store: tirx.BufferStore, fallback: _Fallback) -> tirx.Stmt | None:
    """The store, then a loop over its lanes: if a lane's value (re-read from shared memory) is
    NaN, the fallback for that element. A loop, not one branch per lane: the fallback's code
    once per store, so the epilogue stays small beside the kernel's unrolled main loop."""
    value = store.value
    if not (isinstance(value, tvm.ir.TensorLoad) and value.source.scope().startswith("shared")):
        return None
    lane = tirx.Var("lane", "int32")
    stored = tirx.BufferLoad(value.source, [_lane(value.indices[0], lane)])
    check = tirx.IfThenElse(_is_nan(stored), fallback.element(_lane(store.indices[0], lane)), None)
    lanes = _lanes(value)
    if lanes == 1:
        return tirx.SeqStmt([store, check])
    return tirx.SeqStmt([store, tirx.For(lane, tirx.IntImm("int32", 0), tirx.IntImm("int32", lanes),
                                         tirx.ForKind.SERIAL, check)])


def add_fallback(body):
    """The kernel body with every checked store of C; unchanged where C, A or B is not found."""
    buffers = _global_buffers(body)
    if not all(name in buffers for name in (_OUTPUT, _LEFT, _RIGHT)):
        return body
    output = buffers[_OUTPUT]
    fallback = _Fallback(buffers[_LEFT], buffers[_RIGHT], output)

    def visit(node):
        if isinstance(node, tirx.BufferStore) and node.buffer.same_as(output):
            return _checked_store(node, fallback)
        return None

    return pipelines.rewrite(body, visit)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="Fp32FallbackForNaN")
def nan_fallback_pass(func, mod, ctx):
    return func.with_body(add_fallback(func.body))
