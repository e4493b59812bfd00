"""TF32 tensor-core intrinsics for ``tensorize``: the project's own, registered at first use.

TVM 0.27 ships ``mma.sync`` intrinsics for fp16, int8 and fp8 only; its codegen accepts
``T.ptx_legacy.mma(..., "tf32", "tf32", "fp32", ...)``, so the TF32 pairs are written here.
Each intrinsic is a pair of PrimFuncs: a *description* (what the tile computes, elementwise,
which ``tensorize`` matches against the blockized schedule) and an *implementation* (the PTX).

The unit of work is a 16 x 16 x 8 tile (m x n x k): two ``mma.sync.m16n8k8`` TF32
instructions side by side along n. A fragment is spread over the warp's 32 lanes; each lane's
share is a small ``local`` buffer (schedules/transforms/tensor_core.py says why not TVM's "warp" scope),
and the maps below say which lane holds which element in which register (PTX ISA, "Matrix
Fragments for mma.m16n8k8", with g = lane // 4 and t = lane % 4):

- A, 16 x 8 (m, k):  a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
- B, 8 x 16 (k, n):  b0 (t, g)  b1 (t+4, g) for n < 8; regs 2, 3 the same for n + 8
- C, 16 x 16 (m, n): c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1); regs 4-7 for n + 8

C's map is the one TVM's fp16 intrinsics use for a 16 x 16 accumulator, so the fp32 fill
(``mma_fill_16x16_f32``) and the store to shared memory are TVM's own.

Loads: an fp32 A fragment is four 8 x 4 fp32 tiles, which is what ``ldmatrix.x4.b16`` moves
(an 8 x 8 tile of 16-bit values is an 8 x 4 tile of 32-bit ones, and lane l receives element
(l // 4, l % 4) of each): one instruction per fragment. B cannot use it: ``.trans`` swaps
16-bit halves, not fp32 elements, and B is stored k-major (n contiguous, as cp.async copies
it from global). So B's fragment is four 32-bit shared loads per lane.

3xTF32 (``TF32X3_*``): x = big + small with big = tf32(x), small = x - big; the split is
done once per fragment, at the shared -> register load, into a fragment of 8 registers per
lane (0-3 big, 4-7 small). Its mma issues small*big + big*small + big*big. With per-slice
promotion (step 14's promote 2) the mma accumulates in place and ``FRAG_ADD`` folds the slice's
accumulator into C's, register by register.
16-bit inputs (fp16, bf16; ``LOAD16_*``, ``MMA16``): a 16 x 16 x 16 tile, two
``mma.sync.m16n8k16`` with fp32 accumulation, both fragments one ``ldmatrix.x4`` each (B with
``.trans``); TVM's own fp16 intrinsics write its "warp" scope (not lowered here, see
tensor_core.py) and it has none for bf16, so both dtypes are written here, registered apart
(``register16``) the first time a 16-bit one is used.
Registered when a schedule first tensorizes with one (``tensorize`` below), not at import:
building the 19 PrimFuncs from TVMScript takes ~4.3 s, which was most of ``import schedules``
(~5.5 s on a 2-core CPU box, ~10 s on the H100's host) and was paid by every process that builds
any step: a sweep's 32 build processes, each on its own, before the first candidate.
Pure IR: no GPU, no I/O.
"""

from __future__ import annotations

import threading

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

WARP = 32
# One tensorized tile: m x n x k.
TILE_M, TILE_N, TILE_K = 16, 16, 8
FRAG_AB = TILE_M * TILE_K // WARP  # 4 registers per lane for A (16x8) and for B (8x16)
FRAG_C = TILE_M * TILE_N // WARP  # 8 accumulators per lane for C (16x16)


def a_fragment(i, k):
    """(lane, register) of element (i, k) of a 16 x 8 A tile."""
    return 4 * (i % 8) + k % 4, i // 8 + 2 * (k // 4)


