"""Step 23 — split-K on the persistent grid: small outputs over long K fill the SMs.

Idea: step 20's blocks walk output tiles, and a tile is the unit of work: at 256 x 256 x 16384
there are 2 tiles of 256 x 128 for 132 SMs, and at 64 x 64 x 65536 one, so one or two SMs run
the whole reduction while the rest idle (step 19 measured 0.03x cuBLAS there, issue 49). Make
the unit a tile *and a range of K* instead: with `split` parts, unit u is tile u % tiles over
K's slices [part x S, (part + 1) x S), part = u // tiles, S = ceil(K / BK / split). The blocks
walk units exactly as step 20's walk tiles (``unit_loop``: the ring's slices counted across
them, the producer starting the next unit while the consumers store), each unit's fp32
accumulator goes to its own block of rows of a workspace W[split x M, N] (``store_partial``),
and a second kernel sums the parts into C (``reduce_partials``: one thread per element of C,
rounded to C's dtype once, at the end). K's tail beyond the last slice reads zeros (TMA fills
outside the tensor with zeros), so any K splits evenly. The tile shrinks with the output too
(``default_config``: 64 or 128 each way, as many stages as fit) and K is halved until the units
fill the SMs. Where 128 x 128 tiles would take more than one wave it is step 20's kernel exactly
(256 x 128, one part): no workspace, no second kernel. The reduction is a second pass rather than
atomics or stream-K's fix-up: it is deterministic, needs no zeroed buffer or semaphore, and at
these shapes W is a few MB that stays in L2 (50 MB) between the two kernels.

Prediction (a cost model, before any device run): 16-bit 64 x 64 x 65536 ~6-8 us, bound by
reading A and B once (16 MB), against step 20's ~150 us on one SM: near cuBLAS; 256 x 256 x 16384
~8 us; TF32 about twice that; big squares unchanged (split 1). The model (waves of units, each
slice its wgmma or its share of the bandwidth, the partial sums written and read) picked 16 parts
at 64 x 64 x 65536 and 8 at 256 x 256 x 16384.

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-27, kernel time, one process; step
23 at its model's pick and at 8 other configs per shape, against cuBLAS in the same run;
bf16 against cuBLAS bf16, fp32 inputs against cuBLAS TF32):
- the model was wrong by up to 2x: it charged the partial sums and the redundant loads of small
  tiles too much. The fastest config had about 128 units (64-132) at every shape: 64 x 64 x 65536
  8.4 us bf16 (0.94x cuBLAS; the model's pick 17.4) and 10.3 us TF32 (1.32x) with 64 x 64 tiles x
  128 parts; 256 x 256 x 16384 10.3 us (0.77x) / 14.5 (1.37x) at 128 x 128 x 32 parts; 512 x 512 x
  8192 12.5 (0.94x) / 19.2 (1.68x) at 128 x 128 x 8; 4096 x 16 x 4096 11.9 (1.04x) / 23.2 (1.00x)
  at 128 x 64 x 4; 384 x 384 x 12288 13.9 (0.72x) / 23.3 (1.25x) at 128 x 128 x 8; 2048 x 64 x 2048
  7.9 (0.69x) at 64 x 64 x 2. Step 20 on the same shapes: 0.01-0.31x cuBLAS.
- so ``default_config`` is now that measurement's rule, not the model: the tile that just covers
  a short side, and parts doubled while the units stay within the SMs and each part has at least
  4 slices. Errors equal step 20's (bf16 1.7e-3, TF32 6.9e-4) on every shape: the parts are
  summed in fp32.
Where bf16 stays below cuBLAS (0.7-0.94x) its kernels run 5-8 us: the second launch and the
partials' round trip (~2-3 us) are a third of that.

On the H100 (driver 580.159.04, 2026-11-27, the shape benchmark; results/nvidia-h100-80gb-hbm3/
evidence/issue49_rows.txt): correct on all 43 shapes of bench/shapes.toml in TF32 (largest error
6.9e-4) after the storage fix below; TF32 64 x 64 x 65536 45.3 TFLOP/s (step 20: 0.46),
256 x 256 x 16384 107.7 (7.35), 128 x 128 x 32768 50.1 (1.87), 512 x 512 x 8192 187.2 (28.7),
4096 x 16 x 4096 17.5 (7.0), and 768^3 / 1024^3 77 / 144 against step 20's 48 / 92 (split in
two; both readings flagged host-bound, so upper bounds on the kernel's time): it is the TF32 dispatch rows' pick on the k-heavy, tall-skinny and short-wide shapes. That
run's baseline was cuBLAS strict fp32 (2.2-4.1x there), not cuBLAS TF32: the TF32 ratios are
still to measure (``steps.bench`` now takes cuBLAS TF32 for a run of TF32 steps). In bf16, a run
cut short by its call's limit: 0.45-0.91x cuBLAS bf16 on the k-heavy and short-wide shapes
(256 x 256 x 16384 170 against 212 TFLOP/s, 512 x 512 x 8192 319 against 351, 64 x 64 x 65536
48 against 63): issue 49's 0.9x is not met in 16-bit.

The 16-bit rule, refitted (H100, 2026-11-28; evidence/step23_calibration.txt): 196 configs at 18
shapes in bf16 said the split costs more than it pays wherever tiles alone can fill the SMs.
At 128 x 8192 x 1024 the TF32 rule's 128 x 128 tiles in 2 parts ran 12.9 us (0.47x cuBLAS) and
128 x 64 tiles in one part 7.6 (0.80x); at 1024^3 11.8 against 7.1 (128 x 64, one part); at 1536^3
and 3072^3, 192 x 128 tiles (96 and 384 of them, against 72 and 288 of 256 x 128: 0.55 and 2.2
waves) 16.5 and 95.5 us against step 20's 21.4 and 111.3. So for fp16 and bf16 ``default_config``
takes the least ``estimated_us``: waves of units, each its operands' loads and its math at its
tile's rate (TILE_RATE), never faster than reading A and B once, plus the second kernel and the
workspace's traffic where K is split. Its constants were fitted to that calibration: its pick is
the fastest config measured at 13 of the 18 shapes and within 4-24% at the rest. TF32 keeps the
rule above (its calibration is the H200's). The shape benchmark with it (H100, 2026-11-28, python
-m steps.bench --dtype bf16 --steps 13,18,20,22,23,24 --fastest --save; † a reading the harness
flags host-bound, an upper bound on the kernel's time): step 23 against cuBLAS bf16 at 1536^3
0.70x (step 20 0.56x), 3072^3 0.82x (0.71x), 2048^3 and 4096^3 0.88x (step 20's kernel there),
256 x 256 x 16384 0.94x†, 128 x 8192 x 1024 0.68x†, 8192 x 32 x 2048 and 4096 x 128 x 4096 0.64x,
and 64 x 64 x 65536 0.71x†: below the calibration's 0.84x with 128 parts, because the fit picks
64 parts there, a config the calibration had not timed (the estimate charges one wave of 64
units the DRAM rate of all 132 SMs). One kernel read up to 10% apart within that run (the
"fastest" row times the pick again: 4096^3 1.02x against step 22's 0.92x, the same kernel).
TF32 against cuBLAS TF32 (the same day, the TF32 rule): 256 x 256 x 16384 1.14x, 512 x 512 x
8192 1.65x, 64 x 64 x 65536 1.18x†, 4096^3 0.93x, 128 x 8192 x 1024 0.61x, 8192 x 128 x 1024 0.50x.
The kernels that stay below cuBLAS run 5-15 us, where the second launch and the partial sums'
round trip are a large share: an in-kernel reduction (stream-K's fix-up, or a cluster's parts
summed through distributed shared memory) is the next idea for them.

The 16-bit rule's 96 x 192 tile (H200, 2026-11-29; the calls' log:
git show 8f5fcb7:results/nvidia-h200/evidence/cluster_tiles_probe.txt):
at 1536^3 cuBLAS runs 128 tiles of 192 x 96 (Nsight Compute: nvjet_sm90_tst_192x96_64x5_1x2), this
rule 96 of 192 x 128. Prediction: on 128 SMs instead of 96, up to 1.33x. Measured: 96 x 192, three
consumer warpgroups of 64 columns (512 threads, 152 registers a consumer thread), 5 stages, 14.4-14.5
us against 16.6-16.8 (1.15x; 0.79x cuBLAS bf16, 11.5 us, 1.44x faster than 192 x 128). The gap to
the prediction is the smaller tile's rate (TILE_RATE 0.65, from this shape alone; so the rule offers
the tile in one part of K only, as timed). At 3072^3 it lost (113 us against 95: 3.9 waves against
2.9), and the estimate keeps 192 x 128 there. The H200's rows, run again with it: 1536^3 0.80x
cuBLAS bf16 (0.68x before), 0.78x fp16 (0.69x).

TF32's one-wave line (H200, 2026-11-29; `git show 2f026a2:probe/tf32_one_wave.py`, its log
`git show 2f026a2:results/nvidia-h200/evidence/tf32_one_wave_probe.txt`): the rule used to take
256 x 128 wherever 128 x 128 tiles filled half the SMs. Between half and one wave that leaves most
SMs idle: at 1280^3 50 tiles of 256 x 128 for 132 SMs (the pick 0.70x cuBLAS TF32 in the audit), at
1000 x 1500 x 700 48 (0.86x in the rows), while 1024^3, just below the line, ran 128 x 128 at
1.20x. Prediction: one wave of 128 x 128 tiles does half of 256 x 128's work per SM, at 16-bit's
measured rate for the smaller tile (TILE_RATE 0.85) ~0.59 of the time; where 128 x 128 needs two
waves (1536^3: 144 tiles) 1.18 of it, so the big tile stays there. Measured, step 29 (this kernel,
launched dependent), eight alternating rounds: 1280^3 27.5 -> 17.2 us (0.63 of the time; 1.11x
cuBLAS TF32 in turns, was 0.70x), 1000 x 1500 x 700 19.5 (the pick, step 31) -> 14.3 (1.18x, was
0.86x), 769 x 1543 x 2049 61.3 -> 51.8, 1531 x 769 x 3067 80.1 (the pick, step 30) -> 71.8 (1.12x,
was 1.00x); 1536^3 32.3 against 40.0 for 128 x 128, as predicted. So the line is now one wave of
128 x 128 tiles. The H200's TF32 rows, run again with it: 1000 x 1500 x 700 1.11x, 1531 x 769 x
3067 1.11x (step 29 the pick at both).

Run: python -m steps.step23
"""

