"""Step 27 — stream-K: the last wave's work spread over every SM, a tile's two parts added through L2.

Idea: step 22's clusters walk pairs of 256 x 128 tiles, and a pair is the unit of work: at
4096^3 there are 256 pairs for the 66 clusters of two an H100 (or H200) holds, 3.9 waves, so
every cluster runs 4 pairs or idles through the last; step 22 launches 64 clusters (128 blocks,
``blocks_for``), 4 waves exactly, and four SMs do nothing. cuBLAS runs the same tile and cluster
on all 132 SMs (Nsight Compute, H200, 2026-11-28: ``nvjet_sm90_hsh_256x128_64x4_1x2_..._coopA``,
132 blocks) and is ~3% faster, per SM as busy as step 22 (wgmma 90.2% against 90.6%).
So make the unit a pair *and a range of K* where the pairs do not divide evenly, as stream-K
does (Osama et al., 2023), after data-parallel waves as CUTLASS's hybrid does: with C clusters
and P pairs, P % C + C pairs (the remainder and one full wave) are "streamed": their P_s x KT
slices of 64 k are cut into C equal ranges, one per cluster, after the (P - P_s) / C whole pairs
each cluster runs first, as step 22 (``StreamK``). A range is at least KT slices long, so each
streamed tile is cut at most once: the cluster whose range holds the tile's first slices (its
k-start) owns it; the next cluster holds the tile's last slices, at the start of its range. It
multiplies them (``accumulate_slices``: step 20's loop over a count known only when the kernel
runs), writes its fp32 sums to a workspace in L2, register by register (coalesced: 128 threads
of a consumer write 512 consecutive bytes per register; ``write_partial``), and raises a flag
(``red.release.gpu``, after the consumer's threads meet); the owner gets to the tile at the end
of its own range, waits for the flag (``ld.acquire.gpu``, almost always already raised, since
its partner wrote the partial sums a whole range earlier), adds the partial sums to its own
(``add_partial``) and stores the tile as step 22 does, fused epilogue included. The workspace
and the flags are a kernel's own ``__device__`` arrays (zero when the module loads; the owner
lowers its flag once it has seen it, so each launch starts from zero): no allocation, no kernel
to clear them. One kernel. Where nothing is streamed (the pairs divide evenly over the clusters,
or more than 1 / ``stream_share`` of them would be while step 22's waves are nearly whole: the
measurements below) or TMA cannot address C, the kernel is step 22's, and the default config is
step 22's too (``default_config``).

Prediction: at 4096^3, 256 pairs of 64 slices on 66 clusters: 2 whole pairs each, then 124 pairs
streamed, 120.2 slices a cluster: 248.2 slices against step 22's 256, 3.1% less work on the
slowest SM; the partial sums (128 KB a block) written once and read once cost ~1-2 us of a
~190 us run. So 1-2% over step 22 at 4096^3, and at 8192^3 (1024 pairs of 128 slices: 14 whole
pairs, 100 streamed, 1985.9 slices against 2048) ~3%. Below 4096 (fewer pairs than clusters)
it is step 22's kernel.

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-28, kernel time, the board at its
700 W cap; alternating rounds in one process, the kernel streaming on 132 blocks against step 22
on 128, each round's ratio to cuBLAS in the dtype, medians; results/nvidia-h200/evidence/
stream_k_rounds.txt):

| shape | pairs streamed | bf16: 27 / 22 | fp16: 27 / 22 | TF32: 27 / 22 |
|---|---|---|---|---|
| 4096^3 | 124 of 256 | 0.925 / 0.970 | 0.933 / 0.968 | 0.978 / 1.034 |
| 6144^3 | 114 of 576 | 0.959 / 0.975 | 0.958 / 0.975 | |
| 8192 x 8192 x 4096 | 100 of 1024 | 1.001 / 0.990 | | |
| 8192^3 (two calls) | 100 of 1024 | 1.024, 1.032 / 1.007, 1.009 | 1.026, 1.034 / 1.007, 1.010 | 1.002 / 1.002 |

At 8192^3 the prediction held in 16 bits (+2%, every one of the 10 rounds of the second call but
one above step 22's ratio; TF32 level), and streaming puts the ladder 3% past cuBLAS there. At
4096^3 it failed: 4-5% slower where 1-2% faster was predicted, and 1.7% slower at 6144^3.
Where the time goes at 4096^3 (bf16, the same rounds; results/nvidia-h200/evidence/stream_k_cost.txt):
the kernel with its fix-up left out (no partial sums written or added: wrong results, right time)
ran 0.985 and 1.008 of cuBLAS in two calls, against step 22's 0.967 and 0.971: the balance is
worth the predicted 2-4%, and the fix-up costs 5-6% (~11 us of ~195), where ~1-2 us were
predicted. Every cluster writes its partial sums at the same moment (the start of its streamed
range) and the owners read them at the same moment (its end), 17 MB each way with no wgmma
running; Nsight Compute (4096^3, one launch) shows DRAM throughput at 31% of peak against step
22's 18%. Keeping the sums in L2 (stores with an evict_last policy) and raising the flag a unit
later, so the stores drain under the next unit's wgmma, measured 0.948 against the committed
fix-up's 0.943 in the same rounds: no gain, so not kept. A later call (2026-11-29,
results/nvidia-h200/evidence/stream_k_order.txt; bf16 4096^3, ten rounds) split the fix-up: step
22 0.969 of cuBLAS, this kernel 0.934, without the partner's write 0.956, without the owner's
read 0.953, without both 0.979. The two sides cost about the same (~2.5% each), so a cheaper read
alone cannot win, and the balance itself is worth only 1% in that call. Running each cluster's
streamed range before its whole pairs (Osama et al.'s order, so the owners' reads fall mid-run
rather than at the end) measured no better: 0.926 at 4096^3 (fp16 0.933 against 0.940) and 1.024
against 1.049 at 8192^3 (six rounds), so it is not kept (git 32062d9). Hence the default streams
only where the streamed pairs are at most an eighth (``stream_share`` 8, fitted to these four
shapes), where a fix-up of fixed cost is a small part of a long run: 8192^3 and 8192 x 8192 x 4096
stream, 4096^3 and 6144^3 run step 22's kernel.
Nsight Compute (8192^3 bf16, one launch each, clocks as the board sets them; results/nvidia-h200/
evidence/ncu_stream_k_8192.txt): step 27 1.37 ms at 1.58 GHz against step 22's 1.36 ms at 1.61
(2.16M against 2.19M cycles, 1.1% fewer); the tensor pipe active 94.4% of cycles on 132 SMs
against 96.5% on 128 (each SM a little less busy, 0.9% more in all); stalls per issued
instruction: barrier 10.8 (step 22: 10.9), wait 1.3 (1.2), long scoreboard 1.1 (1.0). DRAM
throughput 25.4% of peak against 18.4%: the streamed ranges read more from DRAM than whole pairs
do, as the L2 argument above says.
The committed ladder runs (python -m steps --steps 22,27 --sizes 512 1024 2048 4096 8192 --dtype
bf16 --save, fp16, and fp32 inputs in TF32; results/nvidia-h200/) read step 27 at 8192^3 689.6
TFLOP/s bf16 against step 22's 715.5 (0.96x), 662.0 fp16 against 638.1 (1.04x), 356.9 TF32
against 363.7 (0.98x): one run each, within the +-4% a single run reads at the power cap, where
the rounds above are the measurement. Below 8192 step 27 is step 22's kernel there, and its
numbers are step 22's again.

Where step 22's waves are ragged (H200, 2026-11-29; the probe's log:
`git show b9d4f39:results/nvidia-h200/evidence/stream_share_probe.txt`).
At 3072^3 there are 144 pairs for step 22's 64 clusters: three waves, the last a quarter full.
Streamed over all 66 clusters with every pair streamable (``stream_share`` 1; 78 pairs streamed,
more than an eighth), a cluster has 2.18 pairs' work. Prediction: 2.18 pairs and the fix-up (~11 us
at 4096^3, about 0.3 of a pair at K = 3072) against 3 pairs: 0.83 of step 22's time. Measured,
eight alternating rounds of each: 96.2 us against 113.7 (bf16, 0.85), 101.3 against 121.5 (fp16,
0.83), 187.0 against 225.9 (TF32, 0.83). So ``default_config`` also streams every pair where
``ragged_waves`` says so: step 22's ceil(P / 64) waves against P / 66 pairs and a fix-up worth
0.5 pair at K = 4096 (times 4096 / K: a pair's time grows with K, the fix-up's bytes do not). The
constant lies between what 6144^3 asks (over 0.41, to stay unstreamed: 1.7% slower streamed) and
3072^3 (under 0.61), and it agrees with 4096^3 (no) and 8192^3 (yes). In the shape set that is
3072^3 alone. There TF32's pick becomes step 31 (this kernel, launched dependent): 1.07-1.08x
cuBLAS TF32 in turns, where the pick before (step 29: the same tiles in whole waves on 128
blocks) read 0.88-0.89x; the H200's rows of 18:59 UTC read the pick at 1.03x. In 16 bits step 23's
192 x 128 tiles (384, three whole waves) stay as fast: 92.8 us against 94.8-96.2 in bf16 rounds,
0.87x cuBLAS in turns against 0.82-0.85x.

Two conditions the fix-up rests on. A cluster may wait for the next one's partial sums, so the
next must run: all 66 clusters are resident at once on a 132-SM Hopper (H100 SXM, H200); where
fewer fit (a 114-SM H100 PCIe), blocks are dispatched in order and each cluster writes its own
partial sums (its range's first unit) before it waits for any (its last), so the resident ones
finish and the rest start. And the workspace is the module's: two launches of one kernel running
at the same time (two streams) would share it; TVM's calls here run in one stream, one at a time.

The rung's own pieces, below: ``StreamK`` (the split: data-parallel waves, each cluster's range
of the streamed slices, its units), ``workspace`` (the partial sums and flags, CUDA),
``write_partial`` and ``add_partial`` (the fix-up), ``produce_stream`` and ``consume_stream``
(the producer and consumers over a cluster's units). A stage's loads (A multicast), the wgmma
and the TMA store are steps 21 and 22's.

Run: python -m steps.step27
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tvm.script import tirx as T

from . import config
from .config import HOPPER_SMS, WgmmaStreamKConfig
from .step18_register_a import multiply_register_a, multiply_transposed
from .step20_persistent import accumulate_slices
from .step21_cluster import CLUSTER, clustered, grid, load_multicast, pair_corner, release_both
from .step22_tma_store import StorePlan, drained, store_chunks, tma_store_fits, with_c_map
from .step22_tma_store import default_config as step22_default
from .step22_tma_store import kernel as step22_kernel
from .transforms import wgmma
from .transforms.wgmma import WARPGROUP, _ceil

NUMBER = 27
TENSOR_CORES = True
NAME = "stream-K"
IDEA = "the pairs that do not fill a wave are cut into equal ranges of K slices, one per cluster; a tile's two parts meet through L2"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 22
Config = WgmmaStreamKConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) applied by the owner as it stages the tile (step 22's store)
PIECES = ("StreamK", "workspace", "write_partial", "add_partial", "produce_stream", "consume_stream")


# The fix-up's cost in a cluster's time for one pair at K = 4096 (it is the same bytes at any K, and
# a pair's time grows with K), from the rounds in the docstring: it must be over 0.41 for 6144^3 not
# to stream (measured 1.7% slower streamed) and under 0.61 for 3072^3 to stream (measured 1.18x).
FIXUP_PAIRS_AT_4096 = 0.5


def ragged_waves(pairs: int, clusters: int, K: int) -> bool:
    """Whether the pairs' whole waves on step 22's `clusters` take longer than streaming them over
    every cluster, fix-up included: ceil(pairs / clusters) against pairs / 66 + the fix-up."""
    every = HOPPER_SMS // CLUSTER
    return pairs > every and pairs / every + FIXUP_PAIRS_AT_4096 * 4096 / K <= -(-pairs // clusters)


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaStreamKConfig:
    """On every SM where the kernel streams there; elsewhere step 22's config (its kernel). It streams
    where the streamed pairs are at most an eighth of all (``stream_share`` 8: a fix-up of fixed cost
    in a long run), or, with every pair streamable (``stream_share`` 1), where step 22's whole waves
    would leave more SMs idle than the fix-up costs (``ragged_waves``: 3072^3)."""
    cfg = WgmmaStreamKConfig(**step22_default(M, N, K, dtype).as_dict())
    if not tma_store_fits(M, N, dtype):
        return cfg
    pairs = _ceil(M, cfg.block_m) * _ceil(_ceil(N, cfg.block_n), CLUSTER)
    if StreamK(pairs, HOPPER_SMS // CLUSTER, 1, cfg.stream_share).streams:
        return replace(cfg, ctas=HOPPER_SMS)
    if ragged_waves(pairs, cfg.ctas // CLUSTER, K):
        return replace(cfg, ctas=HOPPER_SMS, stream_share=1)
    return cfg


def _max(a, b):
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else T.max(a, b)


def _min(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else T.min(a, b)


@dataclass(frozen=True)
class StreamK:
    """The split of `pairs` pairs of KT slices each over `clusters` clusters. Its methods take a
    cluster's index (a Python int, or the kernel's expression of blockIdx.x) and return the same
    numbers either way, so the tests walk the kernel's own arithmetic."""

    pairs: int
    clusters: int
    KT: int
    share: int = 1  # the config's stream_share

    @property
    def streams(self) -> bool:
        """Whether pairs are streamed: they do not divide evenly over the clusters, and the
        streamed ones are at most 1 / share of them (so there are more pairs than clusters)."""
        return self.pairs % self.clusters != 0 and self.streamed * self.share <= self.pairs

    @property
    def streamed(self) -> int:
        """Pairs streamed: the last wave's remainder and one full wave, so a cluster's range is at
        least a pair's KT slices (each streamed tile is cut at most once)."""
        return self.pairs % self.clusters + self.clusters

    @property
    def waves(self) -> int:
        """Whole pairs each cluster runs first (cluster c: pairs c, c + clusters, ...)."""
        return (self.pairs - self.streamed) // self.clusters

    def range_of(self, cid):
        """Cluster cid's slices [s0, s1) of the streamed pairs' streamed x KT."""
        total = self.streamed * self.KT
        return cid * total // self.clusters, (cid + 1) * total // self.clusters

    def units(self, cid):
        """How many streamed pairs cluster cid's range touches."""
        s0, s1 = self.range_of(cid)
        return (s1 - 1) // self.KT - s0 // self.KT + 1

    def unit(self, cid, u):
        """Cluster cid's u-th streamed unit: (pair, its first slice k0, slices n, g0: the unit's
        first slice in the block's count of ring slices, owner: whether the unit holds the pair's
        first slice, shared: whether another cluster holds part of the pair)."""
        s0, s1 = self.range_of(cid)
        q = s0 // self.KT + u
        lo, hi = _max(s0, q * self.KT), _min(s1, (q + 1) * self.KT)
        return (self.waves * self.clusters + q, lo - q * self.KT, hi - lo, self.waves * self.KT + lo - s0,
                lo == q * self.KT, hi - lo < self.KT)


