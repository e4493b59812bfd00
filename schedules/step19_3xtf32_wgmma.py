"""Step 19 — 3xTF32 on wgmma: fp32 accuracy at Hopper's tensor-core rate.

Idea: step 14's arithmetic on step 18's pipeline. Each operand x is big = tf32(x) plus small =
x - big, and x*y ~ small_x*big_y + big_x*small_y + big_x*big_y: three TF32 products with fp32's
accuracy (docs/tensor-cores.md). Step 18 computes C^T = B^T A^T, B^T from registers and A from
shared memory, so the split falls into two places:
- **B^T, in registers.** Each consumer thread masks its fragment registers as it loads them
  (big = x & 0xFFFFE000, small = x - big): 16 of each per 32-k slice.
- **A, once per shared tile.** wgmma reads A's tile from shared memory, and reads an fp32 value
  as TF32 by dropping its low 13 bits: the tile TMA writes is already A's big half. Its small
  half must be a tile of its own, which the producer warpgroup writes: warp 0 issues the TMA
  loads as in step 16, warps 1-3 wait for each stage, write A - tf32(A) beside it in the same
  swizzled positions (an elementwise map keeps the swizzle), fence the generic proxy against
  wgmma's async one, and arrive on a third barrier per stage, "ready", which the consumers wait
  on. One split per element of A per block, not per warp that reads it (step 14 splits each
  fragment in every warp).
- **Why both places, not one design or the other.** wgmma takes at most one operand from
  registers. Step 18 already gives that place to B^T (its register layout is what spares B a
  transposed copy), so B's split is free there, and A, the shared operand, can only be split in
  shared memory: a transform stage for A and register A for B are not two designs to choose
  between here but the two halves of one. The alternative, B^T from shared memory too (a
  transposed copy and both operands' halves written by the producer, step 17's ss form), would
  bring back the copy step 18 removed and double the producer's writes; it was not built.
- **Promotion.** The tensor core truncates the sum it adds each product into (step 14's
  docstring); accumulating all of K on it costs an error linear in K. Each consumer keeps a
  second accumulator: every `promote` slices, it waits for its wgmma (wait_group 0), adds the
  accumulator into the total in fp32 (round to nearest), and the next slice's first wgmma
  restarts it (scale-d false). The total is 64 more registers a thread, so the tile is 128 x
  128 (wgmma m64n128k8, two consumers), not step 18's 256 x 128. Where K is long enough that
  the total would add more than 1024 chunk sums (K over 32768 at promote 1), it is added into C
  every 512 chunks instead (schedules/lowering/long_k.py's reason).
- **fp32's special values.** An infinite x splits into inf and NaN, and subnormal sums are
  truncated by whole units: each thread tests what it stores and recomputes NaN and tiny
  outputs with serial FFMA (schedules/lowering/fp32_fallback.py's test, here written into the kernel).

Prediction. Shared memory per stage (32 k): TMA writes 32 KB, the split reads 16 and writes 16,
the fragment loads read 16, and wgmma reads its shared operand 24 times (4 KB each), 96 KB: 176
KB per 1,540 cycles of tensor work at full rate, 114 B/cycle of the SM's 128. So the tensor pipe
can run near full only if nothing else waits; 93 TFLOP/s (the issue's bar, 1.8x cuBLAS SGEMM)
needs 56% of the TF32 peak for three products, 120 (its aim) 73%.

Measured (H100 80GB HBM3, 2026-11-25, probe runs in one process, 3 alternating rounds with step
14, step 18 and cuBLAS SGEMM; kernel time):
- first version, one producer thread both refilling the ring and (with its warpgroup) splitting
  A: 64.0 / 63.0 TFLOP/s at 4096^3 / 2048^3. The thread that refilled waited for the slice
  before the current one to be freed, and consumers free it only when they promote, so every
  other slice the split of the next stage waited for the consumers to finish this one. Promote 1
  (every slice freed at once) ran 88.7.
- warp 0 loads, warps 1-3 split: 81.6 / 78.3; Nsight Compute: tensor pipe active 51%, warps
  waiting mostly on long scoreboard (the "ready" barrier). The split was one scalar load and
  store per loop trip, and the compiler moves no load past the PTX store (its "memory" clobber):
  each of the 43 trips per stage waited out a shared load, about the time of the stage's wgmma.
- float4, four loads in flight before their stores: 126.1 / 116.7 at promote 2, 126.7 / 115.5
  at promote 1, 122.4 / 113.3 at promote 4, 108.1 at 3 stages; cuBLAS SGEMM 51.7 / 50.5: 2.44x
  / 2.31x at promote 2, past the issue's bars (1.8x / 1.6x) and at its aim (2.3x, ~120). Nsight
  Compute (4096^3, promote 2): tensor pipe active 92.3% (sm__pipe_tensor_op_hmma_cycles_active),
  1.00 ms; per issued instruction a warp waits 11.7 cycles, mostly on the barrier (2.2:
  wgmma.fence's warpgroup sync and the consumers' drains), long scoreboard (2.1: the mbarrier
  waits), fixed latency (1.5) and short scoreboard (1.2: the fragment loads); 3 warps per
  scheduler (one block of 384 threads per SM).
- promote: 1, 2 and 4 run within 1-3% of each other (the two consumers drain together, and the
  producer and the other warps hide it), with errors 5.5e-7, 7.5e-7 and 1.2e-6 at 4096^3
  (cuBLAS SGEMM 1.15e-6): promote 1 is the default. In 6 alternating rounds (step19_probe
  in docs/maintaining.md), promote 2 ran 1.01x / 1.04x promote 1 at 4096 / 2048 (121.7 / 117.6 against
  120.2 / 113.2), raster 4 0.98x / 1.02x: the accuracy is worth more than that.
- Nsight Compute at the default (4096^3, promote 1, results/nvidia-h100-80gb-hbm3/
  evidence/ncu_step19_4096.txt): tensor pipe active 90.4% of cycles, 1.02 ms; per issued instruction a
  warp waits 9.3 cycles: barrier 2.1 (wgmma.fence's warpgroup sync, the drain per slice), short
  scoreboard 1.5 (the fragment loads), long scoreboard 1.4 (mbarrier waits), fixed latency 1.3.
- the sweep (python -m steps.sweep --step 19 --sizes 2048 4096 --top 2, results/
  nvidia-h100-80gb-hbm3/evidence/sweep_hopper.txt): 128 x 128 tiles 126 TFLOP/s against 86-94 for the
  64-wide ones, 4 stages against 104-120 for 2 and 3; raster and promote within the sweep's
  single timings (114-133).
- the committed ladder run (2026-11-25, promote 1, ``--save``, every step and reference in one
  run): 14.0 / 63.3 / 117.5 / 125.4 TFLOP/s at 512 / 1024 / 2048 / 4096, 0.66x / 1.65x / 2.34x /
  2.43x cuBLAS SGEMM (21.2 / 38.5 / 50.3 / 51.7) and 0.64x / 1.13x / 1.76x / 1.77x step 14 (21.8 /
  55.9 / 66.8 / 70.7). At 512 there are 16 blocks for 132 SMs, and step 14 stays the faster
  fp32-accurate kernel there.
- error against float64: 7.4-7.5e-7 at 256^3 to 4096^3 and 6.7-7.4e-7 on 1000 x 1500 x 700,
  1 x 300 x 77, 257 x 129 x 95, 4097 x 33 x 1001 (promote 2); 9.4e-7 at 256 x 256 x 65536. Every
  class of python -m steps.special within the contract (2x SGEMM or 1e-6), with SGEMM's
  non-finite pattern; the limit class (operands near 2^-120) 1.6e-5, as step 14 (TF32's range).

Where its error differs from SGEMM's, and why (python -m steps.special, 2026-11-25, 1024^3 unless
said): on data near 1 at any scale 5.2e-7 against SGEMM's 5.7e-7, the same as step 14's: per
k, the three products carry x and y to within 2^-21 (big is x truncated to TF32; small, x - big,
has up to 13 bits of which the tensor core reads 11), and each tensor-core sum truncates, but
the fp32 total is rounded to nearest every slice (promote 1), where SGEMM's serial FFMA
accumulates 1024 roundings. At K = 2^16 (16 x 16) 6.7e-7 against 4.9e-7: 2048 promotions into
one fp32 total, a sum of 2048 rounded terms where cuBLAS splits K; at 2^20 6.5e-7 against
1.1e-6 (the total goes into C every 512 chunks). With fp32's largest value in a column of A,
4.7e-7 against 2.3e-8: there one product dominates each output, and SGEMM's FFMA computes it
exactly, where the split drops up to two bits of each small half (2^-22 of the value): the
error is the representation of x and y, not the sum. Operands near 2^-120 times 2^100 (a limit
class, not held to the bar): 1.5e-5, as step 14, since TF32's smallest subnormal, 2^-136,
leaves a small half near 2^-131 five bits.

The tile rule (issue 31, after the dispatch rule's audit found step 19 at 0.77x cuBLAS SGEMM on
128 x 4096 x 4096: 32 blocks of 128 x 128 for 132 SMs). Prediction: where an output has fewer
128 x 128 tiles than the GPU has SMs, 64 x 64 tiles (four times the blocks, half the reuse of
each loaded tile) fill the machine and win as long as the kernel is latency-bound, not
bandwidth-bound; at or above one wave the 128 x 128 tile's reuse wins (the sweep above: 126
against 86-94 TFLOP/s at 4096^3). Measured (H100, 2026-11-25, results/nvidia-h100-80gb-hbm3/
evidence/dispatch_probe.txt, x cuBLAS SGEMM, 128 x 128 -> 64 x 64): 128 x 4096 x 4096 0.77x -> 1.51x,
4096 x 128 x 4096 0.79x -> 1.51x, 512^3 0.65x -> 1.23x, 997 x 1009 x 1013 1.10x -> 1.36x,
513 x 257 x 1025 0.36x -> 0.60x (still below step 11 there). So ``default_config`` takes
64 x 64 below 132 tiles of 128 x 128 (WAVE_SMS), 128 x 128 from there. In the ladder (python
-m steps, same day, results/nvidia-h100-80gb-hbm3/evidence/step19_tile_rule.txt): 26.2 / 81.8 TFLOP/s at
512 / 1024 against the committed run's 14.0 / 63.3 below (1.25x / 2.12x cuBLAS SGEMM; step 14
21.8 / 56.4 in the same run), so step 19 is now the faster fp32-accurate kernel at 512 too. The
shape benchmark and the dispatch table were measured with the rule.

Limits: the 128 x 128 tile is as large as the total's registers allow, so from one wave up a
shape's last wave may leave SMs idle (1536^3: 144 tiles on 132 SMs). A stagger of the two consumers' promotions (so they do not drain
together) was tried: the branch on the warpgroup inside the loop made ptxas serialize every
wgmma (warning C7518), in two copies of the loop as well.

A fused epilogue (D = act(alpha * AB + bias + beta * C_in), issue 50) goes in ``store_split``
after the fallback's test: each value stored is the epilogue of the total, the flag is the raw
total's; a thread whose flag is up (rare) writes its raw totals back from registers, recomputes
what the fallback asks, then applies the epilogue in place, so the contract is the bare kernel's
(a GPU test: D = 2 AB is twice the bare C bit for bit on the classes that take the fallback).
Expected (no prediction was written before the change; this is step 11's measurement carried
over): GELU's erff on 64 values a consumer thread once per tile, against ~1 ms of tensor work at
4096^3, under 1%. Measured (H200, 2026-11-28, python -m steps.epilogue --step 19 --sizes 4096
--rounds 3): bias and GELU 1.020x the bare kernel (1.1743 against 1.1511 ms), the product and a
separate kernel 1.043x the fused one; error 5.5e-7. More than step 11's: here the store runs while
no wgmma does (both consumers store together), as in steps 20-22 (docs/models.md).

The rung's own pieces, below: ``split_a_tile`` (the producer's helper warps), ``multiply_split``
(three wgmma per k step), ``consume_split`` (the chunks and their promotion), ``flush_partial``
and ``store_split`` (the total to C, with the fp32 fallback); the loads are step 18's and the
kernel step 16's.

Run: python -m steps.step19
"""

