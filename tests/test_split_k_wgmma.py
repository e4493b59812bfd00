"""Step 23 (issue 49) without a GPU: split-K on the persistent wgmma grid. The rule that picks
its tile and parts, how K divides, what its two kernels hold, that one part is step 20's kernel
exactly, its config's one-line errors. ptxas (no spills, no stack frame) is tests/test_hopper.py's,
which runs every Hopper rung; correctness on the GPU is tests/test_gpu_shapes.py's and
tests/test_gpu_sixteen_bit_shapes.py's."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import tvm

import schedules
from schedules.config import HOPPER_SMS, WgmmaPersistentConfig, WgmmaSplitKConfig
from schedules.step23_split_k_wgmma import MIN_SLICES, SUM_US, _options, estimated_us, parts
from schedules.transforms import wgmma
from steps.commands import cli

from .checks import config_error

STEP20, STEP23 = schedules.get_step(20), schedules.get_step(23)


def source(M, N, K, dtype="fp32", cfg=None) -> str:
    return schedules.cuda_source(schedules.build(STEP23, M, N, K, arch="sm_90a", config=cfg, dtype=dtype))


def kernels(src: str) -> list[tuple[str, str, str]]:
    return re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{', src)


def test_prior_and_config():
    assert cli.prior_step(STEP23).number == 20 and STEP23.precision == "tf32"
    assert STEP23.dtypes == ("fp32", "fp16", "bf16") and issubclass(WgmmaSplitKConfig, WgmmaPersistentConfig)
    for bad in (0, 257, True, 2.0):
        msg = config_error(lambda: WgmmaSplitKConfig(split_k=bad).validate(512, 512, 512))
        assert msg.startswith("split_k must be 1 to 256 parts of K") and "\n" not in msg


@pytest.mark.parametrize("shape, tile, split", [
    ((64, 64, 65536), (64, 64), 128),   # one tile: 128 units of 8 slices
    ((512, 512, 8192), (128, 128), 8),
    ((384, 384, 12288), (128, 128), 8),  # 9 tiles: 72 units (16 parts would pass 132)
    ((33, 65, 129), (64, 128), 1),      # 5 slices: no split
    ((1280, 1280, 1280), (128, 128), 1),  # 100 tiles, one wave (256 x 128: 50 tiles, 0.63x as fast, H200)
    ((1000, 1500, 700), (128, 128), 1),   # 96 tiles
])
def test_the_tf32_rule_fills_the_sms_with_units(shape, tile, split):
    cfg = STEP23.default_config(*shape, "fp32")
    assert (cfg.block_m, cfg.block_n, cfg.split_k) == (*tile, split)
    tiles = -(-shape[0] // tile[0]) * -(-shape[1] // tile[1])
    assert tiles * cfg.split_k <= HOPPER_SMS and cfg.ctas == tiles * cfg.split_k
    per, n = parts(wgmma.plan(*shape, cfg), cfg.split_k)
    assert n == cfg.split_k and (per >= MIN_SLICES or split == 1)
    cfg.validate(*shape)


# The 16-bit rule against the calibration it was fitted to (H100, bf16, 2026-11-28): the fastest
# config measured at each of these shapes, and the one shape where the pick was 24% off it; at
# 1536^3 the 96 x 192 tile timed later (H200, 2026-11-29: 1.15x the calibration's 192 x 128).
@pytest.mark.parametrize("shape, pick", [
    ((128, 8192, 1024), (128, 64, 1)),   # 128 tiles, no split (the TF32 rule: 128 x 128 in 2 parts, 0.59x as fast)
    ((4096, 128, 4096), (64, 64, 1)),
    ((1024, 1024, 1024), (128, 64, 1)),
    ((1536, 1536, 1536), (96, 192, 1)),   # 128 tiles of three consumers (cuBLAS: 192 x 96); 192 x 128 makes 96
    ((3072, 3072, 3072), (192, 128, 1)),  # 384 tiles, 2.9 waves, where 256 x 128 makes 288, 2.2
    ((256, 256, 16384), (128, 64, 16)),
    ((64, 2048, 2048), (64, 64, 4)),      # measured fastest: 32 x 64 in one part, 1.3x faster
])
@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
def test_the_16_bit_rule_picks_the_least_estimated_time(shape, pick, dtype):
    cfg = STEP23.default_config(*shape, dtype)
    assert (cfg.block_m, cfg.block_n, cfg.split_k) == pick
    tiles = -(-shape[0] // pick[0]) * -(-shape[1] // pick[1])
    assert cfg.ctas == min(HOPPER_SMS, tiles * pick[2]) and cfg.stages == min(8, 196608 // ((pick[0] + pick[1]) * 128))
    best = estimated_us(*shape, *pick)
    for other in _options(*shape):
        assert estimated_us(*shape, *other) >= best
    cfg.validate(*shape)


@pytest.mark.parametrize("shape", [(1536, 1536, 1536), (768, 1536, 4096), (256, 4096, 16384)], ids=str)
def test_three_consumers_are_an_option_in_one_part_only(shape):
    """96 x 192 (three consumer warpgroups) was timed in one part of K (1536^3): the rule offers it
    there and nowhere split, so a shape near a K-heavy one cannot take an untimed kind of unit."""
    wide = [o for o in _options(*shape) if o[1] == 192]
    assert wide == [(96, 192, 1)]
    assert any(split > 1 for _, _, split in _options(*shape))  # other tiles still split


def test_the_16_bit_estimate_charges_the_workspace_and_never_beats_reading_the_operands():
    one, two = estimated_us(64, 2048, 2048, 64, 64, 1), estimated_us(64, 2048, 2048, 64, 64, 2)
    # 32 tiles: two parts halve each unit's work, and pay the second kernel and 2 x 2 x 64 x 2048 fp32 words.
    assert two - SUM_US - 2 * 2 * 64 * 2048 * 4 / 3e6 < one / 2 + 0.5 < one
    assert estimated_us(1, 4096, 4096, 32, 64, 1) >= 4096 * 4096 * 2 / 3e6  # B's 32 MB at 3 TB/s


@pytest.mark.parametrize("shape, big", [((1536, 1536, 1536), True), ((1664, 1408, 512), True),
                                        ((1536, 1408, 4096), False), ((1280, 1664, 64), False)])
def test_the_tf32_rule_keeps_256_x_128_only_past_one_wave_of_128_x_128(shape, big):
    """132 tiles of 128 x 128 are one wave: the smaller tile there (H200: 0.63 of 256 x 128's time at
    1280^3); 144 are two, where the big tile's one wave wins (1536^3: 32.3 us against 40.0)."""
    cfg = STEP23.default_config(*shape, "fp32")
    tiles = -(-shape[0] // 128) * -(-shape[1] // 128)
    assert (tiles > HOPPER_SMS) == big
    assert (cfg.block_m, cfg.block_n, cfg.split_k) == ((256, 128, 1) if big else (128, 128, 1))


@pytest.mark.parametrize("n", (2048, 4096))
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_big_outputs_get_step_20s_kernel_byte_for_byte(n, dtype):
    cfg = STEP23.default_config(n, n, n, dtype)
    assert cfg.split_k == 1 and cfg.as_dict() == {**STEP20.default_config(n, n, n, dtype).as_dict(), "split_k": 1}
    assert source(n, n, n, dtype) == schedules.cuda_source(schedules.build(STEP20, n, n, n, arch="sm_90a", dtype=dtype))
    # And any config with one part is step 20's at that config, as IR.
    small = WgmmaSplitKConfig(block_m=128, block_n=64, stages=8, ctas=64, split_k=1)
    as20 = WgmmaPersistentConfig(**{k: v for k, v in small.as_dict().items() if k != "split_k"})
    tvm.ir.assert_structural_equal(STEP23.schedule(1000, 700, 300, small).mod, STEP20.schedule(1000, 700, 300, as20).mod)


@pytest.mark.parametrize("KT, split, expected", [(10, 4, (3, 4)), (10, 8, (2, 5)), (10, 1, (10, 1)), (3, 64, (1, 3)),
                                                 (1024, 128, (8, 128))])
def test_parts_are_equal_and_never_empty(KT, split, expected):
    cfg = WgmmaSplitKConfig(block_m=64, block_n=64)
    plan = wgmma.plan(64, 64, KT * 32, cfg)  # TF32: 32 k a slice
    assert plan.KT == KT and parts(plan, split) == expected
    per, n = expected
    assert (n - 1) * per < KT <= n * per  # the last part holds at least one real slice


@pytest.mark.parametrize("dtype, store", [("fp32", "C_ptr[((((int)blockIdx.x) * 256) + ((int)threadIdx.x))] = s_ptr[0];"),
                                          ("bf16", "((nv_bfloat16)s_ptr[0])")])
def test_two_kernels_a_workspace_and_one_rounding(dtype, store):
    cfg = WgmmaSplitKConfig(block_m=128, block_n=128, stages=6, ctas=128, split_k=32)  # TF32's rule here
    src = source(256, 256, 16384, dtype, cfg)
    (gemm_threads, _, gemm_params), (sum_threads, _, sum_params) = kernels(src)
    # The GEMM writes fp32 partial sums to W, never C; the second kernel reads W and writes C.
    assert "W_ptr" in gemm_params and "C_ptr" not in gemm_params and gemm_params.count("CUtensorMap") == 2
    assert "float* __restrict__ W_ptr" in gemm_params
    assert "C_ptr" in sum_params and "W_ptr" in sum_params and "CUtensorMap" not in sum_params
    assert (gemm_threads, sum_threads) == ("384", "256")
    # C is rounded to its dtype once, after all 32 parts are added in fp32.
    body = src[src.rindex("__launch_bounds__(256)"):]  # the second kernel's definition
    assert store in body and body.count("W_ptr[") == 1  # one load in the loop over the parts
    assert re.search(r"for \(int p = 0; p < 32; \+\+p\)", body)


def test_k_beyond_the_last_slice_reads_zeros_from_tma():
    """K = 1000 in bf16: 16 slices of 64, the last one 40 deep; split in parts of 8 (the rule:
    32 x 64 tiles, 2 parts), the part's slice index goes into the TMA coordinate, which fills
    zeros past K instead of reading A's next row."""
    cfg = STEP23.default_config(64, 64, 1000, "bf16")
    assert (cfg.block_m, cfg.block_n, cfg.split_k) == (32, 64, 2)
    src = source(64, 64, 1000, "bf16")
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    # A's tensor map is over K = 1000 (16-byte rows: 1000 halves is 2000 bytes), not a padded copy.
    assert len(kernels(src)) == 2 and "A_pad" not in src


def test_a_config_with_parts_changes_only_the_gemm_and_the_sum():
    cfg = WgmmaSplitKConfig(block_m=128, block_n=128, stages=6, ctas=64, split_k=16)
    src = source(256, 256, 16384, cfg=cfg)
    assert re.search(r"for \(int p = 0; p < 16; \+\+p\)", src)
    assert source(256, 256, 16384, cfg=replace(cfg, split_k=32)) != src
