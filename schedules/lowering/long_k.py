"""Long K: a second accumulator, so a sum over tens of thousands of k stays fp32-accurate.

Every fp32 step sums each output C[i, j] in one fp32 register, serially over its k (steps 1-10
over all of K; step 11 over its split's chunk of K; step 14 adds one slice sum per block_k).
A serial sum of n terms of random sign carries a relative error that grows like sqrt(n) ulps:
measured on the H100 (results/<gpu>/special_values.md, 16 x 16 outputs, uniform data), steps
1-10 reach 4.9e-6 at K = 2^16 and 1.7e-5 at 2^20, against cuBLAS SGEMM's 4.9e-7 and 1.1e-6
(SGEMM splits K); step 11 (split 64, chunks of 2^14) 2.3e-6 at 2^20; step 14 (2^15 slice sums
added in order) 3.1e-6 at 2^20.

The idea: promoted accumulation, two levels. The loop over K is cut into chunks of
``CHUNK_ADDS`` additions into each accumulator; each chunk is summed from zero in the existing
accumulator, then added into a second one (``<acc>_promoted``) and the accumulator zeroed. The
rounding error then grows like sqrt(C + K / C) for chunks of C additions instead of sqrt(K):
at C = 512, about sqrt(256 + 64) at K = 2^16 and sqrt(256 + 1024) at 2^20, against sqrt(2^15)
and sqrt(2^19). The hot loop is unchanged: one add and one zeroing per accumulator per chunk,
1/512 of the FMAs, and one loop level more.

It is a pass over the lowered kernel (composed by schedules/lowering/pipelines.py, as
schedules/lowering/fp32_fallback.py is), not a schedule primitive, because the steps build their K loop
in eleven different shapes (plain, sliced, pipelined with prologue and epilogue, split over
blocks, tensorized) and the lowered kernel has one: a serial loop whose body adds into the same
elements every iteration. ``add_promotion`` finds the outermost serial loop whose body holds
such adds (``acc[x] = acc[x] + ...``) into a buffer allocated outside it, counts the adds per
element per iteration (block_k for steps 3-11, 1 for steps 1-2 and step 14's slice sums), and
turns ``for k in range(E): body`` into

    acc_promoted[*] = 0
    for k_chunk in range(ceil(E / P)):
        for k_in_chunk in range(min(P, E - k_chunk * P)):
            k = k_chunk * P + k_in_chunk;  body
        acc_promoted[x] += acc[x];  acc[x] = 0        # for every element x
    acc[x] += acc_promoted[x]

with P = CHUNK_ADDS / adds per iteration. A local accumulator (steps 5-11 and 14, and steps 1-4
where the shape is padded) is promoted element by element over its whole buffer; steps 1-4 on
an unpadded shape accumulate in C itself (registers, by nvcc), and then each distinct element
of C the loop adds into gets a slot (its index must not depend on the loop). A pipelined loop's
epilogue adds its last slices after the final add, into the restored sum.

Where: ``applies`` says yes where one accumulator's serial sum covers at least ``LONG_K`` =
8192 k: K itself for steps 1-10 and 14, step 11's chunk K / split_k. Everything shorter builds
exactly as before (no pass, the same pipeline): every square up to 4096^3, every shape of
bench/shapes.toml with K < 8192, and step 11 wherever its split leaves chunks under 8192
(256x256x16384, 64x64x65536 and 16x16x65536 among them). tests/test_long_k.py hashes that CUDA.
Not covered: step 11's matrix-vector and vector-matrix modes (``k_threads`` > 1), which split K
over a block's threads and sum in a cross-thread reduction.

Why 8192 and 512. At 8192 a serial sum is ~1.7e-6 (the error model below), over the contract's
1e-6 floor, where cuBLAS splits K on small outputs; 4096 (1.2e-6) is a square the speed bar
measures, and SGEMM's own error there is 1.15e-6. A float32 simulation of the summation order
(FMA: exact products, the sum rounded; 64 outputs of uniform [-1, 1] data) gives, relative to
the float64 sum: serial 4.6e-6 at 2^16 and 2.2e-5 at 2^20 (the H100 measured 4.9e-6 and
1.7e-5); chunks of 256: 3.5e-7 / 1.4e-6; 512: 3.8e-7 / 8.1e-7; 1024: 5.2e-7 / 9.0e-7. 512 is
the best of both.

Prediction (written before the device run), 16 x 16 x 2^16 and
2^20, uniform, against SGEMM's 4.9e-7 and 1.1e-6:
- steps 1-10: 4.9e-6 -> ~4e-7 and 1.7e-5 -> ~8e-7 (the simulation's 3.8e-7 / 8.1e-7);
- step 11: unchanged at 2^16 (chunks of 1024 k: 6.4e-7 measured); 2.3e-6 -> ~5e-7 at 2^20
  (64 partials of 2^14, each promoted, then summed in order by the second kernel);
- step 14: 9.4e-7 -> ~6.5e-7 at 2^16, 3.1e-6 -> ~7e-7 at 2^20 (chunks of 512 slice sums: the
  simulated adds 3.9e-7 / 5.3e-7, then the tensor core's truncation within a slice, ~5e-7 as at
  1024^3, which this does not touch).
Measured (H100 80GB HBM3, 2026-11-25, python -m steps.special --save, special_values.md), at 2^16 /
2^20 against SGEMM's 4.9e-7 / 1.1e-6: steps 1-10 4.9-5.0e-7 / 8.4-8.8e-7; step 11 6.4e-7 /
4.5e-7; step 14 6.8e-7 / 6.5e-7. As predicted within 10-30%; every step now meets the contract
on both classes.
Cost: a register per accumulator, at long K only (ptxas, nvcc 13.0, sm_90, before -> after):
16x16x2^16 and 2^20, steps 1-10 30-64 -> 31-85 registers, step 14 65 -> 79, step 11 (2^20) 69 -> 89;
1024x1024x2^16 step 10 87 -> 127, step 11 80 (4 B spilled) -> 128 (none), step 14 239 -> 246;
4096x4096x16384 step 10 87 -> 128 (5 -> 4 blocks of 128 threads per SM), step 5's 8x8 tile
128 -> 217. Steps 7-11 and 14 spill nothing at any of these. Steps 3 (64x64x2^16,
256x256x16384, 1024x1024x2^16) and 6 (256x256x16384) now spill 8 bytes: ptxas keeps 64 / 72
registers and parks one promoted value on the stack, one load and one store per chunk, outside
the FMA loop (SASS). Speed at 2048^3 and 4096^3 cannot change: those kernels are byte-identical.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir.prim.expr import BinaryOpExpr

from . import pipelines

LONG_K = 8192  # an accumulator's serial sum at least this long (in k) is promoted
CHUNK_ADDS = 512  # additions into an accumulator per chunk
SUFFIX = "_promoted"


def serial_length(cfg, K: int) -> int | None:
    """How many k one accumulator sums serially under `cfg`: K, or step 11's chunk K / split_k
    (K padded to whole splits); None for step 11's k_threads modes, which this does not cover,
    and for step 19, which promotes its own."""
    if getattr(cfg, "k_threads", 1) > 1:
        return None
    if getattr(cfg, "split", False):
        # Step 19 (3xTF32 on wgmma) promotes its own sums, and flushes them to C at a long K
        # (schedules/transforms/wgmma.py): it has no registers for another accumulator.
        return None
    return cfg.chunk_k(K) if hasattr(cfg, "chunk_k") else K


def applies(cfg, K: int) -> bool:
    """Whether ``schedules.build`` adds ``promote_pass`` for `cfg` at this K."""
    length = serial_length(cfg, K)
    return length is not None and length >= LONG_K


def _is_accumulation(store) -> bool:
    """store is acc[x] = acc[x] + e (or e + acc[x]) in float32."""
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add):
        return False
    if store.value.ty.dtype != "float32":
        return False
    for side in (store.value.a, store.value.b):
        if (isinstance(side, tvm.ir.TensorLoad) and side.source.same_as(store.buffer)
                and len(side.indices) == len(store.indices)
                and all(tvm_ffi.structural_equal(x, y) for x, y in zip(side.indices, store.indices))):
            return True
    return False


class _Scan:
    """What a loop body holds: its accumulating stores (with the number of times each runs per
    iteration), the buffers it allocates, the variables it binds (loops, Bind) and their values."""

    def __init__(self, body):
        self.stores: list[tuple[tirx.BufferStore, int]] = []
        self.allocated: list = []
        self.bound: list = []
        self.values: dict = {}
        self._walk(body, 1)

    def _walk(self, stmt, times: int) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self._walk(s, times)
        elif isinstance(stmt, (tirx.AttrStmt, tirx.While)):
            self._walk(stmt.body, times)
        elif isinstance(stmt, tirx.IfThenElse):
            self._walk(stmt.then_case, times)
            if stmt.else_case is not None:
                self._walk(stmt.else_case, times)
        elif isinstance(stmt, tirx.For):
            self.bound.append(stmt.loop_var)
            extent = stmt.extent.value if isinstance(stmt.extent, tirx.IntImm) else 1
            self._walk(stmt.body, times * extent)
        elif isinstance(stmt, tirx.Bind):
            self.bound.append(stmt.var)
            self.values[stmt.var] = stmt.value
        elif isinstance(stmt, tirx.AllocBuffer):
            self.allocated.append(stmt.buffer)
        elif _is_accumulation(stmt):
            self.stores.append((stmt, times))

    def accumulators(self) -> list:
        """The buffers added into, allocated outside the loop, in order of first store."""
        out = []
        for store, _ in self.stores:
            buf = store.buffer
            if any(buf.same_as(b) for b in self.allocated) or any(buf.same_as(b) for b in out):
                continue
            out.append(buf)
        return out


def _inline(expr, values: dict):
    """expr with the loop body's Bind variables replaced by their values (index arithmetic)."""
    if isinstance(expr, tirx.Var):
        return _inline(values[expr], values) if expr in values else expr
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return expr
    if isinstance(expr, BinaryOpExpr):
        return type(expr)(_inline(expr.a, values), _inline(expr.b, values))
    if isinstance(expr, tirx.Cast):
        return tirx.Cast(expr.ty.dtype, _inline(expr.value, values))
    raise ValueError(f"long_k: cannot inline {type(expr).__name__} {expr}")


