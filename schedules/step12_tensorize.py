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

16-bit form (fp16, bf16; issue 47): the same idea on the 16-bit instruction. Each 16 x 16 x 16
tile is blockized and tensorized onto two ``mma.sync.aligned.m16n8k16`` (``.f32.f16.f16.f32`` or
``.f32.bf16.bf16.f32``: fp32 accumulation), a warp multiplying 16 x 16 by 16 x 8 per instruction,
twice TF32's k per mma. Both fragments are one ``ldmatrix.x4`` each: A's row-major tile as it
is, and B, stored [K, N] row-major (n contiguous), with ``ldmatrix.trans``, which hands each
lane the two k-consecutive halves an m16n8k16 B register holds (TF32 could not: ``.trans``
swaps 16-bit elements, not fp32 ones). The intrinsics are the project's own for both dtypes
(schedules/transforms/tensor_intrin.py: TVM ships fp16 ones for its "warp" scope, none for
bf16). The base computation sums in fp32 (block C, into C_acc) and rounds in block C_store;
C_store is reverse-inlined into the C tile's write-back, so each fp32 sum is rounded to the
dtype as it leaves shared memory for global, a 16-byte store of 8 values. Same tiles as TF32
(block_k 32 is two k16 steps), copies of 8 elements (16 bytes). Error: the store's rounding,
relative ~2^-9 (bf16) / ~2^-12 (fp16) of the float64 product of the 16-bit inputs.
Prediction (written before measuring): still no pipeline, so it stays bound by the global
loads each slice waits on, but it moves half the bytes per flop and each mma does twice the
work: 1.5-2x the TF32 form at 4096 (62 -> 90-120 TFLOP/s), far below cuBLAS's ~700.
Measured (H100 80GB HBM3, 2026-11-27, one device probe, CUDA events around the kernel, the TF32
form in the same run): 52.7 / 118.4 / 123.9 TFLOP/s bf16 at 1024 / 2048 / 4096 (fp16 within 1%:
52.3 / 119.1 / 124.0), against TF32's 28.4 / 58.9 / 63.3: 1.85-2.0x, the top of the prediction
and at 4096 a little above it; 0.16-0.18x cuBLAS bf16/fp16 (torch.mm, 659-781 at 2048-4096).
Error against the float64 product of the 16-bit inputs 1.66e-3 (bf16) / 2.07e-4 (fp16) at every
size and at 1000 x 1500 x 700, 33 x 65 x 129, 257 x 130 x 95, 1 x 4096 x 4096: equal to rounding
that exact product to the dtype, and to cuBLAS's error on the same inputs.

Run: python -m steps.step12
"""

from __future__ import annotations

from dataclasses import replace

from .transforms import tensor_core, tensor_intrin
from .config import TensorCoreConfig

NUMBER = 12
TENSOR_CORES = True
NAME = "tensor cores (TF32)"
IDEA = "blockize 16x16x8 tiles, tensorize onto mma.sync.m16n8k8 TF32 (ldmatrix A fragments)"
PRECISION = "tf32"
# fp16 and bf16 inputs: m16n8k16 with fp32 accumulation, C stored in the dtype (see the docstring).
DTYPES = ("fp32", "fp16", "bf16")
Config = TensorCoreConfig
PASS_CONFIG: dict = {"tirx.disable_storage_rewrite": True}
# Slower than step 11 (fp32 on CUDA cores) where it is: see the docstring.
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024),
    "no pipeline yet: every slice stalls on its global loads, and small sizes have too few warps "
    "to hide it (step 13 adds cp.async stages)",
)


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> TensorCoreConfig:
    if M * N <= 1024 * 1024:
        # 128 x 128 tiles leave most of 132 SMs idle at 512 and 1024: 64 x 64 blocks of 4 warps.
        cfg = TensorCoreConfig(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32)
    else:
        cfg = TensorCoreConfig()
    return cfg if dtype == "fp32" else sixteen_bit(cfg, dtype)


def sixteen_bit(cfg, dtype: str):
    """The same tiles for fp16 / bf16 inputs: block_k 32 is two k16 steps, and a copy moves 16
    bytes (8 elements), as fp32's float4 did."""
    return replace(cfg, vector=8, dtype=dtype)


def intrinsics(cfg) -> tuple[str, str, str]:
    """The fragment loads (A, B) and the mma for the config's dtype and shared scope."""
    scope = cfg.shared_scope
    if cfg.dtype == "fp32":
        return tensor_intrin.LOAD_A[scope], tensor_intrin.LOAD_B[scope], tensor_intrin.MMA
    return (tensor_intrin.LOAD16_A[cfg.dtype, scope], tensor_intrin.LOAD16_B[cfg.dtype, scope],
            tensor_intrin.MMA16[cfg.dtype])


def apply(sch, cfg: TensorCoreConfig, block):
    load_a, load_b, mma = intrinsics(cfg)
    tiles = tensor_core.tile_warps(sch, block, cfg)
    tiles = tensor_core.stage_operands(sch, tiles, cfg)
    tiles = tensor_core.load_fragments(sch, tiles, cfg, load_a, load_b)
    tiles = tensor_core.accumulate_in_fragments(sch, tiles, cfg)
    tiles = tensor_core.tensorize_tiles(sch, tiles, cfg, mma)
    if cfg.sixteen_bit:
        tiles = tensor_core.round_to_dtype(sch, tiles)
    return tiles
