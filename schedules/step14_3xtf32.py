"""Step 14 — 3xTF32: fp32 accuracy from TF32 tensor cores.

Idea: step 13 is fast but reduced precision (TF32 keeps 10 of fp32's 23 mantissa bits). Split
each operand x into big = tf32(x) and small = x - big (exact; the tensor core reads small's top
11 bits, so it sees x to within 2^-21); then x*y ~ big_x*big_y + big_x*small_y + small_x*big_y
(small*small is below fp32's rounding), three TF32 products that together carry fp32's accuracy.
TensorIR expresses the split as producer blocks: the matmul is written over split operands
(``computation`` below: A_split[i, k, part], B_split[k, j, part]), those blocks are computed at
the shared -> register load (one split per fragment, not per mma that reads it) and tensorized
with a load intrinsic that loads and splits in registers; the mma intrinsic issues small*big,
big*small, then big*big.

Accumulation. The tensor core adds its products into C with truncation (round toward zero,
Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021). Accumulating all of K into C
on the tensor core (``promote`` 0) therefore loses up to an ulp of C per 8-k step, always toward
zero: a bias that grows with K. ``promote`` 1 gives each 8-k step's three products a fresh zero
accumulator (the truncation is then relative to one step's partial sum) and adds it to C with
fp32 adds, which round to nearest: 8 FADDs per 6 mma per lane. ``promote`` 2, the default,
promotes once per block_k slice: the tensor core accumulates a whole slice (block_k / 8 steps x
3 products) into a per-slice accumulator C_slice, zeroed at the slice's start, and the slice's
partial sum is added to C: block_k / 8 times fewer FADDs. TensorIR writes it as a two-level sum
(``_sliced``): block "C" sums C_slice[ko, i, j] over one slice (ko = k // block_k is a spatial
axis of it), block "C_promote" adds C_acc[i, j] += C_slice[ko, i, j] over ko. Its error: the
3 * block_k / 8 truncations of a slice (12 at block_k 32) cost a few 2^-23 of that slice's
partial sum S_ko, toward zero; summed over the slices that is a few 2^-23 of C whatever K is (the
number of truncations per accumulator is fixed by block_k, where promote 0 truncates 3K / 8 times
against C itself), and the K / block_k fp32 adds across slices grow like a rounded sum. The cost
is registers: C_slice is a second warp-tile accumulator (warp_m * warp_n / 32 registers).

Prediction (first version, promote 1): 3 mma per product instead of 1, plus the split and the
promote adds: about a third of step 13's speed, ~1.3-1.6x cuBLAS strict fp32 at 2048 and 4096;
error ~1e-6 (promote 1), ~1e-5 and growing with K (promote 0).

Measured (H100 80GB HBM3, 2026-11-22, device probes, kernel time), first version (promote 1,
small rounded to TF32, 8 warps of 32 x 32):
- accuracy, as predicted. Against float64, with promote 1: 2.2e-7 / 3.2e-7 / 4.3e-7 at 1024 /
  2048 / 4096 and 8.2e-7 at 256 x 256 x 16384, against cuBLAS SGEMM's 5.7e-7 / 8.1e-7 / 1.15e-6
  on the same inputs. With promote 0: 1.4e-5 / 2.9e-5 at 2048 / 4096 and 1.2e-4 at K = 16384:
  linear in K, the signature of the truncating accumulation, over the 1e-5 bar from K ~ 1500.
- speed, below the prediction: 53.6 / 55.6 TFLOP/s at 2048 / 4096 in the ladder run, 1.06x /
  1.08x cuBLAS strict fp32 (50.3 / 51.5), short of the issue's 1.25x.

What limited it (ncu, 4096^3, 64 x 128 blocks of 32 x 64 warps, promote 1, 2026-11-23): issue
slots, not the tensor pipe (56% active). Of the executed instructions 38% were FADD (the promote
adds and the split's x - big), 21% HMMA, 16% IADD3 and 10% LOP3 (the split's integer ops): 4.8
instructions per mma, and "selected" (issuing) was a quarter of the warps' stall samples. Two
changes cut instructions per mma:
- small unrounded (tensor_intrin.tf32_split): 2 integer ops less per fragment register.
  Predicted +5%; measured 62.0 -> 64.7 at 4096 and 57.9 -> 61.4 at 2048 (+4-6%), error 4.3e-7 ->
  5.3e-7 at 4096 (zero-mean inputs; 3.1e-7 -> 4.2e-7 on positive ones), still below SGEMM's.
- promote 2: ptxas' count per slice and warp goes from 352 FADDs to 160 for 192 HMMA. Predicted
  ~66 TFLOP/s, between promote 1 and the inaccurate promote 0 (68.9), with registers (193-243
  instead of 153) the risk. Measured 74.7 at 4096 and 66.7 at 2048 with 3 stages of 64 x 128
  blocks of 32 x 64 warps (243 registers: 2 blocks of 4 warps per SM), faster than promote 0 was:
  it also frees the registers promote 1's per-step accumulator held in the mma loop. Error 5.5e-7
  at 4096, 5.3e-7 at 2048 (cuBLAS SGEMM 1.15e-6 / 8.1e-7).
The committed ladder run (2026-11-23): 23.4 / 56.4 / 67.2 / 70.6 TFLOP/s at 512 / 1024 / 2048 /
4096, 1.09x / 1.46x / 1.32x / 1.36x cuBLAS strict fp32 (21.4 / 38.7 / 50.8 / 52.0), errors
5.1e-7 / 5.2e-7 / 5.3e-7 / 5.5e-7 (cuBLAS SGEMM 2e-7 - 1.15e-6): the issue's 1.25x at 2048 and
4096 is met. 70.6 TFLOP/s is 66% of the mma.sync ceiling for three products (322 / 3).

fp32 at the ends of its range (issue 28; docs/fp32-contract.md). Prediction: TVM's fast math
flushes the split's and the promote's FADDs (x - big is subnormal for x below ~2^-115); without
the flush, what is left is the tensor core. Measured (H100, 2026-11-24, fp32_probe in docs/maintaining.md):
TF32 mma.sync keeps subnormal operands, products and sums exactly (its result is the exact sum
of the TF32-truncated inputs, truncated to fp32), and with --ftz=false (schedules/lowering/nvrtc.py) the
errors at 2^-60 went 4.4e-4 -> 5.2e-7 (cuBLAS SGEMM 5.7e-7) and at 2^-64 0.89 -> 1.3e-6 (6.3e-7:
2.1x, the mma's truncation in the subnormal range). An infinite operand splits into big = inf
and small = inf - inf = NaN, so every output it reaches came out NaN, where fp32 gives +-inf:
such outputs are now recomputed in plain fp32 after the store (FP32_FALLBACK,
schedules/lowering/fp32_fallback.py), where keeping infinities out of the split itself cost 9% / 7%.
The same test recomputes tiny outputs (non-zero, under 2^-124 times 3 * ceil(K / 8), the most
the subnormal truncations can add up to): predicted to bring 2^-64 to SGEMM's error, measured
6.3e-7 (SGEMM 6.3e-7, H100, 2026-11-25); its cost, one test per stored float4, 1.018x / 0.991x
at 2048 / 4096 in 12 alternating rounds against the kernel without it (within noise). Limits, measured: operands
near 2^-120 keep 16 of their 24 bits (TF32's smallest value is 2^-136; 1.5e-5 against 5.7e-7),
and a 16 x 16 x 2^20 product sums 2^15 slices in fp32 in order (3.1e-6 against SGEMM's
split-K 1.1e-6). Since then, where C_acc adds more than 512 slice sums (K over about 16384), the
build promotes it every 512 slices into a second accumulator (schedules/lowering/long_k.py); predicted
(a float32 simulation of the adds, plus the tensor core's ~5e-7 of truncation within a slice)
~6.5e-7 at 2^16 and ~7e-7 at 2^20, not yet measured. K up to 16384 builds the same CUDA as before.

Run: python -m steps.step14
"""

