"""Step 18 — register A: C^T = B^T A^T, so B needs no transposed copy.

Idea: steps 15-17 spend a copy kernel writing ``Bt[N, K]``, because TF32 wgmma reads shared
operands K-major only. But wgmma's A operand may come from registers instead, in any layout
the threads load it with. So compute the transpose of the product, C^T = B^T A^T:
- wgmma's register operand is B^T: each thread loads its four TF32 values per 8-k step from
  B's tile as TMA stored it, N-major (boxes of 32 k rows x 32 n, 128B-swizzled: a fragment
  load touches two 16-byte units per row, a 2-way bank conflict at worst);
- wgmma's shared operand is A[M, K] itself, K-major as stored: "n" of the instruction is M;
- the accumulator holds a 64 x 256 tile of C^T per consumer, stored transposed to C.
The block tile is 256 (M) x 128 (N), two consumer warpgroups of 64 columns of C each, the
pipeline of step 16. The fragments of a slice stay live until its wgmma finish, so the loop
runs two slices per trip with two register sets (32 registers).

Prediction: the copy kernel was 13 us at 2048^3 and ~26 us at 4096^3 (measured by leaving it
out, with B given transposed); removing it, and the fragment loads costing little beside
wgmma's own shared reads, 1.2-1.4x step 17 at 2048 and 1.1x at 4096.

Measured (H100 80GB HBM3, 2026-11-24, hopper_probe in docs/maintaining.md, kernel time, two alternating
rounds with cuBLAS TF32): 321 / 329 TFLOP/s at 2048^3 / 4096^3, 1.42x / 1.15x step 17, and
0.91-0.92x / 0.87-0.97x cuBLAS TF32 (348-353 / 341-377 in the same run): past the issue's
bars (0.7x at 2048, 0.75x at 4096), short of cuBLAS. raster 1 or 8 within 1%; 3 stages 1-4%
slower. The committed run (2026-11-25, ``--save``, cuBLAS TF32 timed in the same run): 19.1 /
92.2 / 334.0 / 345.8 TFLOP/s at 512 / 1024 / 2048 / 4096, 1.47x / 1.23x step 17 at 2048 / 4096,
94% / 93% of cuBLAS TF32; at 512 and 1024 51% / 59% (8 and 32 blocks of 256 x 128). The whole
ladder in one run (same day): 336 / 353 TFLOP/s, 95% / 89% of cuBLAS TF32 (355 / 397).

What limits it (Nsight Compute 2025, 4096^3, tools/ncu_hopper.sh, 2026-11-25,
results/nvidia-h100-80gb-hbm3/evidence/ncu_step18_4096.txt): 352 us, the tensor pipe active 91.3% of the
cycles (sm__pipe_tensor_op_hmma_cycles_active), SM busy 88.7%, 2,097,152 wgmma issued. One
block of 384 threads per SM (197 KB of shared memory), so 3 warps per scheduler: per issued
instruction a warp waits 13.4 cycles, most on long scoreboard (3.0: the mbarrier waits and the
epilogue's global stores), the barrier (2.4: bar.sync of the setup and the consumers' named
waits), short scoreboard (2.0: the B^T fragment loads from shared memory) and wgmma.wait (1.8).
What is left is the edges of each tile: the pipeline's fill and drain, and an epilogue that
stores 128 floats per thread while no wgmma runs. Next: a persistent grid whose epilogue
overlaps the next tile's loads, and a TMA store. The Nsight cross-check (harness time per call
against ncu's, results/nvidia-h100-80gb-hbm3/evidence/crosscheck_partial_2026-11-25.txt) agreed within 3%
at 512 and 1024 and differed at 2048: 53.3 us in the harness against 46.7 us in ncu. Measured
again (results/nvidia-h100-80gb-hbm3/evidence/crosscheck_clocks_2026-11-25.txt): 47.4 against 46.6, the
gap gone; at 4096 the harness reads 7-8% above ncu for this step (377.5 against ~352 us) and for
cuBLAS TF32 alike (370 against ~342; ncu's SM clock 1.63 and 1.69 GHz), so the ratio between
them stands. The whole ladder run of 2026-11-25 (second): 340.8 / 333.3 TFLOP/s, 0.97x / 0.84x
cuBLAS TF32; the ratio at 4096 moves by about 5% between runs. The sweep (2026-11-25, python -m
steps.sweep --step 18 --sizes 2048 4096 --top 2, results/nvidia-h100-80gb-hbm3/evidence/sweep_hopper.txt)
keeps this config's tile and depth: 256 x 128 at 323 / 353 TFLOP/s against 284 / 280 for 128 x
128 and 248 / 299 for 192 x 128, 4 stages against 313 / 354 (3) and 212 / 235 (2); its best
raster differs by size (4 at 2048: 329; 1 at 4096: 385) by margins the single timings of a sweep
do not settle (the previous session's alternating rounds: raster 1 and 8 within 1%).

The rung's own pieces, below: ``load_b_boxes`` (B's tile as TMA boxes of its rows),
``multiply_register_a`` (the fragments and the register-A wgmma) and ``store_transposed``,
assembled with step 16's producer, consumer and kernel.

fp16 and bf16 (``--dtype``): the same C^T = B^T A^T, the same loads and store, but B^T does not
go through registers: 16-bit wgmma may read an operand MN-major (``trans_a`` = 1), so the
shared operand A of the instruction is B's tile exactly as TMA stored it, one 64-n box per
consumer (``multiply_transposed``; only the descriptor's stride between 8-k row groups, 1024
bytes, is used: a 64-wide swizzle atom holds the consumer's 64 n). No fragment loads, no
transposed copy. Prediction (made before the first 16-bit run, written down after it): the
copy step 17 spends is ~8% of its time at 4096^3 (32 MB of bf16 read and written), so ~1.05-1.1x
step 17, ~0.8x cuBLAS. Measured (H100, 2026-11-27,
git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/sixteen_bit_hopper_probe.json, one process, three alternating
rounds of every rung and cuBLAS): 689 / 744 TFLOP/s bf16 and 685 / 663 fp16 at 4096^3 /
8192^3, 1.03x / 0.96x and 1.01x / 0.92x cuBLAS in the dtype (670 / 776 and 676 / 722), 1.39x /
1.19x and 1.40x / 1.08x step 17: far more than the copy's share, not yet explained (the tiles
are 256 x 128 here, 128 x 256 in step 17; the ncu comparison is to do). Errors equal to cuBLAS's
on the same inputs at 512-4096 and on 1000 x 1500 x 700, 33 x 65 x 129, 257 x 130 x 95,
1 x 4096 x 4096, 4097 x 33 x 1001, 300 x 5000 x 2000, 256 x 256 x 640, in both dtypes. The best
16-bit rung of the ladder, past issue 47's bar (0.8x cuBLAS at 4096^3 and 8192^3).
The committed 16-bit ladders (python -m steps --dtype bf16 / fp16 --sizes 512 1024 2048 4096
8192 --save, H100, 2026-11-27, results/nvidia-h100-80gb-hbm3/bf16/ and fp16/): bf16 650.9 /
693.7 / 719.0 TFLOP/s at 2048 / 4096 / 8192, 89% / 87% / 101% of cuBLAS bf16 (733 / 796 / 709 in
that run); fp16 623.2 / 673.5 / 715.8, 87% / 93% / 97% of cuBLAS fp16; dlight's default 3% (bf16,
CUDA cores) and 11% (fp16, WMMA). Every class of python -m steps.special --dtype bf16 / fp16
within the contract (bf16/special_values.md, fp16/special_values.md). Nsight Compute (bf16,
4096^3, DTYPE=bf16 bash tools/ncu_hopper.sh; its log: git show 9770cce:results/nvidia-h100-80gb-hbm3/
evidence/ncu_step18_4096_bf16.txt): 189 us, the tensor pipe active 88.5% of cycles
(sm__pipe_tensor_op_hmma_cycles_active), 1,048,576 wgmma; per issued instruction a warp waits on
the barrier 7.2 cycles (not yet attributed by source line; the likely part is wgmma.fence's
warpgroup sync after each wait_group 0, one group at a time per consumer),
long scoreboard 2.4 (the mbarrier waits), wait 1.3. Next (issue 48): two groups in flight again
once the race they showed is understood, a persistent grid, a TMA store.

Run: python -m steps.step18
"""