def stream_of(plan: StorePlan) -> StreamK:
    return StreamK(plan.tm * _ceil(plan.tn, CLUSTER), grid(plan) // CLUSTER, plan.KT, plan.cfg.stream_share)


def workspace(plan: StorePlan):
    """The CUDA of the fix-up, named for the kernel's sizes: each consumer warpgroup of each block
    has a slot of 128 x acc_n fp32 partial sums (register i of thread t at i * 128 + t: a
    warp's access is 128 consecutive bytes) and a flag. Through L2 (``st.cg``/``ld.cg``): the
    reader runs on another SM."""
    slots, acc_n = grid(plan) * plan.consumers, plan.acc_n
    tag = f"{slots}x{acc_n}"
    source = f"""
#ifndef STREAM_K_{tag}
#define STREAM_K_{tag}
__device__ float stream_k_partials_{tag}[{slots * WARPGROUP * acc_n}];
__device__ unsigned int stream_k_flags_{tag}[{slots}];
__forceinline__ __device__ void stream_k_put_{tag}(int slot, int t, int i, float v) {{
  __stcg(&stream_k_partials_{tag}[(slot * {acc_n} + i) * {WARPGROUP} + t], v);
}}
__forceinline__ __device__ float stream_k_get_{tag}(int slot, int t, int i) {{
  return __ldcg(&stream_k_partials_{tag}[(slot * {acc_n} + i) * {WARPGROUP} + t]);
}}
// After every thread of the warpgroup has written (a named barrier): cumulative, so their
// writes are visible at GPU scope before the flag.
__forceinline__ __device__ void stream_k_raise_{tag}(int slot) {{
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(&stream_k_flags_{tag}[slot]) : "memory");
}}
// Spin until the partner has raised the flag, then lower it for the next launch (each slot is
// written once a launch; launches on a stream do not overlap).
__forceinline__ __device__ void stream_k_wait_{tag}(int slot) {{
  unsigned int seen;
  do {{
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(&stream_k_flags_{tag}[slot]) : "memory");
  }} while (seen == 0);
  stream_k_flags_{tag}[slot] = 0;
}}
#endif
"""

    def call(name, *args, **kw):
        return T.cuda.func_call(f"stream_k_{name}_{tag}", *args, source_code=source, **kw)

    return call


def write_partial(plan: StorePlan):
    """A macro: a consumer warpgroup writes its fp32 sums to its slot, meets, and one thread
    raises the slot's flag."""
    acc_n, call = plan.acc_n, workspace(plan)

    @T.macro
    def write(acc, slot, tid, wg):
        for i in T.unroll(acc_n):
            T.evaluate(call("put", slot, tid % WARPGROUP, i, acc[i]))
        T.cuda.warpgroup_sync(1 + wg)
        if tid % WARPGROUP == 0:
            T.evaluate(call("raise", slot))

    return write


def add_partial(plan: StorePlan):
    """A macro: one thread of a consumer warpgroup waits for the partner's flag, the warpgroup
    meets, and each thread adds the partner's sums of its registers to its own."""
    acc_n, call = plan.acc_n, workspace(plan)

    @T.macro
    def add(acc, slot, tid, wg):
        if tid % WARPGROUP == 0:
            T.evaluate(call("wait", slot))
        T.cuda.warpgroup_sync(1 + wg)
        for i in T.unroll(acc_n):
            acc[i] = acc[i] + call("get", slot, tid % WARPGROUP, i, return_type="float32")

    return add


def produce_stream(plan: StorePlan, load):
    """A macro: the producer thread loads the slices of its cluster's units in order, the ring's
    slices counted across them (step 20): the whole pairs, then the streamed range."""
    stages, KT, walk = plan.stages, plan.KT, stream_of(plan)

    @T.macro
    def fill(smem, A_map, B_map, g, kt, m0, n0, rank):
        if g >= stages:
            T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar(g % stages)]), ((g // stages) & 1) ^ 1)
        load(smem, A_map, B_map, kt, g % stages, m0, n0, rank)

    @T.macro
    def producer(smem, A_map, B_map, bid):
        cid, rank = T.meta_var((bid // CLUSTER, bid % CLUSTER))
        for t in T.serial(walk.waves):
            m0, n0 = T.meta_var(pair_corner(plan, cid + t * walk.clusters, rank))
            for kt in T.serial(KT):
                fill(smem, A_map, B_map, t * KT + kt, kt, m0, n0, rank)
        for u in T.serial(walk.units(cid)):
            pair, k0, n, g0, _owner, _shared = T.meta_var(walk.unit(cid, u))
            m0, n0 = T.meta_var(pair_corner(plan, pair, rank))
            for kt in T.serial(n):
                fill(smem, A_map, B_map, g0 + kt, k0 + kt, m0, n0, rank)

    return producer


def consume_stream(plan: StorePlan, multiply, store):
    """A macro: a consumer warpgroup over its cluster's units: each whole pair multiplied and
    stored as step 22's; a streamed unit that lacks its pair's first slices writes its sums to the
    workspace; one that lacks the last ones adds the partner's sums before it stores."""
    KT, walk, consumers = plan.KT, stream_of(plan), plan.consumers
    accumulate = accumulate_slices(plan, multiply, release_both(plan))
    write, add = write_partial(plan), add_partial(plan)

    @T.macro
    def consumer(smem, acc, frag, descA, descB, out, bid, tid, wg, warp, lane):
        cid, rank = T.meta_var((bid // CLUSTER, bid % CLUSTER))
        for t in T.serial(walk.waves):
            m0, n0 = T.meta_var(pair_corner(plan, cid + t * walk.clusters, rank))
            accumulate(smem, acc, frag, descA, descB, t * KT, KT, tid, wg, warp, lane)
            store(smem, out, acc, m0, n0, tid, wg, warp, lane)
        for u in T.serial(walk.units(cid)):
            pair, _k0, n, g0, owner, shared = T.meta_var(walk.unit(cid, u))
            m0, n0 = T.meta_var(pair_corner(plan, pair, rank))
            accumulate(smem, acc, frag, descA, descB, g0, n, tid, wg, warp, lane)
            if owner:
                if shared:
                    # The pair's first slices: the next cluster's same block has the rest.
                    add(acc, (bid + CLUSTER) * consumers + wg, tid, wg)
                store(smem, out, acc, m0, n0, tid, wg, warp, lane)
            else:
                # The pair's last slices: the owner (the cluster before) adds them.
                write(acc, bid * consumers + wg, tid, wg)

    return consumer


def kernel(M: int, N: int, K: int, cfg: WgmmaStreamKConfig, dtype: str = "fp32", epilogue=None, fused=True):
    p = StorePlan(M, N, K, cfg, config.DTYPES[dtype], epilogue=epilogue, fused=fused)
    if not tma_store_fits(M, N, dtype) or not stream_of(p).streams:
        return step22_kernel(M, N, K, cfg, dtype, epilogue, fused)
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    block = clustered(p, produce_stream(p, load_multicast(p)), drained(consume_stream(p, multiply, store_chunks(p))))
    return wgmma.prim_func(p, with_c_map(p, block))
