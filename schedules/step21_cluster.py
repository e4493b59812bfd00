"""Step 21 — clusters of two blocks: one TMA multicast loads A's tile into both.

Idea: step 20's blocks each load a 256 x 64 tile of A (32 KB in 16-bit) and a 64 x 128 tile of
B (16 KB) per slice; two blocks that share their rows of C load the same A tile from L2 twice.
At 700 TFLOP/s that is ~8 TB/s from L2 into the SMs, near what an H100's L2 delivers. Launch
the blocks in clusters of two side by side in N (``clusterCtaIdx``: TVM launches the kernel
with cuLaunchKernelEx and a cluster dimension), and let block 0 of each cluster load A's tile
once, with ``.multicast::cluster``, into the same place in both blocks' shared memory, the copy
engine completing each block's own "full" barrier; each block loads its own B tile. A stage may
be overwritten only when both blocks are done with it, so each consumer warpgroup hands a stage
back to both blocks' "empty" barriers (``arrive_cluster``: ``mapa`` gives the other block's
address of the same barrier). L2 traffic per pair of tiles and slice: 32 + 2 x 16 KB instead of
2 x (32 + 16), a third less. The persistent walk is over pairs of tiles (256 x 256), the blocks
of a cluster in step; where N has an odd number of tiles, block 1's last tile lies past N: it
loads zeros (TMA fills out-of-bounds boxes) and stores nothing (the store's edge masks).
The cluster meets (``barrier.cluster``) after its barriers are initialized, before anyone
arrives on the other block's, and at the end, so no block exits while the other may still
arrive on its barriers.

Prediction: if L2 bandwidth is what holds steps 18 and 20 at ~0.9x cuBLAS (the tensor pipe
active 88.5% of cycles at 4096^3 in bf16), a third less traffic gives ~5-8% (towards cuBLAS,
which runs clusters of two); if not, ~0-2%, and the cost of the remote arrivals shows.

Measured (H100 80GB HBM3, 2026-11-27, kernel time; git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/
issue48_probes.txt). First with ``.release.cluster`` on the remote arrivals: 390 TFLOP/s bf16 at
4096^3 against step 20's 680, whatever the grid (66 to 132 blocks: the time scaled with the
blocks, so not a wave of clusters waiting), and the same kernel launched in clusters without
the multicast ran as step 20 (742 against 748): the cluster-scope release on each of the 4
arrivals per slice was the cost; without it (as CUTLASS), 693. The committed run (python -m
steps --steps 18,20,21,22 ... --save, the three dtypes): at 2048 / 4096 / 8192^3
- bf16 605.1 / 698.6 / 737.6 TFLOP/s, 0.96x / 0.99x / 1.07x step 20, 84% / 101% / 97% of cuBLAS bf16;
- fp16 591.0 / 687.0 / 686.1, 0.96x / 1.04x / 1.00x step 20, 84% / 102% / 99%;
- TF32 319.5 / 375.8 / 384.8, 0.98x / 1.06x / 1.02x step 20, 90% / 109% / 101% of cuBLAS TF32.
So the lower end of the prediction, and slower below 4096 (EXPECTED_REGRESSION): at the
power limit (see step 20) the L2 traffic saved is not what holds the kernel. cuBLAS's own
kernels, named by the profiler in the same process: bf16 and fp16 at 4096^3
``nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA`` (this rung's tile, 4 stages, clusters of two),
at 8192^3 ``..._320x128_64x3_1x2_...`` (a larger tile, 3 stages); TF32
``sm90_xmma_gemm_..._tilesize128x256x32_warpgroupsize2x1x1`` (no cluster).
Nsight Compute (4096^3, one launch, 1.62-1.65 GHz under the profiler, 2026-11-27;
results/nvidia-h100-80gb-hbm3/evidence/ncu_steps20-22.txt): bf16 184 us, the tensor pipe active
89.4% of cycles (step 20: 90.3%), stalls per issued instruction: barrier 10.9 (7.4 in step 20:
the two blocks of a cluster wait for each other's consumers before a stage is reused), long
scoreboard 1.3 (2.2: half of A's loads are the partner's), wait 1.2, sleeping 0.7; TF32 343 us,
94.5%, barrier 7.2, wait 1.7, short scoreboard 1.7. Memory throughput falls from 72% to 65% of
peak (bf16), the multicast's saving, but the pipe was not waiting on memory.

The rung's own pieces, below: ``pair_corner`` and ``pair_loop`` (a cluster's pairs of tiles),
``load_multicast``, ``arrive_cluster``, ``produce_pairs``, ``release_both`` and ``clustered`` (the
kernel). The consumers' loop is step 20's (``consume_tiles``, walking ``pair_loop`` and handing
stages back with ``release_both``); a stage's wgmma and the store are step 18's.

Run: python -m steps.step21
"""

from __future__ import annotations

from dataclasses import replace

from tvm.script import tirx as T

