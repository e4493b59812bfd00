"""Step 28 — 3xFP16: fp32 accuracy from three fp16 products on scaled operands.

Idea: step 25 runs 3xTF32 at a third of the TF32 rate, and on Hopper a TF32 product costs two
16-bit ones. fp16 keeps TF32's 11 significant bits but not its exponent range, so scale first:
each row of A and each column of B by the power of two that puts its largest finite magnitude
in [2^14, 2^15) (``shift``). Then x 2^s = hi + lo with hi = fp16(x 2^s) and lo = fp16(x 2^s -
hi), which is step 19's big and small halves for every value within 2^18 of its row's largest,
and A B = 2^-(s_row + s_col) (hi_A hi_B + hi_A lo_B + lo_A hi_B) up to the dropped lo lo. The
three products are fp16 wgmma at twice the TF32 rate; the scale comes back in the store, one
ldexpf a value (one rounding). Three pieces, in the order the function runs them:
- **The scales** (``operand_scales``): copy kernels before the GEMM find each row's largest
  finite |a| (a block per row, a cross-thread reduction) and each column's largest |b| (chunks
  of K, then the chunks' maxima). Infinities and NaN are left out of the maxima, so they stay
  where they are and come out NaN (below).
- **The split** (``split_operands``): copy kernels write A's halves side by side, hi in columns
  0..Kr and lo in Kr..2Kr of an fp16 [M, 2Kr] (K rounded up to the 64-k slice, zeros past K),
  and B's, hi in rows 0..Kr and lo in Kr..2Kr of an fp16 [2Kr, N]: one tensor map each, a
  half chosen by the box's coordinate. The same bytes as the fp32 operands.
- **The GEMM** (``load_halves``, ``multiply_halves``, ``consume_halves``, ``store_unscaled``):
  step 20's persistent kernel in its 16-bit form (B^T read MN-major through a transposed
  descriptor, A K-major), four tiles a stage (both halves of each), three wgmma
  m64n128k16 a 16 k (the small products first, hi x hi last, as step 19), restarted every
  `promote` slices and added to an fp32 total as step 19 does: the tensor core truncates the
  sums it adds into, and at a long K one sum over all products misses (docs/fp32-contract.md).
  The store scales the total back and, where it is NaN (an infinite or NaN operand: hi = inf,
  lo = inf - inf), recomputes that output with serial FFMA on the fp32 operands, as step 19.

What the scale costs in accuracy (docs/fp32-contract.md's CPU study): nothing for values within
2^18 of their row's (column's) largest; a smaller one keeps fewer bits, down to none below 2^-40
of it (fp16's subnormals), where 3xTF32 keeps 21 bits down to fp32's own range. A product of
such small values carries weight in an output only when another column of the same row is
2^40 larger and cancels: a limit of this rung, written down, as step 19's TF32 range is its
(step 19 loses bits below 2^-126 instead, where this rung keeps them: tiny x huge).

Prediction: at 8192^3 on the H200, cuBLAS bf16 ran 667 TFLOP/s and step 27 691; three fp16
products per product at ~650 is ~215 TFLOP/s of fp32-accurate work before the copies; the
copies read A and B twice and write them once (~1.3 GB at 8192^2, ~0.4 ms of ~5 ms): ~195, 1.5x
step 25. The tile is 128 x 128 (the total's registers, as step 19), which reads more per
product than the 16-bit rungs' 256 x 128: if L2 bandwidth limits it, less.

Measured (NVIDIA H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-29, kernel time of the whole
function, copies included; alternating rounds in one process, the board at its 700 W cap;
results/nvidia-h200/evidence/step28_rounds.txt):
- the first version wrote the split one value a thread and computed the shift (ilogbf) three
  times a value: 182 TFLOP/s at 8192^3, 1.47-1.62x step 25 in six rounds. Nsight Compute: the
  two split kernels took 307 and 297 us (1.7 TB/s), the maxima 64 and 67, the GEMM 4.64 ms. Now
  the shifts are computed once per row and column, and the split reads a float4 and writes four
  halves of each half a thread: 127 and 123 us; the copies 388 us of ~5.2 ms at 8192^3 (7%),
  109 of ~650 us at 4096^3 (17%).
- four rounds, TFLOP/s (x step 25 per round): 8192^3 211.3 against step 25's 119.6 (1.72-1.81x),
  cuBLAS SGEMM 50.7 (4.2x), cuBLAS TF32 394; 4096^3 203.0 against 124.6 (1.48-1.76x); 2048^3
  135.5 against 125.4 (1.05-1.10x); 1024^3 44.4 against 68.7 (0.64-0.65x: seven launches of
  copies beside a short GEMM; step 25 stays the faster kernel there, EXPECTED_REGRESSION).
  The prediction (195) was low: the GEMM kernel alone took 4.39-4.64 ms at 8192^3 under Nsight
  Compute, 237-250 TFLOP/s of fp32-accurate work (711-751 of fp16 products), where cuBLAS bf16
  ran 667 at that size on this board (docs/hopper.md).
- the committed ladder run (python -m steps.step28 --sizes 512 1024 2048 4096 8192 --save, results/
  nvidia-h200/step28.json): 137.5 / 189.4 / 208.6 TFLOP/s at 2048 / 4096 / 8192^3, 1.15x / 1.55x /
  1.67x step 25 and 2.74x / 3.70x / 4.09x cuBLAS SGEMM in the same run. At 512 and 1024 the
  timing is the host's: submitting the function (eight launches, two tensor maps encoded) took
  37-41 us against 36-40 us on the GPU. Nsight Compute at 1024^3: the copies 26 us, the GEMM 20.
- promote: every slice (64 k) is the fastest as well as the most accurate: 181.9 / 171.2 /
  177.6 TFLOP/s at promote 1 / 2 / 4 (8192^3, six rounds, first version), errors 3.3e-7 / 5.0e-7
  / 9.3e-7. Why the longer chunks are not faster was not measured (step 25 gained 3-5% from
  promote 2; here the two consumers' groups share one pipe that stays 91% busy, below).
- Nsight Compute, the GEMM kernel at 8192^3: tensor pipe active 91.2% of cycles
  (sm__pipe_tensor_op_hmma_cycles_active), 50,331,648 wgmma; per issued instruction a warp waits
  2.7 cycles on the barrier (wgmma.fence's warpgroup sync after each drain), 1.3 on wait
  (fixed latency), 0.7 on long scoreboard (the mbarriers); 168 registers, no spills.
- the 64 x 64 tile rule below a wave of 128 x 128 tiles (step 19's, measured there 2x on
  128 x 4096 x 4096) measured the same as 128 x 128 at 1024^3 (44.4 against 43.9), where the
  copies take most of the time.
- error against float64 (C poisoned with NaN): 2.7e-7 to 3.3e-7 at 512-8192^3 against cuBLAS
  SGEMM's 2.9e-7 to 1.6e-6; 2.3e-7 to 4.8e-7 on 257 x 129 x 95, 1000 x 1500 x 700, 33 x 65 x
  129, 4097 x 33 x 1001, 300 x 5000 x 2001, 1 x 4096 x 4096, 3000 x 2999 x 517 and 64 x 64 x
  70000 (K past 32768: the total goes into C every 512 chunks). Every class of python -m
  steps.special within the contract, below SGEMM's error on most (2.6e-7 against 5.7e-7 at
  every scale from 2^60 to 2^-64); three come out better than step 25, as the CPU study said:
  scale 2^-70 5.3e-5 (SGEMM 1.7e-3), fp32's largest 4.4e-8 (step 25 4.7e-7, SGEMM 2.3e-8),
  tiny x huge 2.6e-7 (step 25 1.5e-5, its stated limit).

A fused epilogue (D = act(alpha * AB + bias + beta * C_in), issue 50) goes in ``store_unscaled``
after the unscale, as step 19's goes after its total: the fallback's test reads the raw total,
and a thread whose test fires writes its raw products back, recomputes what the fallback asks,
then applies the epilogue in place, so the contract is the bare kernel's. Measured (H200,
2026-11-29, python -m steps.epilogue --step 28 --sizes 4096 --rounds 3): bias and GELU 1.034x
the bare kernel (0.7659 against 0.7408 ms), the product and a separate kernel 1.050x the fused
one; error 2.9e-7. As in steps 19-22, the store runs while no wgmma does.

In a model (schedules/integration/relax_dispatch.py places the Hopper rungs): the H200's fp32
rows (python -m steps.bench --save, results/nvidia-h200/evidence/bench_fp32_rows.txt) pick step
28 from 2048^3 up and for the block's 1024 x 1024 x 4096 product at 1024 tokens, where the block
ran 0.309 ms: 2.33x PyTorch eager fp32, 4.66x dlight, error 4.8e-7 (one round;
results/nvidia-h200/evidence/step28_models.txt). The first try did not compile: a model's kernels
share one CUDA source, where this kernel's dynamic shared memory (halves) and step 25's (floats)
were both the extern "smem"; it is named apart now (``persistent_halves``).

Issue 48's bar for the fp32-accurate rung is the H100's: 130 TFLOP/s at 8192^3, aim 140. On the
H200 this rung runs 211, 1.77x step 25 in the same rounds; step 25 read 123-131 on the H100.
Not measured on an H100 (none lent since 2026-11-28).

Run: python -m steps.step28
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from .config import Wgmma3xFP16Config
from .lowering import fp32_fallback
from .step18_register_a import MN_MAJOR_LBO, MN_MAJOR_SBO, c_col, c_row
from .step19_3xtf32_wgmma import FLUSH_CHUNKS, SMALL_TILE, WAVE_SMS, flush_partial, flushes, recompute_flagged
from .step20_persistent import blocks_for, grid, produce_tiles, tile_loop
from .transforms import wgmma
from .transforms.wgmma import (DESC_LBO, DESC_SBO, L2_PROMOTION_128B, PRODUCER_REGS, SWIZZLE_128B, TMA_LOAD, WARPGROUP,
                               Plan, _ceil, _round_up)

NUMBER = 28
TENSOR_CORES = True
NAME = "3xFP16 (scaled fp16 halves)"
IDEA = ("fp32 accuracy from three fp16 products: A and B scaled by a power of two per row and column, "
        "split into fp16 halves before the GEMM, the total promoted in fp32 and scaled back in the store")
PRECISION = "fp32"
ARCH = "sm_90a"
PRIOR = 25  # an fp32-accurate rung: measured against step 25
Config = Wgmma3xFP16Config
PASS_CONFIG: dict = {}
PIECES = ("shift", "operand_scales", "split_operands", "load_halves", "multiply_halves", "consume_halves",
          "store_unscaled")
EPILOGUE = True  # store_unscaled: D = the epilogue of the unscaled total, the fallback on the raw product
# Below 2048^3 the copies (seven launches over A and B) weigh more than the GEMM they feed.
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024),
    "the scale and split copies over A and B (seven launches before the GEMM: 26 us at 1024^3 beside a "
    "GEMM of 20, and as long again to submit) cost more than the three fp16 products save against "
    "step 25's 3xTF32 at this size; from 2048^3 step 28 is faster",
)

# A row's (column's) largest finite magnitude goes to [2^TOP, 2^(TOP + 1)): fp16's largest finite
# value is 65504 < 2^16, and hi rounds up at most to 2^(TOP + 1).
TOP = 14
ROW_THREADS = 256  # A's row maxima: a block per row
COLUMN_CHUNK = 64  # B's column maxima: a thread per (chunk of K, column), then per column
COPY_THREADS = 256
# 128 registers a consumer thread (the accumulator and the total); the producer keeps step 16's.
CONSUMER_REGS = 232
SMALL_STAGES = 6


def default_config(M: int, N: int, K: int) -> Wgmma3xFP16Config:
    """128 x 128 tiles in 3 stages (64 KB each); where those would not fill the SMs, step 19's
    rule: 64 x 64 tiles (one consumer), 6 stages of 32 KB."""
    tiles = _ceil(M, Wgmma3xFP16Config.block_m) * _ceil(N, Wgmma3xFP16Config.block_n)
    if tiles < WAVE_SMS:
        small = _ceil(M, SMALL_TILE) * _ceil(N, SMALL_TILE)
        return Wgmma3xFP16Config(block_m=SMALL_TILE, block_n=SMALL_TILE, stages=SMALL_STAGES, ctas=blocks_for(small))
    return Wgmma3xFP16Config(ctas=blocks_for(tiles))


@dataclass(frozen=True)
class SplitPlan(Plan):
    """Step 20's plan (fp16) with both halves of each operand in a stage: A's hi and lo tiles,
    then B's hi and lo tiles; the tensor maps over the split operands [M, 2Kr] and [2Kr, N]."""

    @property
    def Kr(self) -> int:
        return _round_up(self.K, self.BK)

    @property
    def Nq(self) -> int:
        return _round_up(self.N, self.align)

    @property
    def stage_fl(self) -> int:
        return 2 * (self.A_fl + self.B_fl)

    @property
    def tx_bytes(self) -> int:
        return self.eb * self.stage_fl

    def a_tile(self, s, half):
        return s * self.stage_fl + half * self.A_fl

    def b_tile(self, s, half):
        return s * self.stage_fl + 2 * self.A_fl + half * self.B_fl

    @property
    def A_tma(self) -> list:
        return [2 * self.Kr, self.M, 2 * self.Kr * self.eb, self.BK, self.BM, 1, 1, 0, SWIZZLE_128B,
                L2_PROMOTION_128B, 0]

    @property
    def B_tma(self) -> list:
        return [self.Nq, 2 * self.Kr, self.Nq * self.eb, self.box_n, self.BK, 1, 1, 0, SWIZZLE_128B,
                L2_PROMOTION_128B, 0]


