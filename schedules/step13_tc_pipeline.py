"""Step 13 — feed the tensor cores: cp.async stages, conflict-free fragment loads, tuned tiles.

Idea: step 12's tensor cores wait on memory. Three things from the CUDA-core ladder, applied
to the warp-level loop nest at once because each alone leaves the others as the limit:
- step 7's cp.async pipeline: `stages` shared buffers, copies `stages - 1` slices ahead, no
  registers spent on staging; the slice's k steps unrolled so the next fragments load during
  this step's mma;
- step 8's padding: ``ldmatrix`` reads 8 rows of 16 bytes of A per matrix, which with 32-float
  rows all start in the same bank (8-way conflict); a pad_a of 4 floats shifts each row by one
  16-byte bank group. B's 32-bit fragment loads read 4 k rows x 8 n columns per instruction:
  with pad_b = 8 the rows are 8 banks apart, so the 32 lanes hit 32 banks. The same pad on the
  C tile spreads the accumulator stores;
- step 9/10's raster order and a tile per size.

Prediction: the pipeline matters most (step 12 stalls on every slice): 2-3x step 12 at 2048,
approaching half of the mma.sync ceiling (~160 TFLOP/s) at 2048 and 4096, where 128 x 128
tiles give 256 and 1024 blocks for 132 SMs.

Measured (H100 80GB HBM3, 2026-11-22, two device probes over 26 configs, kernel time): at the
chosen tiles 31.1 / 107 / 165 / 175 TFLOP/s at 512 / 1024 / 2048 / 4096: 2.8x / 3.7x / 2.8x step
12, and 0.70x / 0.46x / 0.50x cuBLAS TF32 at 1024 / 2048 / 4096 (153 / 358 / 351 TFLOP/s, its
Hopper wgmma kernels; error 6.9e-4 against its 2.6e-4, both within the TF32 bound). As predicted
the pipeline is most of it (3 stages of 128 x 128 x 32: 60 -> 147 at 2048); 128 x 256 blocks of
8 warps added 12% more in that probe (each warp's 64 x 64 tile does 32 mma per 4 ldmatrix and 16
32-bit B loads; the next paragraph finds the 128 x 128 config it was compared with was not the
best of its kind), 4 stages or block_k 16 lose 5-10%. 165-178 TFLOP/s is 51-55% of the 322
TFLOP/s mma.sync ceiling; part of what is left is what this route cannot reach: cuBLAS's wgmma/TMA kernels (reachable from TVM only by
hand-written "tirx" kernels), and B's fragment loads (ldmatrix cannot transpose fp32, so four
32-bit loads per fragment: a third of the shared-memory instructions).
The committed ladder run (same day): 24.7 (host-bound at 512: 8.8 us kernels) / 105.1 / 161.9 /
173.4 TFLOP/s at 512 / 1024 / 2048 / 4096, 68% / 45% / 46% of cuBLAS TF32 at 1024 / 2048 / 4096.

What limited it (ncu, 4096^3, the 128 x 256 default, 2026-11-23): the tensor pipe was active 56%
of the cycles. 203 registers x 256 threads and 157 KB of shared memory leave one block (8 warps,
2 per scheduler) per SM, so every block's __syncthreads and every cp.async.wait_group stalls
the whole SM: of the warps' stall samples 18% waited on the cp.async data (long scoreboard,
charged to the address arithmetic after wait_group), 12% on the barrier, 26% on fixed-latency
dependencies between the mma and 17% on the busy tensor pipe; shared-memory loads were
conflict-free (817 conflicts in 67.6M wavefronts). Prediction: two independent blocks per SM
hide one block's barrier and copy waits behind the other's mma, so 4-warp 128 x 128 blocks (167
registers, 107 KB at 3 stages: 2 blocks per SM) should win although each block re-reads more
operand per flop. Measured (three device probes, 44 configs at 2048 and 4096): 128 x 128 blocks
of 4 warps reach 187-195 TFLOP/s, +10% at 4096 and +15% at 2048 over 128 x 256; block_k 32 with
3 stages, A rows padded by 8 floats and a 4-wide raster was the best at 2048 (186.9) and within
1% of the best at 4096 (193.1 vs 195.3), against cuBLAS TF32 at 357 / 353 in the same run
(0.52x / 0.55x). The raster order moves it by up to 20% (L2 reuse of the operand panels), more
than any other field; 4 stages or block_k 64 cost the second block per SM and lose 15-35%.
The ladder run of 2026-11-23 01:20 (then committed): 30.9 / 106.7 / 173.4 / 197.3 TFLOP/s at
512 / 1024 / 2048 / 4096, 83% / 69% / 48% / 50% of cuBLAS TF32 (37.2 / 154.5 / 359.8 / 393.6). So
the issue's 0.5x was met at 4096 and missed at 2048 in that run; the cross-check of the same session timed the
same kernel at 2048 at 91.3 us (188 TFLOP/s, 0.52x of cuBLAS TF32's 47.65 us; ncu 94.6 us), and
the probes at 173-187: at 2048 this kernel varies ~8% from run to run, cuBLAS TF32 under 1%
at 2048 (at 4096 it measured 342-394 across runs).

What limits it at 2048 (ncu, the 128 x 128 default, 2026-11-23): the tensor pipe is active 64%
of the cycles (cuBLAS TF32: 78%), at an SM clock of 1.72 GHz under load; L2 runs at 62% of its
peak and shared memory at 58%, so neither bandwidth is the wall. Two warps per scheduler issue
0.29 instructions a cycle, stalled per issue 2.1 cycles on fixed-latency dependencies, 1.0 on
cp.async data and 0.9 on barriers, of which each slice has two: TVM's ThreadSync cannot tell
that the copy into one stage and the reads of another touch different parts of one buffer. (The
CUDA edited by hand to one barrier per slice measured only 1-2% faster at 2048 and 4096.)

Then one more idea from the CUDA-core ladder, step 6's double buffer, in registers:
``fragment_buffers=2`` pipelines the k-step loop inside the cp.async one (TVM expands the inner
pipeline first, so the outer loop sees its prologue, body and epilogue as three statements),
so each warp loads the next 8-k step's fragments while this one's mma run, and the next
slice's first fragments before this slice's last mma. Prediction: a warp no longer starts
each slice waiting on shared memory; worth most where a block's few warps are alone on their
SM. Measured (H100, device probe, three interleaved rounds): 30.6 -> 34.9 TFLOP/s at 512
(+14%), 104 -> 106 at 1024, and 171 -> 168 at 2048, 184 -> 174 at 4096: at the large sizes two
blocks per SM already hide those loads, and the second register set (234 registers against
167) costs more than it saves. It is the default at and below 1024^2 outputs. TVM 0.27 cannot
generate it when K has fewer than stages - 1 block_k slices (the nested pipeline's wait count
stays a run-time value): a one-line ConfigError there, and the default keeps one set.
The ladder runs with it (2026-11-23): H100 34.3 / 106.2 / 175.9 / 180.1 TFLOP/s at 512 / 1024 /
2048 / 4096, 0.94x / 0.73x / 0.499x / 0.53x cuBLAS TF32, and in a later run (committed) 35.0 (host-
bound) / 107.0 / 178.8 / 186.7, 0.70x / 0.508x / 0.53x at 1024 / 2048 / 4096; H200 34.8 / 107.4 /
179.1 / 184.0, 0.95x / 0.64x / 0.51x / 0.48x. The issue's 0.5x at 2048 and 4096 is within this
kernel's run-to-run variation in both directions: not met reliably.

Two more levers, each predicted to help and measured slower (H100, 2026-11-23, one device
probe; docs/tensor-cores.md has the details): B's fragments as two 128-bit loads per k row,
by permuting the n columns each mma covers (``transform_block_layout``), lost 19-23%: the
HMMA reads B as an aligned register pair of k rows t and t + 4, so ptxas moved every loaded
value into place (833 moves; 1770 SASS instructions against 1122). Three blocks per SM
(``__launch_bounds__(128, 3)``, 2 stages or block_k 16 to fit the shared memory) lost 14-26%
against the default, and gained nothing over 2 stages at two blocks per SM (-10% to +1%): the
shallower pipeline costs more than the third block's warps hide. Timed alternately with
cuBLAS TF32 (8 rounds; in a second call 6 with 3 s idle before each timing, and 6 without),
this kernel reads 0.503x / 0.491x / 0.504x at 2048 and 0.53x / 0.511x / 0.520x at 4096.

How far mma.sync itself goes (H100, 2026-11-23, tools/cutlass_tf32, same runs, alternating
rounds): CUTLASS's own SM80 TF32 kernels reach 197-203 TFLOP/s at their best tiles (256 x 128
or 128 x 256 blocks of 8 warps, one per SM), 0.58-0.59x cuBLAS TF32, and 183 at this step's
then 128 x 128 x 32 tile. Under Nsight Compute that kernel took 160 k cycles at 2048^3 against
CUTLASS's 164 k at the same tile and 155 k at its best. So the schedule matched NVIDIA's
mma.sync code tile for tile, and the 0.5x bar asks for 85% of the best mma.sync result; in
those calls it read 0.50-0.52x at 2048 and 0.52-0.53x at 4096.

Then CUTLASS's best shape, and one more idea from it: one barrier per slice. TVM's ThreadSync
puts two in every slice (before the copies, which overwrite a stage other warps may still read,
and after the wait); CUTLASS waits first, syncs once, and then copies. That one barrier covers
both hazards, because the stage the copy overwrites was last read in the previous slice
(schedules/lowering/one_barrier.py, a TIR pass run after ThreadSync: ``barriers=1``). Prediction:
nothing for two 4-warp blocks per SM, where one block's barriers hide behind the other's mma
(the CUDA edited this way measured -1% / -1% there), but something for CUTLASS's best shape,
one 8-warp block per SM, where all 8 warps drain at every barrier. Measured (H100, 2026-11-23,
alternating rounds with cuBLAS TF32, 128 x 256 x 32, 4 stages, pad_a 4, fragment_buffers=2):
- the 8-warp tile against the 128 x 128 default of before: +2.2% / +1.0% (2048 / 4096), and in
  a later call +3.5% / +2.1%;
- one barrier against two, at that tile: +3.1% / +3.6% with the CUDA edited by hand; 0.0% /
  -1.9% with the pass; and in 10 rounds decided in advance, +0.5% / -0.2%. So no measurable
  effect: the barriers are not what the 8-warp block waits on. The rule fixed before those 10
  rounds (one barrier if the geometric mean of the two ratios is above 1) kept it.
So the default from 128 such tiles up (2048^2) is that 128 x 256 config, with one barrier per
slice. CUTLASS's L2 prefetch hint and 64-bit cp.async addresses, patched into the CUDA, gained
nothing either (+-1%). The committed ladder (the run after those rounds): 194.1 / 195.4
TFLOP/s at 2048 / 4096, 0.54x / 0.49x cuBLAS TF32 (358.0 / 398.3; at 4096 cuBLAS TF32 measured
342-398 across this day's runs, this kernel 180-195).

16-bit form (fp16, bf16; issue 47): step 12's 16-bit tiles (m16n8k16, ldmatrix for A and
ldmatrix.trans for B, C rounded to the dtype in the write-back) fed the same way: cp.async
stages of 16-byte copies (8 elements), rows padded by 8 elements (16 bytes, as fp32's 4 floats:
a 32-element A row is 64 bytes, so without the pad rows 0, 2, 4, 6 of an ldmatrix start in the
same bank group; B's 128-element rows are 256 bytes, all 8 rows in one group), fragments
double-buffered where the fp32 form does it, the same tiles per size (a stage is half the bytes,
so the C tile staged for the store, still fp32, sets the shared memory). Prediction (written
before measuring): the mma.sync fp16 ceiling is 639 TFLOP/s (../shared/notes/tensor-cores.md),
twice TF32's, and this kernel reached 55-60% of TF32's; with B now one ldmatrix instead of four
32-bit loads the shared-memory side improves too, but each slice does twice the mma per byte
copied, so barriers and waits weigh more: 300-400 TFLOP/s at 4096, 0.4-0.55x cuBLAS bf16/fp16
(~700), 3-4x the 16-bit step 12.
Measured (H100 80GB HBM3, 2026-11-27, one device probe, CUDA events, cuBLAS through torch.mm
alternating in the same process): 151 / 373 / 403 TFLOP/s bf16 at 1024 / 2048 / 4096 (fp16
153 / 375 / 404; a second reading of bf16 at 4096: 410), 0.55x / 0.54x cuBLAS bf16 (684 / 745)
and 0.57x / 0.56x cuBLAS fp16 (661 / 723) at 2048 / 4096; 3.3x the 16-bit step 12 at 4096, and
1.9x this step's TF32 form in the same run (210). So the top of the predicted range, at 63% of
the 639 TFLOP/s mma.sync ceiling (TF32: 55-60% of its own). The fp32 tiles carry over: at 4096
128 x 128 x 32 blocks of 4 warps (3 stages), 128 x 128 x 64, 128 x 256 x 64 and the default
without the fragment double buffer all read 308-314 against the default's 403-410 (one round
each). Error as step 12's (the store's rounding: 1.66e-3 bf16, 2.07e-4 fp16, as cuBLAS's) at
512-4096 and the odd shapes above.

Run: python -m steps.step13
     python -m steps.step13 --sizes 2048 --config block_n=128,stages=2,fragment_buffers=1
         # 2 stages on 4-warp 128 x 128 tiles, a variant measured above, again (one fragment
         # set: fragment_buffers 2 needs 3 stages)
     python -m steps.step13 --sizes 2048 --config barriers=2     # TVM's two barriers per slice again
     python -m steps.step13 --sizes 512 --config fragment_buffers=1  # without the register double buffer
"""

