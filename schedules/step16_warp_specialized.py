"""Step 16 — a TMA ring and warp specialization: a producer warpgroup keeps `stages` buffers full.

Idea: step 15 loads a slice, waits, multiplies, waits, loads the next: the copy engine and the
tensor cores take turns. Give the loads a warpgroup of their own. `stages` shared buffers form
a ring with two mbarriers each: "full" (the producer's ``arrive.expect_tx`` plus the copy
engine's byte count complete it) and "empty" (each consumer thread arrives once its wgmma
on the stage are done). One producer thread waits for an empty stage and starts the next
TMA; the consumer warpgroups wait for a full stage, issue its four wgmma, and then wait only
for the previous slice's group (``wgmma.wait_group 1``) before handing that stage back, so a
slice's wgmma overlap the next slice's issue. ``setmaxnreg`` moves registers from the producer
(40 each) to the consumers (232): the 64 x 128 accumulators and addresses fit without spills.

Prediction: the loads now run stages - 1 slices ahead, so the tensor pipe waits only when
the ring is empty: 1.3-1.5x step 15, towards 250-300 TFLOP/s at 4096.

Measured (H100 80GB HBM3, 2026-11-24, hopper_probe in docs/maintaining.md, kernel time, two rounds): 209 /
251 TFLOP/s at 2048^3 / 4096^3, 1.27x / 1.25x step 15, 0.59x / 0.67-0.74x cuBLAS TF32. 3 stages
instead of 4: 178 / 212. Less than predicted: each block still multiplies a 128 x 128 tile, so
per 32-k slice a consumer reads 16 KB of B from shared memory for 2 x 64 x 128 x 32 FLOP; and
the transposed copy of B is 13% of the time at 2048. The committed run (2026-11-25, ``--save``):
19.1 (host-bound at 512: 14 us kernels) / 102.1 / 209.0 / 254.1 TFLOP/s at 512 / 1024 / 2048 /
4096, 1.26x / 1.27x step 15 at 2048 / 4096.

The rung's own pieces, below: ``warp_specialized`` (the kernel: roles, registers, the ring's
barriers), ``produce`` (the producer thread's loop) and ``consume`` (a consumer's loop); a stage's
loads and wgmma are step 15's (schedules/transforms/wgmma.py). Steps 17-19 reuse this kernel.

fp16 and bf16 (``--dtype``): the same ring on k16 wgmma. (Until 2026-11-28 a 16-bit consumer
waited for all its groups before handing a stage back, ``wait_group 0``: with one group left
running the sums were wrong, because ptxas moved the store's conversions above the wait after
the loop; now the tile's last slice waits for all inside the loop, ``wgmma.wait_for_slice``,
and 16-bit leaves one group running where the tile is small, ``Plan.in_flight``: this rung's
128 x 128 tile over two consumers. The measurements below are of the waiting kernel.)
Prediction (made before the first 16-bit run, written down after it): 1.25x step 15 as in
TF32, ~450-500 TFLOP/s at 4096^3. Measured (H100, 2026-11-27,
git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/sixteen_bit_hopper_probe.json): 426 / 523 bf16 and
427 / 508 fp16 at 4096^3 / 8192^3, 1.20x / 1.34x and 1.20x / 1.25x step 15, 0.64x / 0.67x and
0.63x / 0.70x cuBLAS in the dtype.

Run: python -m steps.step16
"""

from __future__ import annotations

from tvm.script import tirx as T

from .config import WgmmaPipelineConfig
from .transforms import wgmma
from .transforms.wgmma import PRODUCER_REGS, WARPGROUP, Plan, _ceil

NUMBER = 16
TENSOR_CORES = True
NAME = "TMA ring, warp-specialized"
IDEA = "a producer warpgroup fills a 4-stage TMA ring (full/empty mbarriers); consumers overlap wgmma groups; setmaxnreg"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
Config = WgmmaPipelineConfig
PASS_CONFIG: dict = {}
PIECES = ("warp_specialized", "produce", "consume")


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaPipelineConfig:
    return WgmmaPipelineConfig()


