"""Step 17 — wide tiles: 128 x 256 per block, wgmma m64n256k8.

Idea: step 16's consumers each multiply 64 x 128 per wgmma. wgmma's n runs to 256: with a
128 x 256 block tile each consumer's instruction does twice the work for the same A operand,
and per FLOP the block loads a third less from global memory and reads a quarter less from
shared memory ((128 + 256) / (128 x 256) against (128 + 128) / (128 x 128)). Accumulators
double to 128 floats per consumer thread, which setmaxnreg's 232 holds. A config change
(block_n 256), 48 KB per stage, 4 stages = 192 KB.

Prediction: 10-20% over step 16 at 2048 and 4096; slower at 512 and 1024, where 128 x 256
tiles give 8 and 32 blocks for 132 SMs (expected regression, marked).

Measured (H100 80GB HBM3, 2026-11-24, hopper_probe in docs/maintaining.md, kernel time, two rounds): 226 /
287 TFLOP/s at 2048^3 / 4096^3, 1.08x / 1.14x step 16, 0.64x / 0.76-0.84x cuBLAS TF32. At 2048
the transposed copy of B (13 us of 76) is now the largest single cost: step 18. The committed
run (2026-11-25, ``--save``): 11.7 / 62.0 / 229.4 / 282.9 TFLOP/s at 512 / 1024 / 2048 / 4096,
1.10x / 1.13x step 16 at 2048 / 4096, 0.61x at 512 and 1024 as predicted (marked).

No code of its own: the rung is step 16's kernel with a config, which is its idea (a tile of
128 x 256 is the widest wgmma; the pieces do not change).

fp16 and bf16: wgmma m64n256k16. Prediction (made before the first 16-bit run, written down
after it): 1.1-1.15x step 16, ~500-570 TFLOP/s at 4096^3. Measured (H100, 2026-11-27,

git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/sixteen_bit_hopper_probe.json): 496 / 624 bf16 and 489 / 612 fp16 at 4096^3 / 8192^3, 1.16x / 1.19x and 1.15x / 1.21x
step 16, 0.74x / 0.80x and 0.72x / 0.85x cuBLAS in the dtype.

Run: python -m steps.step17
"""

from __future__ import annotations

from .config import WgmmaPipelineConfig
from .step16_warp_specialized import kernel as step16_kernel

NUMBER = 17
TENSOR_CORES = True
NAME = "128 x 256 tiles"
IDEA = "block_n 256: wgmma m64n256k8, each consumer 64 x 256; a third less traffic per FLOP"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
Config = WgmmaPipelineConfig
PASS_CONFIG: dict = {}
PIECES = ("default_config",)  # step 16's kernel; the idea is the tile
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024),
    "128 x 256 tiles give 8 (512) and 32 (1024) blocks for 132 SMs, against step 16's 16 and 64",
)
EXPECTED_REGRESSION_BF16 = EXPECTED_REGRESSION_FP16 = EXPECTED_REGRESSION


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaPipelineConfig:
    return WgmmaPipelineConfig(block_n=256)


def kernel(M: int, N: int, K: int, cfg: WgmmaPipelineConfig, dtype: str = "fp32"):
    return step16_kernel(M, N, K, cfg, dtype)
