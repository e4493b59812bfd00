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

Long K (issue 28's contract, docs/fp32-contract.md): one serial fp32 sum over all of K
loses accuracy like sqrt(K): 4.9e-6 at K = 2^16 and 1.7e-5 at 2^20 on the H100 (16 x 16
outputs), where cuBLAS SGEMM, which splits K, has 4.9e-7 and 1.1e-6; every step to 10 keeps
this one accumulator per output. So where K >= 8192, ``schedules.build`` adds a pass
(schedules/lowering/long_k.py) that sums each chunk of 512 k from zero and adds it into a second
accumulator: predicted ~4e-7 and ~8e-7 (a float32 simulation), not yet measured. Shorter K,
every square the ladder times included, builds byte-identical CUDA.

Run: python -m steps.step1   (--build-only without a GPU, --explain for the IR and CUDA)
"""

from .config import GridConfig
from .transforms.cuda_core import tile_grid

NUMBER = 1
NAME = "tiled grid"
IDEA = "split/reorder i, j into thread blocks; bind blockIdx/threadIdx; one C element per thread"
Config = GridConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> GridConfig:
    return GridConfig(block_m=8, block_n=32)


def apply(sch, cfg: GridConfig, block):
    return tile_grid(sch, block, cfg.block_m, cfg.block_n)