from .config import WgmmaClusterConfig
from .step18_register_a import multiply_register_a, multiply_transposed
from .step20_persistent import blocks_for, consume_tiles, store_registers
from .transforms import wgmma
from .transforms.wgmma import PRODUCER_REGS, TMA_LOAD, WARPGROUP, Plan, _ceil

NUMBER = 21
TENSOR_CORES = True
NAME = "clusters of two, A multicast"
IDEA = "clusters of 2 blocks side by side in N; block 0's TMA multicasts A's tile to both; stages freed cluster-wide"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
Config = WgmmaClusterConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) fused into the store (wgmma.stored)
PIECES = ("pair_corner", "pair_loop", "load_multicast", "arrive_cluster", "produce_pairs", "release_both", "clustered")

EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024, 2048),
    "at 2048 and below (64 pairs of tiles or fewer) the L2 traffic a cluster saves is not what limits; "
    "its blocks wait for each other at every stage (measured 0.90-0.98x step 20)",
)
EXPECTED_REGRESSION_BF16 = EXPECTED_REGRESSION_FP16 = EXPECTED_REGRESSION

CLUSTER = 2  # blocks per cluster, side by side in N
TMA_MULTICAST = TMA_LOAD + ".multicast::cluster"
BOTH = 0b11  # the multicast's mask: both blocks of the cluster


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaClusterConfig:
    cfg = WgmmaClusterConfig()
    pairs = _ceil(M, cfg.block_m) * _ceil(_ceil(N, cfg.block_n), CLUSTER)
    return replace(cfg, ctas=blocks_for(pairs, CLUSTER))


def grid(plan: Plan) -> int:
    """Blocks launched: two per pair of tiles, at most ctas."""
    return min(plan.tm * _ceil(plan.tn, CLUSTER), plan.cfg.ctas // CLUSTER) * CLUSTER


def pair_corner(plan: Plan, i, rank):
    """The first row and column of C of the `rank`-th tile of pair i, pairs in step 15's raster
    order (group rows of pairs at a time)."""
    rows, cols = plan.tm, _ceil(plan.tn, CLUSTER)
    group = min(plan.cfg.raster, rows)
    g = i // (group * cols)
    height = T.min(group, rows - g * group)
    return ((g * group + i % (group * cols) % height) * plan.BM,
            (i % (group * cols) // height) * plan.BN * CLUSTER + rank * plan.BN)


def pair_loop(plan: Plan, bid):
    """Step 20's tile_loop for block `bid` of cluster bid // 2: how many pairs of tiles its
    cluster runs (the pairs cid, cid + clusters, ...), and the first row and column of C of this
    block's tile of pair t (the (bid % 2)-th of the pair)."""
    rows, cols, clusters = plan.tm, _ceil(plan.tn, CLUSTER), grid(plan) // CLUSTER
    cid = bid // CLUSTER
    return ((rows * cols - cid + clusters - 1) // clusters,
            lambda t: pair_corner(plan, cid + t * clusters, bid % CLUSTER))


# Arrive on the barrier at `bar`'s address in block `cta` of the cluster (this block's own too),
# with mbarrier.arrive's default semantics (release at CTA scope), as CUTLASS's ClusterBarrier
# does: the stage was read by wgmma, whose completion wait_group has already waited for, and is
# written next by the copy engine. ".release.cluster" (a cluster-scope fence on every arrival)
# measured 430 TFLOP/s against 693 without it (bf16, 4096^3, H100, 2026-11-27).
ARRIVE_CLUSTER = """
__forceinline__ __device__ void arrive_cluster(void* bar, unsigned int cta) {
  unsigned int local = (unsigned int)__cvta_generic_to_shared(bar);
  asm volatile("{\\n\\t.reg .b32 remote;\\n\\tmapa.shared::cluster.u32 remote, %0, %1;\\n\\t"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\\n\\t}"
               :: "r"(local), "r"(cta) : "memory");
}
"""


# barrier.cluster without .aligned: the producer's thread 0 reaches the last one after the
# other threads of its warp (TVM's cluster_sync is the .aligned form, for converged warps).
CLUSTER_SYNC = """
__forceinline__ __device__ void cluster_sync_diverged() {
  asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");
}
"""


def cluster_sync():
    return T.cuda.func_call("cluster_sync_diverged", source_code=CLUSTER_SYNC)


def arrive_cluster(bar, cta):
    return T.cuda.func_call("arrive_cluster", bar, cta, source_code=ARRIVE_CLUSTER)


def load_multicast(plan: Plan):
    """A macro: a stage's loads in one block of a cluster. Each block expects A's and its B's
    bytes on its own "full" barrier; block 0 multicasts A's tile to both, each loads its B tile
    as step 18 does (block_n / box_n boxes of BK k rows)."""
    BK, A_fl, stage_fl, BN, box = plan.BK, plan.A_fl, plan.stage_fl, plan.BN, plan.box_n

    @T.macro
    def load(smem, A_map, B_map, kt, s, m0, n0, rank):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(smem[plan.full_bar(s)]), T.uint32(plan.tx_bytes))
        if rank == 0:
            T.ptx[TMA_MULTICAST](T.address_of(smem[s * stage_fl]), T.address_of(A_map), kt * BK, m0,
                                 T.address_of(smem[plan.full_bar(s)]), T.uint16(BOTH))
        for c in T.unroll(BN // box):
            T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl + A_fl + c * BK * box]), T.address_of(B_map),
                            n0 + c * box, kt * BK, T.address_of(smem[plan.full_bar(s)]))

    return load


