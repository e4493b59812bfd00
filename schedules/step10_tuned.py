"""Step 10 — unrolling and per-size tuning.

Idea: the last two knobs. ``unroll`` the loop over a k slice's runs, so nvcc sees every
fragment load and FMA of the slice as straight-line code (constant shared offsets, loads
of run r + 1 scheduled among the FMAs of run r); and stop using one hand-picked tile for
every size: ``python -m steps.sweep --step 10`` searches block tile, micro-tile, block_k,
stages, padding, warp shape, rasterization and unrolling on the GPU, and writes the best
config per size to ``schedules/tuned/step10.json``, which this step loads. So step 10 is
deterministic and needs no tuning at run time; a size not in the file takes the entry of
the nearest tuned size (by M*N*K).

Prediction: unrolling +0-5% (nvcc already unrolls short constant loops); tuning is worth most
where step 9's one-size-fits-all tile is furthest from the best: 512 (few blocks for 132
SMs) and 2048.

Measured (H200, 2026-11-21; sweep of 392 candidates in 89 s, then the committed ladder run;
a second sweep that also tried block_k = 64 (433 candidates, 113 s; best bk64 44.4 TFLOPS at
2048) chose the same three configs, and its ladder re-run was within 3% of every committed
entry; a third, which also tried step 8's k-major A (504 candidates, 113 s), chose them again,
24.6 / 41.1 / 45.2 TFLOPS, and wrote the committed file):
24.4 / 41.0 / 45.1 TFLOPS at 512 / 1024 / 2048, 1.14x / 1.30x / 1.18x step 9, and 174% / 111%
/ 91% of cuBLAS strict fp32 (14.1 / 36.9 / 49.5) in the same run. Tuned configs: 32x64 4x4 bk32
2 stages at 512; 32x128 8x4 bk32 4 stages at 1024; 64x64 8x4 bk32 2 stages, 128 threads at
2048. Unrolling was underestimated: it is in every winner, and over the sweep's pairs that
differ only in unroll_k it is worth a median +17% / +18% / +13% (512 / 1024 / 2048; at the
winning tiles +33% / +22% / +13%), not the predicted 0-5%: nvcc did not unroll the k-run
loop by itself. Tuning moved the 1024 tile furthest from step 9's.
What limits 2048 (ncu, one launch): 96 registers, 26% warps active, FMA pipe 70% of peak,
issue slots 81% busy, shared loads conflict-free (54 K conflicts of 67 M wavefronts). The
8x8 micro-tiles that would halve shared loads per FMA need 128-163 registers and lose
occupancy (best 8x8: 39.5 TFLOPS). 53 TFLOPS (80% of peak) would need the FMA pipe near 90%:
not reached here.

Against cuBLAS at 2048 (ncu, same GPU, 2026-11-21): its kernel runs 128 blocks of 256 threads
(a 128x256 tile, so 128 accumulators per thread), 202 registers, one block per SM, 48 KB of
shared memory; FMA pipe 79%, issue slots 88% busy, 13.5 M shared-load instructions and 40.6 M
shared wavefronts (ours: 25.6 M and 67.1 M). Its instruction mix is no leaner than ours (FFMA
89% of instructions against 88%): what it has is 8 points more issue-slot use with a third of
our occupancy, i.e. better-scheduled SASS. Tried here to close the gap, each measured at 2048
on the H200 and each slower than this step's 45 TFLOPS:
- the same shape from TVM: 256x128 with 16x8 micro-tiles (255 registers, no spills) 40.7,
  128x256 with 8x16 37.3 (ptxas fits 128 accumulators but its schedule issues less: 8x8 tiles
  at 128x128 ran with issue slots 68% busy against 80% for 8x4);
- step 8's k-major A (per-k fragments, 8x8 at 123 registers, 2 blocks/SM): 37.5-39.5, its
  4-byte copies add 60% shared wavefronts;
- B fragments of one k step instead of 4 (8x8 at 125 registers instead of 153): no gain at
  2048 (44.9), and step 7 lost 5-7% at 512/1024, so it was not kept;
- ``__launch_bounds__(threads, min_blocks)`` (TVM's ``tirx.launch_bounds_min_blocks_per_sm``
  attribute, tried from a scratch script) to force one more block per SM: the 8x4 tiles drop
  to 80 registers with 8-16 bytes of spills and run 8-12% slower; 8x8 tiles gain nothing.
So the remaining gap is instruction scheduling, which the TensorIR -> CUDA C -> ptxas route
does not control. The next thing to try is explicit register double-buffering of fragments
(a ``software_pipeline`` on the k-run loop), which TVM 0.27's InjectSoftwarePipeline rejected
when nested inside the cp.async pipeline ("pipeline annotation ... vs original order").

Run: python -m steps.step10
"""

from __future__ import annotations

import json
from pathlib import Path

from . import step9_warp_tile as prior
from .config import ConfigError, TunedConfig
from .transforms import unroll_k_slice

NUMBER = 10
NAME = "unroll + tuning"
IDEA = "unrolled k slice; best config per size from a committed sweep (schedules/tuned/step10.json)"
Config = TunedConfig
PASS_CONFIG: dict = dict(prior.PASS_CONFIG)
TUNED_PATH = Path(__file__).resolve().parent / "tuned" / "step10.json"


def tuned_configs(path: Path = TUNED_PATH) -> dict[tuple[int, int, int], TunedConfig]:
    """The committed sweep results: {(M, N, K): TunedConfig}; empty if none committed."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path.name}: not JSON ({exc})") from None
    entries = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{path.name}: expected an object with a 'configs' list")
    configs = {}
    for entry in entries:
        try:
            size = (entry["M"], entry["N"], entry["K"])
            cfg = TunedConfig.from_dict(entry["config"])
            cfg.validate(*size)
        except (KeyError, TypeError, ConfigError) as exc:
            raise ConfigError(f"{path.name}: bad entry {str(entry)[:80]}: {exc}") from None
        configs[size] = cfg
    return configs


def default_config(M: int, N: int, K: int) -> TunedConfig:
    tuned = tuned_configs()
    if not tuned:
        return TunedConfig(**prior.default_config(M, N, K).as_dict(), unroll_k=1)
    if (M, N, K) in tuned:
        return tuned[(M, N, K)]
    nearest = min(tuned, key=lambda s: abs(s[0] * s[1] * s[2] - M * N * K))
    return tuned[nearest]


def apply(sch, cfg: TunedConfig, block):
    tiles = prior.apply(sch, cfg, block)
    return unroll_k_slice(sch, tiles) if cfg.unroll_k else tiles
