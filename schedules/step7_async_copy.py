"""Step 7 — async copy: cp.async global -> shared in a multi-stage pipeline.

Idea: step 6 overlapped the next slice's global loads with this slice's FMAs by routing them
through registers. Ampere and Hopper can copy global -> shared without registers:
``cp.async`` (16 bytes per thread), committed in groups and waited for with
``cp.async.wait_group``. Step 7 starts again from step 5 (one shared buffer, no staging) and
pipelines the k_outer loop with ``stages`` shared buffers: ``software_pipeline_stage``
[0, 0, stages-1] issues the copies of slice t + stages - 1 while slice t is multiplied, and
``software_pipeline_async_stages`` [0] with pass config ``tirx.use_async_copy`` makes them
cp.async, one commit group per slice. The copies no longer need registers, so each round of
a cooperative copy is warp-contiguous (512 bytes per instruction) again.

Two TVM details: StorageRewrite retypes a shared buffer whose every access is a float4 as a
``float4`` array, which InjectPTXAsyncCopy then rejects ("lanes" check), so steps 7+ run with
``tirx.disable_storage_rewrite``; and 3 stages of a 128 x 128 x 16 tile are exactly 48 KB, so
larger pipelines go to dynamic shared memory (``shared.dyn``, chosen by the config).

Prediction: latency hiding no longer costs registers or instructions (step 6 spent 8-16
registers and two copy loops per slice on it), and 3 stages cover more latency than one
prefetched slice. Small problems have few warps per SM, so they gain most: +5-15% at 512 and
1024; at 2048 step 6 already hides latency with many warps, and the bigger 128 x 128 tiles
that its register budget could not afford become possible: +10-20%.

Measured (H200, 2026-11-21, committed ladder run; tiles from ``python -m steps.sweep --step 7``:
32x64 4x4 bk16 4 stages at 512, 32x64 8x4 bk16 4 stages at 1024, 64x128 8x4 bk32 2 stages at
2048): 22.2 / 34.5 / 39.0 TFLOPS, 1.31x / 1.08x / 1.21x step 6 (H100, 2026-11-22, kernel time:
21.6 / 34.4 / 38.8 TFLOPS, 102% / 89% / 77% of cuBLAS strict fp32 in the same run).
Right in shape, bigger than predicted at 512. Not the predicted way at 2048: the 128 x 128 8x8
tile needs 163 registers with cp.async (one block of 8 warps per SM, ncu: 12% warps active)
and ran at 31 TFLOPS; the sweep's winners are 8x4 micro-tiles with 91-97 registers and 2-3
blocks per SM. Deeper pipelines help the small sizes (4 stages), 2 stages of bk32 suffice at
2048.

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step7
"""

from . import step5_registers as step5
from .config import AsyncCopyConfig
from .transforms.cuda_core import async_copy_pipeline

NUMBER = 7
NAME = "async copy"
IDEA = "cp.async global->shared, multi-stage software pipeline with commit/wait groups"
Config = AsyncCopyConfig
PASS_CONFIG: dict = {"tirx.use_async_copy": True, "tirx.disable_storage_rewrite": True}


def default_config(M: int, N: int, K: int) -> AsyncCopyConfig:
    # The best of `python -m steps.sweep --step 7` (H200, 2026-11-21) at each size: 22.3,
    # 34.5 and 38.9 TFLOPS. Steps 8 and 9 keep these tiles, so their gains are their ideas'.
    if M * N <= 512 * 512:
        return AsyncCopyConfig(block_m=32, block_n=64, thread_m=4, thread_n=4, block_k=16, stages=4)
    if M * N <= 1024 * 1024:
        return AsyncCopyConfig(block_m=32, block_n=64, thread_m=8, thread_n=4, block_k=16, stages=4)
    return AsyncCopyConfig(block_m=64, block_n=128, thread_m=8, thread_n=4, block_k=32, stages=2)


def apply(sch, cfg: AsyncCopyConfig, block):
    # Built on step 5, not step 6: the registers that step 6 staged through are what
    # cp.async makes unnecessary.
    tiles = step5.apply(sch, cfg, block)
    return async_copy_pipeline(sch, tiles, cfg.stages)