from __future__ import annotations

from tvm.script import tirx as T

from . import step13_tc_pipeline as prior
from .transforms import tensor_core, tensor_intrin
from .config import TF32x3Config
from .transforms.padding import padded_shape

NUMBER = 14
TENSOR_CORES = True
NAME = "3xTF32"
IDEA = "split operands into big + small TF32 (producer blocks at the fragment load), 3 mma per product"
Config = TF32x3Config
PASS_CONFIG: dict = dict(prior.PASS_CONFIG)
# Outputs that come out NaN or tiny are computed again in plain fp32 (schedules/lowering/fp32_fallback.py):
# what an infinite operand's split (big = inf, small = inf - inf) and the tensor core's truncation
# of subnormal sums do to them, corrected.
FP32_FALLBACK = True
# Three TF32 mma per product, plus the split: slower than step 13 by design, for fp32 accuracy.
EXPECTED_REGRESSION = dict.fromkeys(
    (512, 1024, 2048, 4096),
    "3xTF32 issues three TF32 products per product plus the operand split: slower than TF32 by "
    "design, for fp32 accuracy (its peer is cuBLAS strict fp32, not TF32)",
)


def default_config(M: int, N: int, K: int) -> TF32x3Config:
    # Per-slice promotion everywhere. From 1024^2 outputs up, 64 x 128 blocks of four 32 x 64
    # warps, 3 stages (243 registers: two blocks per SM); below, 32 x 64 blocks of four 16 x 32
    # warps, for more blocks on 132 SMs. The best of 39 configs (H100, 2026-11-23): 74.7 / 66.7 /
    # 56.7 / 23.5 TFLOP/s at 4096 / 2048 / 1024 / 512.
    if M * N <= 512 * 512:
        return TF32x3Config(block_m=32, block_n=64, block_k=32, warp_m=16, warp_n=32, stages=3, promote=2)
    return TF32x3Config(block_m=64, block_n=128, block_k=32, warp_m=32, warp_n=64, stages=3, raster=8, promote=2)


