"""Step 6 — double buffering: prefetch the next k slice into registers while this one computes.

Idea: software-pipeline the k_outer loop. Each shared copy is split in two (``cache_read`` to
``local``): global -> registers, registers -> shared. ``software_pipeline_stage`` [0,0,0,0,1]
puts the copies one slice ahead of the math and ``software_pipeline_order`` runs them as
loads(t+1), compute(t), stores(t+1): the global loads of the next slice are in flight during
this slice's FMAs. The registers are the second buffer; shared memory keeps one.

Prediction: in step 5 a warp waits on its global loads at every slice, covered only by other
warps. Overlapping them with the FMAs should help most where there are few warps per SM to
hide latency, i.e. small problems: +10-25% at 512-1024, +5% at 2048.

Measured (H200, 2026-11-21): at the same tiles as step 5 (32x64 at 512, 64x64 at 1024 and
2048, 4x4 micro-tiles) 17.0 / 31.7 / 32.1 TFLOPS against 13.9 / 27.4 / 30.7: +22% / +16% / +5%,
the predicted shape. The README table has the committed run. Two schedules
that double the *shared* buffers instead lost: the plain ``[0, 0, 1]`` pipeline (copy,
copy, compute) gained only 0-2%, since its copies are synchronous and nothing overlaps; and
doubling both shared and register buffers lost 15-30%, because the two register versions are
indexed by ``k % 2`` at run time and go to local memory (176-byte stack frame).

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step6
"""

from . import step4_cooperative_fetch as step4
from . import step5_registers as prior
from .config import CooperativeFetchConfig
from .transforms.cuda_core import prefetch_pipeline

NUMBER = 6
NAME = "double buffering"
IDEA = "software pipeline on k_outer: global->register prefetch of slice t+1 during compute of t"
Config = CooperativeFetchConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> CooperativeFetchConfig:
    # 4x4 micro-tiles in 64x64 blocks (32x64 at 512) pipeline best at every size measured;
    # step 5's 128x128 8x8 tile at 2048 gains less here (30.8 against 32.1 TFLOPS).
    return step4.default_config(M, N, K)


def apply(sch, cfg: CooperativeFetchConfig, block):
    tiles = prior.apply(sch, cfg, block)
    return prefetch_pipeline(sch, tiles, *cfg.thread_axes, cfg.vector)