def _elements(buf, scan: _Scan, loop) -> list:
    """The elements of `buf` to promote, as index expressions valid outside the loop body: every
    element of a local buffer; the distinct elements a global one is added into (each must not
    depend on the loop, else ValueError)."""
    if buf.scope() == "local":
        size = math.prod(int(x) for x in buf.shape)
        return [[tirx.IntImm("int32", e)] for e in range(size)]
    inner = [loop.loop_var, *scan.bound]
    out: list = []
    for store, _ in scan.stores:
        if not store.buffer.same_as(buf):
            continue
        if any(x.ty.dtype.lanes != 1 for x in store.indices):
            raise ValueError(f"long_k: a vector accumulation into {buf.name}")
        index = [_inline(x, scan.values) for x in store.indices]
        used = [v for x in index for v in tirx.analysis.undefined_vars(x)]
        if any(v.same_as(w) for v in used for w in inner):
            raise ValueError(f"long_k: {buf.name}'s element {index} depends on the loop")
        if not any(all(tvm_ffi.structural_equal(a, b) for a, b in zip(index, seen)) for seen in out):
            out.append(index)
    return out


def _adds_per_iteration(scan: _Scan, elements: dict) -> int:
    """Additions into one accumulator element per iteration of the loop (block_k for a sliced
    loop); at least 1."""
    adds = sum(times * store.value.ty.dtype.lanes for store, times in scan.stores
               if any(store.buffer.same_as(b) for b in elements))
    count = sum(len(v) for v in elements.values())
    return max(1, round(adds / max(1, count)))