from __future__ import annotations

from tvm.script import tirx as T

from .config import WgmmaRegisterAConfig
from .step16_warp_specialized import consume, produce, warp_specialized
from .transforms import wgmma
from .transforms.wgmma import DESC_LBO, DESC_SBO, SWIZZLE_128B, TMA_LOAD, WG_M, Plan

NUMBER = 18
TENSOR_CORES = True
NAME = "register A (no copy of B)"
NAME_16BIT = "B read transposed (no copy)"  # 16-bit: a transposed descriptor, not registers
IDEA = ("C^T = B^T A^T: B^T fragments from registers (wgmma's register A; 16-bit: a transposed descriptor), "
        "A from shared memory; no transposed copy")
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
Config = WgmmaRegisterAConfig
PASS_CONFIG: dict = {}
PIECES = ("load_b_boxes", "multiply_register_a", "multiply_transposed", "store_transposed")


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaRegisterAConfig:
    return WgmmaRegisterAConfig()


def frag_offset(plan: Plan, s, kk, r, wg, warp, lane):
    """Where B^T's fragment register r of k-step kk lives in stage s (register A).
    wgmma's TF32 A fragment, per warp: rows 16*warp + lane/4 (+8 for r odd), columns
    lane%4 (+4 for r >= 2); here a row is an n of B and a column a k. The tile is
    block_n / 32 TMA boxes of 32 k rows x 32 n, each row 128 B, swizzled: the 16-byte unit
    u of row k sits at u ^ (k % 8)."""
    BK, WG_K = plan.BK, plan.wg_k
    n = wg * WG_M + warp * 16 + lane // 4 + 8 * (r % 2)
    k = kk * WG_K + lane % 4 + 4 * (r // 2)
    nn = n % 32
    return s * plan.stage_fl + plan.A_fl + (n // 32) * (BK * 32) + k * 32 + (((nn // 4) ^ (k % 8)) * 4) + nn % 4


def c_row(m0, i, c, lane):
    """The row of C (a column of C^T) that accumulator register 4i + 2h + c of this thread
    holds: column 8i + 2 (lane % 4) + c of the warpgroup's 64 x n tile."""
    return m0 + i * 8 + (lane % 4) * 2 + c


def c_col(n0, h, wg, warp, lane):
    """The column of C (a row of C^T) of accumulator register 4i + 2h + c: row
    16 warp + lane / 4 + 8h of the warpgroup's 64 x n tile."""
    return n0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h


def load_b_boxes(plan: Plan):
    """A macro: a stage's loads. A's tile as step 15's; B's tile as it is stored, N-major, in
    block_n / box_n boxes of BK k rows x box_n n (one 128-byte swizzle row each)."""
    BK, A_fl, stage_fl, BN, box = plan.BK, plan.A_fl, plan.stage_fl, plan.BN, plan.box_n

    @T.macro
    def load(smem, A_map, B_map, kt, s, m0, n0):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(smem[plan.full_bar(s)]), T.uint32(plan.tx_bytes))
        T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl]), T.address_of(A_map), kt * BK, m0,
                        T.address_of(smem[plan.full_bar(s)]))
        for c in T.unroll(BN // box):
            T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl + A_fl + c * BK * box]), T.address_of(B_map),
                            n0 + c * box, kt * BK, T.address_of(smem[plan.full_bar(s)]))

    return load


