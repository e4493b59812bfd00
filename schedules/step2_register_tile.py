"""Step 2 — register tiling: each thread computes a thread_m x thread_n tile of C.

Idea: a two-level split of i and j (block, thread, micro-tile) gives each thread a micro-tile
of C. k sits outside the micro-tile, the accumulator's zero-init is hoisted out of k
(``decompose_reduction``) and the micro-tile is unrolled, so nvcc keeps all its partial sums
in registers: per k step a thread loads thread_m values of A and thread_n of B and does
thread_m x thread_n FMAs.

Why k is not innermost: with k inside the micro-tile each C element is a separate dot
product, every FMA still needs two loads, and nothing is reused from registers. Measured on
an H200 (2026-11-21): 0.2-3.9 TFLOPS that way, against 3.1 / 11.5 / 17.8 with k outside.

Prediction: loads per FMA fall from 2 to (tm + tn) / (tm * tn): 0.5 for 4x4, 0.25 for 8x8, so
step 1's load bound lifts, 2-3x at 2048. Small problems need small tiles to fill 132 SMs, and
at 512 even those leave the GPU idle much of the time: expect no gain there.

Measured (committed runs: H200 2026-11-21 / H100 2026-11-22): 3.1 / 11.5 / 18.2 and 3.0 / 11.3 /
17.6 TFLOPS at 512 / 1024 / 2048 with the per-size defaults below (32x32 4x4, 64x64 4x4, 64x64
8x8), 1.7x / 2.5-2.6x over step 1 at 1024 / 2048;
128x128 8x8 reached only 1.5 / 6.5 / 16.3 in a probe (too few blocks). At 512 this is *slower* than step 1 (5.6, so 0.54-0.55x): 64 threads per block and
global loads the L1 serves worse than step 1's one-warp-wide rows; shared memory fixes it.

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step2
"""

from .config import RegisterTileConfig
from .transforms.cuda_core import tile_registers

NUMBER = 2
NAME = "register tiling"
IDEA = "two-level split: each thread computes a TMxTN micro-tile held in registers"
Config = RegisterTileConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> RegisterTileConfig:
    if M * N <= 512 * 512:
        return RegisterTileConfig(block_m=32, block_n=32, thread_m=4, thread_n=4)
    if M * N <= 1024 * 1024:
        return RegisterTileConfig(block_m=64, block_n=64, thread_m=4, thread_n=4)
    return RegisterTileConfig(block_m=64, block_n=64, thread_m=8, thread_n=8)


def apply(sch, cfg: RegisterTileConfig, block):
    return tile_registers(sch, block, cfg.block_m, cfg.block_n, cfg.thread_m, cfg.thread_n,
                          warp_m=cfg.warp_m, raster=cfg.raster)