def shift(largest):
    """s with largest * 2^s in [2^TOP, 2^(TOP + 1)) (ilogbf: subnormals too); 0 for a row of
    zeros, infinities and NaN (largest 0)."""
    return T.if_then_else(largest > T.float32(0), TOP - T.call_pure_extern("int32", "ilogbf", largest), 0)


def power_of_two(e):
    return T.call_pure_extern("float32", "ldexpf", T.float32(1), e)


def finite_magnitude(x):
    return T.if_then_else(T.isfinite(x), T.fabs(x), T.float32(0))


def nan(x):
    """x is NaN, read from its bits (fp32_fallback's test, a compiler flag cannot fold it away)."""
    return fp32_fallback._magnitude_bits(x) > T.uint32(0x7F800000)


def hi(xs):
    return T.Cast("float16", xs)


def lo(xs):
    # xs - hi is exact in fp32 (hi is xs rounded to 11 bits); fp16 keeps 11 of its up to 13.
    return T.Cast("float16", xs - T.Cast("float32", T.Cast("float16", xs)))


def operand_scales(plan: SplitPlan):
    """A macro: the largest finite |a| of each row of A (a reduction block, scheduled as a block
    per row) and |b| of each column of B, in two passes: per chunk of COLUMN_CHUNK k, then over
    the chunks (a thread per column reads along a row: coalesced); then each row's and column's
    shift (``shift``) and the shift as two factors 2^(s >> 1) and 2^(s - (s >> 1)), each a
    normal fp32: x 2^s is x times one, then the other, exactly wherever the result is within
    fp16's range (the split multiplies by them, four values at a time; ldexpf takes no vector)."""
    M, N, K = plan.M, plan.N, plan.K
    chunks = _ceil(K, COLUMN_CHUNK)

    @T.macro
    def shifts(largest, shift_, factor, extent, name):
        for i in T.serial(extent):
            with T.sblock(name):
                v = T.axis.spatial(extent, i)
                s = T.meta_var(shift(largest[v]))
                shift_[v] = s
                factor[0, v] = power_of_two(s >> 1)
                factor[1, v] = power_of_two(s - (s >> 1))

    @T.macro
    def scales(A, B, largest_a, partial_b, largest_b, shift_a, shift_b, factor_a, factor_b):
        for m, k in T.grid(M, K):
            with T.sblock("A_row_max"):
                vm, vk = T.axis.remap("SR", [m, k])
                with T.init():  # max's identity, so TVM finds the reducer (every value is at least 0)
                    largest_a[vm] = T.min_value("float32")
                largest_a[vm] = T.max(largest_a[vm], finite_magnitude(A[vm, vk]))
        for c, n, kk in T.grid(chunks, N, COLUMN_CHUNK):
            with T.sblock("B_chunk_max"):
                vc, vn, vk = T.axis.remap("SSR", [c, n, kk])
                with T.init():
                    partial_b[vc, vn] = T.float32(0)
                partial_b[vc, vn] = T.max(partial_b[vc, vn], T.if_then_else(
                    vc * COLUMN_CHUNK + vk < K, finite_magnitude(B[T.min(vc * COLUMN_CHUNK + vk, K - 1), vn]),
                    T.float32(0)))
        for n, c in T.grid(N, chunks):
            with T.sblock("B_column_max"):
                vn, vc = T.axis.remap("SR", [n, c])
                with T.init():
                    largest_b[vn] = T.float32(0)
                largest_b[vn] = T.max(largest_b[vn], partial_b[vc, vn])
        shifts(largest_a, shift_a, factor_a, M, "A_shift")
        shifts(largest_b, shift_b, factor_b, N, "B_shift")

    return scales