def produce_pairs(plan: Plan, load):
    """A macro: step 20's producer over the cluster's pairs, telling the load its block's rank
    (block 0 multicasts A)."""
    stages, KT = plan.stages, plan.KT

    @T.macro
    def producer(smem, A_map, B_map, bid):
        count, corner = T.meta_var(pair_loop(plan, bid))
        for t in T.serial(count):
            m0, n0 = T.meta_var(corner(t))
            for kt in T.serial(KT):
                if t * KT + kt >= stages:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar((t * KT + kt) % stages)]),
                                         (((t * KT + kt) // stages) & 1) ^ 1)
                load(smem, A_map, B_map, kt, (t * KT + kt) % stages, m0, n0, bid % CLUSTER)

    return producer


def release_both(plan: Plan):
    """A macro: a stage goes back to both blocks of the cluster: threads 0 and 1 of each consumer
    warpgroup arrive on block 0's and block 1's "empty" barrier."""

    @T.macro
    def release(smem, g, tid):
        if tid % WARPGROUP < CLUSTER:
            T.evaluate(arrive_cluster(T.address_of(smem[plan.empty_bar(g % plan.stages)]), T.uint32(tid % WARPGROUP)))

    return release


def consume_pairs(plan: Plan, multiply, store):
    """A macro: step 20's consumer over the cluster's pairs, handing each stage back to both blocks."""
    return consume_tiles(plan, multiply, store, walk=pair_loop, release=release_both(plan))


def init_cluster_barriers(plan: Plan):
    """A macro: thread 0 initializes each stage's "full" (one arrival plus the bytes) and "empty"
    (one arrival per consumer warpgroup of both blocks) barriers; the cluster meets, so no block
    arrives on the other's barriers before they exist. (The buffer launched whole: wgmma.keep_whole.)"""
    stages, consumers = plan.stages, plan.consumers

    @T.macro
    def init(smem, tid):
        wgmma.keep_whole(smem, tid)
        if tid == 0:
            for s in T.unroll(stages):
                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[plan.full_bar(s)]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[plan.empty_bar(s)]), T.uint32(consumers * CLUSTER))
        T.ptx.fence.proxy.async_.shared__cta()
        T.cuda.cluster_sync()

    return init


def clustered(plan: Plan, producer, consumer):
    """A macro: the kernel, step 20's launched in clusters of two (clusterCtaIdx.x is the
    block's rank); `out` is what the consumers' store writes through (C here)."""

    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map, out):
        for bid in T.thread_binding(grid(plan), thread="blockIdx.x"):
            # The binding makes TVM launch clusters of two; a block's rank in its cluster is
            # bid % 2 (blockIdx.x counts blocks, not clusters), cheaper than reading %cluster_ctarank.
            for _rank in T.thread_binding(CLUSTER, thread="clusterCtaIdx.x"):
                for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                    with T.sblock("C"):
                        T.reads(A_op[0:plan.M, 0:plan.Ka], B_op[0:plan.B_shape[0], 0:plan.B_shape[1]])
                        T.writes(C[0:plan.M, 0:plan.N])
                        smem = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                        acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                        frag = T.sblock_alloc_buffer((plan.frag_regs,), "uint32", scope="local")
                        descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                        descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                        wg = T.meta_var((tid - plan.first) // WARPGROUP)
                        warp = T.meta_var(tid % WARPGROUP // 32)
                        lane = T.meta_var(tid % 32)
                        init_cluster_barriers(plan)(smem, tid)
                        if tid < WARPGROUP:
                            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                            if tid == 0:
                                producer(smem, A_map, B_map, bid)
                        else:
                            T.ptx["setmaxnreg.inc.sync.aligned.u32"](plan.consumer_regs)
                            consumer(smem, acc, frag, descA, descB, out, bid, tid, wg, warp, lane)
                        # No block leaves while the other may still arrive on its barriers.
                        T.evaluate(cluster_sync())

    return kernel


def kernel(M: int, N: int, K: int, cfg: WgmmaClusterConfig, dtype: str = "fp32", epilogue=None, fused=True):
    p = wgmma.plan(M, N, K, cfg, dtype, epilogue=epilogue, fused=fused)
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    block = clustered(p, produce_pairs(p, load_multicast(p)), consume_pairs(p, multiply, store_registers(p)))

    @T.macro
    def launch(A_op, B_op, C, A_map, B_map):
        block(A_op, B_op, C, A_map, B_map, C)

    return wgmma.prim_func(p, launch)