def computation(M: int, N: int, K: int, cfg: TF32x3Config):
    """The matmul over split operands, padded to whole tiles (A_pad, B_pad, C_pad: the same
    blocks pad_einsum makes for the other steps; where the tiles divide, their bounds checks are
    always true and simplify away)."""
    Mp, Np, Kp = padded_shape(cfg, M, N, K)
    split = tensor_intrin.tf32_split

    @T.macro
    def split_operands(A, B, A_pad, B_pad, A_split, B_split):
        """The pad blocks and the split (big, small) of both operands, in both computations."""
        for i, k in T.grid(Mp, Kp):
            with T.sblock("A_pad"):
                vi, vk = T.axis.remap("SS", [i, k])
                A_pad[vi, vk] = T.if_then_else(vi < M and vk < K, A[vi, vk], T.float32(0))
        for k, j in T.grid(Kp, Np):
            with T.sblock("B_pad"):
                vk, vj = T.axis.remap("SS", [k, j])
                B_pad[vk, vj] = T.if_then_else(vk < K and vj < N, B[vk, vj], T.float32(0))
        for i, k, p in T.grid(Mp, Kp, 2):
            with T.sblock("A_split"):
                vi, vk, vp = T.axis.remap("SSS", [i, k, p])
                A_split[vi, vk, vp] = split(A_pad[vi, vk], vp)
        for k, j, p in T.grid(Kp, Np, 2):
            with T.sblock("B_split"):
                vk, vj, vp = T.axis.remap("SSS", [k, j, p])
                B_split[vk, vj, vp] = split(B_pad[vk, vj], vp)

    if cfg.promote == 2:
        return _sliced(M, N, K, cfg, split_operands)

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        with T.sblock("root"):
            A_pad = T.sblock_alloc_buffer((Mp, Kp), "float32")
            B_pad = T.sblock_alloc_buffer((Kp, Np), "float32")
            A_split = T.sblock_alloc_buffer((Mp, Kp, 2), "float32")
            B_split = T.sblock_alloc_buffer((Kp, Np, 2), "float32")
            C_acc = T.sblock_alloc_buffer((Mp, Np), "float32")
            split_operands(A, B, A_pad, B_pad, A_split, B_split)
            for i, j, k in T.grid(Mp, Np, Kp):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        C_acc[vi, vj] = T.float32(0)
                    C_acc[vi, vj] = C_acc[vi, vj] + (A_split[vi, vk, 1] * B_split[vk, vj, 0]
                                                     + A_split[vi, vk, 0] * B_split[vk, vj, 1]
                                                     + A_split[vi, vk, 0] * B_split[vk, vj, 0])
            for i, j in T.grid(M, N):
                with T.sblock("C_pad"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = C_acc[vi, vj]

    return main


def _sliced(M: int, N: int, K: int, cfg: TF32x3Config, split_operands):
    """``promote`` 2: the same products, summed in two levels. Block "C" sums each block_k slice
    (slice ko = k // block_k, kk = k % block_k) into its own C_slice[ko, i, j]: ko is a spatial
    axis of this block, so the tensor core accumulates a whole slice and no more. Block
    "C_promote" adds the slices up in fp32: C_acc[i, j] += C_slice[ko, i, j], reducing over ko.
    The pad blocks and the split are those of the one-level computation (``split_operands``)."""
    Mp, Np, Kp = padded_shape(cfg, M, N, K)
    bk = cfg.block_k

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        with T.sblock("root"):
            A_pad = T.sblock_alloc_buffer((Mp, Kp), "float32")
            B_pad = T.sblock_alloc_buffer((Kp, Np), "float32")
            A_split = T.sblock_alloc_buffer((Mp, Kp, 2), "float32")
            B_split = T.sblock_alloc_buffer((Kp, Np, 2), "float32")
            C_slice = T.sblock_alloc_buffer((Kp // bk, Mp, Np), "float32")
            C_acc = T.sblock_alloc_buffer((Mp, Np), "float32")
            split_operands(A, B, A_pad, B_pad, A_split, B_split)
            for ko, i, j, kk in T.grid(Kp // bk, Mp, Np, bk):
                with T.sblock("C"):
                    vko, vi, vj, vkk = T.axis.remap("SSSR", [ko, i, j, kk])
                    with T.init():
                        C_slice[vko, vi, vj] = T.float32(0)
                    C_slice[vko, vi, vj] = C_slice[vko, vi, vj] + (
                        A_split[vi, vko * bk + vkk, 1] * B_split[vko * bk + vkk, vj, 0]
                        + A_split[vi, vko * bk + vkk, 0] * B_split[vko * bk + vkk, vj, 1]
                        + A_split[vi, vko * bk + vkk, 0] * B_split[vko * bk + vkk, vj, 0])
            for i, j, ko in T.grid(Mp, Np, Kp // bk):
                with T.sblock("C_promote"):
                    vi, vj, vko = T.axis.remap("SSR", [i, j, ko])
                    with T.init():
                        C_acc[vi, vj] = T.float32(0)
                    C_acc[vi, vj] = C_acc[vi, vj] + C_slice[vko, vi, vj]
            for i, j in T.grid(M, N):
                with T.sblock("C_pad"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = C_acc[vi, vj]

    return main


def apply(sch, cfg: TF32x3Config, block):
    tiles = tensor_core.tile_warps(sch, block, cfg)  # promote 2: its slice loop is k_outer
    tiles = tensor_core.split_fragments(sch, tiles, cfg)
    if cfg.promote == 2:  # the mma sums a slice in registers, C_promote adds it to C per slice
        tiles = tensor_core.accumulate_per_slice(sch, tiles, cfg)
    tiles = tensor_core.accumulate_in_fragments(sch, tiles, cfg)
    # promote 1: a fresh accumulator and the fp32 adds inside each 8-k tile's intrinsic;
    # 0 and 2: the mma accumulates in place (into C, or into the slice's C_slice).
    mma = tensor_intrin.SPLIT_MMA_PROMOTE if cfg.promote == 1 else tensor_intrin.SPLIT_MMA
    tiles = tensor_core.tensorize_tiles(sch, tiles, cfg, mma)
    return tensor_core.async_pipeline(sch, tiles, cfg.stages)
