"""Step 20 — a persistent grid: one block per SM walks the output tiles, loads running ahead.

Idea: step 18 launches one block per 256 x 128 tile, and a block holds an SM alone (197 KB of
shared memory), so between two tiles an SM does nothing useful: the block's consumers store the
accumulator while no load is in flight, the block exits, the next one starts, initializes its
barriers and waits a TMA round trip for its first slice. Launch min(tiles, ctas) blocks (ctas =
132, one per SM of an H100) instead; block b takes the tiles b, b + ctas, b + 2 ctas, ... in
the raster order of step 15 (blocks that run together still share A's rows and B's columns in
L2). The ring's slices are counted across the block's tiles, so its producer goes on loading
the next tile's slices as soon as a stage is free, while the consumers finish and store the
last one; the consumers hand back every stage of a tile, its last slice included. The tile
scheduler is a loop and two index functions (``tile_loop``): a block's tiles are known when it
starts, so no counter in global memory is needed.

Prediction: at 4096^3 step 18 runs 512 tiles of ~48 us each on 132 SMs (3.9 waves); what a
persistent block saves per tile is the fill (one TMA round trip, ~1-2 us) and the launch of the
next block, ~3-5%; at 8192^3 (2048 tiles, 135 us each) less than 2%. The last wave's
imbalance (512 = 3 x 132 + 116) stays.

Measured (H100 80GB HBM3, driver 580.159.04, TVM 0.27.0.post1, 2026-11-27, kernel time). The
committed run (python -m steps --steps 18,20,21,22 --sizes 512 1024 2048 4096 8192 --save, and
--dtype bf16 / fp16; results/nvidia-h100-80gb-hbm3/): at 2048 / 4096 / 8192^3
- bf16 632.9 / 706.8 / 688.5 TFLOP/s, 1.03x / 1.02x / 0.95x step 18, 88% / 102% / 90% of cuBLAS bf16;
- fp16 617.8 / 658.3 / 688.8, 0.99x / 0.99x / 0.98x step 18, 87% / 98% / 99% of cuBLAS fp16;
- TF32 327.4 / 355.1 / 377.6, 1.02x / 1.00x / 1.09x step 18, 92% / 103% / 99% of cuBLAS TF32.
The probe's alternating rounds (one process, kernels in turn; git show 80234e7:tools/hopper48_probe.py,
git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/issue48_probes.txt) agree: 0-2% over step 18 at 4096^3
(bf16 686-692 against 681-683), within the spread of one kernel's rounds. The spread is wide
because every kernel here, cuBLAS included, runs at the board's power limit (680-700 W of 700,
SM clocks 1.1-1.45 GHz under load against 1.98 maximum): the same kernel reads 650 in one round
and 750 in the next, so only same-round ratios count. As predicted, small; what the probe
found instead is where the time goes: leaving the store out (results wrong, time right) ran
step 20 at 836 against 645 TFLOP/s at 4096^3 bf16 in the same rounds (766 against 680 at
8192^3). The accumulator's store, 128 scattered 2-byte stores per thread while no wgmma runs,
is step 22's idea. Also measured: 128 blocks rather than 132 (``blocks_for``) 0-5% faster in
every round where the two differed by more than the noise (512 tiles: 4 waves either way); the
16-bit wait_group 1 (``Plan.in_flight``), tried here, was right at 4096^3 but no faster. (Later,
on small tiles in deep rings, a group in flight was 1.06-1.20x faster and wrong at some depths,
until the tile's last slice waited for all inside the loop: ``wgmma.wait_for_slice``.)
Nsight Compute (4096^3, one launch, clocks as the board sets them: 1.60-1.63 GHz under the
profiler; NCU="20 21 22" ONLY_TESTS=1 SKIP_TESTS=1 bash tools/device_run.sh, 2026-11-27;
the figures: results/nvidia-h100-80gb-hbm3/evidence/ncu_steps20-22.txt): bf16 185 us, the tensor
pipe active 90.3% of cycles (step 18: 88.5%), per issued instruction a warp waits 7.4 cycles
at a barrier (the consumers' warpgroup syncs around wgmma), 2.2 on the long scoreboard (the
mbarrier waits), 1.2 fixed latency; TF32 344 us, tensor pipe 94.9%, barrier 3.3, long
scoreboard 1.9, short scoreboard 1.8 (B^T's fragment loads from shared memory). With the pipe
this busy, what the persistent grid could win at 4096^3 is the few percent it won.

The rung's own pieces, below: ``tile_loop`` (a block's tiles), ``produce_tiles`` (the producer
over them), ``consume_tiles`` (a consumer over them; step 21 reuses it with its own walk and
hand-back) and ``persistent`` (the kernel). A stage's loads, wgmma and the store are step 18's.

Run: python -m steps.step20
"""

