"""Step 15 — wgmma: Hopper's warpgroup MMA, operands from shared memory, loaded by TMA.

Idea: steps 12-14 issue ``mma.sync``, a warp multiplying 16 x 8 x 8 at a time from registers
it loaded itself (ldmatrix and 32-bit loads: a third of the shared-memory instructions are
B's fragments). Hopper's ``wgmma.mma_async`` lets four warps (a warpgroup) multiply a
64 x n x 8 tile, n up to 256, reading both operands straight from shared memory through
64-bit descriptors, asynchronously: issue, fence, commit, wait. The tiles must sit in the
layout wgmma reads, K-major with a 128-byte swizzle, which is exactly what the copy engine
(TMA, ``cp.async.bulk.tensor``) writes when one thread hands it a tensor map and a box
coordinate; it also fills ragged edges with zeros. Here: a 128 x 128 tile per block, two
warpgroups of 64 x 128 (wgmma m64n128k8, four per 32-k slice), one shared buffer: thread 0
starts the slice's TMA, everyone waits on its mbarrier, multiplies, waits for the wgmma, and
meets at a barrier before the next slice overwrites the buffer. No overlap of loads and math
yet: that is step 16.

B's layout: TF32 wgmma has no transpose, so both shared operands must be K-major, and
``B[K, N]`` row-major is not. A copy kernel first writes ``Bt[N, K]`` (32 x 32 tiles through
shared memory, both sides coalesced), 13 us of the 2048^3 total; step 18 removes it.

Why this is written, not scheduled: wgmma's accumulator is spread over 128 threads (no
TensorIR scope holds it: "warp" scope is one warp), TMA needs a host-side tensor map, and the
mbarrier phases are control flow over time. schedules/transforms/wgmma.py says more and holds the
pieces every Hopper rung shares (a stage's TMA loads, its wgmma, the store); this rung's own
piece is ``one_buffer`` below, the kernel that loads a slice, waits, and multiplies it.

Reduced precision, said so: the tensor cores read TF32 (a 10-bit mantissa; they truncate the
fp32 operands), compared with float64 against ``TF32_TOLERANCE`` (5e-3; 6.9e-4 measured, as
step 13) and timed against cuBLAS TF32.

Prediction (before the probe): wgmma's rate is about 1.5x mma.sync's (494.7 dense TF32 peak
against the 322 measured for mma.sync), and no fragment loads, but every slice waits for its
TMA with nothing to overlap it, as step 12 did: around step 13's 165-175 TFLOP/s, well below
cuBLAS's 350-380.

Measured (H100 80GB HBM3, 2026-11-24, hopper_probe in docs/maintaining.md, kernel time, two alternating
rounds; results/nvidia-h100-80gb-hbm3/evidence/hopper_probe.json): 163 / 200 TFLOP/s at 2048^3 / 4096^3
(transposed copy included), 0.46x / 0.53-0.58x cuBLAS TF32 (348-353 / 341-377) in the same run:
like step 13 at 2048 and 15% above it at 4096, with no pipeline at all. The committed run
(2026-11-25, ``--save``): 12.4 / 60.6 / 164.6 / 202.5 TFLOP/s at 512 / 1024 / 2048 / 4096,
2.5x / 3.1x step 14 (3xTF32, fp32-accurate: another precision, the x prior is shown, not
claimed) at 2048 / 4096, and 0.60x step 14 at 512 (expected regression, marked): 16 blocks of
128 x 128 for 132 SMs, each waiting on every slice, plus the copy kernel's launch.

fp16 and bf16 (``--dtype``): the same kernel on wgmma m64n128k16, a 128-byte row of a stage
now 64 halves, so a slice is 64 k, still four wgmma; C rounded to the dtype in the store. B is
copied transposed here too (16-bit wgmma could read it N-major: step 18 measures that).
Prediction (made before the first 16-bit run, written down after it): a slice moves the same
bytes and does twice the FLOP at twice the rate, so the same time per slice as TF32: about 2x
TF32 step 15, ~400 TFLOP/s at 4096^3 less the copy, half of cuBLAS bf16. Measured (H100,
2026-11-27, probe of the 16-bit rungs in one process, CUDA events,
git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/sixteen_bit_hopper_probe.json): 354 / 391
TFLOP/s bf16 and 355 / 405 fp16 at 4096^3 / 8192^3, 0.53x / 0.50x and 0.52x / 0.56x cuBLAS
in the dtype; errors equal to cuBLAS's on the same inputs (1.66e-3 bf16, 2.07e-4 fp16: the
store's rounding) at 512-4096 and 7 odd shapes.

Run: python -m steps.step15   (builds for sm_90a; --build-only works without a GPU)
"""