from __future__ import annotations

from tvm.script import tirx as T

from .config import Wgmma3xTF32Config
from .lowering import fp32_fallback
from .step16_warp_specialized import produce, warp_specialized
from .step18_register_a import c_col, c_row, frag_offset, load_b_boxes
from .transforms import wgmma
from .transforms.wgmma import DESC_LBO, DESC_SBO, SPLITTERS, SWIZZLE_128B, Plan, _ceil

NUMBER = 19
TENSOR_CORES = True
NAME = "3xTF32 on wgmma"
IDEA = ("step 14's three TF32 products on step 18's pipeline: A's small half written once per shared tile "
        "by the producer, B^T's split in registers, promoted to an fp32 total")
PRECISION = "fp32"
ARCH = "sm_90a"
Config = Wgmma3xTF32Config
PASS_CONFIG: dict = {}
PIECES = ("split_a_tile", "multiply_split", "consume_split", "store_split", "recompute_flagged")
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) in store_split, after the fallback's test
# Three products where step 18 issues one: slower than its TF32 prior by design, for fp32 accuracy.
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024, 2048, 4096),
    "3xTF32 issues three TF32 products per product, and its tile is 128 x 128 (the fp32 total needs "
    "registers): slower than TF32 by design, for fp32 accuracy (its peers are cuBLAS strict fp32 and step 14)",
)