from __future__ import annotations

from dataclasses import replace

from . import step12_tensorize as prior
from .transforms import tensor_core
from .config import TensorCorePipelineConfig

NUMBER = 13
TENSOR_CORES = True
NAME = "tensor-core pipeline"
IDEA = ("cp.async stages + padded conflict-free ldmatrix/fragment loads + tiles per size, on the mma loop; "
        "fragments double-buffered in registers where that pays")
PRECISION = "tf32"
DTYPES = ("fp32", "fp16", "bf16")
Config = TensorCorePipelineConfig
PASS_CONFIG: dict = {**prior.PASS_CONFIG, "tirx.use_async_copy": True}
EXPECTED_REGRESSION: dict = {}


# 128 x 256 tiles an output needs before one 8-warp block per SM beats two 4-warp 128 x 128
# blocks: 128 of the H100's 132 SMs busy, as 2048^2 has.
ONE_BLOCK_PER_SM_TILES = 128


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> TensorCorePipelineConfig:
    if dtype != "fp32":
        return default_config_16bit(M, N, K, dtype)
    return _default_config_fp32(M, N, K)


def default_config_16bit(M: int, N: int, K: int, dtype: str) -> TensorCorePipelineConfig:
    """fp16 / bf16: the fp32 tiles, each 32-k slice two k16 steps, copies of 8 elements (16
    bytes) and rows padded by 8 elements (16 bytes, as fp32's 4 floats): ldmatrix's 8 rows of
    16 bytes then start in 8 different bank groups, for A and for B's transposed loads."""
    cfg = replace(_default_config_fp32(M, N, K), vector=8, pad_a=8, pad_b=8, dtype=dtype)
    if cfg.fragment_buffers == 2 and not cfg.fragments_double_buffer_at(K):
        cfg = replace(cfg, fragment_buffers=1)
    return cfg