def b_fragment(k, n):
    """(lane, register) of element (k, n) of an 8 x 16 B tile."""
    return 4 * (n % 8) + k % 4, k // 4 + 2 * (n // 8)


def c_fragment(i, j):
    """(lane, register) of element (i, j) of a 16 x 16 fp32 accumulator (TVM's own layout)."""
    return 4 * (i % 8) + (j % 8) // 2, j % 2 + 2 * (i // 8) + 4 * (j // 8)


def b_element(lane, reg):
    """Inverse of b_fragment: the (k, n) that a lane's register holds."""
    return lane % 4 + 4 * (reg % 2), lane // 4 + 8 * (reg // 2)


# -- 16-bit inputs (fp16, bf16): mma.sync.m16n8k16, fp32 accumulation -------------------------
# One tensorized tile is 16 x 16 x 16: two m16n8k16 side by side along n. A lane holds 8 halves
# of A (16 x 16) and 8 of B (16 x 16), two per 32-bit register (PTX ISA, "Matrix Fragments for
# mma.m16n8k16 with floating point type", g = lane // 4, t = lane % 4):
# - A (m, k): halves 0-1 (g, 2t..2t+1), 2-3 (g+8, 2t..), 4-5 (g, 2t+8..), 6-7 (g+8, 2t+8..)
# - B (k, n): halves 0-1 (k 2t..2t+1, n g), 2-3 (k 2t+8.., n g); halves 4-7 the same for n + 8
# - C: as for TF32 (c_fragment), fp32.
# Both operand fragments are one ldmatrix.x4 each: A's four 8 x 8 matrices in that order, and
# B's, stored k-major ([k][n], n contiguous), with .trans, which hands lane (g, t) the two
# k-consecutive halves (2t, 2t+1) of column g: exactly b0, b1. So every fragment load is one
# instruction (fp32 needed four 32-bit loads for B).
TILE_K16 = 16
FRAG16_AB = TILE_M * TILE_K16 // WARP  # 8 halves per lane for A (16 x 16) and for B (16 x 16)
SIXTEEN_BIT = {"fp16": ("float16", "fp16"), "bf16": ("bfloat16", "bf16")}  # TVM dtype, PTX type


def a16_fragment(i, k):
    """(lane, half) of element (i, k) of a 16 x 16 A tile of 16-bit values (m16n8k16)."""
    return 4 * (i % 8) + (k % 8) // 2, k % 2 + 2 * (i // 8) + 4 * (k // 8)


def b16_fragment(k, n):
    """(lane, half) of element (k, n) of a 16 x 16 B tile of 16-bit values (two n8 halves)."""
    return 4 * (n % 8) + (k % 8) // 2, k % 2 + 2 * (k // 8) + 4 * (n // 8)


def geometry(dtype: str = "fp32"):
    """(tile k, A fragment map, B fragment map) of the tensorized tile for `dtype` inputs."""
    if dtype == "fp32":
        return TILE_K, a_fragment, b_fragment
    return TILE_K16, a16_fragment, b16_fragment


# -- TF32 in integer arithmetic (exact, no GPU instruction needed) -----------------------------
# tf32 keeps fp32's sign and 8-bit exponent and the top 10 of its 23 mantissa bits. The tensor
# core ignores the low 13 bits of its inputs (truncation toward zero), so a value is "TF32" once
# they are cleared; clearing them is one AND with this mask.
TF32_MASK = 0xFFFFE000


def tf32_big(x):
    """The big half of a split: x truncated to TF32 (its low 13 mantissa bits cleared).

    Truncation, not rounding: one integer AND instead of an add and an AND, for each of the
    16-32 fragment registers split per 8 k (the split competes with the mma for issue slots).
    Measured on the H100 (2026-11-22, 4096^3): 57.6 TFLOP/s and 4.3e-7 error, against 54.8 and
    4.2e-7 with a rounded big."""
    return T.reinterpret("float32", T.bitwise_and(T.reinterpret("uint32", x), T.uint32(TF32_MASK)))