def produce(plan: Plan, load):
    """A macro: the producer thread keeps the ring full, waiting for each stage's "empty"
    barrier (from its second use on) before starting its loads."""
    stages = plan.stages

    @T.macro
    def producer(smem, A_map, B_map, m0, n0):
        for kt in T.serial(plan.KT):
            if kt >= stages:
                T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar(kt % stages)]),
                                     ((kt // stages) & 1) ^ 1)
            load(smem, A_map, B_map, kt, kt % stages, m0, n0)

    return producer


def consume(plan: Plan, multiply, store):
    """A macro: a consumer warpgroup waits for each full stage, issues its wgmma, and once the
    previous slice's group is done (wait_group 1) hands that stage back; then stores."""
    stages, KT, acc_n = plan.stages, plan.KT, plan.acc_n
    wait = wgmma.wait_for_slice(plan)

    @T.macro
    def consumer(smem, acc, frag, total, flag, fallback, descA, descB, A_op, B_op, C, m0, n0, wg, warp, lane):
        for i in T.unroll(acc_n):
            acc[i] = T.float32(0)
            T.cuda.wgmma.noop_barrier(acc[i])
        # Two k slices per trip, so each slice's B^T fragments (register A, step 18) have
        # their own registers while the previous slice's wgmma run.
        for kt2 in T.serial(_ceil(KT, 2)):
            for p in T.unroll(2):
                if kt2 * 2 + p < KT:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((kt2 * 2 + p) % stages)]),
                                         ((kt2 * 2 + p) // stages) & 1)
                    multiply(smem, acc, frag, descA, descB, (kt2 * 2 + p) % stages, p, wg, warp, lane)
                    # The previous slice's wgmma are done: its stage is free (16-bit: all are
                    # done, Plan.in_flight says why; the tile's last slice: all, wait_for_slice).
                    wait(kt2 * 2 + p, KT)
                    if kt2 * 2 + p > 0:
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[plan.empty_bar((kt2 * 2 + p - 1) % stages)]), T.uint32(1))
        T.ptx.wgmma.wait_group.sync.aligned(0)
        for i in T.unroll(acc_n):
            T.cuda.wgmma.noop_barrier(acc[i])
        store(C, acc, m0, n0, wg, warp, lane)

    return consumer


def warp_specialized(plan: Plan, producer, consumer, helpers=None, blocks: int | None = None):
    """The rung's kernel: warpgroup 0 produces (thread 0 runs `producer`; with `helpers`, step
    19's, warps 1-3 run them), the others consume, with setmaxnreg moving registers from the
    producer (PRODUCER_REGS a thread) to the consumers (plan.consumer_regs). One block per tile, each
    role given its tile's corner (m0, n0); or, with `blocks` (step 25's persistent grid), that
    many blocks, each role given the block's index to walk its tiles from."""

    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map):
        for bid in T.thread_binding(plan.tm * plan.tn if blocks is None else blocks, thread="blockIdx.x"):
            for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A_op[0:plan.M, 0:plan.Ka], B_op[0:plan.B_shape[0], 0:plan.B_shape[1]])
                    T.writes(C[0:plan.M, 0:plan.N])
                    # The registers of every Hopper rung (one a rung does not use is never
                    # allocated): the accumulator, B^T's fragments (register A), the fp32 total,
                    # fallback flag and value and the split's loads (3xTF32), the descriptors.
                    smem = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                    acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                    frag = T.sblock_alloc_buffer((plan.frag_regs,), "uint32", scope="local")
                    total = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                    flag = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    fallback = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    stash = T.sblock_alloc_buffer((plan.stash_regs,), "float32", scope="local")
                    descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    # What each role is told of its work: a tile's corner, or a persistent block's index.
                    walker = T.meta_var(() if blocks is None else (bid,))
                    where = T.meta_var((plan.tile_m0(bid), plan.tile_n0(bid)) if blocks is None else walker)
                    wg = T.meta_var((tid - plan.first) // WARPGROUP)
                    warp = T.meta_var(tid % WARPGROUP // 32)
                    lane = T.meta_var(tid % 32)
                    wgmma.init_barriers(plan)(smem, tid)
                    if tid < WARPGROUP:
                        T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                        if tid == 0:
                            producer(smem, A_map, B_map, *where)
                        elif helpers is not None and tid >= 32:
                            helpers(smem, stash, *walker, tid - 32)
                    else:
                        T.ptx["setmaxnreg.inc.sync.aligned.u32"](plan.consumer_regs)
                        consumer(smem, acc, frag, total, flag, fallback, descA, descB, A_op, B_op, C,
                                 *where, wg, warp, lane)

    return kernel


def kernel(M: int, N: int, K: int, cfg: WgmmaPipelineConfig, dtype: str = "fp32"):
    p = wgmma.plan(M, N, K, cfg, dtype)
    return wgmma.prim_func(p, warp_specialized(p, produce(p, wgmma.load_stage(p)),
                                               consume(p, wgmma.multiply_stage(p), wgmma.store(p))))
