"""Step 11 — split-K with rfactor, and a config for every shape.

Idea: when M x N gives too few output tiles to fill the SMs (132 on an H100), split the
reduction over K too. TensorIR's ``rfactor`` does it as a schedule: K is split into
``split_k`` chunks, and the chunk loop becomes a spatial axis of a new block, ``C_rf``, that
writes partial sums to a global buffer [split_k, M, N]; each chunk is a slice of the grid
(blockIdx.z), tiled exactly as step 10 tiles the whole matmul (``split_k_rfactor`` in
schedules/transforms/cuda_core.py). A second kernel sums the partials into C (``reduce_partials``).
So a 256 x 256 output with K = 16384, 16 tiles of 64 x 64 on 132 SMs, becomes 16 x 8 = 128
blocks of a 2048-long chunk each, plus a reduction over 2 MB of partials. K pads to whole
``split_k x block_k`` (schedules/transforms/padding.py), so any K splits; ``split_k`` 1 is step 10's IR
exactly (no rfactor, no second kernel), so the squares step 10 fills lose nothing.

The split, and the rest of the config, now come from the shape: a tuned entry of
``schedules/tuned/step11.json`` where a sweep measured that exact shape, else the shape rule
(schedules/shape_rule.py: a cost model of padding waste, wave quantisation over the SMs and
split-K's overhead, over a small menu of tiles), instead of step 10's "nearest M*N*K".
``python -m steps.sweep --step 11 --shapes ...`` measures the rule's neighbourhood per shape.

Prediction (written before any device run; the model's numbers, schedules/shape_rule.py):
256x256x16384: step 10 takes 1024^3's 32x128 tile, 16 blocks for 132 SMs, ~6 TFLOPS; split 8
at 64x64 should reach 30-40 TFLOPS, 5-7x. 2048x64x2048 (and 64x2048x2048): step 10 takes
512^3's 32x64 tile, 64 blocks, ~14 TFLOPS; split 4 at 64x64, 128 blocks, 25-30 TFLOPS, ~2x.
512^3: split 1 and step 10's own config (tuned entry), the same speed within noise (±3%);
the rule would also pick split 1 there (a second launch costs ~2 us of an 11 us kernel).
768^3 (144 tiles of 64x64: one more than a wave): split 3, +15-25%.

Measured (H100 80GB HBM3, 2026-11-22, kernel time). The sweep (43 shapes of bench/shapes.toml,
step 10's config plus up to 11 of the rule's neighbours each, 294 s) wrote step11.json; the
rule's own pick reached a median 96% of the best candidate (71-100%; >= 90% on 33 of 43).
Then ``python -m steps.bench --save`` against cuBLAS strict fp32 in the same run:
- 256x256x16384: 35.5 TFLOPS with split 16 (32x128 tiles), 0.89x cuBLAS; the prediction's
  30-40 held. 2048x64x2048: 27.6 (split 8), 1.15x cuBLAS; 64x2048x2048: 27.8, 1.00x; the
  predicted 25-30 held, with a deeper split than the model's 4. 768^3: 27.5 (split 3), 1.00x.
- 512^3 / 1024^3 / 2048^3: 24.3 / 41.3 / 45.3, split 1, step 10's numbers within noise
  (24.1 / 41.1 / 45.0), as predicted.
- Over the set: geometric mean 0.99x cuBLAS; by class square 1.01x, tall-skinny 1.17x,
  short-wide 1.20x, k-heavy 0.91x, k-light 1.16x, odd 0.72x, degenerate 0.86x. Below 0.9x: the
  odd sizes (2047^3 0.61x: K = 2047 breaks float4 alignment, so every copy is a 4-byte
  cp.async, schedules/transforms/padding.py), 4096^3 and 2048^3 (step 10's FFMA ceiling, 0.89-0.90x),
  and the matrix-vector shapes (0.82-0.88x, memory-bound for both).

Staged padding (``stage_pads`` 1; schedules/transforms/padding.py, ``stage_padding``): the odd sizes are
slow because inlined padding narrows every copy to the alignment of N and K. At 2047^3 the
kernel's SASS (nvcc 13, sm_90) has 64 4-byte LDGSTS, 64 STS (zero-fills), 384 LDS and 485
integer ops, against 16 LDGSTS, no STS, 198 LDS and 107 integer ops at 2048^3. With staging,
an operand whose rows are misaligned is first copied by a small kernel of its own into a
padded, zero-filled, aligned global buffer, and the matmul is the kernel of the aligned padded
problem (the same cp.async and fragment loads as 2048^3's, character for character; SASS: 16
LDGSTS, 198 LDS, 177 integer ops, the extra ones in C's predicated scalar stores). C keeps its
predicated write-back, as wide as N allows (a float at a time for odd N). The shape rule weighs
the copies (a launch each, plus reading the operand and writing its copy) against the narrowed
kernel's 0.68x rate, so it stages big misaligned shapes and not tiny ones (33x65x129).
Prediction (the model's, not yet measured): 2047^3 runs at 2048^3's kernel plus ~7% for the
copies, ~41-42 TFLOPS against 30.6 (1.35-1.4x), and 997x1009x1013, 1531x769x3067,
4093x4099x127, 2053x3001x1021 gain 1.25-1.4x; 513x257x1025 (split 3, 23 us) about nothing.
Measured (H100, 2026-11-23): the sweep of the 10 misaligned shapes (20 candidates each, both
stage_pads; ``--shapes ... --write``) picked staging for 7 of them: 2047^3 40.9 TFLOPS (was 30.6:
1.34x, as predicted), 997x1009x1013 31.8 (26.2: 1.21x), 1531x769x3067 31.9 (26.6: 1.20x, split
8), 4093x4099x127 34.6 (26.8: 1.29x), 2053x3001x1021 40.0 (29.7: 1.35x), 8192x1x1024 and
2048x2048x1; 513x257x1025 and 33x65x129 stay inlined (as predicted), and so does 4096x1x4096.
In the shape benchmark of the same session (``python -m steps.bench --save``): the odd class
0.72x -> 0.85x cuBLAS strict fp32, the whole set's geometric mean 0.99x -> 1.02x. Still below
0.9x: 513x257x1025 0.74x (22 us, split 3: launches and a partial wave), 1531x769x3067 0.77x and
997x1009x1013 0.79x (padding to whole tiles adds 9% and 6% of work, then the copies), 2047^3
0.82x (2048^3's own 0.90x, then the copies: 41.2 against 2048^3's 45.0).

Occupancy in the rule (2026-11-23). The model counted one block of 4 warps per SM as a full
SM, so it kept splits shallow: at 128x4096x4096 it predicted 45.6 TFLOPS for split 1 (128
blocks), where measured neighbours ran 37-40, and the same 64x64 tile ran 37.2 with split 2 and
40.0 with split 4 (2 and 4 blocks per SM) despite twice the partials. The rule now scales an
SM's rate by (w / (w + 1.5)) / (20 / 21.5) for w resident warps (20: step 10's 2048^3 config),
refitted with the micro-tile efficiencies to ~300 measured configs on 17 shapes (median error
of the model 0.126 -> 0.102 in log TFLOPS; its favourite among the measured configs of a shape
0.950 -> 0.970 of the best, geometric mean), and it may split K up to 64. Prediction: deeper
splits on K-heavy and skinny shapes, up to 1.2-1.4x at 64x64x65536 (the model: 23.5 TFLOPS
for 32x64 tiles x split 64, against 17.0), a few percent elsewhere, the squares unchanged.
Measured (H100, 2026-11-23; a re-sweep of all 43 shapes, 18 candidates each, then the shape
benchmark): 18 table entries changed, 512^3-4096^3 kept theirs. 64x64x65536 17.0 -> 21.8 (split
64, 1.12x cuBLAS), 384x384x12288 33.1 -> 38.0 (split 32, 1.03x), 128x128x32768 29.9 -> 32.9,
8192x1x1024 1.10 -> 1.25, 8192x32x2048 +10%, 512x512x8192 38.4 -> 39.5 (split 8, 0.87x); one
entry measured slower in the benchmark than in the sweep that chose it (64x1024x8192, 34.2 ->
32.8, 0.98x cuBLAS: one sample's winner). Geometric mean 1.02x -> 1.04x; 12 shapes below 0.9x
(14 before; docs/any-shape.md lists them). The rule's own pick reached a median 98% of the best
candidate, >= 90% on 37 of 43 shapes (32 before); the worst, 60%, at 1x8192x1024, host-bound.

Matrix-vector mode (``k_threads`` > 1, 2026-11-23). At N = 1 the tiled path pads N to an
8-wide tile, splits K over blocks and sums the partials in a second kernel (or stages B):
0.72-0.83x cuBLAS at 8192x1x1024 and 4096x1x4096. Here instead each row's K is split over the
threads of one block: ``rfactor`` on the thread loop gives each thread a partial sum in a
register, and the sum over the threads, bound to threadIdx.x, is lowered by TVM to warp
shuffles (schedules/transforms/cuda_core.py, ``split_k_over_threads``); float4 loads, 8 passes unrolled.
One kernel, no partial buffer, and at first no padding (the rule took it only where the block
divided the shape; K now pads, below). Prediction, from a probe of 36 such schedules (H100,
same day, kernel time): 1.35 TFLOPS at 4096x1x4096 (2 rows x 128 threads) and 2.40 at
8192x1x1024 (8 x 32), against the tiled path's 1.05 and 1.23. Measured in the shape benchmark after a sweep of the two shapes: 1.35
(1.14x cuBLAS) and 2.38 (1.33x; its A stays in L2 between back-to-back calls). The mirrored
1 x N x K (threads along n, K over threadIdx.y, reduced through shared memory) was probed too
and lost to the tiled path (1.16 against 1.20 TFLOPS at 1x4096x4096), so it was not built
then (it is now, with float4 columns, for the shapes it wins: vector-matrix mode, below).
The same benchmark run read 256x256x16384 at 32.7 TFLOPS (0.82x), 37.6 in the run before with
the same config: run-to-run variance this project has not explained.

Rasterization in the sweep (2026-11-23). Step 9's ``raster`` (blocks launched in column
groups) was never varied by step 11's sweep: the rule sets raster 1 and cannot model launch
order. Prediction: nothing for split 1 (the squares' tuned rasters were already swept by step
10), a few percent where a split-K grid is tall and narrow. A probe of raster 2-16 on six
shapes, then 5 alternating rounds of the same kernels (H100, kernel time): 4096x128x4096 38.7
-> 40.3 TFLOPS (raster 2) and 512x512x8192 39.1 -> 40.8 (raster 4/8), +4%; 256x256x16384 and
4096^3 unchanged within 1%; 128x4096x4096 and 2048^3 1-4% slower. At 4096x128x4096 the grid
is 2 blocks wide, so raster 2 launches blocks in the same order as raster 1; what changes is a
one-dimensional blockIdx.x (and its index arithmetic) instead of a 2 x 64 grid, with the same
registers and SASS length (95 registers; 2464 against 2456 instructions): the gain is measured,
not explained. (Also probed: ptxas ``--register-usage-level``, which TVM sets to 10; 0 and 5
were no faster anywhere.) So the sweep now measures the committed entry's and the rule's pick's
other rasters (``shape_rule.raster_variants``: the distinct gcd(raster, column blocks)), and the
rule's pick always, whatever ``--candidates``. A sweep of the 43 shapes with only those
(``--candidates 1``, 187 configs, 150 s) then the benchmark: 4096x128x4096 0.87x -> 0.92x,
512x512x8192 0.87x -> 0.92x, 128x128x32768 32.3 -> 34.2 TFLOPS (raster 2), geometric mean 1.05x.
That sweep once measured a committed config at half its speed (32x128 split 64 at
128x128x32768: 16.4 TFLOPS, 33.1 in an alternating re-run), so it kept a slower config there;
a re-sweep of that shape (20 candidates) fixed the entry. Such an outlier is not understood;
the benchmark, not the sweep, is the number to quote.

Vector-matrix mode (``k_threads`` > 1 with block_n > 1, 2026-11-23). At M = 1 (one row of A
times B: a batch-1 layer) the tiled path pads M to an 8-row tile and splits K over blocks,
with a second kernel for the partials; at 1x8192x1024 that call took 10.9 us with 8.8 us of
host submission (the benchmark flagged it host-bound). The mirror of the matrix-vector
mode makes it one kernel (schedules/transforms/cuda_core.py, ``vector_matrix_split_k``): threads along
n read a float4 of a row of B each, K is split into contiguous ranges over threadIdx.y, and
the sum over threadIdx.y is TVM's cross-thread reduction (a shared-memory tree per column:
TVM lowers one only where the reduction's thread loop is innermost, so the columns stay a
loop around it). Prediction, from a probe of ~65 one-kernel schedules per shape on the H100
(alternating rounds, kernel time): 1.93 TFLOPS at 1x8192x1024 against the tiled 1.41-1.51,
and no gain at 1x4096x4096 (1.17-1.20 against 1.18-1.20; K over threadIdx.x with warp
shuffles, 8 columns a thread, deeper unrolling and loads hoisted ahead of the FMAs did no
better). Measured: the
sweep of the two shapes chose the mode at 1x8192x1024 (8 threads along n x 16 along K, 2.08
TFLOPS; the rule's 4 x 32, 1.95) and kept the tiled split-K at 1x4096x4096 (1.22; the mode,
the rule's pick, 1.19). Alternating rounds after it: 1x8192x1024 1.89 against the old entry's
1.51 (+25%) and cuBLAS's 2.31, 0.65x -> 0.82x. Nsight Compute at 1x4096x4096 (caches flushed)
puts step 11's main kernel level with cuBLAS's one GEMV kernel (24.5-27.3 us, 76-82% of DRAM
bandwidth, against 25.7-27.4 us, 75-78%); the gap in the benchmark (0.83-0.87x) is the
second kernel's 2.9 us and cuBLAS's better use of L2 between back-to-back calls (23.1-24.5 us
there). At 1x8192x1024 B is 32 MB, inside the H100's 50 MB L2, and cuBLAS ran at two speeds:
7.3 us in the alternating rounds, 13.4 us in two benchmark runs (1.24-1.26 TFLOPS), so the
benchmark's 1.61-1.70x there is cuBLAS missing L2, not step 11 winning; 0.82x is the number.

Matrix-vector mode at any N = 1 (2026-11-23, later). A benchmark of 28 shapes outside the set
(results/<gpu>/evidence/audit.txt) found 12345x1x777 at 0.39x cuBLAS: no pass of the mode divided K = 777,
so the rule fell back to the tiled path (N padded to 16, split-K). The mode now pads K to whole
passes of k_threads x vector (pad_einsum; the pad block inlines into the register loads as a
bound, as the tiled path's padding does into its copies), at the widest vector that divides K
(A's rows stay aligned); rows are not padded, and 1 row per block always divides M (so 1 x 32
and 1 x 64 joined the menu). An odd number of passes is unrolled by 8 anyway, the last group
cut off by a predicate (13 passes at 777 / 64). Where the blocks are fewer than the SMs, the
model now scales the memory floor as it does for the vector-matrix mode, so more blocks win
(130x1x2048: 1 row a block). Prediction: cuBLAS's speed (1.6-1.7 TFLOPS: A, 38 MB, streamed once),
where the tiled path ran 0.63. Measured (alternating rounds, H100): 12345x1x777 1.60 TFLOPS
(0.94x; the 1 x 128 block 1.71, 1.00x), 5000x1x3000 1.23 (1.12x; tiled 0.83), 4096x1x4095 1.27
(1.08x; tiled 0.70); in the benchmark 0.98x, 1.12x, 1.08x. Still weak: N = 1 with few rows and
a long K (16x1x65536: 16 blocks, 0.41x; 130x1x2048 0.54x), where the mode runs one block per
row and the tiled path, split over blocks, ran slower still (0.08-0.10 against 0.16 TFLOPS):
K split over blocks as well as threads would be the next step.

Long K (issue 28's contract, 2026-11-24): at 16 x 16 x 2^20 the rule splits 64 ways, and each
partial is still one serial fp32 sum of 2^14 k: 2.3e-6 against cuBLAS SGEMM's 1.1e-6 (H100;
at 2^16, chunks of 1024 k, 6.4e-7, within the contract). Where a chunk is at least 8192 k long,
the build now adds a second accumulator to the partials kernel (schedules/lowering/long_k.py: each 512 k
summed from zero, then added into it); the reduction kernel is unchanged. A float32 simulation
of that order predicts 4.3e-7 at 2^20 (2.3e-6 for the present one); not yet measured. Chunks
under 8192 k, every tuned shape's included, build the same CUDA as before; the matrix-vector
and vector-matrix modes are not promoted.

Run: python -m steps.step11 --shape 256 256 16384 --shape 2048 64 2048
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import shape_rule
from . import step10_tuned as prior
from .config import SplitKConfig
from .transforms.cuda_core import reduce_partials, split_k_over_threads, split_k_rfactor, vector_matrix_split_k

NUMBER = 11
NAME = "split-K"
IDEA = "rfactor splits K into chunks over blockIdx.z + a reduction kernel; config from the shape rule"
Config = SplitKConfig
PASS_CONFIG: dict = dict(prior.PASS_CONFIG)
TUNED_PATH = Path(__file__).resolve().parent / "tuned" / "step11.json"


def tuned_configs(path: Path | None = None) -> dict[tuple[int, int, int], SplitKConfig]:
    """The committed sweep's best per shape: {(M, N, K): SplitKConfig}; empty if none committed."""
    return prior.tuned_configs(TUNED_PATH if path is None else path, SplitKConfig)