def split_operands(plan: SplitPlan):
    """A macro: the fp16 halves of the scaled operands, hi and lo side by side along K; zeros in
    A's columns and B's rows past K (they meet the other operand's padding, which must not be
    NaN) and in B's columns past N."""
    M, N, K, Kr, Nq = plan.M, plan.N, plan.K, plan.Kr, plan.Nq

    @T.macro
    def split(A, B, factor_a, factor_b, As, Bs):
        for m, k in T.grid(M, K):
            with T.sblock("A_split"):
                vm, vk = T.axis.remap("SS", [m, k])
                xs = T.meta_var(A[vm, vk] * factor_a[0, vm] * factor_a[1, vm])
                As[vm, vk] = hi(xs)
                As[vm, Kr + vk] = lo(xs)
        for k, n in T.grid(K, N):
            with T.sblock("B_split"):
                vk, vn = T.axis.remap("SS", [k, n])
                xs = T.meta_var(B[vk, vn] * factor_b[0, vn] * factor_b[1, vn])
                Bs[vk, vn] = hi(xs)
                Bs[Kr + vk, vn] = lo(xs)
        if Kr != K:
            for m, k, h in T.grid(M, Kr - K, 2):
                with T.sblock("pad_A_halves"):
                    vm, vk, vh = T.axis.remap("SSS", [m, k, h])
                    As[vm, vh * Kr + K + vk] = T.float16(0)
            for k, n, h in T.grid(Kr - K, Nq, 2):
                with T.sblock("pad_B_rows"):
                    vk, vn, vh = T.axis.remap("SSS", [k, n, h])
                    Bs[vh * Kr + K + vk, vn] = T.float16(0)
        if Nq != N:
            for k, n, h in T.grid(K, Nq - N, 2):
                with T.sblock("pad_B_columns"):
                    vk, vn, vh = T.axis.remap("SSS", [k, n, h])
                    Bs[vh * Kr + vk, N + vn] = T.float16(0)

    return split