from __future__ import annotations

from tvm.script import tirx as T

from .config import WgmmaConfig
from .transforms import wgmma
from .transforms.wgmma import WARPGROUP, Plan

NUMBER = 15
TENSOR_CORES = True
NAME = "wgmma (TF32)"
IDEA = "warpgroup MMA from 128B-swizzled shared tiles that TMA loads; one buffer; B transposed by a copy kernel"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
Config = WgmmaConfig
PASS_CONFIG: dict = {}
# The rung's own code, below (python -m steps.step15 --explain prints it).
PIECES = ("one_buffer",)
EXPECTED_REGRESSION = {
    512: "16 blocks of 128 x 128 for 132 SMs, each waiting on every slice's TMA, plus the copy kernel "
         "for B: step 14's 32 x 64 tiles fill the GPU at 512",
}

# 16-bit: its prior is step 13 (mma.sync, a cp.async ring), which overlaps loads and math.
EXPECTED_REGRESSION_BF16 = EXPECTED_REGRESSION_FP16 = dict.fromkeys(
    (512, 1024, 2048, 4096),
    "one buffer: each 64-k slice waits for its TMA with nothing to overlap it, and B is copied "
    "transposed first, where step 13's cp.async ring overlaps loads and math: slower until 8192",
)

def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaConfig:
    return WgmmaConfig()


def one_buffer(p: Plan, load, multiply, store):
    """The rung's kernel: one shared buffer; per k slice thread 0 starts its TMA, every
    warpgroup waits for it, multiplies, waits for its wgmma, and the block meets before the
    next slice overwrites the buffer."""

    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map):
        for bid in T.thread_binding(p.tm * p.tn, thread="blockIdx.x"):
            for tid in T.thread_binding(p.threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A_op[0:p.M, 0:p.Ka], B_op[0:p.B_shape[0], 0:p.B_shape[1]])
                    T.writes(C[0:p.M, 0:p.N])
                    smem = T.sblock_alloc_buffer((p.smem_fl,), p.dtype, scope="shared.dyn", align=1024)
                    acc = T.sblock_alloc_buffer((p.acc_n,), "float32", scope="local")
                    frag = T.sblock_alloc_buffer((p.frag_regs,), "uint32", scope="local")
                    descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    m0 = T.meta_var(p.tile_m0(bid))
                    n0 = T.meta_var(p.tile_n0(bid))
                    wg = T.meta_var((tid - p.first) // WARPGROUP)
                    warp = T.meta_var(tid % WARPGROUP // 32)
                    lane = T.meta_var(tid % 32)
                    wgmma.init_barriers(p)(smem, tid)
                    for i in T.unroll(p.acc_n):
                        acc[i] = T.float32(0)
                        T.cuda.wgmma.noop_barrier(acc[i])
                    for kt in T.serial(p.KT):
                        if tid == 0:
                            load(smem, A_map, B_map, kt, 0, m0, n0)
                        T.cuda.mbarrier_wait(T.address_of(smem[p.full_bar(0)]), kt & 1)
                        multiply(smem, acc, frag, descA, descB, 0, 0, wg, warp, lane)
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        # Nobody reads the buffer any more: thread 0 may load the next slice.
                        T.tvm_storage_sync("shared")
                    for i in T.unroll(p.acc_n):
                        T.cuda.wgmma.noop_barrier(acc[i])
                    store(C, acc, m0, n0, wg, warp, lane)

    return kernel


def kernel(M: int, N: int, K: int, cfg: WgmmaConfig, dtype: str = "fp32"):
    p = wgmma.plan(M, N, K, cfg, dtype)
    return wgmma.prim_func(p, one_buffer(p, wgmma.load_stage(p), wgmma.multiply_stage(p), wgmma.store(p)))
