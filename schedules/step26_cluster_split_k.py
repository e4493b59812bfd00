"""Step 26 — split-K in a cluster: a tile's parts of K are added through distributed shared memory.

Idea: step 23 splits K to fill the SMs, but its parts meet in global memory: each unit writes an
fp32 partial sum to a workspace and a second kernel adds them, a launch and a round trip that
are a third of a 5-15 us run (step 23's docstring). On Hopper the blocks of a cluster can read
each other's shared memory. So launch one block per (tile, part) in clusters of `split` blocks,
the parts of one tile side by side (``part_of``): block r multiplies slices [r S, (r + 1) S) of K
with step 18's ring and consumers, writes its fp32 accumulator to its own shared memory in the
tile's row-major order (``write_partial``), and the cluster meets (``barrier.cluster``, release
and acquire: the writes are visible to the other blocks). Then block r adds rows [r BM / split,
(r + 1) BM / split) of the tile over every block's partial (``ld.shared::cluster`` through
``mapa``, the parts in order 0, 1, ..., so every block's sum is the same fp32 sum) and writes
them to C, 4 consecutive columns a thread (16-byte loads of each block's partial sums, every
load issued before the first add; stores coalesced; the fused epilogue applied: wgmma.stored); the cluster meets again before any block exits, as its shared memory is still
being read. One kernel, no workspace. The partial sums' rows are padded by PARTIAL_PAD floats:
an accumulator register's 32 lanes write 4 rows x 8 columns, which without it would fall in 8
banks.

Prediction (before any device run): where step 23 runs a split (4096 x 128 x 4096: 4 parts of
128 x 128 tiles ran 22.6 us on the H100 against 16.0 for one part of 64 x 64 tiles, cuBLAS bf16
10.8; 16 x 1024 x 4096 at 16 tokens of a model, 8 parts) this removes the second launch and the
workspace's traffic, ~2-4 us; the adds themselves read 4 x BM x BN bytes from split blocks, ~1
us at DSMEM's rate. So 4096 x 128 x 4096 ~12-14 us (0.8-0.9x cuBLAS), and the K-heavy small
outputs that need more than 8 parts (64 x 64 x 65536) stay step 23's.

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-28, kernel time; cuBLAS in the
dtype, step 23's own config and step 26 at its rule and at other tiles in one process per call;
git show e2a3b79:results/nvidia-h200/evidence/step26_probe.txt):
- Right where predicted, on the small outputs step 23 splits: bf16 at a d = 1024 model's 16 and
  128 tokens, 16 x 1024 x 4096 6.05 us against step 23's 7.84 (1.30x; cuBLAS 6.08),
  16 x 3072 x 1024 5.10 against 7.67 (1.50x), 16 x 4096 x 1024 6.42 against 9.43 (1.47x),
  16 x 1024 x 1024 4.33 against 8.93 (2.06x), 128 x 1024 x 1024 5.63 against 7.31 (1.30x),
  128 x 1024 x 4096 8.31 against 8.50. In TF32 the 16-token shapes and 128 x 1024 x 1024 ran
  1.03-1.59x step 23 (128 x 1024 x 4096 0.95x) and 0.98-1.31x cuBLAS TF32. The saving, 1.7-4.6
  us, is the second kernel and its launch.
- Wrong at 4096 x 128 x 4096: 16.07 us, step 23's 16.08 (one part of 64 x 64 tiles), 0.56x
  cuBLAS; 4 parts of 128 x 128 ran 19.3. The adds were not what limits there; reading A is.
  Nsight Compute (the same H200): step 23's kernel (64 x 64, 8 stages, 128 blocks of 256
  threads) 18.0 us at 1.97 TB/s from DRAM, step 26's (128 x 128, 2 parts, 64 blocks) 20.1 at
  1.76, and cuBLAS's nvjet_sm90_tst_64x64_64x13_2x1 13.95 at 2.56: the same tile on 128 blocks,
  but 13 stages of 64 k (230 KB), two consumer warpgroups, clusters of two. Which of the three
  it owes its speed to is untried (rings of up to 16 stages build, ``MAX_RING_STAGES``; unmeasured).
- Step 23 stays ahead where K wants more than 8 parts or a persistent walk over many: 256 x 256 x
  16384 0.59x step 23 (64 blocks, 8 parts of 2048), 512 x 512 x 8192 0.93x, 1024 x 64 x 8192
  0.86x, and where one part of small tiles fills the SMs: 128 x 3072 x 1024 0.85x, 128 x 4096 x
  1024 0.77x, 1000 x 1500 x 700 0.77x.
- Clusters of 4 and 8 fill fewer SMs than clusters of 2: 128 blocks in clusters of 4 or 8 ran
  1.2-1.4x the time of the same work in fewer parts (``CLUSTER_WAVE``), and parts
  shorter than 256 of K lost to fewer, longer ones (``PART_K``). ``default_config`` is the rule
  these measurements chose (calls 2-4 of that log): its pick was the fastest config tried, or
  within 6%, at 16 of 19 shapes in bf16; 1.10-1.19x at 256 x 256 x 16384, 128 x 3072 x 1024
  and 128 x 4096 x 1024 (64 x 128 tiles in two parts were faster at the last two).
- Errors equal step 23's (bf16 1.7e-3, TF32 6.9e-4): the parts are added in fp32 in rank order.
  The GPU tests (odd shapes in every dtype, the fused epilogue fused and not) pass: 41 of 41.
No H100 run yet. The H200's rows pick it at shapes where tiles alone leave SMs idle, and which
of those moves with each run's 1-2% (2026-11-29, third run: bf16 at 2048 x 64 x 2048, 64 x 2048 x
2048, 64 x 1024 x 8192 and 513 x 257 x 1025; fp16 at those but 64 x 1024 x 8192, and at 8192 x 32
x 2048 and 1024 x 64 x 8192; earlier runs also at 997 x 1009 x 1013),
and a d = 1024 model's 16- and 128-token blocks take it (docs/models.md). The H100's rows will once
tools/bench_run.sh (which times it among the TF32 and 16-bit candidates) has run there.

Run: python -m steps.step26
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from . import config
from .config import CLUSTER_SPLITS, FLOAT_BYTES, HOPPER_SMS, PARTIAL_PAD, WgmmaClusterSplitConfig
from .step18_register_a import c_col, c_row, load_b_boxes, multiply_register_a, multiply_transposed
from .step20_persistent import accumulate_tile
from .step20_persistent import kernel as persistent_kernel
from .step21_cluster import cluster_sync
from .step22_tma_store import store_shared
from .step23_split_k_wgmma import STAGE_BYTES
from .transforms import wgmma
from .transforms.wgmma import PRODUCER_REGS, WARPGROUP, Plan, _ceil

NUMBER = 26
TENSOR_CORES = True
NAME = "split-K in a cluster"
IDEA = "a tile's K parts on the blocks of one cluster, added through distributed shared memory: one kernel, no workspace"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 23
Config = WgmmaClusterSplitConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) applied as the parts are added (wgmma.stored)
PIECES = ("SplitPlan", "part_of", "produce_part", "write_partial", "add_parts", "cluster_split")


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaClusterSplitConfig:
    """The rule the H200's measurements chose (docstring): block_m the smallest of 32, 64 and 128
    that covers M (128 beyond); block_n 128, then the most parts (8, 4, 2) whose blocks fit one
    wave of clusters of that size (CLUSTER_WAVE) with PART_K of K each; block_n 64 instead where
    N passes 64 and 128 leaves fewer than HALF_WAVE blocks and 64 gives more."""
    bm = 32 if M <= 32 else 64 if M <= 64 else 128

    def parts(bn: int) -> tuple[int, int]:
        tiles = _ceil(M, bm) * _ceil(N, bn)
        split = next((s for s in sorted(CLUSTER_SPLITS, reverse=True)
                      if tiles * s <= CLUSTER_WAVE[s] and _ceil(K, s) >= PART_K), min(CLUSTER_SPLITS))
        return tiles * split, split

    bn = 128 if N > 64 else 64
    blocks, split = parts(bn)
    if bn == 128 and blocks < HALF_WAVE and parts(64)[0] > blocks:
        bn, (blocks, split) = 64, parts(64)
    return _config(bm, bn, split)


# Blocks in clusters of 2, 4 and 8 that ran as one wave (H200, 2026-11-28, bf16): 128 blocks in
# clusters of 4 or 8 ran 1.2-1.4x the time of the same work in fewer parts, as a second wave
# would (512 x 1024 x 4096, 128 x 128 tiles: 4 parts 20.6 us, 2 parts 16.3; 16 x 4096 x 1024:
# 4 parts 8.2, 2 parts 6.1; 4096 x 128 x 4096: 128 x 128 x 4 parts 19.3, 64 x 128 x 2 parts 16.0).
CLUSTER_WAVE = {2: HOPPER_SMS, 4: 96, 8: 64}
PART_K = 256  # K a part at least: 8 parts of 128 ran 1.31x 4 of 256 (16 x 3072 x 1024, bf16)
HALF_WAVE = 64


def _config(bm: int, bn: int, split: int) -> WgmmaClusterSplitConfig:
    partial = bm * (bn + PARTIAL_PAD) * FLOAT_BYTES
    stages = max(2, min(8, (STAGE_BYTES + 2 * 16384 - partial) // ((bm + bn) * 128)))
    return WgmmaClusterSplitConfig(block_m=bm, block_n=bn, stages=stages, split_k=split)


@dataclass(frozen=True)
class SplitPlan(Plan):
    """Step 18's plan with the partial sums after the ring and its barriers: block_m rows of
    block_n + PARTIAL_PAD floats, 16-byte aligned."""

    @property
    def partial0(self) -> int:
        """The partial sums' first element (in the plan's dtype)."""
        return _ceil(super().smem_fl, 16 // self.eb) * (16 // self.eb)

    @property
    def stride(self) -> int:
        """Floats per row of the partial sums."""
        return self.BN + PARTIAL_PAD

    def partial(self, r, c):
        """Element offset (in the plan's dtype) of the partial sum of tile row r, column c."""
        return self.partial0 + (r * self.stride + c) * (FLOAT_BYTES // self.eb)

    @property
    def smem_fl(self) -> int:
        return self.partial0 + self.BM * self.stride * FLOAT_BYTES // self.eb


def part_of(plan: Plan, split: int, bid):
    """Block `bid`'s tile (the raster order's bid // split: a cluster's blocks share one) and part
    of K (bid % split, its rank in the cluster), and the part's slices: S = ceil(K / BK / split)."""
    tile = bid // split
    return plan.tile_m0(tile), plan.tile_n0(tile), bid % split


def produce_part(plan: Plan, load, split: int):
    """A macro: the producer thread loads the block's S slices of K (zeros past K's end)."""
    stages, per = plan.stages, _ceil(plan.KT, split)

    @T.macro
    def producer(smem, A_map, B_map, bid):
        m0, n0, rank = T.meta_var(part_of(plan, split, bid))
        for kt in T.serial(per):
            if kt >= stages:
                T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar(kt % stages)]), ((kt // stages) & 1) ^ 1)
            load(smem, A_map, B_map, rank * per + kt, kt % stages, m0, n0)

    return producer


def write_partial(plan: SplitPlan):
    """A macro: a consumer's accumulator (C^T's registers, step 18's layout) to the partial sums
    in the tile's row-major order, fp32."""
    acc_n = plan.acc_n
    settle = wgmma.settle(plan)

    @T.macro
    def write(smem, acc, wg, warp, lane):
        settle(acc)
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    T.evaluate(store_shared("float32", T.address_of(smem[plan.partial(
                        c_row(0, i, c, lane), c_col(0, h, wg, warp, lane))]), acc[i * 4 + 2 * h + c]))

    return write


# The sums over the cluster's blocks of the 4 floats at shared address p (the same offset in
# each): mapa gives block r's address, ld.shared::cluster reads 16 bytes. Every part's load is
# issued before the first add (one round trip, not `parts`), and the parts are added in rank order.
CLUSTER_SUM = """
__forceinline__ __device__ void cluster_sum_v4(void* p, unsigned int parts, float* out) {
  unsigned int local = (unsigned int)__cvta_generic_to_shared(p);
  float4 v[8];
#pragma unroll
  for (unsigned int r = 0; r < 8; ++r) {
    if (r < parts) {
      asm volatile("{\\n\\t.reg .b32 remote;\\n\\tmapa.shared::cluster.u32 remote, %4, %5;\\n\\t"
                   "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [remote];\\n\\t}"
                   : "=f"(v[r].x), "=f"(v[r].y), "=f"(v[r].z), "=f"(v[r].w) : "r"(local), "r"(r));
    }
  }
  float4 s = v[0];
#pragma unroll
  for (unsigned int r = 1; r < 8; ++r) {
    if (r < parts) { s.x += v[r].x; s.y += v[r].y; s.z += v[r].z; s.w += v[r].w; }
  }
  out[0] = s.x; out[1] = s.y; out[2] = s.z; out[3] = s.w;
}
"""


def cluster_sum(addr, parts, out):
    return T.cuda.func_call("cluster_sum_v4", addr, T.uint32(parts), out, source_code=CLUSTER_SUM)


def add_parts(plan: SplitPlan, split: int):
    """A macro: the consumers of block `rank` add its BM / split rows of the tile over the
    cluster's partial sums, 4 consecutive columns a thread and consecutive threads along a row,
    and write them to C (or, fused, the epilogue of them to D)."""
    M, N, BN = plan.M, plan.N, plan.BN
    rows, threads = plan.BM // split, plan.consumers * WARPGROUP
    quads = rows * BN // 4

    @T.macro
    def add(smem, sums, C, m0, n0, rank, tid):
        for it in T.unroll(_ceil(quads, threads)):
            if it * threads + (tid - plan.first) < quads:
                r = T.meta_var(rank * rows + (it * threads + tid - plan.first) * 4 // BN)
                c = T.meta_var((it * threads + tid - plan.first) * 4 % BN)
                T.evaluate(cluster_sum(T.address_of(smem[plan.partial(r, c)]), split, T.address_of(sums[0])))
                for v in T.unroll(4):
                    if m0 + r < M and n0 + c + v < N:
                        wgmma.output(C)[m0 + r, n0 + c + v] = wgmma.stored(plan, C, sums[v], m0 + r, n0 + c + v)

    return add


def cluster_split(plan: SplitPlan, split: int, producer, multiply):
    """A macro: the kernel. tiles x split blocks in clusters of `split` (clusterCtaIdx.x); step
    20's roles and registers; the consumers accumulate the block's part, write it to shared
    memory; the cluster meets; they add their rows of the tile over the cluster; it meets again."""
    blocks = plan.tm * plan.tn * split
    accumulate = accumulate_tile(plan, multiply, slices=_ceil(plan.KT, split))
    write, add = write_partial(plan), add_parts(plan, split)

    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map):
        for bid in T.thread_binding(blocks, thread="blockIdx.x"):
            # The binding makes TVM launch clusters of `split` blocks; a block's rank in its
            # cluster is bid % split (step 21's).
            for _rank in T.thread_binding(split, thread="clusterCtaIdx.x"):
                for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                    with T.sblock("C"):
                        T.reads(A_op[0:plan.M, 0:plan.Ka], B_op[0:plan.B_shape[0], 0:plan.B_shape[1]])
                        T.writes(C[0:plan.M, 0:plan.N])
                        smem = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                        acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                        frag = T.sblock_alloc_buffer((plan.frag_regs,), "uint32", scope="local")
                        descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                        descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                        sums = T.sblock_alloc_buffer((4,), "float32", scope="local")
                        wg = T.meta_var((tid - plan.first) // WARPGROUP)
                        warp = T.meta_var(tid % WARPGROUP // 32)
                        lane = T.meta_var(tid % 32)
                        m0, n0, rank = T.meta_var(part_of(plan, split, bid))
                        wgmma.init_barriers(plan)(smem, tid)
                        if tid < WARPGROUP:
                            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                            if tid == 0:
                                producer(smem, A_map, B_map, bid)
                        else:
                            T.ptx["setmaxnreg.inc.sync.aligned.u32"](plan.consumer_regs)
                            accumulate(smem, acc, frag, descA, descB, 0, tid, wg, warp, lane)
                            write(smem, acc, wg, warp, lane)
                        T.evaluate(cluster_sync())  # every part is in its block's shared memory
                        if tid >= plan.first:
                            add(smem, sums, C, m0, n0, rank, tid)
                        # No block leaves while another may still read its partial sums.
                        T.evaluate(cluster_sync())

    return kernel


def kernel(M: int, N: int, K: int, cfg: WgmmaClusterSplitConfig, dtype: str = "fp32", epilogue=None, fused=True):
    p = SplitPlan(M, N, K, cfg, config.DTYPES[dtype], epilogue=epilogue, fused=fused)
    split = cfg.split_k
    while split > 1 and split > p.KT:  # no part without a slice of K
        split //= 2
    if split == 1:  # K is one slice: step 20's kernel at this tile
        one = config.WgmmaPersistentConfig(block_m=cfg.block_m, block_n=cfg.block_n, stages=min(cfg.stages, 4))
        return persistent_kernel(M, N, K, one, dtype, epilogue, fused)
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    return wgmma.prim_func(p, cluster_split(p, split, produce_part(p, load_b_boxes(p), split), multiply))
