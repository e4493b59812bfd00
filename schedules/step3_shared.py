"""Step 3 — shared memory: ``cache_read`` A and B to ``shared`` + ``compute_at`` the k slice.

Idea: split k into block_k slices; for each slice the block stages its block_m x block_k piece
of A and block_k x block_n piece of B in shared memory (``cache_read``), placed at the outer k
loop with ``compute_at``. TVM inserts the barriers around the copy.

Prediction: the copy is not shared out yet. After ``compute_at`` every thread runs the whole
copy loop itself (each of the block's threads copies every element of both tiles), and two
barriers per slice stall the block. Global reuse improves, but the redundant copy costs far
more: step 3 should be much *slower* than step 2, roughly by the thread count. The next step
fixes exactly this.

Measured (H200, 2026-11-21): 0.5 / 0.8 / 3.2 TFLOPS at 512 / 1024 / 2048 with step 2's tiles,
0.15x / 0.07x / 0.18x of step 2: the slowdown predicted, a little smaller than the thread count
because L1 absorbs part of the redundant global reads.

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step3
"""

from . import step2_register_tile as prior
from .config import SharedTileConfig
from .transforms.cuda_core import stage_in_shared

NUMBER = 3
NAME = "shared memory"
IDEA = "cache_read A, B to shared + compute_at the outer k loop"
Config = SharedTileConfig
PASS_CONFIG: dict = {}
# Square size -> why this step is slower than step 2 there; read by the step-over-step gate
# (tests/test_gpu.py) and copied into results/<gpu>/step3.json.
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024, 2048, 4096),
    "every thread still runs the whole shared-memory copy itself after compute_at (the copy is "
    "shared out only in step 4): predicted, measured 0.07-0.18x of step 2",
)


def default_config(M: int, N: int, K: int) -> SharedTileConfig:
    return SharedTileConfig(**prior.default_config(M, N, K).as_dict(), block_k=16)


def apply(sch, cfg: SharedTileConfig, block):
    tiles = prior.apply(sch, cfg, block)
    return stage_in_shared(sch, tiles, cfg.block_k, cfg.shared_scope)
