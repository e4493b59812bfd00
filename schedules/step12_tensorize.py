"""Step 12 — tensor cores: blockize a 16 x 16 x 8 tile and tensorize it onto mma.sync TF32.

Idea: steps 1-11 do every multiply-add on the CUDA cores, one FFMA per thread per element
pair; the H100's FFMA ceiling is about 66 TFLOP/s. Its tensor cores run ``mma.sync.m16n8k8``
TF32 at about 322 (../shared/notes/tensor-cores.md): a warp multiplies a 16 x 8 by an 8 x 8
tile in one instruction. TensorIR reaches them with two primitives. ``blockize`` turns the
innermost 16 x 16 x 8 tile of the matmul into one block; ``tensorize`` replaces that block
with an intrinsic whose description has the same loops (schedules/transforms/tensor_intrin.py registers
the project's own: TVM ships none for TF32). The loop nest around it is a warp-level version
of the earlier steps: a 128 x 128 block tile, four warps of 64 x 64, A and B staged through
shared memory 32 k at a time by all threads, and per 8 k each warp loads its fragments
(``ldmatrix`` for A, 32-bit loads for B) and issues 4 x 4 tile products, 32 mma.
C stays in registers, then goes through shared memory to be written as float4 rows.

Reduced precision, said so: the tensor cores read TF32, a 10-bit mantissa (fp32 has 23), so
the result is compared with float64 against its own tolerance (``TF32_TOLERANCE``, 5e-3;
expected ~3e-4 like cuBLAS TF32) and with cuBLAS TF32, never with strict fp32.

Prediction: no pipelining yet (one shared buffer, a barrier each slice), so the warps stall on
every global load, as step 3 did: well below the mma ceiling, maybe 60-100 TFLOP/s at 2048,
still 1.3-2x step 11 (fp32 on CUDA cores, a different precision: the x prior is shown, not
claimed as a like-for-like gain).

Measured (H100 80GB HBM3, 2026-11-22, device probe, kernel time): 11.0 / 28.7 / 59.7 TFLOP/s at
512 / 1024 / 2048, relative error 6.9e-4 against float64 (cuBLAS TF32: 2.6e-4; it rounds the
operands to TF32, the tensor core here reads their top bits, i.e. truncates). At 2048 the low
end of the prediction, 1.3x step 11; at 512 and 1024 slower than step 11 (expected regression,
marked): without a pipeline each 32-k slice waits for its global loads behind a barrier, and
at those sizes there are too few warps per SM to hide it, as step 3 found on CUDA cores.
The committed ladder run (same day, 512-4096): 11.1 / 28.9 / 59.2 / 62.0 TFLOP/s, 0.46x /
0.71x / 1.32x / 1.34x step 11, 17% of cuBLAS TF32 at 2048 and 4096.

Run: python -m steps.step12
"""

from __future__ import annotations

from .transforms import tensor_core, tensor_intrin
from .config import TensorCoreConfig

NUMBER = 12
TENSOR_CORES = True
NAME = "tensor cores (TF32)"
IDEA = "blockize 16x16x8 tiles, tensorize onto mma.sync.m16n8k8 TF32 (ldmatrix A fragments)"
PRECISION = "tf32"
Config = TensorCoreConfig
PASS_CONFIG: dict = {"tirx.disable_storage_rewrite": True}
# Slower than step 11 (fp32 on CUDA cores) where it is: see the docstring.
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024),
    "no pipeline yet: every slice stalls on its global loads, and small sizes have too few warps "
    "to hide it (step 13 adds cp.async stages)",
)


def default_config(M: int, N: int, K: int) -> TensorCoreConfig:
    if M * N <= 1024 * 1024:
        # 128 x 128 tiles leave most of 132 SMs idle at 512 and 1024: 64 x 64 blocks of 4 warps.
        return TensorCoreConfig(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32)
    return TensorCoreConfig()


def apply(sch, cfg: TensorCoreConfig, block):
    tiles = tensor_core.tile_warps(sch, block, cfg)
    tiles = tensor_core.stage_operands(sch, tiles, cfg)
    scope = cfg.shared_scope
    tiles = tensor_core.load_fragments(sch, tiles, cfg, tensor_intrin.LOAD_A[scope], tensor_intrin.LOAD_B[scope])
    tiles = tensor_core.accumulate_in_fragments(sch, tiles, cfg)
    return tensor_core.tensorize_tiles(sch, tiles, cfg, tensor_intrin.MMA)