def load_halves(plan: SplitPlan):
    """A macro: a stage's six TMA loads: A's tile and B's boxes (step 18's), from the hi half
    and from the lo half (its coordinate along K moved by Kr)."""
    BK, BN, box, Kr = plan.BK, plan.BN, plan.box_n, plan.Kr

    @T.macro
    def load(smem, A_map, B_map, kt, s, m0, n0):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(smem[plan.full_bar(s)]), T.uint32(plan.tx_bytes))
        for half in T.unroll(2):
            T.ptx[TMA_LOAD](T.address_of(smem[plan.a_tile(s, half)]), T.address_of(A_map), half * Kr + kt * BK, m0,
                            T.address_of(smem[plan.full_bar(s)]))
            for c in T.unroll(BN // box):
                T.ptx[TMA_LOAD](T.address_of(smem[plan.b_tile(s, half) + c * BK * box]), T.address_of(B_map),
                                n0 + c * box, half * Kr + kt * BK, T.address_of(smem[plan.full_bar(s)]))

    return load


def multiply_halves(plan: SplitPlan):
    """A macro: a consumer's three fp16 wgmma per 16 k of a slice (step 18's 16-bit form: B^T's
    box MN-major, A's tile K-major), one commit group; the chunk's first restarts the sum."""
    BK, wg_k, acc_n, mma, box = plan.BK, plan.wg_k, plan.acc_n, plan.mma, plan.box_n

    @T.macro
    def multiply(smem, acc, descA, descB, s, restart, wg):
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // wg_k):
            # lo_B x hi_A and hi_B x lo_A, then hi_B x hi_A (the small products first, as step 19).
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]),
                                                  T.address_of(smem[plan.b_tile(s, 1) + wg * BK * box + kk * wg_k * box]),
                                                  MN_MAJOR_LBO, MN_MAJOR_SBO, SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[plan.a_tile(s, 0) + kk * wg_k]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], descA[0], descB[0], T.ptx.pred(T.Or(kk > 0, T.Not(restart))),
                       1, 1, 1, 0)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]),
                                                  T.address_of(smem[plan.b_tile(s, 0) + wg * BK * box + kk * wg_k * box]),
                                                  MN_MAJOR_LBO, MN_MAJOR_SBO, SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[plan.a_tile(s, 1) + kk * wg_k]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], descA[0], descB[0], T.ptx.pred(True), 1, 1, 1, 0)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[plan.a_tile(s, 0) + kk * wg_k]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], descA[0], descB[0], T.ptx.pred(True), 1, 1, 1, 0)
        T.ptx.wgmma.commit_group.sync.aligned()

    return multiply


