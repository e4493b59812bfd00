"""The shape rule: a step-11 config for any M, N, K, from a small cost model. Pure: no GPU, no I/O.

    from schedules import shape_rule
    cfg = shape_rule.rule_config(256, 256, 16384)          # a SplitKConfig, split_k 16 here
    shape_rule.ranked(2048, 64, 2048)[:5]                   # the model's best few, best first

Step 11 takes its config from ``schedules/tuned/step11.json`` where a sweep measured that very
shape, else from :func:`rule_config`. The rule enumerates a small menu of block tiles (the
step-10 sweep's winners plus narrow tiles for skinny shapes), block_k 16 or 32, and split-K
factors, and keeps the candidate with the least predicted time (:func:`predicted_seconds`):

- **padding waste**: the work counted is the padded problem (M, N rounded up to the block
  tile, K to whole ``split_k x block_k``), so a 64-wide tile on N = 65 costs double;
- **wave quantisation**: a thread block's work is ``block_m x block_n x chunk`` FMAs; an SM
  holds ``resident`` blocks at once (registers, shared memory, threads); the grid runs in rounds
  of ``sm_count x resident`` blocks and a partly filled round costs nearly a full one; an SM
  with few warps runs its FMA pipe part-busy (:func:`occupancy`, fitted to measured configs);
- **split-K**: splitting K multiplies the blocks by ``split_k`` at the price of the partial
  buffer (written once, read once) and a second launch (``REDUCE_LAUNCH_S``), and a fixed
  per-block cost (pipeline fill and write-back, ``BLOCK_OVERHEAD_SLICES``) that short chunks
  pay more often;
- **memory floor**: no config beats reading A and B once from DRAM (M = 1 or N = 1 shapes);
- **misaligned rows** (N or K not a multiple of 4): inlined padding narrows the vector and
  slows the matmul (``NARROW_VECTOR_RATE``); staged padding (``stage_pads`` 1,
  schedules/transforms/padding.py) keeps it at the aligned rate for the price of copying the misaligned
  operands (``staging_seconds``). Both are candidates; the model picks per shape.

Efficiencies per micro-tile are calibrated to step 10's measured configs (H100/H200, 512^3 /
1024^3 / 2048^3). The result is deterministic: ties go to the earlier candidate of a fixed
order. Every config returned validates, and fits the shared memory and thread limits of the
arch passed (sm_80 / 86 / 89 / 90). docs/any-shape.md explains the rule and the sweep that
checks it (``python -m steps.sweep --step 11 --shapes ...``).
"""

from __future__ import annotations

import dataclasses
import functools
import math

from .config import MAX_SHARED_BYTES, ConfigError, SplitKConfig, check_sizes
from .transforms.padding import effective_config, staged_operands

SM_COUNT = 132  # H100 SXM; pass the GPU's own count where it differs
MAX_THREADS_PER_SM = 2048
REGISTERS_PER_SM = 65536
SHARED_PER_SM = 228 * 1024
RESERVED_SHARED_PER_BLOCK = 1024  # the CUDA runtime's own share of each block's shared memory
MAX_BLOCKS_PER_SM = 32

# One SM: 128 FP32 FMAs per clock at ~1.9 GHz under load (H100).
FMA_PER_SM_S = 128 * 1.9e9
DRAM_BYTES_S = 3.0e12
REDUCE_LAUNCH_S = 2.0e-6  # a second, dependent kernel: launch gap plus its own tail
# Occupancy: how busy a tile keeps the FMA pipe with w warps resident per SM, relative to
# step 10's 2048^3 config (5 blocks of 4 warps: REFERENCE_WARPS) and never above it:
# (w / (w + h)) / (20 / (20 + h)), h = OCCUPANCY_HALF_WARPS. Fitted (H100, 2026-11-23) to
# 300 measured step-11 configs on 17 shapes: the same 64x64 8x4 tile at 128x4096x4096 ran
# 37.2 TFLOPS with 2 blocks of 4 warps per SM (split 2) and 40.0 with 4 (split 4), although
# split 4 moves twice the partials; the model this replaces counted one block of 4 warps as a
# full SM and picked split 1 there (predicted 45.6, the measured neighbours 37-40).
REFERENCE_WARPS = 20
OCCUPANCY_HALF_WARPS = 1.5
BLOCK_OVERHEAD_SLICES = 3  # pipeline fill + write-back of one block, in block_k slices of work

