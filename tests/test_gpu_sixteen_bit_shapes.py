"""On a CUDA GPU: every 16-bit rung (steps 12, 13, 15-18 in fp16 and bf16) correct on odd and
non-square shapes: ragged tiles, TMA's padded rows (K or N not a multiple of 8 halves), one row,
a K of one slice. Fresh inputs, C poisoned with NaN, the float64 product of the 16-bit inputs,
held to the dtype's tolerance (docs/sixteen-bit.md). Issue 47's "8 odd or non-square shapes".
Also, in all three dtypes (fp32 inputs: TF32's tolerance), the Hopper rungs at configs no default
takes: TMA-stored tiles whose rows the chunk's do not divide, and three consumer warpgroups."""

import dataclasses

import pytest

import schedules
from schedules.config import WgmmaPersistentConfig
from steps.measure import dtypes, harness

from .checks import skip_unless_it_runs_here

pytestmark = pytest.mark.gpu

SHAPES = [(1000, 1500, 700), (33, 65, 129), (257, 130, 95), (1, 4096, 4096), (4097, 33, 1001),
          (300, 5000, 2000), (127, 255, 513), (2047, 1025, 67)]
CASES = [pytest.param(s, d, id=f"step{s.number}-{d}") for s in schedules.STEPS for d in dtypes.SIXTEEN_BIT
         if d in s.dtypes]


@pytest.fixture(scope="module")
def runner():
    return harness.KernelRunner(repeat=5)


@pytest.fixture(scope="module")
def arch():
    return harness.gpu_arch()


@pytest.mark.parametrize("step, dtype", CASES)
def test_16_bit_step_is_correct_on_odd_shapes(step, dtype, runner, arch):
    skip_unless_it_runs_here(step, arch)
    bound = dtypes.TOLERANCE[dtype]
    errors = {}
    for M, N, K in SHAPES:
        lib = schedules.build(step, M, N, K, arch=arch, dtype=dtype)
        errors[(M, N, K)] = runner.check(lib["main"], M, N, K, dtype)
    bad = {shape: e for shape, e in errors.items() if not e <= bound}  # NaN fails too
    assert not bad, f"relative errors above {bound:g}: {bad}"


# Rings deeper than 8 stages on a walk of several tiles, or deeper than K's slices: with a wgmma
# group left in flight and no wait inside the loop on the tile's last slice, these were wrong on
# an H200 (wgmma.wait_for_slice); each block here walks two tiles of 16 slices (9, 10, 12
# stages), or has one tile of 10 slices (12 stages).
@pytest.mark.parametrize("shape, stages", [((8192, 128, 1024), 9), ((8192, 128, 1024), 10),
                                           ((8192, 128, 1024), 12), ((2048, 256, 640), 12)], ids=str)
@pytest.mark.parametrize("dtype", dtypes.SIXTEEN_BIT)
def test_a_deep_16_bit_ring_is_correct(shape, stages, dtype, runner, arch):
    step = schedules.get_step(20)
    skip_unless_it_runs_here(step, arch)
    cfg = WgmmaPersistentConfig(block_m=64, block_n=64, stages=stages, ctas=128)
    lib = schedules.build(20, *shape, arch=arch, config=cfg, dtype=dtype)
    error = runner.check(lib["main"], *shape, dtype)
    assert error <= dtypes.TOLERANCE[dtype], f"relative error {error:g} at {shape} in {stages} stages"


# The TMA-store rungs' chunks of C at tiles whose rows the chunk's do not divide: 192-row tiles
# in 16 KB chunks of 16-bit C (128 rows) once stored one chunk and left a third of C as poisoned
# (H200, 2026-11-29; StorePlan.rows); fp32's 16 KB chunks hold 64 rows (96, 160, 224 tiles), so
# its TF32 form is here too. N is a multiple of 8: C's rows 16-byte strided, the TMA store's case.
@pytest.mark.parametrize("block_m, chunk", [(192, 16384), (96, 16384), (160, 8192), (224, 16384)])
@pytest.mark.parametrize("dtype", ("fp32", "bf16", "fp16"))
@pytest.mark.parametrize("number", (22, 27))
def test_every_row_of_a_tma_stored_tile_is_written(number, dtype, block_m, chunk, runner, arch):
    step = schedules.get_step(number)
    skip_unless_it_runs_here(step, arch)
    shape = (1000, 1512, 700)
    cfg = step.Config(block_m=block_m, block_n=128, stages=2, ctas=24, chunk=chunk)
    lib = schedules.build(step, *shape, arch=arch, config=cfg, dtype=dtype)
    error = runner.check(lib["main"], *shape, dtype)
    bound = harness.tolerance(number, dtype)
    assert error <= bound, f"relative error {error:g} (bound {bound:g}) with {cfg}"


# Three consumer warpgroups (a 192-wide consumer side, 512 threads, 152 registers a consumer
# thread) in every Hopper rung that takes them, on a shape with ragged tiles; step 23 also with
# its K in two parts. Steps 15-17 put the consumers along M, the later ones along N.
# wgmma's n: 96 (the 1536^3 tile) and 128, the most three consumers are allowed.
THREE = [pytest.param(n, d, wn, id=f"step{n}-{d}-n{wn}") for n in (15, 16, 17, 18, 20, 21, 22, 23, 26, 27)
         for d in ("fp32", "bf16", "fp16") for wn in (96, 128)]


@pytest.mark.parametrize("number, dtype, wgmma_n", THREE)
def test_three_consumer_warpgroups_are_correct(number, dtype, wgmma_n, runner, arch):
    step = schedules.get_step(number)
    skip_unless_it_runs_here(step, arch)
    shape = (1000, 1512, 700)
    base = step.default_config(*shape, dtype=dtype)
    tile = dict(block_m=wgmma_n, block_n=192) if base.register_a else dict(block_m=192, block_n=wgmma_n)
    ring = {"stages": 2} if "stages" in {f.name for f in dataclasses.fields(base)} else {}  # step 15: one buffer
    configs = [dataclasses.replace(base, **tile, **ring)]
    if number == 23:
        configs.append(dataclasses.replace(configs[0], split_k=2))
    bound = harness.tolerance(number, dtype)
    for cfg in configs:
        lib = schedules.build(step, *shape, arch=arch, config=cfg, dtype=dtype)
        error = runner.check(lib["main"], *shape, dtype)
        assert error <= bound, f"relative error {error:g} (bound {bound:g}) with {cfg}"