def _default_config_fp32(M: int, N: int, K: int) -> TensorCorePipelineConfig:
    # The best of the device probes (H100, 2026-11-22/23; about 100 configs at 512-4096): small
    # outputs want more, smaller blocks for 132 SMs. Large ones take CUTLASS's best mma.sync
    # shape, one 128 x 256 block of 8 warps per SM: 4 stages (pad_a 4 to fit 204 KB) and
    # fragments double-buffered, since no second block on the SM hides this one's barriers and
    # first loads (+2-4% at 2048 over two 128 x 128 blocks, +0-2% at 4096, 2026-11-23), and
    # CUTLASS's one barrier per slice (no measurable effect either way: +0.5% / -0.2% in 10
    # alternating rounds; kept by a rule fixed before those rounds, see the docstring).
    # That needs about a block per SM: with fewer 128 x 256 tiles than 128 (2048^2 has 128 for
    # 132 SMs) the output stays in two 4-warp 128 x 128 blocks per SM, whose barrier and copy
    # waits hide behind the other block's mma. Both launch in groups 4 blocks wide, so
    # neighbours share operand panels in L2.
    if M * N <= 1024 * 1024:
        if M * N <= 512 * 512:
            cfg = TensorCorePipelineConfig(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=4)
        else:
            cfg = TensorCorePipelineConfig(block_m=64, block_n=128, block_k=32, warp_m=32, warp_n=64, stages=3)
        # Fragments double-buffered where they measured faster: at and below 1024^2 (+14% at
        # 512, +2% at 1024; at 2048 and 4096 they cost 2-5% in 128 x 128 blocks), when K has
        # the slices for it.
        if cfg.fragments_double_buffer_at(K):
            cfg = replace(cfg, fragment_buffers=2)
        return cfg
    cfg = TensorCorePipelineConfig(block_m=128, block_n=256, block_k=32, warp_m=64, warp_n=64, stages=4, pad_a=4,
                                   raster=4, fragment_buffers=2, barriers=1)
    if -(-M // cfg.block_m) * -(-N // cfg.block_n) < ONE_BLOCK_PER_SM_TILES:
        return TensorCorePipelineConfig(block_m=128, block_n=128, block_k=32, warp_m=64, warp_n=64, stages=3,
                                        pad_a=8, raster=4)
    # With fewer than 3 slices of K the double buffer cannot be generated (a ConfigError).
    return cfg if cfg.fragments_double_buffer_at(K) else replace(cfg, fragment_buffers=1)


def apply(sch, cfg: TensorCorePipelineConfig, block):
    tiles = prior.apply(sch, cfg, block)
    return tensor_core.async_pipeline(sch, tiles, cfg.stages, cfg.fragment_buffers)
