"""Step 8 — bank-conflict-free shared memory: permuted and padded shared tiles.

Idea: a warp's float4 fragment loads should touch distinct shared-memory banks. With
row-major tiles they do not: in a 16-thread-wide warp the two rows of threads read A rows
thread_m apart, i.e. block_k * thread_m floats apart (a multiple of 32 banks: the same
banks), and for 8 x 8 micro-tiles the 16 threads read B float4s 32 bytes apart, four to a
bank group. ``transform_layout`` stores A's rows interleaved by thread (row
``g * thread_m + r`` at ``r * threads_m + g``) and B's columns interleaved by float4 (column
``g * thread_n + 4h + l`` at ``4h * threads_n + 4g + l``), and ``storage_align`` pads each A
row by ``pad_a`` floats (a multiple of 4, or the float4 accesses would be misaligned). Every
run of 4 floats stays together, so the 16-byte cp.async copies survive.

Prediction: ncu's shared-load bank conflicts (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld)
should drop to near zero. What that buys depends on whether shared bandwidth limits the
kernel: the 8 x 8 tiles do 16 FMAs per float4 loaded, so even doubled wavefronts are not the
bound; expect +0-10%, most at the 8 x 8 tile of 2048.

Measured (H200, 2026-11-21; ncu 2025.3 with --clock-control none, one launch at 2048):
- Where there are conflicts, they go and speed follows. At step 7's first tile, 128x128x16 with
  8x8 micro-tiles and 3 stages: shared-load bank conflicts 33.55 M -> 472, shared wavefronts
  83.9 M -> 50.3 M (the same 17.6 M load instructions), kernel 547 -> 450 us: +22%.
- At the tiles the step-7 sweep picked (8x4 and 4x4 micro-tiles) there was nothing to remove:
  conflicts 0 / 0 / 4,062 (512 / 1024 / 2048) in step 7 and 0 / 0 / 4,236 here. A thread reads
  one float4 per B row (thread_n = 4), and a warp spans one row of threads, so A is a
  broadcast. The padding only costs shared memory and a few registers: 21.6 / 32.6 / 38.3
  TFLOPS, 0.98x / 0.95x / 0.98x step 7 in the committed run (within noise at 2048).
So the prediction held for the tile it was made for; the sweep had already steered step 7 to
conflict-free tiles, which is the other way to the same end.

The other layout, ``transpose_a=1`` (not the default): A stored k-major, block_k rows of
block_m (+ pad_a) floats, interleaved by thread like B. One k step's A fragment is then
thread_m contiguous floats, so fragments load per k step instead of per run of 4 k: an 8x8
micro-tile needs 123-128 registers instead of 153-167 (ptxas), two blocks of 256 threads per SM
instead of one. Prediction: +10-20% for 8x8 tiles at 2048 from the doubled occupancy. Measured
(H200, 2026-11-21): slower. A's global rows run along k, so its cp.async copies become 4-byte
scalars: ncu at 128x128x16, 8x8, 2 stages counts 81.6 M shared wavefronts against 51.2 M for
the m-major layout (loads identical at 50.3 M and conflict-free in both; the 30 M extra are the
copies), and the kernel ran 470 vs 458 us despite twice the warps. The scalar copies are the
cost, not their banks: a layout that rotates each thread's float4 chunks by k row, making the
copies conflict-free, took them only from 44 M to 36.5 M wavefronts at 256x128x8 (step 10's
notes).
In the step-10 sweep the transposed layout lost at every size (best 19.0 / 36.5 / 39.5 TFLOPS
against 24.6 / 41.1 / 45.2 m-major), so the sweep no longer searches it; it stays selectable,
and tested, as the measured counterexample.

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step8
"""

from . import step7_async_copy as prior
from .config import ConflictFreeConfig
from .transforms.cuda_core import conflict_free_layout

NUMBER = 8
NAME = "conflict-free shared"
IDEA = "transform_layout + storage_align: interleaved, padded shared tiles for conflict-free float4 loads"
Config = ConflictFreeConfig
PASS_CONFIG: dict = dict(prior.PASS_CONFIG)


def default_config(M: int, N: int, K: int) -> ConflictFreeConfig:
    return ConflictFreeConfig(**prior.default_config(M, N, K).as_dict(), pad_a=4, transpose_a=0)


def apply(sch, cfg: ConflictFreeConfig, block):
    tiles = prior.apply(sch, cfg, block)
    return conflict_free_layout(sch, tiles, cfg.block_m, cfg.block_n, cfg.block_k,
                                cfg.thread_m, cfg.thread_n, cfg.pad_a, bool(cfg.transpose_a), cfg.vector)