def store_unscaled(plan: SplitPlan, out: Plan):
    """A macro: the total, scaled back (ldexpf: one rounding, subnormal results included), to C;
    where a total is NaN (an infinite or NaN operand), that output recomputed with serial FFMA on
    the fp32 operands, as step 19's fallback. At a long K the flushed partial sums (in C, still
    scaled) are added first. With a fused epilogue (C a wgmma.FusedOutput; `out`, the fp32 plan
    that carries it), D = the epilogue of the unscaled total, and as in step 19's ``store_split``
    the fallback's test and recomputation see the raw product: the contract is the bare kernel's."""
    M, N, acc_n, flush = plan.M, plan.N, plan.acc_n, flushes(plan)
    fused = out.epilogue is not None and out.fused
    recompute = recompute_flagged(out, nan)

    def unscaled(total, row, col, shift_a, shift_b):
        return T.call_pure_extern("float32", "ldexpf", total, 0 - shift_a[row] - shift_b[col])

    @T.macro
    def store(C, A, B, shift_a, shift_b, total, flag, fallback, m0, n0, wg, warp, lane):
        flag[0] = 0
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                        if flush:
                            total[i * 4 + 2 * h + c] = total[i * 4 + 2 * h + c] + C[
                                c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)]
                        # (C: the output, or a fused epilogue's D and inputs: wgmma.FusedOutput)
                        wgmma.output(C)[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = wgmma.stored(
                            out, C, unscaled(total[i * 4 + 2 * h + c], c_row(m0, i, c, lane),
                                             c_col(n0, h, wg, warp, lane), shift_a, shift_b),
                            c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane))
                        flag[0] = flag[0] | T.Cast("int32", nan(total[i * 4 + 2 * h + c]))
        if flag[0] != 0:
            if fused:
                # D holds the epilogue's values: put this thread's raw products back for the test
                # and the recomputation below, which read them from D.
                for i in T.unroll(acc_n // 4):
                    for h in T.unroll(2):
                        for c in T.unroll(2):
                            if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                                wgmma.output(C)[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = unscaled(
                                    total[i * 4 + 2 * h + c], c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane),
                                    shift_a, shift_b)
            # Rare: step 19's recomputation of what the test flagged, then the epilogue in place.
            recompute(C, A, B, fallback, m0, n0, wg, warp, lane)

    return store


def consume_halves(plan: SplitPlan, out: Plan):
    """A macro: a consumer walks its block's tiles (step 20's order); on each, step 19's chunks
    (``consume_split``'s promotion and hand-back of stages) over three fp16 products, then the
    store."""
    KT, stages, acc_n, promote, flush = plan.KT, plan.stages, plan.acc_n, plan.cfg.promote, flushes(plan)
    multiply, store, flush_partial_ = multiply_halves(plan), store_unscaled(plan, out), flush_partial(plan)

    @T.macro
    def consumer(smem, acc, total, flag, fallback, descA, descB, A, B, shift_a, shift_b, C, bid, wg, warp, lane):
        count, corner = T.meta_var(tile_loop(plan, bid))
        for t in T.serial(count):
            m0, n0 = T.meta_var(corner(t))
            for i in T.unroll(acc_n):
                acc[i] = T.float32(0)
                total[i] = T.float32(0)
                T.cuda.wgmma.noop_barrier(acc[i])
            for kt in T.serial(KT):
                T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((t * KT + kt) % stages)]),
                                     ((t * KT + kt) // stages) & 1)
                multiply(smem, acc, descA, descB, (t * KT + kt) % stages, kt % promote == 0, wg)
                if (kt + 1) % promote == 0 or kt == KT - 1:
                    # The chunk's last slice: wait for all its wgmma, add its sum to the total.
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    for i in T.unroll(acc_n):
                        T.evaluate(wgmma.fence_operand(acc[i]))
                        total[i] = total[i] + acc[i]
                    if flush:
                        if (kt // promote + 1) % FLUSH_CHUNKS == 0 and kt != KT - 1:
                            flush_partial_(C, total, kt // promote + 1, m0, n0, wg, warp, lane)
                    if kt % promote != 0:
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[plan.empty_bar((t * KT + kt - 1) % stages)]), T.uint32(1))
                    T.ptx.mbarrier.arrive.shared.b64(T.address_of(smem[plan.empty_bar((t * KT + kt) % stages)]),
                                                     T.uint32(1))
                else:
                    # The previous slice's group is done: its stage goes back (if it is this chunk's).
                    T.ptx.wgmma.wait_group.sync.aligned(1)
                    if kt % promote != 0:
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[plan.empty_bar((t * KT + kt - 1) % stages)]), T.uint32(1))
            store(C, A, B, shift_a, shift_b, total, flag, fallback, m0, n0, wg, warp, lane)

    return consumer