from __future__ import annotations

from dataclasses import replace

from tvm.script import tirx as T

from .config import HOPPER_SMS, WgmmaSplitKConfig
from .step18_register_a import c_col, c_row, load_b_boxes, multiply_register_a, multiply_transposed
from .step20_persistent import accumulate_tile, blocks_for, persistent
from .step20_persistent import kernel as persistent_kernel
from .transforms import wgmma
from .transforms.wgmma import Plan, _ceil

NUMBER = 23
TENSOR_CORES = True
NAME = "split-K (wgmma)"
IDEA = "units of work are a tile and a range of K; partial sums to a workspace, a second kernel adds them"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 20
Config = WgmmaSplitKConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) fused into the store (wgmma.stored)
PIECES = ("parts", "unit_loop", "produce_units", "store_partial", "consume_units", "reduce_partials")

REDUCE_THREADS = 256
SMALL_TILE = 128  # the tile's side where a side of C is longer than 64, else 64
MIN_SLICES = 4  # a part of K at least this many slices: the ring's fill is paid per unit
STAGE_BYTES = 196608  # the ring's budget: step 18's four 48 KB stages


def parts(plan: Plan, split: int) -> tuple[int, int]:
    """(slices per part, parts): K's slices in `split` parts of equal length, fewer where
    they would leave a part empty (a split beyond K's slices)."""
    per = _ceil(plan.KT, max(1, min(split, plan.KT)))
    return per, _ceil(plan.KT, per)


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaSplitKConfig:
    """fp16 and bf16: the tile and split whose estimated time (``estimated_us``) is least; step
    20's own config where that is its tile with one part. TF32: step 20's kernel (256 x 128, split
    1) where 128 x 128 tiles would take more than one wave of the SMs; else a tile just covering a
    short side (64 or 128 each way), K split in two until the units would pass the SMs or a part
    would be shorter than MIN_SLICES slices, and as many stages as fit step 18's ring (the
    measurements that chose these rules: the docstring)."""
    big = WgmmaSplitKConfig()  # step 20's tile, and its blocks (step 20's default_config)
    big = replace(big, ctas=blocks_for(_ceil(M, big.block_m) * _ceil(N, big.block_n)))
    if dtype != "fp32":
        bm, bn, split = min(_options(M, N, K), key=lambda o: estimated_us(M, N, K, *o))
        return big if (bm, bn, split) == (big.block_m, big.block_n, 1) else _config(M, N, bm, bn, split)
    bm, bn = (64 if M <= 64 else SMALL_TILE), (64 if N <= 64 else SMALL_TILE)
    tiles = _ceil(M, bm) * _ceil(N, bn)
    if _ceil(M, SMALL_TILE) * _ceil(N, SMALL_TILE) > HOPPER_SMS:  # one wave of 128 x 128 no longer
        return big
    slices = _ceil(K, 32)  # TF32: 32 k a slice
    split = 1
    while tiles * split * 2 <= HOPPER_SMS and slices // (split * 2) >= MIN_SLICES:
        split *= 2
    return _config(M, N, bm, bn, split)