# Misaligned rows, padding inlined: the matmul's rate at a narrowed vector, as a fraction of
# its aligned rate. Vector 1, measured on an H100 (2026-11-22, step 11's committed runs, the
# same 64x64 8x4 bk32 config and padded problem at both): 2047^3 30.6 TFLOPS (560 us) against
# 2048^3 45.3 (379 us), 0.68: every copy a 4-byte cp.async, every fragment load a scalar.
# Vector 2 (N and K even, not both multiples of 4): not measured, a guess half-way.
NARROW_VECTOR_RATE = {1: 0.68, 2: 0.85}
# Staged padding: each staging copy is one more dependent kernel (its launch gap and tail, as
# split-K's reduction), moving its operand at DRAM speed (read once, the padded copy written
# once). An upper bound where the operand sits in L2 (50 MB). Not yet measured.
STAGE_LAUNCH_S = REDUCE_LAUNCH_S

# Per micro-tile (thread_m, thread_n): registers per thread (ptxas, step 10's builds) and
# the fraction of FMA peak a full SM reaches at REFERENCE_WARPS (calibrated, with the
# occupancy curve, so the model gives step 10's measured 512^3 / 1024^3 / 2048^3 winners
# 24.6 / 40.2 / 45.6 TFLOPS against the measured 24.6 / 41.1 / 45.2; 8x8 from the step-10
# docstring's attempts).
REGISTERS = {(2, 4): 48, (4, 2): 48, (4, 4): 64, (8, 4): 96, (4, 8): 96, (8, 8): 168}
# 4x4: 512^3 (24.6 TFLOPS, one block of 4 warps per SM), 8x4: 1024^3 / 2048^3 (41.1 / 45.2),
# 8x8: 37-40 TFLOPS at 2048^3; 2x4 / 4x2 (8-wide tiles for M or N of a few): half of 4x4's
# FMAs per fragment load, a guess.
EFFICIENCY = {(2, 4): 0.3, (4, 2): 0.3, (4, 4): 0.6, (8, 4): 0.78, (4, 8): 0.70, (8, 8): 0.64}
NARROW_TILE_FACTOR = 0.9  # a 16- or 8-wide block re-reads the other operand from L2 more often
BLOCK_K16_FACTOR = 0.92  # twice the barriers and copy issues per FMA of block_k 32

# The menu: (block_m, block_n, thread_m, thread_n, warp_m, stages, pad_a). The first three
# are step 10's tuned configs at 2048 / 1024 / 512; the narrow ones are for skinny shapes.
TILES = (
    (64, 64, 8, 4, 2, 2, 0),
    (32, 128, 8, 4, 4, 4, 4),
    (32, 64, 4, 4, 2, 2, 0),
    (64, 128, 8, 4, 4, 2, 0),
    (128, 64, 8, 4, 4, 2, 0),
    (128, 128, 8, 8, 4, 2, 0),
    (64, 32, 4, 4, 4, 2, 0),
    (16, 128, 4, 4, 4, 2, 0),
    (128, 16, 4, 4, 8, 2, 0),
    (16, 64, 4, 4, 4, 2, 0),
    (64, 16, 4, 4, 8, 2, 0),
    (8, 64, 2, 4, 2, 2, 0),
    (64, 8, 4, 2, 8, 2, 0),
)
# Matrix-vector mode (N = 1, ``k_threads`` > 1: K split over a block's threads, one kernel):
# (rows per block, threads per row). Measured on an H100 (2026-11-23, a probe of 36 of them):
# 2 x 128 best at 4096x1x4096 (1.35 TFLOPS, 2.7 TB/s), 8 x 32 at 8192x1x1024 (2.40). One-row
# blocks divide any M: with K padded to whole passes, every N = 1 shape has a candidate
# (12345x1x777: 1 x 64, 1.60 TFLOPS, where the tiled path ran 0.63).
MATRIX_VECTOR_BLOCKS = ((2, 128), (4, 64), (8, 32), (4, 128), (1, 128), (2, 64), (4, 32), (1, 64), (1, 32))
# Its compute, for the tie-break among configs at the memory floor: the unpadded FMAs at this
# fraction of peak (the kernel is bound by reading A once; what matters is that the tiled
# configs' padded N = 1 -> 8 FMAs count more).
MATRIX_VECTOR_EFFICIENCY = 0.25
MATRIX_VECTOR_PASSES = 8
# Vector-matrix mode (M = 1, ``k_threads`` > 1 with block_n > 1; the same efficiency): (threads
# along n, k_threads), float4 columns each. Measured on an H100 (2026-11-23, alternating rounds
# of 8 such blocks x 2 orders of K at 1x8192x1024 and 1x4096x4096): the fastest launched about
# 2^16 threads in all, 16 warps per SM: 4 x 32 at 1x8192x1024 (512 blocks; 1.93 TFLOPS against
# the tiled 1.41-1.51) and 4-8 x 64 at 1x4096x4096 (1.17-1.20, the tiled path's own 1.18-1.20);
# half or twice that many threads ran 3-18% slower.
VECTOR_MATRIX_BLOCKS = tuple((n, k) for n in (4, 8, 16) for k in (8, 16, 32, 64, 128, 256) if n * k <= 1024)
VECTOR_MATRIX_THREADS = 2 ** 16
BLOCK_KS = (32, 16, 64)  # 64 is the only block_k whose A slice splits over 8-row tiles' threads
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # up to config.MAX_SPLIT_K
MIN_CHUNK_SLICES = 4  # a chunk shorter than this many block_k slices is mostly overhead