# The tile rule (issue 31's dispatch audit): a 128 x 128 tile leaves SMs idle where the output
# has fewer such tiles than a Hopper has SMs (132 on the H100 and H200); 64 x 64 tiles give four
# times as many thread blocks. Measured on the H100 (2026-11-25, kernel time, x cuBLAS SGEMM):
# 128x4096x4096 0.77x -> 1.51x, 4096x128x4096 0.79x -> 1.51x, 512^3 0.65x -> 1.23x,
# 997x1009x1013 1.10x -> 1.36x, 513x257x1025 0.36x -> 0.60x (results/<gpu>/evidence/dispatch_probe.txt).
WAVE_SMS = 132
SMALL_TILE = 64


def default_config(M: int, N: int, K: int) -> Wgmma3xTF32Config:
    cfg = Wgmma3xTF32Config()
    if -(-M // cfg.block_m) * -(-N // cfg.block_n) < WAVE_SMS:
        return Wgmma3xTF32Config(block_m=SMALL_TILE, block_n=SMALL_TILE)
    return cfg


TF32_MASK = 0xFFFFE000  # the bits of an fp32 that TF32 keeps (the tensor core drops the other 13)
# 3xTF32 at a long K: the promoted accumulator is itself added into C every FLUSH_CHUNKS chunks,
# so no fp32 register sums more than that many chunk sums (schedules/lowering/long_k.py's reason).
FLUSH_CHUNKS = 512
SPLIT_BATCH = 4  # float4 loads in flight per splitting thread (SPLITTERS of them: the producer's warps 1-3)


def flushes(plan: Plan) -> bool:
    """Whether the total goes into C every FLUSH_CHUNKS chunks (a long K)."""
    return plan.KT > 2 * plan.cfg.promote * FLUSH_CHUNKS


def split_a_tile(plan: Plan):
    """A macro: the producer's warps 1-3 (helpers), once per shared tile, write A's small half."""
    A_fl, stage_fl, As0 = plan.A_fl, plan.stage_fl, plan.As0

    @T.macro
    def split_a_tile(smem, stash, s, tid):
        # The producer's warps 1-3, once per shared tile: A's small half, A - tf32(A), written
        # beside it in the same (swizzled) positions; wgmma reads A itself as its big half.
        # float4 at a time, SPLIT_BATCH loads before their stores: the stores are PTX (TVM's
        # thread-sync pass would put a __syncthreads after a plain store to shared memory, inside
        # the producer's branch; the mbarriers order it instead), and the compiler moves no load
        # past one, so a load-store loop would wait out each load's latency in turn.
        for i in T.serial(_ceil(A_fl // 4, SPLITTERS * SPLIT_BATCH)):
            for b in T.unroll(SPLIT_BATCH):
                if (i * SPLIT_BATCH + b) * SPLITTERS + tid < A_fl // 4:
                    stash[T.ramp(b * 4, 1, 4)] = smem[T.ramp(s * stage_fl + ((i * SPLIT_BATCH + b) * SPLITTERS + tid) * 4, 1, 4)]
            for b in T.unroll(SPLIT_BATCH):
                if (i * SPLIT_BATCH + b) * SPLITTERS + tid < A_fl // 4:
                    T.ptx["st.shared.v4.f32"](
                        T.address_of(smem[s * stage_fl + As0 + ((i * SPLIT_BATCH + b) * SPLITTERS + tid) * 4]),
                        *[stash[b * 4 + v] - T.reinterpret("float32", T.reinterpret("uint32", stash[b * 4 + v])
                                                              & T.uint32(TF32_MASK)) for v in range(4)])
        # Written through the generic proxy, read by wgmma through the async one.
        T.ptx.fence.proxy.async_.shared__cta()
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(smem[plan.ready_bar(s)]), T.uint32(1))

    return split_a_tile


def multiply_split(plan: Plan):
    """A macro: a consumer's three wgmma per k step, B^T's halves from registers."""
    BK, WG_K, stage_fl, As0, acc_n, mma = plan.BK, plan.wg_k, plan.stage_fl, plan.As0, plan.acc_n, plan.mma

    @T.macro
    def multiply_split(smem, acc, frag, descA, descB, s, p, restart, wg, warp, lane):
        # B^T's fragments, split in registers: big (registers 0-15 of the slice), small (16-31).
        for kk in T.unroll(BK // WG_K):
            for r in T.unroll(4):
                frag[p * 32 + kk * 4 + r] = T.reinterpret("uint32", smem[frag_offset(plan, s, kk, r, wg, warp, lane)]) & T.uint32(TF32_MASK)
                frag[p * 32 + 16 + kk * 4 + r] = T.reinterpret("uint32", smem[frag_offset(plan, s, kk, r, wg, warp, lane)] - T.reinterpret(
                    "float32", T.reinterpret("uint32", smem[frag_offset(plan, s, kk, r, wg, warp, lane)]) & T.uint32(TF32_MASK)))
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // WG_K):
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]), T.address_of(smem[s * stage_fl + kk * WG_K]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + As0 + kk * WG_K]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            # The small products first, big x big last (as step 14): the chunk's first wgmma
            # restarts the accumulator (scale-d false: D = A * B).
            T.ptx[mma](*[acc[i] for i in range(acc_n)], *[frag[p * 32 + 16 + kk * 4 + r] for r in range(4)],
                       descA[0], T.ptx.pred(T.Or(kk > 0, T.Not(restart))), 1, 1)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], *[frag[p * 32 + kk * 4 + r] for r in range(4)],
                       descB[0], T.ptx.pred(True), 1, 1)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], *[frag[p * 32 + kk * 4 + r] for r in range(4)],
                       descA[0], T.ptx.pred(True), 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    return multiply_split