def promote(loop, chunk_adds: int = CHUNK_ADDS):
    """`loop` with a second accumulator (module docstring), or None where it holds no
    accumulation over more than one chunk."""
    if loop.kind != tirx.ForKind.SERIAL or not isinstance(loop.extent, tirx.IntImm):
        return None
    scan = _Scan(loop.body)
    buffers = scan.accumulators()
    if not buffers:
        return None
    elements = {buf: _elements(buf, scan, loop) for buf in buffers}
    per_chunk = max(1, chunk_adds // _adds_per_iteration(scan, elements))
    extent = loop.extent.value
    if extent <= per_chunk:
        return None
    zero = tirx.FloatImm("float32", 0.0)
    promoted = {buf: tvm.tirx.decl_buffer((len(elements[buf]),), "float32", name=buf.name + SUFFIX,
                                          scope="local") for buf in buffers}
    slot = lambda s: [tirx.IntImm("int32", s)]  # noqa: E731
    start, flush, finish = [], [], []
    for buf in buffers:
        hi = promoted[buf]
        start.append(tirx.AllocBuffer(hi))
        for s, index in enumerate(elements[buf]):
            start.append(tirx.BufferStore(hi, zero, slot(s)))
            flush.append(tirx.BufferStore(hi, tirx.BufferLoad(hi, slot(s)) + tirx.BufferLoad(buf, index), slot(s)))
            flush.append(tirx.BufferStore(buf, zero, index))
            finish.append(tirx.BufferStore(buf, tirx.BufferLoad(buf, index) + tirx.BufferLoad(hi, slot(s)), index))
    dtype = loop.loop_var.ty.dtype
    chunk = tirx.Var("k_chunk", dtype)
    within = tirx.Var("k_in_chunk", dtype)
    p = tirx.IntImm(dtype, per_chunk)
    inner_extent = p if extent % per_chunk == 0 else tirx.min(p, tirx.IntImm(dtype, extent) - chunk * p)
    # The original loop variable, now bound once per iteration: the body is kept as it is.
    body = tirx.SeqStmt([tirx.Bind(loop.loop_var, loop.min + chunk * p + within),
                         *pipelines.statements(loop.body)])
    inner = tirx.For(within, tirx.IntImm(dtype, 0), inner_extent, tirx.ForKind.SERIAL, body,
                     None, loop.annotations)
    outer = tirx.For(chunk, tirx.IntImm(dtype, 0), tirx.IntImm(dtype, -(-extent // per_chunk)),
                     tirx.ForKind.SERIAL, tirx.SeqStmt([inner, *flush]))
    return tirx.SeqStmt([*start, outer, *finish])


def add_promotion(body, chunk_adds: int = CHUNK_ADDS):
    """The kernel body with each outermost accumulating loop promoted; unchanged where none."""
    def enter(node):
        return promote(node, chunk_adds) if isinstance(node, tirx.For) else None

    return pipelines.rewrite(body, lambda node: None, enter)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="PromoteLongK")
def promote_pass(func, mod, ctx):
    return func.with_body(add_promotion(func.body))