def tf32_split(x, part):
    """Part 0 (big) or 1 (small) of x = big + small: big = tf32_big(x), small = x - big.

    x - big is exact in fp32: x's low 13 mantissa bits, below one TF32 ulp of x. small is passed
    to the tensor core as it is, which reads its top 11 significant bits (truncation), so the
    tensor core sees x to within 2^-21 relative; the rest, and small*small, are below what an
    fp32 sum keeps. Rounding small to TF32 first (an integer add and an AND per fragment
    register) would halve that to 2^-22: measured on the H100 (2026-11-23, promote 1), 4.3e-7
    against 5.3e-7 at 4096^3 (cuBLAS SGEMM: 1.15e-6) for 4-7% of the speed, so it is not done."""
    big = tf32_big(x)
    return T.if_then_else(part == 0, big, x - big)


# -- descriptions and implementations ----------------------------------------------------------


def _load(scope: str, operand: str, split: bool = False):
    """Shared tile -> one lane's fragment registers.

    A (16 x 8): one ``ldmatrix.x4``; B (8 x 16): four 32-bit shared loads. With ``split``
    (3xTF32) the fragment is 8 registers, big halves in 0-3 and small in 4-7: the plain load,
    then the split in registers, once per fragment (not once per mma that reads it)."""
    rows, cols = (TILE_M, TILE_K) if operand == "A" else (TILE_K, TILE_N)
    where = a_fragment if operand == "A" else b_fragment
    regs = 2 * FRAG_AB if split else FRAG_AB

    @T.prim_func(s_tir=True)
    def desc(frag_handle: T.handle, shared_handle: T.handle) -> None:
        shared = T.match_buffer(shared_handle, (rows, cols), "float32", align=64, offset_factor=cols, scope=scope)
        frag = T.match_buffer(frag_handle, (regs,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(shared[0:rows, 0:cols])
            T.writes(frag[0:regs])
            if split:
                for ax0, ax1, ax2 in T.grid(rows, cols, 2):
                    with T.sblock("split"):
                        r, c, part = T.axis.remap("SSS", [ax0, ax1, ax2])
                        _lane, reg = T.meta_var(where(r, c))
                        T.reads(shared[r, c])
                        T.writes(frag[part * FRAG_AB + reg])
                        frag[part * FRAG_AB + reg] = tf32_split(shared[r, c], part)
            else:
                for ax0, ax1 in T.grid(rows, cols):
                    with T.sblock("load"):
                        r, c = T.axis.remap("SS", [ax0, ax1])
                        _lane, reg = T.meta_var(where(r, c))
                        T.reads(shared[r, c])
                        T.writes(frag[reg])
                        frag[reg] = shared[r, c]

    @T.prim_func(s_tir=True)
    def impl(frag_handle: T.handle, shared_handle: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        shared = T.match_buffer(shared_handle, (rows, cols), "float32", align=64, offset_factor=cols,
                                scope=scope, strides=[s0, s1])
        frag = T.match_buffer(frag_handle, (regs,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(shared[0:rows, 0:cols])
            T.writes(frag[0:regs])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                if operand == "A":
                    # Lanes 0-15 give the row addresses of k 0-3, lanes 16-31 of k 4-7: matrices
                    # (rows 0-7, k 0-3), (8-15, 0-3), (0-7, 4-7), (8-15, 4-7) land in a0-a3.
                    T.evaluate(T.ptx_legacy.ldmatrix(
                        False, 4, ".b16", frag.data, frag.elem_offset, shared.access_ptr("r"),
                        s0 * (tx % 16) + 4 * (tx // 16), dtype="float32"))
                else:
                    for r in T.unroll(FRAG_AB):
                        k, n = T.meta_var(b_element(tx, r))
                        frag[r] = shared[k, n]
                if split:
                    for r in T.unroll(FRAG_AB):
                        frag[FRAG_AB + r] = frag[r] - tf32_big(frag[r])
                        frag[r] = tf32_big(frag[r])

    return desc, impl


def _mma(split: bool, promote: bool = False):
    """C (16 x 16) += A (16 x 8) @ B (8 x 16): two m16n8k8 TF32 mma per product.

    With ``split`` the fragments hold (big, small) halves in registers 0-3 / 4-7 and the tile
    issues small*big + big*small + big*big, small terms first so they are not lost behind the
    big one. With ``promote`` those three go into a fresh accumulator and are added to C by an
    fp32 add on the CUDA cores: the tensor core's own accumulation truncates (rounds toward
    zero), which over K / 8 accumulations into C biases the sum (schedules/step14_3xtf32.py).
    """
    regs = 2 * FRAG_AB if split else FRAG_AB

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (regs,), "float32", offset_factor=1, scope="local")
        B = T.match_buffer(b, (regs,), "float32", offset_factor=1, scope="local")
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:FRAG_C], A[0:regs], B[0:regs])
            T.writes(C[0:FRAG_C])
            for i, j, k in T.grid(TILE_M, TILE_N, TILE_K):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    _lc, rc = T.meta_var(c_fragment(vi, vj))
                    _la, ra = T.meta_var(a_fragment(vi, vk))
                    _lb, rb = T.meta_var(b_fragment(vk, vj))
                    if split:
                        # Read regions as TensorIR merges them: big and small of one element.
                        T.reads(C[rc], A[ra:ra + FRAG_AB + 1], B[rb:rb + FRAG_AB + 1])
                        T.writes(C[rc])
                        C[rc] = C[rc] + (A[FRAG_AB + ra] * B[rb] + A[ra] * B[FRAG_AB + rb] + A[ra] * B[rb])
                    else:
                        T.reads(C[rc], A[ra], B[rb])
                        T.writes(C[rc])
                        C[rc] = C[rc] + A[ra] * B[rb]

    def mma(A, a_reg, B, b_reg, C, c_reg):
        return T.ptx_legacy.mma(
            "m16n8k8", "row", "col", "tf32", "tf32", "fp32",
            A.data, A.elem_offset + a_reg, B.data, B.elem_offset + b_reg, C.data, C.elem_offset + c_reg,
            False, dtype="float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (regs,), "float32", offset_factor=1, scope="local")
        B = T.match_buffer(b, (regs,), "float32", offset_factor=1, scope="local")
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:FRAG_C], A[0:regs], B[0:regs])
            T.writes(C[0:FRAG_C])
            for _tx in T.thread_binding(0, WARP, "threadIdx.x"):
                if promote:
                    with T.sblock("promote"):
                        T.reads(C[0:FRAG_C], A[0:regs], B[0:regs])
                        T.writes(C[0:FRAG_C])
                        acc = T.sblock_alloc_buffer((FRAG_C,), "float32", scope="local")
                        for r in T.unroll(FRAG_C):
                            acc[r] = T.float32(0)
                        for half in T.unroll(2):
                            T.evaluate(mma(A, FRAG_AB, B, 2 * half, acc, 4 * half))  # small_a * big_b
                            T.evaluate(mma(A, 0, B, FRAG_AB + 2 * half, acc, 4 * half))  # big_a * small_b
                            T.evaluate(mma(A, 0, B, 2 * half, acc, 4 * half))  # big_a * big_b
                        for r in T.unroll(FRAG_C):
                            C[r] = C[r] + acc[r]
                else:
                    for half in T.unroll(2):  # n 0-7 and n 8-15: B regs 0-1 / 2-3, C regs 0-3 / 4-7
                        if split:
                            T.evaluate(mma(A, FRAG_AB, B, 2 * half, C, 4 * half))  # small_a * big_b
                            T.evaluate(mma(A, 0, B, FRAG_AB + 2 * half, C, 4 * half))  # big_a * small_b
                        T.evaluate(mma(A, 0, B, 2 * half, C, 4 * half))  # big_a * big_b

    return desc, impl


def _fill():
    """Zero a 16 x 16 fp32 accumulator: 8 registers per lane."""

    @T.prim_func(s_tir=True)
    def desc(c: T.handle) -> None:
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:FRAG_C])
            for i, j in T.grid(TILE_M, TILE_N):
                with T.sblock("C_init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    _lane, reg = T.meta_var(c_fragment(vi, vj))
                    T.reads()
                    T.writes(C[reg])
                    C[reg] = T.float32(0)

    @T.prim_func(s_tir=True)
    def impl(c: T.handle) -> None:
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:FRAG_C])
            for _tx in T.thread_binding(0, WARP, "threadIdx.x"):
                for r in T.unroll(FRAG_C):
                    C[r] = T.float32(0)

    return desc, impl


def _add():
    """C += S on two 16 x 16 fp32 accumulators in the same register layout: 8 fp32 adds per lane
    (round to nearest, on the CUDA cores). Step 14's ``promote`` 2 folds each block_k slice's
    tensor-core partial sum (S) into the fp32 accumulator (C) with it."""

    @T.prim_func(s_tir=True)
    def desc(c: T.handle, s: T.handle) -> None:
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        S = T.match_buffer(s, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:FRAG_C], S[0:FRAG_C])
            T.writes(C[0:FRAG_C])
            for i, j in T.grid(TILE_M, TILE_N):
                with T.sblock("add"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    _lane, reg = T.meta_var(c_fragment(vi, vj))
                    T.reads(C[reg], S[reg])
                    T.writes(C[reg])
                    C[reg] = C[reg] + S[reg]

    @T.prim_func(s_tir=True)
    def impl(c: T.handle, s: T.handle) -> None:
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        S = T.match_buffer(s, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:FRAG_C], S[0:FRAG_C])
            T.writes(C[0:FRAG_C])
            for _tx in T.thread_binding(0, WARP, "threadIdx.x"):
                for r in T.unroll(FRAG_C):
                    C[r] = C[r] + S[r]

    return desc, impl