from __future__ import annotations

from tvm.script import tirx as T

from dataclasses import replace

from .config import HOPPER_SMS, WgmmaPersistentConfig
from .step18_register_a import load_b_boxes, multiply_register_a, multiply_transposed, store_transposed
from .transforms import wgmma
from .transforms.wgmma import PRODUCER_REGS, WARPGROUP, Plan, _ceil

NUMBER = 20
TENSOR_CORES = True
NAME = "persistent grid"
IDEA = "one block per SM walks the tiles (bid, bid + 132, ...); the producer loads the next tile while the consumers store"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 18  # a TF32 rung: measured against step 18, not step 19 (3xTF32)
Config = WgmmaPersistentConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) fused into the store (wgmma.stored)
PIECES = ("tile_loop", "produce_tiles", "accumulate_tile", "accumulate_slices", "consume_tiles", "persistent")


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaPersistentConfig:
    cfg = WgmmaPersistentConfig()
    return replace(cfg, ctas=blocks_for(_ceil(M, cfg.block_m) * _ceil(N, cfg.block_n)))


def blocks_for(work: int, per: int = 1) -> int:
    """The blocks to launch for `work` tiles (or pairs of tiles, `per` blocks each): 128, not all
    132 SMs, where that takes no more waves (512 tiles at 4096^3, 2048 at 8192^3: 4 and 16
    either way). Measured faster by 0-5% (bf16 and fp16, H100, 2026-11-27, alternating rounds;
    the slowest rounds at 132): what the four idle SMs save is L2 and power, not waves."""
    fewer = 128 // per
    return (fewer if _ceil(work, fewer) == _ceil(work, HOPPER_SMS // per) else HOPPER_SMS // per) * per


def grid(plan: Plan) -> int:
    """Blocks launched: one per SM, or one per tile where there are fewer."""
    return min(plan.tm * plan.tn, plan.cfg.ctas)


def tile_loop(plan: Plan, bid):
    """How many tiles block `bid` runs (bid < grid), and tile t's first row and column of C: the
    tiles bid, bid + grid, ... in the raster order."""
    tiles, ctas = plan.tm * plan.tn, grid(plan)
    return (tiles - bid + ctas - 1) // ctas, lambda t: (plan.tile_m0(bid + t * ctas), plan.tile_n0(bid + t * ctas))


def produce_tiles(plan: Plan, load, walk=tile_loop):
    """A macro: the producer thread loads every slice of every tile of its block (`walk`: how
    many, and where each is); slice g of the block (g = t KT + kt) goes to stage g % stages,
    once the consumers have freed it."""
    stages, KT = plan.stages, plan.KT

    @T.macro
    def producer(smem, A_map, B_map, bid):
        count, corner = T.meta_var(walk(plan, bid))
        for t in T.serial(count):
            m0, n0 = T.meta_var(corner(t))
            for kt in T.serial(KT):
                if t * KT + kt >= stages:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar((t * KT + kt) % stages)]),
                                         (((t * KT + kt) // stages) & 1) ^ 1)
                load(smem, A_map, B_map, kt, (t * KT + kt) % stages, m0, n0)

    return producer


def release_here(plan: Plan):
    """A macro: every consumer thread arrives on slice g's "empty" barrier, in this block."""

    @T.macro
    def release(smem, g, tid):
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(smem[plan.empty_bar(g % plan.stages)]), T.uint32(1))

    return release


def store_registers(plan: Plan):
    """A macro: step 18's store (each register to its place in C) in the consumer's store
    signature, whose `out` is C (step 22's store takes shared memory and C's tensor map)."""
    write = store_transposed(plan)

    @T.macro
    def store(smem, out, acc, m0, n0, tid, wg, warp, lane):
        write(out, acc, m0, n0, wg, warp, lane)

    return store


def accumulate_tile(plan: Plan, multiply, release=None, slices: int | None = None):
    """A macro: a consumer warpgroup's part of one tile, step 16's loop: the accumulator zeroed,
    `slices` slices (default: all of K's) multiplied as they arrive, the ring's slices counted
    from g0 across the block's tiles, every stage handed back, the tile's last one included, so
    the producer is already filling the ring for the next tile while the store runs. `release`
    hands a stage back (step 21's: to both blocks of a cluster)."""
    KT = plan.KT if slices is None else slices
    accumulate = accumulate_slices(plan, multiply, release)

    @T.macro
    def accumulate_(smem, acc, frag, descA, descB, g0, tid, wg, warp, lane):
        accumulate(smem, acc, frag, descA, descB, g0, KT, tid, wg, warp, lane)

    return accumulate_


def accumulate_slices(plan: Plan, multiply, release=None):
    """``accumulate_tile`` whose count of slices is the macro's argument `count`, known only when
    the kernel runs where a block's units differ in length (step 27's stream-K walk)."""
    stages, acc_n = plan.stages, plan.acc_n
    release = release or release_here(plan)
    wait = wgmma.wait_for_slice(plan)

    @T.macro
    def accumulate(smem, acc, frag, descA, descB, g0, count, tid, wg, warp, lane):
        for i in T.unroll(acc_n):
            acc[i] = T.float32(0)
            T.cuda.wgmma.noop_barrier(acc[i])
        for kt2 in T.serial((count + 1) // 2):
            for p in T.unroll(2):
                if kt2 * 2 + p < count:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((g0 + kt2 * 2 + p) % stages)]),
                                         ((g0 + kt2 * 2 + p) // stages) & 1)
                    multiply(smem, acc, frag, descA, descB, (g0 + kt2 * 2 + p) % stages, p, wg, warp, lane)
                    wait(kt2 * 2 + p, count)
                    if kt2 * 2 + p > 0:
                        release(smem, g0 + kt2 * 2 + p - 1, tid)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        # The tile's last slice is done too: its stage goes back before the store.
        release(smem, g0 + count - 1, tid)
        for i in T.unroll(acc_n):
            T.cuda.wgmma.noop_barrier(acc[i])

    return accumulate


def consume_tiles(plan: Plan, multiply, store, walk=tile_loop, release=None):
    """A macro: a consumer warpgroup runs ``accumulate_tile`` on each of its block's tiles
    (`walk`: how many, and where each is), then stores it. `release` hands a stage back (step
    21's: to both blocks of a cluster)."""
    KT = plan.KT
    accumulate = accumulate_tile(plan, multiply, release)

    @T.macro
    def consumer(smem, acc, frag, descA, descB, out, bid, tid, wg, warp, lane):
        count, corner = T.meta_var(walk(plan, bid))
        for t in T.serial(count):
            m0, n0 = T.meta_var(corner(t))
            accumulate(smem, acc, frag, descA, descB, t * KT, tid, wg, warp, lane)
            store(smem, out, acc, m0, n0, tid, wg, warp, lane)

    return consumer


def persistent(plan: Plan, producer, consumer, blocks: int | None = None, out_rows: int | None = None):
    """The kernel: step 16's roles and registers, grid(plan) blocks (or `blocks`) instead of one
    per tile; the consumers write `out_rows` rows of their output (default C's M; step 23's
    partial sums are split x M)."""
    blocks = grid(plan) if blocks is None else blocks
    out_rows = plan.M if out_rows is None else out_rows

    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map):
        for bid in T.thread_binding(blocks, thread="blockIdx.x"):
            for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A_op[0:plan.M, 0:plan.Ka], B_op[0:plan.B_shape[0], 0:plan.B_shape[1]])
                    T.writes(C[0:out_rows, 0:plan.N])
                    smem = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                    acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                    frag = T.sblock_alloc_buffer((plan.frag_regs,), "uint32", scope="local")
                    descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    wg = T.meta_var((tid - plan.first) // WARPGROUP)
                    warp = T.meta_var(tid % WARPGROUP // 32)
                    lane = T.meta_var(tid % 32)
                    wgmma.init_barriers(plan)(smem, tid)
                    if tid < WARPGROUP:
                        T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                        if tid == 0:
                            producer(smem, A_map, B_map, bid)
                    else:
                        T.ptx["setmaxnreg.inc.sync.aligned.u32"](plan.consumer_regs)
                        consumer(smem, acc, frag, descA, descB, C, bid, tid, wg, warp, lane)

    return kernel


def kernel(M: int, N: int, K: int, cfg: WgmmaPersistentConfig, dtype: str = "fp32", epilogue=None, fused=True):
    p = wgmma.plan(M, N, K, cfg, dtype, epilogue=epilogue, fused=fused)
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    return wgmma.prim_func(p, persistent(p, produce_tiles(p, load_b_boxes(p)),
                                         consume_tiles(p, multiply, store_registers(p))))
