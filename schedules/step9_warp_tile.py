"""Step 9 — warp tiling and block rasterization.

Idea: map threads so each warp covers a compact warp_m x (32 / warp_m) block of micro-tiles
instead of two 16-thread rows, and launch thread blocks in column groups ``raster`` blocks
wide. A 4 x 8 warp reads 4 distinct A float4s and 8 distinct B float4s per fragment load
(threads reading the same address share one access), where a 2 x 16 warp reads 2 + 16: with
step 8's layouts that is one shared-memory wavefront per load instead of up to two. Blocks
running together then reuse the same A rows and B columns from L2.

In TVM the mapping is chosen when the loops are tiled (``tile_registers`` calls
``map_warps`` and ``rasterize``): the thread loops must be bound before step 3's
``compute_at``, which sizes each shared copy by relaxing over the loops bound to threads.
So this step's idea enters through its config (``warp_m``, ``raster``), which the tiling of
step 2 reads; every copy binds the same (threadIdx.y = warp, threadIdx.x = lane) axes.

Prediction: fewer shared wavefronts per FMA help the 4 x 4 micro-tiles most (8 FMAs per
float4 loaded): +5-10% at 512 and 1024, +0-5% at 2048. Rasterization should show nothing
at these sizes: at 2048 all 256 blocks of 128 x 128 are resident at once and the three
matrices (48 MB) fit the 50-60 MB L2.

Measured (H200, 2026-11-21): no gain; the prediction was wrong. 21.5 / 31.6 / 38.3 TFLOPS,
0.99x / 0.97x / 1.00x step 8 at step 8's tiles. ncu: shared wavefronts identical with and
without warp tiling (50.3 M at 128x128 8x8; 67.1 M at 64x128 8x4), so broadcast saved no
shared-memory traffic. That is consistent with 128-bit shared loads being served a
quarter-warp (8 threads) at a time: what counts is which 8 threads share a phase, and a row
of 8 threads of either warp shape reads 8 distinct B float4s. At 128x128 the warp mapping
also cost one register (128 -> 129), which halves occupancy (two blocks of 256 threads no
longer fit 64 K registers): 450 -> 545 us. Rasterization: nothing either, as predicted (the
step-10 sweep's raster=8 and raster=1 winners differ by < 1%).

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step9
"""

from . import step8_conflict_free as prior
from .config import WarpTileConfig

NUMBER = 9
NAME = "warp tiling"
IDEA = "warps cover compact 4x8 thread blocks (broadcast fragment loads); rasterized block order"
Config = WarpTileConfig
PASS_CONFIG: dict = dict(prior.PASS_CONFIG)


def default_config(M: int, N: int, K: int) -> WarpTileConfig:
    return WarpTileConfig(**prior.default_config(M, N, K).as_dict(), warp_m=4, raster=1)


def apply(sch, cfg: WarpTileConfig, block):
    # cfg.warp_m and cfg.raster are applied by step 2's tile_registers (see above).
    return prior.apply(sch, cfg, block)