def _store(scope: str):
    """Write a 16 x 16 fp32 accumulator to a (shared-memory) tile, each lane its 8 values."""

    @T.prim_func(s_tir=True)
    def desc(c: T.handle, out: T.handle) -> None:
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        O = T.match_buffer(out, (TILE_M, TILE_N), "float32", offset_factor=1, scope=scope)
        with T.sblock("root"):
            T.reads(C[0:FRAG_C])
            T.writes(O[0:TILE_M, 0:TILE_N])
            for i, j in T.grid(TILE_M, TILE_N):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    _lane, reg = T.meta_var(c_fragment(vi, vj))
                    T.reads(C[reg])
                    T.writes(O[vi, vj])
                    O[vi, vj] = C[reg]

    @T.prim_func(s_tir=True)
    def impl(c: T.handle, out: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        O = T.match_buffer(out, (TILE_M, TILE_N), "float32", offset_factor=1, scope=scope, strides=[s0, s1])
        with T.sblock("root"):
            T.reads(C[0:FRAG_C])
            T.writes(O[0:TILE_M, 0:TILE_N])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                for r in T.unroll(FRAG_C):
                    # c_fragment inverted: lane (g, t), register r -> row g + 8 (r // 2 % 2), column 8 (r // 4) + 2t + r % 2
                    O[tx // 4 + 8 * (r // 2 % 2), 8 * (r // 4) + 2 * (tx % 4) + r % 2] = C[r]

    return desc, impl


def _load16(scope: str, operand: str, dtype: str):
    """Shared tile (16 x 16 of 16-bit values) -> one lane's 8 halves: one ``ldmatrix.x4``.

    Lane l gives the address of row l % 16, column 8 (l // 16) of the tile: for A (rows m)
    matrices (m 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) -> halves 0-1, 2-3, 4-5, 6-7;
    for B (rows k, ``.trans``) (k 0-7, n 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), the same."""
    tvm_dtype = SIXTEEN_BIT[dtype][0]
    where = a16_fragment if operand == "A" else b16_fragment
    trans = operand == "B"

    @T.prim_func(s_tir=True)
    def desc(frag_handle: T.handle, shared_handle: T.handle) -> None:
        shared = T.match_buffer(shared_handle, (TILE_M, TILE_K16), tvm_dtype, align=64, offset_factor=16,
                                scope=scope)
        frag = T.match_buffer(frag_handle, (FRAG16_AB,), tvm_dtype, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(shared[0:TILE_M, 0:TILE_K16])
            T.writes(frag[0:FRAG16_AB])
            for ax0, ax1 in T.grid(TILE_M, TILE_K16):
                with T.sblock("load"):
                    r, c = T.axis.remap("SS", [ax0, ax1])
                    _lane, reg = T.meta_var(where(r, c))
                    T.reads(shared[r, c])
                    T.writes(frag[reg])
                    frag[reg] = shared[r, c]

    @T.prim_func(s_tir=True)
    def impl(frag_handle: T.handle, shared_handle: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        shared = T.match_buffer(shared_handle, (TILE_M, TILE_K16), tvm_dtype, align=64, offset_factor=16,
                                scope=scope, strides=[s0, s1])
        frag = T.match_buffer(frag_handle, (FRAG16_AB,), tvm_dtype, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(shared[0:TILE_M, 0:TILE_K16])
            T.writes(frag[0:FRAG16_AB])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(
                    trans, 4, ".b16", frag.data, frag.elem_offset, shared.access_ptr("r"),
                    s0 * (tx % 16) + 8 * (tx // 16), dtype=tvm_dtype))

    return desc, impl


def _mma16(dtype: str):
    """C (16 x 16, fp32) += A (16 x 16) @ B (16 x 16), 16-bit inputs: two m16n8k16 per tile."""
    tvm_dtype, ptx = SIXTEEN_BIT[dtype]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (FRAG16_AB,), tvm_dtype, offset_factor=1, scope="local")
        B = T.match_buffer(b, (FRAG16_AB,), tvm_dtype, offset_factor=1, scope="local")
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:FRAG_C], A[0:FRAG16_AB], B[0:FRAG16_AB])
            T.writes(C[0:FRAG_C])
            for i, j, k in T.grid(TILE_M, TILE_N, TILE_K16):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    _lc, rc = T.meta_var(c_fragment(vi, vj))
                    _la, ra = T.meta_var(a16_fragment(vi, vk))
                    _lb, rb = T.meta_var(b16_fragment(vk, vj))
                    T.reads(C[rc], A[ra], B[rb])
                    T.writes(C[rc])
                    C[rc] = C[rc] + T.Cast("float32", A[ra]) * T.Cast("float32", B[rb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (FRAG16_AB,), tvm_dtype, offset_factor=1, scope="local")
        B = T.match_buffer(b, (FRAG16_AB,), tvm_dtype, offset_factor=1, scope="local")
        C = T.match_buffer(c, (FRAG_C,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:FRAG_C], A[0:FRAG16_AB], B[0:FRAG16_AB])
            T.writes(C[0:FRAG_C])
            for _tx in T.thread_binding(0, WARP, "threadIdx.x"):
                for half in T.unroll(2):  # n 0-7 and n 8-15: B halves 0-3 / 4-7, C regs 0-3 / 4-7
                    T.evaluate(T.ptx_legacy.mma(
                        "m16n8k16", "row", "col", ptx, ptx, "fp32",
                        A.data, A.elem_offset, B.data, B.elem_offset + 4 * half,
                        C.data, C.elem_offset + 4 * half, False, dtype="float32"))

    return desc, impl


def _name(kind: str, scope: str = "") -> str:
    return f"matmul_ladder_{kind}" + (f"_{scope.replace('.', '_')}" if scope else "")


SCOPES = ("shared", "shared.dyn")
LOAD_A = {s: _name("tf32_load_a", s) for s in SCOPES}
LOAD_B = {s: _name("tf32_load_b", s) for s in SCOPES}
MMA = _name("tf32_mma_16x16x8")
SPLIT_LOAD_A = {s: _name("tf32x3_load_a", s) for s in SCOPES}
SPLIT_LOAD_B = {s: _name("tf32x3_load_b", s) for s in SCOPES}
SPLIT_MMA = _name("tf32x3_mma_16x16x8")
SPLIT_MMA_PROMOTE = _name("tf32x3_mma_16x16x8_promote")
FILL = _name("fill_16x16_f32")
FRAG_ADD = _name("add_16x16_f32")
STORE = {s: _name("store_16x16_f32", s) for s in SCOPES}
# 16-bit inputs, by dtype (fp16, bf16) and scope: registered apart (register16), on first use.
LOAD16_A = {(d, s): _name(f"{d}_ldmatrix_a", s) for d in SIXTEEN_BIT for s in SCOPES}
LOAD16_B = {(d, s): _name(f"{d}_ldmatrix_b_trans", s) for d in SIXTEEN_BIT for s in SCOPES}
MMA16 = {d: _name(f"{d}_mma_16x16x16_f32") for d in SIXTEEN_BIT}


_registering = threading.Lock()
_registered = False


def tensorize(sch, block_or_loop, name: str) -> None:
    """``sch.tensorize`` with one of these intrinsics, registering them all first if no one has
    (the 16-bit ones only when a 16-bit one is asked for: fp32 builds never parse them)."""
    register()
    if name in _SIXTEEN_BIT_NAMES:
        register16()
    sch.tensorize(block_or_loop, name)


_SIXTEEN_BIT_NAMES = frozenset([*LOAD16_A.values(), *LOAD16_B.values(), *MMA16.values()])
_registered16 = False


def register16() -> None:
    """Register the 16-bit intrinsics (fp16, bf16) with TVM, once per process."""
    global _registered16
    with _registering:
        if not _registered16:
            for dtype in SIXTEEN_BIT:
                for scope in SCOPES:
                    TensorIntrin.register(LOAD16_A[dtype, scope], *_load16(scope, "A", dtype), override=True)
                    TensorIntrin.register(LOAD16_B[dtype, scope], *_load16(scope, "B", dtype), override=True)
                TensorIntrin.register(MMA16[dtype], *_mma16(dtype), override=True)
            _registered16 = True


def register() -> None:
    """Register every intrinsic here with TVM, once per process."""
    global _registered
    with _registering:
        if not _registered:
            _register()
            _registered = True


def _register() -> None:
    for scope in SCOPES:
        TensorIntrin.register(LOAD_A[scope], *_load(scope, "A"), override=True)
        TensorIntrin.register(LOAD_B[scope], *_load(scope, "B"), override=True)
        TensorIntrin.register(SPLIT_LOAD_A[scope], *_load(scope, "A", split=True), override=True)
        TensorIntrin.register(SPLIT_LOAD_B[scope], *_load(scope, "B", split=True), override=True)
        TensorIntrin.register(STORE[scope], *_store(scope), override=True)
    TensorIntrin.register(MMA, *_mma(split=False), override=True)
    TensorIntrin.register(SPLIT_MMA, *_mma(split=True), override=True)
    TensorIntrin.register(SPLIT_MMA_PROMOTE, *_mma(split=True, promote=True), override=True)
    TensorIntrin.register(FILL, *_fill(), override=True)
    TensorIntrin.register(FRAG_ADD, *_add(), override=True)