def store_split(plan: Plan):
    """A macro: the fp32 total to C, and the fallback for NaN and tiny outputs. With a fused
    epilogue (C a wgmma.FusedOutput), D = the epilogue of the total; the fallback's test and its
    recomputation see the raw product, so the fp32 contract is the bare kernel's."""
    M, N, K, acc_n, flush = plan.M, plan.N, plan.K, plan.acc_n, flushes(plan)
    tiny_bits = fp32_fallback.tiny_bound_bits(K)
    fused = plan.epilogue is not None and plan.fused
    recompute = recompute_flagged(plan, lambda x: fp32_fallback._needs_fp32(x, tiny_bits))

    @T.macro
    def store_split(C, A_op, B_op, total, flag, fallback, m0, n0, wg, warp, lane):
        # As store() (register A), adding to C where a long K flushed partial sums there, then
        # testing each value: NaN, or tiny (schedules/lowering/fp32_fallback.py says why), recomputed below.
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
                            plan, C, total[i * 4 + 2 * h + c], c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane))
                        flag[0] = flag[0] | T.Cast("int32", fp32_fallback._needs_fp32(total[i * 4 + 2 * h + c], tiny_bits))
        if flag[0] != 0:
            if fused:
                # D holds the epilogue's values: put this thread's raw totals back (still in
                # registers) for the test and the recomputation below, which read them from D.
                for i in T.unroll(acc_n // 4):
                    for h in T.unroll(2):
                        for c in T.unroll(2):
                            if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                                wgmma.output(C)[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = total[
                                    i * 4 + 2 * h + c]
            recompute(C, A_op, B_op, fallback, m0, n0, wg, warp, lane)

    return store_split


def recompute_flagged(plan: Plan, needs):
    """A macro for a store whose test fired (rare): each of this thread's outputs that `needs`
    (of its raw product, re-read from C: registers cannot be indexed by a loop variable without
    going to the stack) is recomputed with serial FFMA on the fp32 operands; then, with a fused
    epilogue (the plan's), the epilogue is applied in place to the products the contract asks for.
    Step 19's store (NaN or tiny) and step 28's (NaN)."""
    M, N, K, acc_n = plan.M, plan.N, plan.K, plan.acc_n
    fused = plan.epilogue is not None and plan.fused

    @T.macro
    def recompute(C, A_op, B_op, fallback, m0, n0, wg, warp, lane):
        for j in T.serial(acc_n):
            if c_row(m0, j // 4, j % 2, lane) < M and c_col(n0, j // 2 % 2, wg, warp, lane) < N:
                if needs(C[c_row(m0, j // 4, j % 2, lane), c_col(n0, j // 2 % 2, wg, warp, lane)]):
                    fallback[0] = T.float32(0)
                    for k in T.serial(K):
                        fallback[0] = T.call_pure_extern(
                            "float32", "fmaf", A_op[c_row(m0, j // 4, j % 2, lane), k],
                            B_op[k, c_col(n0, j // 2 % 2, wg, warp, lane)], fallback[0])
                    wgmma.output(C)[c_row(m0, j // 4, j % 2, lane), c_col(n0, j // 2 % 2, wg, warp, lane)] = fallback[0]
        if fused:
            # Then the epilogue, in place, on the products the contract asks for.
            for j in T.serial(acc_n):
                if c_row(m0, j // 4, j % 2, lane) < M and c_col(n0, j // 2 % 2, wg, warp, lane) < N:
                    wgmma.output(C)[c_row(m0, j // 4, j % 2, lane), c_col(n0, j // 2 % 2, wg, warp, lane)] = \
                        wgmma.stored(plan, C, C[c_row(m0, j // 4, j % 2, lane), c_col(n0, j // 2 % 2, wg, warp, lane)],
                                     c_row(m0, j // 4, j % 2, lane), c_col(n0, j // 2 % 2, wg, warp, lane))

    return recompute


def flush_partial(plan: Plan):
    """A macro: at a long K, the total is added into C every FLUSH_CHUNKS chunks."""
    M, N, acc_n = plan.M, plan.N, plan.acc_n

    @T.macro
    def flush_partial(C, total, chunk, m0, n0, wg, warp, lane):
        # Every FLUSH_CHUNKS chunks at a long K: C (= 0 the first time) += the promoted sum.
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                        wgmma.output(C)[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = total[
                            i * 4 + 2 * h + c] + T.if_then_else(chunk == FLUSH_CHUNKS, T.float32(0), C[
                                c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)])
                    total[i * 4 + 2 * h + c] = T.float32(0)

    return flush_partial


def consume_split(plan: Plan):
    """A macro: a consumer's loop over its tile's slices, promoting every `promote` slices; the
    ring's slices counted from g0 (step 25's persistent blocks count them across their tiles)."""
    KT, stages, acc_n, flush = plan.KT, plan.stages, plan.acc_n, flushes(plan)
    promote = plan.cfg.promote
    multiply_split_ = multiply_split(plan)
    flush_partial_ = flush_partial(plan)

    @T.macro
    def consume_split(smem, acc, total, frag, descA, descB, C, m0, n0, g0, wg, warp, lane):
        # A consumer's slices: chunks of `promote` slices, each summed on the tensor core from
        # zero and added to the total in fp32. Both consumers promote at the same slices: a
        # branch on the warpgroup here (to stagger them), even as two copies of this loop, made
        # ptxas serialize every wgmma (warning C7518).
        for kt2 in T.serial(_ceil(KT, 2)):
            for p in T.unroll(2):
                if kt2 * 2 + p < KT:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((g0 + kt2 * 2 + p) % stages)]),
                                         ((g0 + kt2 * 2 + p) // stages) & 1)
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.ready_bar((g0 + kt2 * 2 + p) % stages)]),
                                         ((g0 + kt2 * 2 + p) // stages) & 1)
                    multiply_split_(smem, acc, frag, descA, descB, (g0 + kt2 * 2 + p) % stages, p,
                                   (kt2 * 2 + p) % promote == 0,
                                   wg, warp, lane)
                    if ((kt2 * 2 + p + 1) % promote == 0
                            or kt2 * 2 + p == KT - 1):
                        # The chunk's last slice: wait for its wgmma, add the
                        # chunk's sum to the total in fp32 (round to nearest).
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        for i in T.unroll(acc_n):
                            T.cuda.wgmma.noop_barrier(acc[i])
                            total[i] = total[i] + acc[i]
                        if flush:
                            if ((kt2 * 2 + p) // promote + 1) % FLUSH_CHUNKS == 0 \
                                    and kt2 * 2 + p != KT - 1:
                                flush_partial_(C, total, (kt2 * 2 + p) // promote + 1,
                                              m0, n0, wg, warp, lane)
                        if kt2 * 2 + p > 0 and (kt2 * 2 + p) % promote != 0:
                            T.ptx.mbarrier.arrive.shared.b64(
                                T.address_of(smem[plan.empty_bar((g0 + kt2 * 2 + p - 1) % stages)]), T.uint32(1))
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[plan.empty_bar((g0 + kt2 * 2 + p) % stages)]), T.uint32(1))
                    else:
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        if kt2 * 2 + p > 0 and (kt2 * 2 + p) % promote != 0:
                            T.ptx.mbarrier.arrive.shared.b64(
                                T.address_of(smem[plan.empty_bar((g0 + kt2 * 2 + p - 1) % stages)]), T.uint32(1))

    return consume_split


def split_stages(plan: Plan):
    """A macro: the helper warps wait for each stage to land and split its A tile."""
    KT, stages = plan.KT, plan.stages
    split = split_a_tile(plan)

    @T.macro
    def helpers(smem, stash, tid):
        for kt in T.serial(KT):
            T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar(kt % stages)]), (kt // stages) & 1)
            split(smem, stash, kt % stages, tid)

    return helpers


def consumer(plan: Plan):
    """A macro: a consumer zeroes both accumulators, runs its chunks and stores the total."""
    acc_n = plan.acc_n
    consume, store = consume_split(plan), store_split(plan)

    @T.macro
    def consumer_(smem, acc, frag, total, flag, fallback, descA, descB, A_op, B_op, C, m0, n0, wg, warp, lane):
        for i in T.unroll(acc_n):
            acc[i] = T.float32(0)
            total[i] = T.float32(0)
            T.cuda.wgmma.noop_barrier(acc[i])
        consume(smem, acc, total, frag, descA, descB, C, m0, n0, 0, wg, warp, lane)
        store(C, A_op, B_op, total, flag, fallback, m0, n0, wg, warp, lane)

    return consumer_


def kernel(M: int, N: int, K: int, cfg: Wgmma3xTF32Config, dtype: str = "fp32", epilogue=None, fused=True):
    # Two slices' fragments, big and small (64 registers); the split's float4 loads in flight.
    # (dtype: fp32 only, Step.check_dtype; the parameter is the epilogue rungs' signature.)
    p = wgmma.plan(M, N, K, cfg, frag_regs=64, stash_regs=4 * SPLIT_BATCH, epilogue=epilogue, fused=fused)
    return wgmma.prim_func(p, warp_specialized(p, produce(p, load_b_boxes(p)), consumer(p), helpers=split_stages(p)))