def multiply_register_a(plan: Plan):
    """A macro (TF32): the slice's B^T fragments loaded into registers (frag, slice parity p),
    then wgmma with B^T from registers and A's K-major tile as the shared operand."""
    BK, WG_K, stage_fl, acc_n, mma = plan.BK, plan.wg_k, plan.stage_fl, plan.acc_n, plan.mma

    @T.macro
    def multiply(smem, acc, frag, descA, descB, s, p, wg, warp, lane):
        for kk in T.unroll(BK // WG_K):
            for r in T.unroll(4):
                frag[p * 16 + kk * 4 + r] = T.reinterpret("uint32", smem[frag_offset(plan, s, kk, r, wg, warp, lane)])
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // WG_K):
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + kk * WG_K]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], frag[p * 16 + kk * 4], frag[p * 16 + kk * 4 + 1],
                       frag[p * 16 + kk * 4 + 2], frag[p * 16 + kk * 4 + 3], descB[0], T.ptx.pred(True), 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    return multiply


# The B^T operand read MN-major (16-bit): a 64-wide swizzle atom holds a consumer's 64 n, so
# only the stride between 8-k row groups (1024 bytes, in 16-byte units) is used; the leading
# offset (between 64-wide atoms along n) gets the same value, which is also right should the
# two be read the other way round.
MN_MAJOR_LBO, MN_MAJOR_SBO = 64, 64


def multiply_transposed(plan: Plan):
    """A macro (fp16, bf16): wgmma reads B^T from shared memory as TMA stored it, N-major, through
    a transposed descriptor (trans_a = 1, which 16-bit types have and TF32 lacks), and A's
    K-major tile as the other shared operand: no fragment loads, no registers for B^T."""
    BK, wg_k, stage_fl, A_fl, acc_n, mma, box = plan.BK, plan.wg_k, plan.stage_fl, plan.A_fl, plan.acc_n, plan.mma, plan.box_n

    @T.macro
    def multiply(smem, acc, frag, descA, descB, s, p, wg, warp, lane):
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // wg_k):
            # This consumer's 64 n are box `wg` of the stage's B tile; k step kk is 16 of its rows.
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]),
                                                  T.address_of(smem[s * stage_fl + A_fl + wg * BK * box + kk * wg_k * box]),
                                                  MN_MAJOR_LBO, MN_MAJOR_SBO, SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + kk * wg_k]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], descA[0], descB[0], T.ptx.pred(True), 1, 1, 1, 0)
        T.ptx.wgmma.commit_group.sync.aligned()

    return multiply


def store_transposed(plan: Plan):
    """A macro: the accumulator holds C^T; each register goes to its place in C, edges masked
    (with a fused epilogue, D = the epilogue of it: wgmma.stored)."""
    M, N, acc_n = plan.M, plan.N, plan.acc_n

    settle = wgmma.settle(plan)

    @T.macro
    def write(C, acc, m0, n0, wg, warp, lane):
        settle(acc)
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                        # (C: the output, or a fused epilogue's D and inputs: wgmma.FusedOutput)
                        wgmma.output(C)[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = wgmma.stored(
                            plan, C, acc[i * 4 + 2 * h + c], c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane))

    return write


def kernel(M: int, N: int, K: int, cfg: WgmmaRegisterAConfig, dtype: str = "fp32"):
    p = wgmma.plan(M, N, K, cfg, dtype)
    # B^T reaches wgmma from registers (TF32: no transpose) or through a transposed descriptor.
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    return wgmma.prim_func(p, warp_specialized(p, produce(p, load_b_boxes(p)),
                                               consume(p, multiply, store_transposed(p))))
