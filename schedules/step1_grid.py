"""Step 1 — tiled grid: split i, j into thread blocks and bind blockIdx / threadIdx.

Idea: the unscheduled loop nest is one serial thread. Splitting i and j into
``block_m x block_n`` tiles and binding the outer loops to ``blockIdx`` and the inner ones to
``threadIdx`` puts one thread on each C element; k stays a serial loop inside the thread, and
nvcc keeps that one partial sum in a register.

Prediction: every FMA needs two global loads (A[i, k], B[k, j]). With threadIdx.x walking j
over a full warp (block_n = 32), a warp reads 32 consecutive floats of B (coalesced) and one
broadcast value of A. 2·M·N·K loads, mostly L1 hits, make this load-bound at a few TFLOPS,
10-100x numpy's fp32 on the host CPU (step 1's prior).

Measured (H200, 2026-11-21, probe): 16x16 blocks 4.6 / 5.1 / 5.3 TFLOPS at 512 / 1024 / 2048;
8x32 (a full warp along j, the default) 5.6 / 6.7 / 7.0, as in the committed runs (H200
2026-11-21; H100 2026-11-22: 5.6 / 6.6 / 6.9).

Run: python -m steps.step1   (--build-only without a GPU, --explain for the IR and CUDA)
"""

from .config import GridConfig
from .transforms import tile_grid

NUMBER = 1
NAME = "tiled grid"
IDEA = "split/reorder i, j into thread blocks; bind blockIdx/threadIdx; one C element per thread"
Config = GridConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> GridConfig:
    return GridConfig(block_m=8, block_n=32)


def apply(sch, cfg: GridConfig, block):
    return tile_grid(sch, block, cfg.block_m, cfg.block_n)