def _round_up(n: int, tile: int) -> int:
    return -(-n // tile) * tile


def resident_blocks(cfg: SplitKConfig) -> int:
    """Blocks of `cfg` one SM holds at once: the least of its register, shared-memory,
    thread and block limits (at least 1: a config that fits a block runs)."""
    regs = REGISTERS.get((cfg.thread_m, cfg.thread_n), 2 * cfg.thread_m * cfg.thread_n + 32)
    by_regs = REGISTERS_PER_SM // (regs * cfg.threads)
    by_shared = SHARED_PER_SM // (cfg.shared_bytes + RESERVED_SHARED_PER_BLOCK)
    by_threads = MAX_THREADS_PER_SM // cfg.threads
    return max(1, min(by_regs, by_shared, by_threads, MAX_BLOCKS_PER_SM))


def occupancy(warps_per_sm: int) -> float:
    """How busy w resident warps per SM keep the FMA pipe, relative to REFERENCE_WARPS."""
    h = OCCUPANCY_HALF_WARPS
    return min(1.0, (warps_per_sm / (warps_per_sm + h)) / (REFERENCE_WARPS / (REFERENCE_WARPS + h)))


def efficiency(cfg: SplitKConfig) -> float:
    """The fraction of FMA peak a full SM of these blocks reaches (model constant)."""
    eff = EFFICIENCY.get((cfg.thread_m, cfg.thread_n), 0.5)
    if min(cfg.block_m, cfg.block_n) < 32:
        eff *= NARROW_TILE_FACTOR
    if cfg.block_k < 32:
        eff *= BLOCK_K16_FACTOR
    return eff


def predicted_seconds(cfg: SplitKConfig, M: int, N: int, K: int, sm_count: int = SM_COUNT) -> float:
    """The model's kernel time for `cfg` at M x N x K (both kernels of a split-K call): the
    compute time, or reading A and B once from DRAM where that takes longer. The k_threads
    modes do not split K over blocks: with fewer blocks than SMs, only that many SMs read."""
    floor = (M * K + K * N + M * N) * 4 / DRAM_BYTES_S
    if cfg.is_vector_matrix:
        floor *= max(1.0, sm_count / (N // cfg.block_n))
    elif cfg.k_threads > 1:
        floor *= max(1.0, sm_count / (M // cfg.block_m))
    return max(compute_seconds(cfg, M, N, K, sm_count), floor)


def staging_seconds(cfg: SplitKConfig, M: int, N: int, K: int) -> float:
    """The model's time for the copy kernels of staged padding (0 where nothing is staged):
    per staged operand a launch, plus reading it and writing its padded copy at DRAM speed."""
    m_pad, n_pad, k_pad = _round_up(M, cfg.block_m), _round_up(N, cfg.block_n), cfg.split_k * cfg.chunk_k(K)
    sizes = {"A": (M * K, m_pad * k_pad), "B": (K * N, k_pad * n_pad)}
    return sum(STAGE_LAUNCH_S + (sizes[op][0] + sizes[op][1]) * 4 / DRAM_BYTES_S
               for op in staged_operands(cfg, M, N, K))


def compute_seconds(cfg: SplitKConfig, M: int, N: int, K: int, sm_count: int = SM_COUNT) -> float:
    """The model's time for the padded FMAs in waves over the SMs (slower at a vector narrowed
    by misaligned rows), plus split-K's reduction and staged padding's copies. Matrix-vector
    mode: its M x K FMAs at MATRIX_VECTOR_EFFICIENCY (it sits at the memory floor)."""
    if cfg.k_threads > 1:  # M x K FMAs (N = 1) or N x K (M = 1), neither padded
        return M * N * K / (sm_count * FMA_PER_SM_S * MATRIX_VECTOR_EFFICIENCY)
    m_pad, n_pad = _round_up(M, cfg.block_m), _round_up(N, cfg.block_n)
    chunk = cfg.chunk_k(K)
    blocks = (m_pad // cfg.block_m) * (n_pad // cfg.block_n) * cfg.split_k
    block_fmas = cfg.block_m * cfg.block_n * (chunk + BLOCK_OVERHEAD_SLICES * cfg.block_k)
    resident = resident_blocks(cfg)
    warps = cfg.threads // 32
    sm_rate = FMA_PER_SM_S * efficiency(cfg)

    def round_seconds(per_sm: int) -> float:
        # per_sm blocks share one SM; fewer warps than the reference run the pipe part-busy.
        return per_sm * block_fmas / (sm_rate * occupancy(per_sm * warps))

    full_rounds, rest = divmod(blocks, sm_count * resident)
    seconds = full_rounds * round_seconds(resident)
    if rest:
        seconds += round_seconds(-(-rest // sm_count))
    vector = effective_config(cfg, M, N, K).vector
    if vector < cfg.vector:
        seconds /= NARROW_VECTOR_RATE[vector]
    seconds += staging_seconds(cfg, M, N, K)
    if cfg.split_k > 1:
        partial_bytes = (2 * cfg.split_k + 1) * m_pad * n_pad * 4  # written, read, then C
        seconds += REDUCE_LAUNCH_S + partial_bytes / DRAM_BYTES_S
    return seconds


def _fits(cfg: SplitKConfig, M: int, N: int, K: int, arch: str) -> bool:
    try:
        cfg.validate(M, N, K)
        cfg.check_shared_memory(arch)
    except ConfigError:
        return False
    return True


def misaligned(M: int, N: int, K: int, vector: int = 4) -> bool:
    """Whether N or K breaks `vector` alignment, so that ``stage_pads`` matters at this shape."""
    return bool(staged_operands(SplitKConfig(vector=vector, stage_pads=1), M, N, K))


def candidates(M: int, N: int, K: int, arch: str = "sm_90") -> list[SplitKConfig]:
    """Every menu config valid at M x N x K on `arch`, in the menu's fixed order; where the
    shape is misaligned each comes inlined (``stage_pads`` 0) and then staged (1). Aligned
    shapes only get 0: 1 would build the very same IR."""
    if arch not in MAX_SHARED_BYTES:
        raise ConfigError(f"unknown arch {arch!r}; valid: {', '.join(MAX_SHARED_BYTES)}")
    stagings = (0, 1) if misaligned(M, N, K) else (0,)
    out = matrix_vector_candidates(M, N, K, arch) + vector_matrix_candidates(M, N, K, arch)
    for bm, bn, tm, tn, warp_m, stages, pad_a in TILES:
        for bk in BLOCK_KS:
            slices = -(-K // bk)
            for split in SPLITS:
                if split > 1 and slices < split * MIN_CHUNK_SLICES:
                    break  # SPLITS ascend: every larger split's chunks are shorter still
                for stage_pads in stagings:
                    cfg = SplitKConfig(block_m=bm, block_n=bn, thread_m=tm, thread_n=tn, block_k=bk,
                                       vector=4, stages=stages, pad_a=pad_a, transpose_a=0,
                                       warp_m=warp_m, raster=1, unroll_k=1, split_k=split,
                                       stage_pads=stage_pads)
                    # A smaller arch (sm_86/89: 99 KB) may not hold the menu's stages: fewer.
                    while not _fits(cfg, M, N, K, arch) and cfg.stages > 2:
                        cfg = dataclasses.replace(cfg, stages=cfg.stages - 1)
                    if _fits(cfg, M, N, K, arch):
                        out.append(cfg)
    return out


def matrix_vector_candidates(M: int, N: int, K: int, arch: str = "sm_90") -> list[SplitKConfig]:
    """Where N = 1: the matrix-vector configs (``k_threads`` > 1) whose rows divide M, each at
    the widest vector that divides K (A's rows stay aligned); K pads to whole passes. Else none."""
    if N != 1:
        return []
    vector = next(v for v in (4, 2, 1) if K % v == 0)
    out = [cfg for cfg in (SplitKConfig.matrix_vector(rows, k_threads, vector)
                           for rows, k_threads in MATRIX_VECTOR_BLOCKS)
           if M % cfg.block_m == 0 and _fits(cfg, M, N, K, arch)]
    # They tie in the model (all at the memory floor, the same FMAs), so their order decides:
    # the widest k_threads that still gives each thread MATRIX_VECTOR_PASSES passes over K (that
    # many loads in flight per thread, unrolled), then the rest by passes. The probe's winners
    # follow it: 2 x 128 at K = 4096 (8 passes), 8 x 32 at K = 1024 (8 passes).
    def preference(cfg):
        passes = -(-K // cfg.block_k)  # K pads to whole passes: the fewest padded last
        return (0, -cfg.k_threads, passes) if passes >= MATRIX_VECTOR_PASSES else (1, -passes, cfg.block_k)
    return sorted(out, key=preference)


def vector_matrix_candidates(M: int, N: int, K: int, arch: str = "sm_90") -> list[SplitKConfig]:
    """Where M = 1 < N: the vector-matrix configs whose block divides the shape, at the widest
    vector that divides N; else none. Their model ties them (the memory floor, once there are
    blocks for every SM), so they come in the probe's order of preference: at least
    MATRIX_VECTOR_PASSES rows per thread, then the total threads nearest
    VECTOR_MATRIX_THREADS, then fewer threads per block."""
    if M != 1 or N == 1:
        return []
    vector = next(v for v in (4, 2, 1) if N % v == 0)
    out = [cfg for cfg in (SplitKConfig.vector_matrix(n, k, vector) for n, k in VECTOR_MATRIX_BLOCKS)
           if N % cfg.block_n == 0 and K % cfg.block_k == 0 and _fits(cfg, M, N, K, arch)]

    def preference(cfg):
        total = N // cfg.block_n * cfg.threads
        return (K // cfg.k_threads < MATRIX_VECTOR_PASSES, abs(math.log2(total / VECTOR_MATRIX_THREADS)),
                cfg.threads)
    return sorted(out, key=preference)


def ranked(M: int, N: int, K: int, sm_count: int = SM_COUNT, arch: str = "sm_90") -> list[SplitKConfig]:
    """The valid candidates, best predicted first. Where the memory floor ties them (tiny or
    M = 1 shapes), the least compute time wins; remaining ties keep menu order (a stable sort)."""
    return list(_ranked(M, N, K, sm_count, arch))


@functools.lru_cache(maxsize=256)
def _ranked(M: int, N: int, K: int, sm_count: int, arch: str) -> tuple[SplitKConfig, ...]:
    # Cached: a sweep asks twice per shape (its neighbourhood, the rule's pick), and validating
    # the ~1300 menu configs of a shape takes ~40 ms: 43 shapes cost the sweep's start ~2 s.
    return tuple(sorted(candidates(M, N, K, arch),
                        key=lambda c: (predicted_seconds(c, M, N, K, sm_count), compute_seconds(c, M, N, K, sm_count))))


def rule_config(M: int, N: int, K: int, sm_count: int = SM_COUNT, arch: str = "sm_90") -> SplitKConfig:
    """The rule's config for any M, N, K >= 1: the least predicted time."""
    check_sizes(M, N, K)
    if not isinstance(sm_count, int) or isinstance(sm_count, bool) or sm_count < 1:
        raise ConfigError(f"sm_count must be a positive integer, got {sm_count!r}")
    best = ranked(M, N, K, sm_count, arch)
    if not best:  # not reached for sizes check_sizes accepts (tests/test_shape_rule.py)
        raise ConfigError(f"no step-11 config fits {M}x{N}x{K} on {arch}")
    return best[0]


def tiled_config(M: int, N: int, K: int, sm_count: int = SM_COUNT, arch: str = "sm_90") -> SplitKConfig:
    """The rule's best config on the tiled path (``k_threads`` 1): its pick wherever neither
    k_threads mode applies, and the one those modes replace at M = 1 or N = 1."""
    return next(c for c in ranked(M, N, K, sm_count, arch) if c.k_threads == 1)


def raster_variants(cfg: SplitKConfig, M: int, N: int, K: int) -> list[SplitKConfig]:
    """`cfg` with each distinct block rasterization (step 9's ``raster``) its grid can take.

    The model does not predict raster (it rates every launch order alike); the sweep measures
    these instead (what they gained, and where they lost: step 11's docstring). ``rasterize``
    uses gcd(raster, column blocks), so only the distinct values of that are returned (a grid
    one block wide has none). The matrix-vector mode has no grid of tiles to reorder."""
    if cfg.k_threads > 1:
        return []
    columns = -(-N // cfg.block_n)
    rasters = sorted({math.gcd(r, columns) for r in (2, 4, 8)} - {1, cfg.raster})
    return [dataclasses.replace(cfg, raster=r) for r in rasters]


def neighbourhood(M: int, N: int, K: int, size: int = 20, sm_count: int = SM_COUNT,
                  arch: str = "sm_90", extra=()) -> list[SplitKConfig]:
    """What a sweep measures at one shape: `extra` configs first (e.g. step 10's own, as
    split_k 1), then the rule's pick (always, so the table can say how far it is from the
    best), its detail variants (raster, stages, warp_m, pad_a; where the shape is misaligned,
    stage_pads too) so the sweep can correct what the model does not see, then the rule's
    next best, each distinct, up to `size` in all."""
    out: list[SplitKConfig] = []

    def add(cfg):
        if cfg not in out and _fits(cfg, M, N, K, arch):
            out.append(cfg)

    for cfg in extra:
        add(cfg)
    order = ranked(M, N, K, sm_count, arch)
    if order:
        best = order[0]
        add(best)
    must = len(out)  # the extras and the pick survive any `size`
    if order:
        for cfg in raster_variants(best, M, N, K):
            add(cfg)
        for stages in (2, 3, 4):
            add(dataclasses.replace(best, stages=stages))
        for warp_m in (2, 4, 8):
            add(dataclasses.replace(best, warp_m=warp_m))
        add(dataclasses.replace(best, pad_a=4 - best.pad_a))
        if misaligned(M, N, K, best.vector):
            add(dataclasses.replace(best, stage_pads=1 - best.stage_pads))
    # Then the model's ranking, one config per (tile, split) first, so the measured set spans
    # tiles and splits rather than block_k variants of one; then the rest of the ranking.
    seen = {(c.block_m, c.block_n, c.thread_m, c.thread_n, c.split_k, c.k_threads) for c in out}
    for cfg in order:
        key = (cfg.block_m, cfg.block_n, cfg.thread_m, cfg.thread_n, cfg.split_k, cfg.k_threads)
        if key not in seen and len(out) < size:
            seen.add(key)
            add(cfg)
    for cfg in order:
        if len(out) >= size:
            break
        add(cfg)
    return out[:max(size, must)]


def describe(cfg: SplitKConfig, M: int, N: int, K: int, sm_count: int = SM_COUNT) -> str:
    """One line: the grid the config launches and the model's prediction."""
    tiles = math.ceil(M / cfg.block_m) * math.ceil(N / cfg.block_n)
    seconds = predicted_seconds(cfg, M, N, K, sm_count)
    if cfg.is_vector_matrix:
        return (f"{N // cfg.block_n} blocks of {cfg.block_n} columns ({cfg.block_n // cfg.vector} threads) "
                f"x {cfg.k_threads} threads along K, one kernel; "
                f"predicted {2 * M * N * K / seconds / 1e12:.1f} TFLOPS")
    if cfg.k_threads > 1:
        return (f"{tiles} blocks of {cfg.block_m} rows x {cfg.k_threads} threads along K, one kernel; "
                f"predicted {2 * M * N * K / seconds / 1e12:.1f} TFLOPS")
    staged = staged_operands(cfg, M, N, K)
    return (f"{tiles} tiles x split {cfg.split_k} = {tiles * cfg.split_k} blocks "
            f"({resident_blocks(cfg)} per SM, {sm_count} SMs)"
            + (f", {' and '.join(staged)} staged" if staged else "")
            + f"; predicted {2 * M * N * K / seconds / 1e12:.1f} TFLOPS")