def _config(M: int, N: int, bm: int, bn: int, split: int) -> WgmmaSplitKConfig:
    return WgmmaSplitKConfig(block_m=bm, block_n=bn, stages=min(8, STAGE_BYTES // ((bm + bn) * 128)),
                             split_k=split, ctas=min(HOPPER_SMS, _ceil(M, bm) * _ceil(N, bn) * split))


# The 16-bit rule's estimate: tiles of block_m (wgmma's n here: 32 to 256) x block_n (64, 128 or 192,
# one to three consumer warpgroups). A tile's share of an SM's tensor rate (1.0 for 256 x 128) and
# the rest were fitted to 196 configs timed at 18 shapes on the H100 (bf16, 2026-11-28,
# results/nvidia-h100-80gb-hbm3/evidence/step23_calibration.txt): the fit's pick was the
# fastest config at 13 of them and within 4-24% of it at the other 5.
# (96, 192), three consumers of 64 x 96: 0.65 from one shape, 1536^3 (H200, 2026-11-29: 14.4-14.5 us
# in 128 tiles against 16.6-16.8 for 96 tiles of 192 x 128; 3072^3 113 against 95).
TILE_RATE = {(256, 128): 1.0, (192, 128): 0.8, (128, 128): 0.85, (256, 64): 0.8, (192, 64): 0.56,
             (128, 64): 0.7, (64, 128): 0.48, (64, 64): 0.4, (32, 128): 0.22, (32, 64): 0.2, (96, 192): 0.65}
SM_TFLOPS = 7.5  # one SM's share of ~990 dense 16-bit TFLOP/s
SM_LOAD_GBPS = 400.0  # the rate one SM's unit loads its operands at (from L2 mostly)
DRAM_GBPS = 3000.0  # A and B read once at least
UNIT_US = 0.5  # a unit's fixed cost: the ring's fill and drain, the store
SUM_US = 0.5  # the second kernel's launch, beside its reads of the workspace


def _options(M: int, N: int, K: int):
    """Tiles no taller than M rounds up to (in 32s) nor wider than N (in 64s); parts of at least
    four 64-deep slices while the units fit two waves. Three consumers (96 x 192) in one part only:
    the one way they were timed."""
    for bm in (256, 192, 128, 96, 64, 32):
        for bn in (192, 128, 64):
            if (bm, bn) not in TILE_RATE or bm > max(32, _ceil(M, 32) * 32) or bn > max(64, _ceil(N, 64) * 64):
                continue
            tiles = _ceil(M, bm) * _ceil(N, bn)
            split = 1
            while split == 1 or (tiles * split <= 2 * HOPPER_SMS and _ceil(K, split) >= 4 * 64 and bn < 192):
                yield bm, bn, split
                split *= 2


def estimated_us(M: int, N: int, K: int, bm: int, bn: int, split: int) -> float:
    """16-bit: waves of units, each loading its (bm + bn) x K / split operands and multiplying at
    its tile's rate, plus a fixed cost; never less than reading A and B once; with parts, the
    second kernel and the workspace's fp32 traffic (written, then read)."""
    units, k = _ceil(M, bm) * _ceil(N, bn) * split, _ceil(K, split)
    unit = k * (bm + bn) * 2 / (SM_LOAD_GBPS * 1e3) + 2 * bm * bn * k / (SM_TFLOPS * 1e6 * TILE_RATE[(bm, bn)]) + UNIT_US
    t = max(_ceil(units, HOPPER_SMS) * unit, (M * K + K * N) * 2 / (DRAM_GBPS * 1e3))
    return t + (SUM_US + 2 * split * M * N * 4 / (DRAM_GBPS * 1e3) if split > 1 else 0.0)


def unit_loop(plan: Plan, split: int, bid):
    """How many units block `bid` runs, and unit t's tile corner and part of K: the units bid,
    bid + blocks, ... ; unit u is tile u % tiles (raster order) over part u // tiles, so the
    blocks that run together share their part of K."""
    tiles = plan.tm * plan.tn
    units = tiles * parts(plan, split)[1]
    blocks = min(units, plan.cfg.ctas)
    return (units - bid + blocks - 1) // blocks, lambda t: (plan.tile_m0((bid + t * blocks) % tiles),
                                                             plan.tile_n0((bid + t * blocks) % tiles),
                                                             (bid + t * blocks) // tiles)


def produce_units(plan: Plan, load, split: int):
    """A macro: the producer walks its units as step 20's walks tiles; unit t's slice kt is
    slice part x S + kt of K (zeros past K's end) and slice t S + kt of the block's ring."""
    stages = plan.stages
    per = parts(plan, split)[0]

    @T.macro
    def producer(smem, A_map, B_map, bid):
        count, unit = T.meta_var(unit_loop(plan, split, bid))
        for t in T.serial(count):
            m0, n0, part = T.meta_var(unit(t))
            for kt in T.serial(per):
                if t * per + kt >= stages:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar((t * per + kt) % stages)]),
                                         (((t * per + kt) // stages) & 1) ^ 1)
                load(smem, A_map, B_map, part * per + kt, (t * per + kt) % stages, m0, n0)

    return producer


def store_partial(plan: Plan):
    """A macro: step 18's store of the accumulator (C^T's registers to their places in C), in
    fp32, to part `part`'s M rows of the workspace."""
    M, N, acc_n = plan.M, plan.N, plan.acc_n

    @T.macro
    def write(W, acc, part, m0, n0, wg, warp, lane):
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                        W[part * M + c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = acc[i * 4 + 2 * h + c]

    return write


def consume_units(plan: Plan, multiply, split: int):
    """A macro: a consumer warpgroup runs step 20's ``accumulate_tile`` over each unit's S
    slices, then stores the unit's partial sum."""
    per = parts(plan, split)[0]
    accumulate, store = accumulate_tile(plan, multiply, slices=per), store_partial(plan)

    @T.macro
    def consumer(smem, acc, frag, descA, descB, W, bid, tid, wg, warp, lane):
        count, unit = T.meta_var(unit_loop(plan, split, bid))
        for t in T.serial(count):
            m0, n0, part = T.meta_var(unit(t))
            accumulate(smem, acc, frag, descA, descB, t * per, tid, wg, warp, lane)
            store(W, acc, part, m0, n0, wg, warp, lane)

    return consumer


# TVM's storage planner gives a dead buffer's memory to one allocated after it. The GEMM reads
# A's and B's padded copies (where their rows are not 16-byte strided) only through tensor maps
# encoded on the host before the launch, so the planner took them for dead at the launch and gave
# the workspace the padded B's memory: wrong sums at 997 x 1009 x 1013, 4096 x 1 x 4096 and
# 8192 x 1 x 1024 (H100, 2026-11-27, relative error up to 5.5). The second kernel's first thread
# therefore prefetches one line of each operand into L2 (wgmma.keep_operands_live): a use after the GEMM
# that keeps them live.


def reduce_partials(plan: Plan, split: int):
    """A macro, the second kernel: C[m, n] = the sum of W[p M + m, n] over the parts, one thread
    per element of C (consecutive threads along n: every load and store coalesced), rounded to
    C's dtype once (a fused epilogue applied to the sum first: wgmma.stored); its first thread
    keeps the GEMM's operands live (``wgmma.keep_operands_live``)."""
    M, N = plan.M, plan.N
    total = M * N

    @T.macro
    def reduce(W, C, A_op, B_op):
        for bx in T.thread_binding(_ceil(total, REDUCE_THREADS), thread="blockIdx.x"):
            for tx in T.thread_binding(REDUCE_THREADS, thread="threadIdx.x"):
                with T.sblock("reduce_partials"):
                    T.reads(W[0:split * M, 0:N], A_op[0:1, 0:1], B_op[0:1, 0:1])
                    T.writes(C[0:M, 0:N])
                    s = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    if bx == 0 and tx == 0:
                        wgmma.keep_operands_live(A_op, B_op)
                    if bx * REDUCE_THREADS + tx < total:
                        s[0] = T.float32(0)
                        for p in T.serial(split):
                            s[0] = s[0] + W[p * M + (bx * REDUCE_THREADS + tx) // N, (bx * REDUCE_THREADS + tx) % N]
                        wgmma.output(C)[(bx * REDUCE_THREADS + tx) // N, (bx * REDUCE_THREADS + tx) % N] = wgmma.stored(
                            plan, C, s[0], (bx * REDUCE_THREADS + tx) // N, (bx * REDUCE_THREADS + tx) % N)

    return reduce


def kernel(M: int, N: int, K: int, cfg: WgmmaSplitKConfig, dtype: str = "fp32", epilogue=None, fused=True):
    p = wgmma.plan(M, N, K, cfg, dtype, epilogue=epilogue, fused=fused)
    split = parts(p, cfg.split_k)[1]
    if split == 1:  # one part: step 20's kernel, exactly
        return persistent_kernel(M, N, K, cfg, dtype, epilogue, fused)
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    units = p.tm * p.tn * split
    return wgmma.prim_func(p, persistent(p, produce_units(p, load_b_boxes(p), split), consume_units(p, multiply, split),
                                         blocks=min(units, cfg.ctas), out_rows=split * M),
                           partials=(split, reduce_partials(p, split)))