def default_config(M: int, N: int, K: int) -> SplitKConfig:
    """A tuned entry for exactly this shape, else the shape rule's config (never a neighbour's)."""
    tuned = tuned_configs()
    if (M, N, K) in tuned:
        return tuned[(M, N, K)]
    return shape_rule.rule_config(M, N, K)


def sweep_candidates(M: int, N: int, K: int, arch: str, sm_count: int, size: int) -> list[SplitKConfig]:
    """What ``python -m steps.sweep --step 11`` measures at one shape: step 10's own config
    (as split_k 1, so a tuned entry is never slower than step 10 there), the committed entry
    for this shape if there is one (so a re-sweep re-measures it), and, where N or K is
    misaligned, each of those with the other ``stage_pads`` (the comparisons that isolate
    staged padding), and the committed entry's other rasterizations; then the shape rule's
    neighbourhood (its pick, the pick's detail variants, its next best: `size` in all, or
    more where these fixed ones outnumber it)."""
    step10 = SplitKConfig(**prior.default_config(M, N, K).as_dict(), split_k=1)
    extra = [step10]
    committed = tuned_configs().get((M, N, K))
    if committed is not None and committed != step10:
        extra.append(committed)
    if shape_rule.misaligned(M, N, K, step10.vector):
        extra = [variant for cfg in extra for variant in (cfg, dataclasses.replace(cfg, stage_pads=1 - cfg.stage_pads))]
    if committed is not None:  # the rule does not model raster: re-measure the winner's
        extra += shape_rule.raster_variants(committed, M, N, K)
    return shape_rule.neighbourhood(M, N, K, size, sm_count, arch, extra=extra)


def apply(sch, cfg: SplitKConfig, block):
    if cfg.is_vector_matrix:  # M = 1: K over threadIdx.y, columns over threadIdx.x, one kernel
        return vector_matrix_split_k(sch, block, cfg.block_n // cfg.vector, cfg.k_threads, cfg.vector)
    if cfg.k_threads > 1:  # matrix-vector: K split over a block's threads, one kernel
        return split_k_over_threads(sch, block, cfg.block_m, cfg.k_threads, cfg.vector)
    if cfg.split_k == 1:
        return prior.apply(sch, cfg, block)
    partials, total = split_k_rfactor(sch, block, cfg.split_k)
    tiles = prior.apply(sch, cfg, partials)
    reduce_partials(sch, total)
    return tiles

