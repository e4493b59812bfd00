"""Step 16 — a TMA ring and warp specialization: a producer warpgroup keeps `stages` buffers full.

Idea: step 15 loads a slice, waits, multiplies, waits, loads the next: the copy engine and the
tensor cores take turns. Give the loads a warpgroup of their own. `stages` shared buffers form
a ring with two mbarriers each: "full" (the producer's ``arrive.expect_tx`` plus the copy
engine's byte count complete it) and "empty" (each consumer thread arrives once its wgmma
on the stage are done). One producer thread waits for an empty stage and starts the next
TMA; the consumer warpgroups wait for a full stage, issue its four wgmma, and then wait only
for the previous slice's group (``wgmma.wait_group 1``) before handing that stage back, so a
slice's wgmma overlap the next slice's issue. ``setmaxnreg`` moves registers from the producer
(40 each) to the consumers (232): the 64 x 128 accumulators and addresses fit without spills.

Prediction: the loads now run stages - 1 slices ahead, so the tensor pipe waits only when
the ring is empty: 1.3-1.5x step 15, towards 250-300 TFLOP/s at 4096.

Measured (H100 80GB HBM3, 2026-11-24, hopper_probe in docs/maintaining.md, kernel time, two rounds): 209 /
251 TFLOP/s at 2048^3 / 4096^3, 1.27x / 1.25x step 15, 0.59x / 0.67-0.74x cuBLAS TF32. 3 stages
instead of 4: 178 / 212. Less than predicted: each block still multiplies a 128 x 128 tile, so
per 32-k slice a consumer reads 16 KB of B from shared memory for 2 x 64 x 128 x 32 FLOP; and
the transposed copy of B is 13% of the time at 2048. The committed run (2026-11-25, ``--save``):
19.1 (host-bound at 512: 14 us kernels) / 102.1 / 209.0 / 254.1 TFLOP/s at 512 / 1024 / 2048 /
4096, 1.26x / 1.27x step 15 at 2048 / 4096.

Run: python -m steps.step16
"""

from __future__ import annotations

from .transforms import wgmma
from .config import WgmmaPipelineConfig

NUMBER = 16
TENSOR_CORES = True
NAME = "TMA ring, warp-specialized"
IDEA = "a producer warpgroup fills a 4-stage TMA ring (full/empty mbarriers); consumers overlap wgmma groups; setmaxnreg"
PRECISION = "tf32"
ARCH = "sm_90a"
Config = WgmmaPipelineConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> WgmmaPipelineConfig:
    return WgmmaPipelineConfig()


def kernel(M: int, N: int, K: int, cfg: WgmmaPipelineConfig):
    return wgmma.computation(M, N, K, cfg)
