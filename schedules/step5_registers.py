"""Step 5 — registers: ``cache_write`` C to ``local`` and shared→local fragments of A and B.

Idea: make the register tile explicit. ``cache_write(C, "local")`` + ``reverse_compute_at``
gives each thread a local accumulator array, written back to global once, as float4s. The
inner k loop is split into runs of 4; per run two ``cache_read(..., "local")`` fragments copy
a thread_m x 4 piece of A and a 4 x thread_n piece of B from shared into registers, both as
float4 loads (A's rows are contiguous along k), and the thread does the outer products from
registers: the outer-product micro-kernel.

Prediction: in step 4 nvcc already keeps the micro-tile in registers, but A is read from
shared one scalar at a time, a 2-way bank conflict each (a warp spans two threadIdx.y rows
64 floats apart). Float4 fragments cut the shared-memory instructions for A by 4x: expect a
large gain where shared memory is the limit, 20-40% at 2048.

Measured (H200, 2026-11-21): half right. At 4x4 micro-tiles nothing moved (64x64x16: 30.4
TFLOPS in step 4, 30.7 here), so shared bandwidth was not what bounded those kernels. At 8x8
micro-tiles (64 accumulators, where nvcc's implicit promotion in step 4 does worse) the same
128x128x16 tile went from 26.3 in step 4 to 31.4 here, +19%, and is the best step-5 config at
2048; 4x4 tiles stay best at 512 (32x64) and 1024 (64x64), +1-5% over step 4.

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step5
"""


from . import step4_cooperative_fetch as prior
from .config import CooperativeFetchConfig
from .transforms.cuda_core import accumulate_in_registers

NUMBER = 5
NAME = "registers"
IDEA = "cache_write C to local + shared->local fragments of A and B (outer-product micro-kernel)"
Config = CooperativeFetchConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> CooperativeFetchConfig:
    if M * N >= 2048 * 2048:  # >= 256 blocks of 128x128: enough to fill 132 SMs
        return CooperativeFetchConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=16)
    return prior.default_config(M, N, K)


def apply(sch, cfg: CooperativeFetchConfig, block):
    tiles = prior.apply(sch, cfg, block)
    return accumulate_in_registers(sch, tiles, cfg.vector)
