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
24.4 / 41.0 / 45.1 TFLOPS at 512 / 1024 / 2048, 1.14x / 1.30x / 1.18x step 9 (the cuBLAS
column of that run timed ``cupy.matmul``, host-bound at 512; see the H100 line). Tuned configs: 32x64 4x4 bk32
2 stages at 512; 32x128 8x4 bk32 4 stages at 1024; 64x64 8x4 bk32 2 stages, 128 threads at
2048. Unrolling was underestimated: it is in every winner, and over the sweep's pairs that
differ only in unroll_k it is worth a median +17% / +18% / +13% (512 / 1024 / 2048; at the
winning tiles +33% / +22% / +13%), not the predicted 0-5%: nvcc did not unroll the k-run
loop by itself. Tuning moved the 1024 tile furthest from step 9's.
On an H100 80GB HBM3 (2026-11-22, the same tuned configs, kernel time: cuBLAS replayed from a
CUDA graph, every number host-guarded, steps/measure/harness.py): 24.1 / 41.1 / 45.0 TFLOPS, 113% / 107%
/ 90% of cuBLAS strict fp32 (21.3 / 38.6 / 50.3 TFLOPS), 2.1x / 2.3x / 2.4x TVM's default dlight
schedule and 1.8x / 1.7x / 1.6x MetaSchedule after 128 trials, in the same run. (The earlier
"205% of cuBLAS at 512" timed cuBLAS through ``cupy.matmul``, whose host time per call exceeds
the kernels': 11.8 TFLOPS where the kernels run at 21.3.)
What limits 2048 (ncu, one launch, H200; the H100 counts match): 96 registers, 5 blocks of 4
warps per SM, FMA pipe 70% busy, issue slots 81%, and the shared-memory pipe 69%: an 8x4
micro-tile's 12 float4 loads per 128 FMAs cost ~31 wavefronts (67 M in all, conflict-free),
as many shared-pipe cycles as FMA cycles, so the two pipes limit together. Warp stalls per
issued instruction, against cuBLAS's kernel: dispatch 0.63 vs 0.14, short scoreboard (shared
loads) 0.52 vs 0.15, barrier 0.49 vs 0.06. 53 TFLOPS is 80% of peak at the 1.95 GHz the SMs
ran at and would need the FMA pipe near 85% busy; cuBLAS reaches 79% and 49.5-50.0 TFLOPS.

cuBLAS's kernel is CUTLASS's ``cutlass_80_simt_sgemm_256x128_8x4_nn_align1``: here a 128x256
tile (its M is our N), block_k 8, 4 stages, 256 threads, so 128 accumulators per thread, with
202 registers, one block per SM, FMA pipe 79%, issue slots 88%, 25 M shared-load wavefronts
against our 67 M. Its instruction mix is no leaner than ours (FFMA 89% of instructions against
88%). Tried here to close the gap, each measured at 2048 (H200) and each slower than 45.0:
- the same shape from TVM: 256x128 with 16x8 micro-tiles (255 registers, no spills) 40.7,
  128x256 with 8x16 37.3; with B fragments per k step 28-37.9; 8x8 tiles 28-39.9 (issue slots
  63-68% busy: one block of 8 warps per SM);
- CUTLASS's own arrangement: 256x128x8, 4 stages, step 8's k-major A so that both fragments
  load per k step (165-182 registers, like cuBLAS's 202): 33.9. Its 4-byte A copies cost 44 M
  shared wavefronts. A rotation of each thread's float4 chunks by k row
  (``transform_layout(..., assume_injective_transform=True)``: TVM cannot prove the modulo
  map bijective) makes those copies bank-conflict-free, yet leaves 36.5 M and ran 32.7: the
  scalar copies cost about a wavefront per two lanes whatever the banks. 128x128 8x8 in that
  layout: 37.8, at 127 registers and two blocks per SM;
- step 8's k-major A for 8x8 tiles (123 registers, 2 blocks/SM): 37.5-39.5;
- ``__launch_bounds__(threads, min_blocks)`` (TVM's ``tirx.launch_bounds_min_blocks_per_sm``,
  from a scratch script): 8x4 tiles drop to 80 registers, spill 8-16 bytes, run 8-12% slower;
- other warp shapes and A padding at the winning tile (ncu: the same 67.2 M wavefronts for a
  2x16 or a padded 4x8 warp): 40.7-44.7;
- register double-buffering of the fragments, a ``software_pipeline`` [0, 0, 1] on the k-run
  loop inside the cp.async pipeline. It builds once the outer loop's annotation lists the five
  statements the inner pipeline leaves in its body ([0, 0, S-1, S-1, S-1]; ``sch.annotate``
  keeps an existing annotation, so ``unannotate`` it first), but nvcc emits identical SASS
  (cuobjdump) for 8x4 and 8x8 tiles: it already hoists the next run's loads in the unrolled
  slice. Not kept.
So the rest of the gap is how the SASS is scheduled: dispatch stalls, waits on shared loads and
barriers, which cuBLAS avoids with a third of our occupancy. The TensorIR -> CUDA C -> NVRTC
route does not control that. This is measured, not a lowered target: step 10 stays at 0.90x cuBLAS at
2048 (kernel time, H100, 2026-11-22).

Long K: where K >= 8192 the build adds a second accumulator per output, promoted every 512
k (schedules/lowering/long_k.py, as for step 1); shorter K builds the same CUDA as before.

Run: python -m steps.step10
"""

from __future__ import annotations

import json
from pathlib import Path

from . import step9_warp_tile as prior
from .config import ConfigError, TunedConfig
from .transforms.cuda_core import unroll_k_slice

NUMBER = 10
NAME = "unroll + tuning"
IDEA = "unrolled k slice; best config per size from a committed sweep (schedules/tuned/step10.json)"
Config = TunedConfig
PASS_CONFIG: dict = dict(prior.PASS_CONFIG)
TUNED_PATH = Path(__file__).resolve().parent / "tuned" / "step10.json"


def tuned_configs(path: Path = TUNED_PATH, config_class: type = TunedConfig) -> dict[tuple[int, int, int], TunedConfig]:
    """The committed sweep results: {(M, N, K): config}; empty if none committed. Step 11
    reads its own file with its own config class."""
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
            cfg = config_class.from_dict(entry["config"])
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
