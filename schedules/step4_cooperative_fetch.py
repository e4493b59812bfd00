"""Step 4 — cooperative fetch: fuse/split/bind the shared copies over the block's threads.

Idea: fuse each copy's two loops and split the result as [threadIdx.y, threadIdx.x, rounds,
vector] so the block's threads copy the tile together, each moving float4s, consecutive
threads reading consecutive runs of global memory (coalesced).

Prediction: the copy shrinks by the thread count (each thread moves 1/threads of the tile),
so step 3's penalty disappears and shared-memory reuse pays: every A/B element is read from
global once per block instead of once per thread. Expect well past step 2, ≥ 15 TFLOPS at
2048. Tiles: 4x4 micro-tiles in 64x64 blocks (32x64 at 512, for more blocks) beat 8x8 in
128x128 here: more blocks per SM and fewer bank conflicts on the scalar A reads.

Measured (committed runs: H200 2026-11-21 / H100 2026-11-22): 13.5 / 26.0 / 30.8 and 13.4 / 25.8
/ 30.7 TFLOPS at 512 / 1024 / 2048, 10-32x step 3 and 1.7-4.4x step 2. 128x128x16 8x8 tiles reached only 11.4 / 26.3 at 1024 / 2048 in a probe. An
earlier probe split the copy as [rounds, ty, tx, vector] instead: the same speed wherever each
thread copies one float4 (as with these tiles), up to 15% faster on 8x8 tiles where it copies
more; the contiguous run is kept because step 6 needs it to stage the copy in registers.

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step4
"""

from . import step3_shared as prior
from .config import CooperativeFetchConfig
from .transforms.cuda_core import cooperative_fetch

NUMBER = 4
NAME = "cooperative fetch"
IDEA = "fuse/split/bind the shared copies across the block's threads, float4 loads"
Config = CooperativeFetchConfig
PASS_CONFIG: dict = {}


def default_config(M: int, N: int, K: int) -> CooperativeFetchConfig:
    if M * N <= 512 * 512:
        return CooperativeFetchConfig(block_m=32, block_n=64, thread_m=4, thread_n=4, block_k=16)
    return CooperativeFetchConfig(block_m=64, block_n=64, thread_m=4, thread_n=4, block_k=16)


def apply(sch, cfg: CooperativeFetchConfig, block):
    tiles = prior.apply(sch, cfg, block)
    for copy in tiles.shared_copies:
        cooperative_fetch(sch, copy, *cfg.thread_axes, cfg.vector, cfg.copy_rounds_outer)
    return tiles