def persistent_halves(plan: SplitPlan, producer, consumer):
    """The GEMM kernel: step 20's roles on its persistent grid, the consumers with step 19's
    registers (accumulator, total, fallback); it reads the split operands through their tensor
    maps and the fp32 ones (the fallback) and the maxima (the unscale) directly. The producer
    thread first prefetches a line of each split operand: a use TVM's storage planner sees, so
    it does not give their memory to another buffer (wgmma.keep_operands_live says why)."""
    M, N, K, Kr, Nq = plan.M, plan.N, plan.K, plan.Kr, plan.Nq

    @T.macro
    def kernel(A, B, As, Bs, shift_a, shift_b, C, A_map, B_map):
        for bid in T.thread_binding(grid(plan), thread="blockIdx.x"):
            for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A[0:M, 0:K], B[0:K, 0:N], As[0:M, 0:2 * Kr], Bs[0:2 * Kr, 0:Nq], shift_a[0:M],
                            shift_b[0:N])
                    T.writes(C[0:M, 0:N])
                    # Named apart from the other rungs' "smem": CUDA declares a kernel's dynamic shared
                    # memory as an extern array, and a model's kernels share one source, where an
                    # extern "smem" of halves here and of floats in step 25 do not compile together.
                    smem_halves = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                    smem = T.meta_var(smem_halves)
                    acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                    total = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                    flag = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    fallback = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    wg = T.meta_var((tid - plan.first) // WARPGROUP)
                    warp = T.meta_var(tid % WARPGROUP // 32)
                    lane = T.meta_var(tid % 32)
                    wgmma.init_barriers(plan)(smem, tid)
                    if tid < WARPGROUP:
                        T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                        if tid == 0:
                            wgmma.keep_operands_live(As, Bs)
                            producer(smem, A_map, B_map, bid)
                    else:
                        T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
                        consumer(smem, acc, total, flag, fallback, descA, descB, A, B, shift_a, shift_b, C,
                                 bid, wg, warp, lane)

    return kernel


def kernel(M: int, N: int, K: int, cfg: Wgmma3xFP16Config, dtype: str = "fp32", epilogue=None, fused=True):
    # (dtype: fp32 inputs only, Step.check_dtype; the parameter is the Hopper rungs' signature.)
    p = SplitPlan(M, N, K, cfg, "float16")
    out = wgmma.plan(M, N, K, cfg, "fp32", epilogue=epilogue, fused=fused)  # C's: fp32, and the epilogue
    Kr, Nq, chunks = p.Kr, p.Nq, _ceil(K, COLUMN_CHUNK)
    scales, split = operand_scales(p), split_operands(p)
    gemm = persistent_halves(p, produce_tiles(p, load_halves(p)), consume_halves(p, out))
    apply_epilogue = wgmma.separate_epilogue(out)

    @T.macro
    def product(A, B, C, unfused):
        largest_a = T.alloc_buffer((M,), "float32")
        partial_b = T.alloc_buffer((chunks, N), "float32")
        largest_b = T.alloc_buffer((N,), "float32")
        shift_a = T.alloc_buffer((M,), "int32")
        shift_b = T.alloc_buffer((N,), "int32")
        factor_a = T.alloc_buffer((2, M), "float32")
        factor_b = T.alloc_buffer((2, N), "float32")
        As = T.alloc_buffer((M, 2 * Kr), "float16")
        Bs = T.alloc_buffer((2 * Kr, Nq), "float16")
        scales(A, B, largest_a, partial_b, largest_b, shift_a, shift_b, factor_a, factor_b)
        split(A, B, factor_a, factor_b, As, Bs)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, "float16", 2, As.data, *p.A_tma)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, "float16", 2, Bs.data, *p.B_tma)
        gemm(A, B, As, Bs, shift_a, shift_b, C, A_map, B_map)
        if unfused is not None:  # the epilogue as a kernel of its own, from C to D
            apply_epilogue(C, unfused, As, Bs)

    # main(A, B, C), or with the epilogue main(A, B, [bias], [C_in], D): the Hopper rungs' signatures.
    return wgmma.entry(M, N, K, "float32", epilogue, fused, product)


VECTOR = 4  # the split's values a thread: a float4 load, two 8-byte stores


def schedule_copies(sch) -> None:
    """The copy kernels before the GEMM: A's row maxima a block per row (its k over the block's
    threads: a cross-thread reduction); the column maxima, shifts and paddings a thread per value;
    the splits VECTOR values a thread along the row where the row's length allows."""
    block = sch.get_sblock("A_row_max")
    m, k = sch.get_loops(block)
    _, tx = sch.split(k, [None, ROW_THREADS])
    sch.bind(m, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        name = sch.get(block).name_hint
        if name in ("C", "A_row_max", "epilogue"):  # bound as written, or above
            continue
        loops = sch.get_loops(block)
        if name == "B_column_max":
            loops = loops[:1]  # its chunks stay a loop in the thread
        elif name == "B_chunk_max":
            loops = loops[:2]
        vector = None
        if name in ("A_split", "B_split") and sch.get(loops[-1]).extent.value % VECTOR == 0:
            loops[-1], vector = sch.split(loops[-1], [None, VECTOR])
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        bx, tx = sch.split(fused, [None, COPY_THREADS])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        if vector is not None:
            sch.vectorize(vector)
