"""The tensor-core rungs (steps 12-14) without a GPU: they build, the CUDA shows the feature,
nvcc reports no spills or stack frame, configs fail in one line, the fragment maps are right,
and the arithmetic of 3xTF32 (split, promoted accumulation) holds in a numpy emulation.

On a GPU (``@pytest.mark.gpu``): correctness at odd shapes within each step's own bound, and
3xTF32 within fp32's 1e-5 at 4096^3 and at K = 16384.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import schedules
from schedules import step14_3xtf32
from schedules.transforms import tensor_intrin as ti
from schedules.config import TensorCoreConfig, TensorCorePipelineConfig, TF32x3Config
from steps.commands import cli
from steps.measure import harness, nvcc

from .checks import config_error

# The mma.sync steps; the Hopper rungs (wgmma, steps 15 on) are tests/test_hopper.py's.
TC_STEPS = [s for s in schedules.STEPS if s.tensor_cores and s.arch is None]
SHAPES = [(512, 512, 512), (2048, 2048, 2048), (1000, 1500, 700), (1, 300, 77)]
ODD = [(1000, 1500, 700), (1, 300, 77)]
MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


def _id(value) -> str:
    return f"step{value.number}" if hasattr(value, "number") else "x".join(map(str, value))


@functools.lru_cache(maxsize=None)
def _lib(number: int, shape: tuple, config=None):
    return schedules.build(number, *shape, config=config)


@functools.lru_cache(maxsize=None)
def _source(number: int, shape: tuple, config=None) -> str:
    return schedules.cuda_source(_lib(number, shape, config))


def test_the_tensor_core_steps_are_12_to_14():
    assert [s.number for s in TC_STEPS] == [12, 13, 14]
    assert [s.precision for s in TC_STEPS] == ["tf32", "tf32", "fp32"]
    assert [s.Config for s in TC_STEPS] == [TensorCoreConfig, TensorCorePipelineConfig, TF32x3Config]
    assert all(s.precision == "fp32" and not s.tensor_cores for s in schedules.STEPS if s.number < 12)
    # Each extends its prior's config (step 12 starts a new kind: warp tiles, not thread tiles).
    assert issubclass(TF32x3Config, TensorCorePipelineConfig) and issubclass(TensorCorePipelineConfig, TensorCoreConfig)


@pytest.mark.parametrize("step", schedules.STEPS, ids=_id)
def test_tolerance_per_step(step):
    """TF32 steps are held to their own labelled bound, never fp32's; 3xTF32 to fp32's."""
    expected = harness.TF32_TOLERANCE if step.number in (12, 13, 15, 16, 17, 18, 20, 21, 22, 23, 26, 27, 29, 30, 31) else harness.TOLERANCE
    assert harness.tolerance(step) == harness.tolerance(step.number) == expected
    assert harness.TOLERANCE == 1e-5 < harness.TF32_TOLERANCE


# --- builds and what the CUDA shows ---------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
@pytest.mark.parametrize("step", TC_STEPS, ids=_id)
def test_builds_with_mma_ldmatrix_and_cp_async(step, shape):
    src = _source(step.number, shape)
    cfg = step.default_config(*shape)
    kernels = re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(', src)
    assert {name for _, name in kernels} == {"main_kernel"}
    assert {int(b) for b, _ in kernels} == {cfg.threads} and cfg.threads % 32 == 0
    assert MMA in src
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src  # A's fragments
    # 16-byte copies (.cg) where 4 | N and 4 | K, 4-byte ones (.ca) otherwise.
    has_cp_async = re.search(r"cp\.async\.c[ag]\.shared\.global", src) is not None
    assert has_cp_async == (step.number >= 13), f"step {step.number}: cp.async {has_cp_async}"
    # No FFMA-style accumulation into C: every product goes through the tensor cores.
    assert not re.search(r"C\w*_local\w*\[\d+\] = \(C\w*_local\w*\[\d+\] \+ \(\w+\[[^\]]+\] \* ", src)


@pytest.mark.parametrize("step", TC_STEPS, ids=_id)
def test_fragments_and_accumulator_are_per_thread_registers(step):
    """Per lane: 8 accumulators per 16 x 16 tile of the warp's C (twice, C_slice and C, where
    step 14 promotes per slice), 4 registers per 16 x 8 (A) or 8 x 16 (B) fragment, twice that
    (big, small) for 3xTF32, and twice for step 13's double-buffered fragments."""
    shape = (512, 512, 512)
    cfg = step.default_config(*shape)
    src = _source(step.number, shape)
    tiles_m, tiles_n = cfg.warp_m // 16, cfg.warp_n // 16
    acc = re.findall(r"^\s*alignas\(\d+\) float (C\w*_local_ptr)\[(\d+)\];", src, re.M)
    accumulators = 2 if getattr(cfg, "promote", 0) == 2 else 1
    assert len({name for name, _ in acc}) == accumulators
    assert [int(n) for _, n in acc] == [tiles_m * tiles_n * 8] * accumulators == [cfg.warp_m * cfg.warp_n // 32] * accumulators
    per = (8 if step.number == 14 else 4) * getattr(cfg, "fragment_buffers", 1)
    name = "split_local" if step.number == 14 else "shared_dyn_local"
    for op, tiles in (("A", tiles_m), ("B", tiles_n)):
        sizes = {int(n) for n in re.findall(rf"float {op}_{name}_ptr(?:_\d+)?\[(\d+)\];", src)}
        assert sizes == {tiles * per}, (op, sizes)
    # B's fragment: four 32-bit shared loads per lane per 8 x 16 tile, no ldmatrix (.trans
    # swaps 16-bit halves, not fp32 elements).
    b_loads = re.findall(rf"B_{name}_ptr\[\d+\] = \(\(float\*\)buf_dyn_shmem_ptr\)\[", src)
    assert b_loads, "no 32-bit shared load into B's fragment"


def _mma_count(src: str) -> int:
    return src.count(MMA)


# One block / warp configuration, built as step 13 and as step 14 (promote 0, 1 and 2).
SAME_TILES = [
    ((512, 512, 512), dict(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=3)),
    ((1000, 1500, 700), dict(block_m=128, block_n=128, block_k=16, warp_m=64, warp_n=32, stages=2, raster=4)),
]


@pytest.mark.parametrize("shape, tiles", SAME_TILES, ids=lambda v: _id(v) if isinstance(v, tuple) else "")
def test_3xtf32_issues_three_mma_per_tile_product(shape, tiles):
    tf32 = _source(13, shape, TensorCorePipelineConfig(**tiles))
    n13 = _mma_count(tf32)
    assert n13 > 0 and n13 % 2 == 0  # two m16n8k8 per 16 x 16 x 8 tile
    for promote in (0, 1, 2):
        split = _source(14, shape, TF32x3Config(**tiles, promote=promote))
        assert _mma_count(split) == 3 * n13, (promote, _mma_count(split), n13)


# `C_acc_shared_dyn_local_ptr[5] = (C_acc_shared_dyn_local_ptr[5] + acc_ptr_3[5]);`
PROMOTE_ADD_RE = re.compile(r"(C\w*_local_ptr)\[(\d+)\] = \(\1\[\2\] \+ (acc_ptr(?:_\d+)?)\[(\d+)\]\);")


@pytest.mark.parametrize("shape", [(512, 512, 512), (1000, 1500, 700)], ids=_id)
def test_promote_adds_a_fresh_accumulator_in_fp32(shape):
    """promote 1: per 8 k, the three products of a 16 x 16 tile go to a zeroed local `acc`
    (6 mma: 2 halves x 3 products) that 8 fp32 adds fold into C; promote 0: straight into C."""
    tiles = SAME_TILES[0][1]
    promoted = _source(14, shape, TF32x3Config(**tiles, promote=1))
    adds = PROMOTE_ADD_RE.findall(promoted)
    # Register r of a tile's accumulator folds into register r of that tile's 8 in C.
    assert adds and all(int(c_reg) % 8 == int(acc_reg) for _, c_reg, _, acc_reg in adds)
    assert len(adds) == 8 * _mma_count(promoted) // 6
    accs = re.findall(r"float (acc_ptr(?:_\d+)?)\[(\d+)\];", promoted)
    assert accs and {n for _, n in accs} == {"8"}
    zeroed = re.findall(r"\b(acc_ptr(?:_\d+)?)\[\d\] = 0x0p\+0f", promoted)
    assert len(zeroed) == 8 * len(accs)
    # Each mma of the promoted kernel accumulates into an acc, none into C directly.
    outputs = re.findall(r'"=f"\(\(\(float \*\)\((\w+) \+ \d+\)\)\[0\]\)', promoted)
    assert outputs and all(o.startswith("acc_ptr") for o in outputs)
    plain = _source(14, shape, TF32x3Config(**tiles, promote=0))
    assert not PROMOTE_ADD_RE.search(plain) and "acc_ptr" not in plain
    outputs = re.findall(r'"=f"\(\(\(float \*\)\((\w+) \+ \d+\)\)\[0\]\)', plain)
    assert outputs and all(re.fullmatch(r"C\w*_local_ptr", o) for o in outputs)


# `C_acc_shared_dyn_local_ptr[5] = (C_acc_shared_dyn_local_ptr[5] + C_slice_local_ptr[5]);`
SLICE_ADD_RE = re.compile(r"(C_acc\w*_local_ptr)\[(\d+)\] = \(\1\[\2\] \+ (C_slice\w*_ptr)\[(\d+)\]\);")
MMA_OUTPUT_RE = re.compile(r'"=f"\(\(\(float \*\)\((\w+) \+ \d+\)\)\[0\]\)')
# (shape, tiles) with block_k 32 (4 k steps per slice) and 16 (2), padded and not.
SLICE_TILES = [
    ((2048, 2048, 2048), dict(block_m=64, block_n=128, block_k=32, warp_m=32, warp_n=64, stages=2, raster=8)),
    ((1000, 1500, 700), dict(block_m=64, block_n=64, block_k=16, warp_m=32, warp_n=32, stages=3)),
]


@pytest.mark.parametrize("shape, tiles", SLICE_TILES, ids=lambda v: _id(v) if isinstance(v, tuple) else "")
def test_promote_per_slice_adds_once_per_block_k_slice(shape, tiles):
    """promote 2: the mma accumulate a whole block_k slice into C_slice (registers, zeroed at
    each slice's start), and C_acc += C_slice in fp32 once per slice: block_k / 8 times fewer
    fp32 adds than promote 1 at the same tiles, the same 3 mma per product, none into C_acc."""
    steps = tiles["block_k"] // 8
    per_warp = tiles["warp_m"] * tiles["warp_n"] // 32  # accumulator registers per lane
    sliced = _source(14, shape, TF32x3Config(**tiles, promote=2))
    per_step = _source(14, shape, TF32x3Config(**tiles, promote=1))
    assert _mma_count(sliced) == _mma_count(per_step) > 0
    adds = SLICE_ADD_RE.findall(sliced)
    assert adds and len(PROMOTE_ADD_RE.findall(per_step)) == steps * len(adds)
    # Register r of the slice sum goes to register r of C: one layout (the mma's) for both.
    assert all(c_reg == s_reg for _, c_reg, _, s_reg in adds)
    # Each (unrolled) slice adds every register of the warp's tile once: 6 mma per 16 x 16 x 8
    # tile and block_k / 8 k steps per slice, so 8 adds per 6 * steps mma.
    assert len(adds) == 8 * _mma_count(sliced) // (6 * steps)
    assert sorted({int(r) for _, r, _, _ in adds}) == list(range(per_warp))
    assert "acc_ptr" not in sliced and not PROMOTE_ADD_RE.search(sliced)
    # Both accumulators are the warp tile's registers; the slice index compacts away.
    sizes = dict(re.findall(r"float (C_(?:acc|slice)\w*_local_ptr)\[(\d+)\];", sliced))
    assert sorted(sizes.values()) == [str(per_warp)] * 2, sizes
    # Every mma writes the slice accumulator, none C_acc (whose adds then round to nearest).
    outputs = MMA_OUTPUT_RE.findall(sliced)
    assert outputs and all(o.startswith("C_slice") for o in outputs), sorted(set(outputs))
    # C_slice is zeroed inside the slice loop (once per slice), C_acc once before it.
    loop = sliced.index("for (int ko = 0;")
    zero_slice = [m.start() for m in re.finditer(r"C_slice\w*_ptr\[\d+\] = 0x0p\+0f", sliced)]
    zero_acc = [m.start() for m in re.finditer(r"C_acc\w*_local_ptr\[\d+\] = 0x0p\+0f", sliced)]
    assert len(zero_acc) == per_warp and max(zero_acc) < loop
    assert zero_slice and min(zero_slice) > loop and len(zero_slice) % per_warp == 0
    assert len(zero_slice) // per_warp == len(adds) // per_warp  # one zeroing per slice add
    # Still a cp.async pipeline with ldmatrix fragment loads.
    assert re.search(r"cp\.async\.c[ag]\.shared\.global", sliced) and "cp.async.wait_group" in sliced
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in sliced


def test_promote_per_slice_pipelines_every_statement_of_the_slice():
    """The k_outer body of promote 2 is [copy A, copy B, zero C_slice, k steps, C += C_slice]:
    the software pipeline gets one stage per statement, copies first (cp.async ahead)."""
    shape, tiles = SLICE_TILES[0]
    sch = schedules.get_step(14).schedule(*shape, TF32x3Config(**{**tiles, "stages": 3}, promote=2))
    pipelined = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("C_o_update"))
                 if "software_pipeline_stage" in sch.get(loop).annotations]
    assert len(pipelined) == 1
    loop = pipelined[0]
    assert [int(v) for v in loop.annotations["software_pipeline_stage"]] == [0, 0, 2, 2, 2]
    assert [int(v) for v in loop.annotations["software_pipeline_order"]] == [0, 1, 2, 3, 4]
    # What each statement is: the blocks it holds.
    names = [set(re.findall(r'T\.sblock\("([^"]+)"\)', str(stmt))) for stmt in loop.body.seq]
    assert [{n for n in blocks if n.endswith("_shared.dyn")} for blocks in names[:2]] == \
        [{"A_pad_shared.dyn"}, {"B_pad_shared.dyn"}]
    assert "C_o_init" in names[2] and "C_o_update" in names[3] and "C_promote_update_o" in names[4]


def test_split_happens_once_per_fragment_in_registers():
    """3xTF32 splits at the shared -> register load: the TF32 mask 0xFFFFE000 on fragment
    registers, never on shared memory; small = x - big is left unrounded (the tensor core
    truncates it), so no +0x1000 rounding appears."""
    src = _source(14, (512, 512, 512))
    mask = f"(uint){ti.TF32_MASK}"
    # big in place: registers 0-3 of a fragment's 8 ...
    bigs = re.findall(r"([AB]_split_local_ptr(?:_\d+)?)\[(\d+)\] = \(\*\(float \*\)", src)
    # ... and small = x - big in registers 4-7, from the same fragment's register r - 4.
    smalls = re.findall(r"([AB]_split_local_ptr(?:_\d+)?)\[(\d+)\] = \(\1\[(\d+)\] - \(\*\(float \*\)", src)
    n = len(bigs)
    assert n > 0 and len(smalls) == n
    assert all(int(reg) % 8 < 4 for _, reg in bigs)
    assert all(int(reg) % 8 >= 4 and int(x) == int(reg) - 4 for _, reg, x in smalls)
    # Per fragment register: one mask for x - big, one for big in place; no rounding add.
    assert src.count(mask) == 2 * n
    assert f"+ (uint){0x1000})" not in src
    # The split's inputs are fragment registers, loaded once from shared memory, never
    # shared memory itself (that would split per use).
    inputs = [(v, rhs) for v, rhs in re.findall(r"float (v_\w*) = (.+);", src)  # per register: x (for small),
              if "buf_dyn_shmem" not in rhs]  # x (for big); not the NaN test's re-read of C (fp32_fallback.py)
    assert len(inputs) == 2 * n
    assert all(re.match(r"[AB]_split_local_ptr(?:_\d+)?\[\d+\]", rhs) for _, rhs in inputs), inputs[:3]
    assert mask not in _source(13, (512, 512, 512))


@pytest.mark.parametrize("step", TC_STEPS, ids=_id)
def test_odd_shapes_predicate_loads_and_stores(step):
    for shape in ODD:
        kernel = cli.kernel_only(_source(step.number, shape))
        M, N, K = shape
        # Bounds in float4s where 4 | N and 4 | K (1000 x 1500 x 700), in floats otherwise.
        vec = 4 if N % 4 == 0 and K % 4 == 0 else 1
        conds = re.findall(r"if \((.*)\) \{", kernel)
        assert conds, f"step {step.number} at {shape}: no predicate"
        # Bounds are counted in elements or in vectors of the copy (float4 where 4 divides).
        bounds = {M, N, K, N // 4, K // 4} - {1}
        assert any(re.search(rf"< {b}\)", c) for c in conds for b in bounds), conds[:4]
        # The store to C is under a condition.
        assert re.search(r"if \([^\n]*\) \{\n(?:[^\n]*\n){0,3}\s*(?:\*\(float\d?\*\)\()?C_ptr\b", kernel), \
            "no predicated store to C"
        # Operand loads: zero-filling where out of bounds (a predicated cp.async for 13/14,
        # a selected value for 12).
        if step.number >= 13:
            # cp.async with a source size of 0 where out of bounds: shared memory gets zeros.
            copies = [c for c in re.findall(r"(ptx_cp_async\w*)\(", kernel) if "_legacy_" in c]
            assert copies and all("_pred_" in c for c in copies), sorted(set(copies))
        else:
            assert "condval" in kernel
    whole = cli.kernel_only(_source(step.number, (512, 512, 512)))
    whole = NAN_CHECK.sub("", whole)  # step 14's branches: the fp32 fallback's tests after the store (fp32_fallback.py)
    assert not re.search(r"\bif \(|condval", whole), "a predicate where the tiles divide"


# --- nvcc: no spills, no stack frame --------------------------------------------------------

NVCC_SHAPES = [(512, 512, 512), (2048, 2048, 2048), (1000, 1500, 700)]


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("shape", NVCC_SHAPES, ids=_id)
@pytest.mark.parametrize("step", TC_STEPS, ids=_id)
def test_nvcc_no_spills_no_stack_frame(step, shape):
    report = nvcc.compile_report(_source(step.number, shape), "sm_90")
    assert report.ok, report.log[-2000:]
    cfg = step.default_config(*shape)
    where = f"step {step.number} at {_id(shape)} ({cfg.threads} threads, {report.registers} registers)"
    assert report.spills == 0, f"{where}: {report.spill_stores} B spill stores, {report.spill_loads} B spill loads"
    assert report.stack_bytes == 0, f"{where}: {report.stack_bytes} B stack frame"
    assert report.registers <= min(255, 65536 // cfg.threads)
    assert report.shared_bytes == 0  # dynamic only: sized at launch, not seen by ptxas


# promote 2 keeps a second warp-tile accumulator (C_slice) live next to C: the configs it is
# recommended at, each spill-free (ptxas, sm_90: 193 / 243 / 128 / 244 registers at 2048^3).
SLICE_CONFIGS = [
    dict(block_m=64, block_n=128, block_k=32, warp_m=32, warp_n=64, stages=2, raster=8),
    dict(block_m=64, block_n=128, block_k=32, warp_m=32, warp_n=32, stages=3, raster=8),
]


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (257, 129, 131)], ids=_id)
@pytest.mark.parametrize("tiles", SLICE_CONFIGS, ids=lambda t: f"{t['warp_m']}x{t['warp_n']}s{t['stages']}")
def test_nvcc_promote_per_slice_no_spills(tiles, shape):
    cfg = TF32x3Config(**tiles, promote=2)
    report = nvcc.compile_report(_source(14, shape, cfg), "sm_90")
    assert report.ok, report.log[-2000:]
    where = f"promote 2 {tiles} at {_id(shape)} ({report.registers} registers)"
    assert report.spills == 0 and report.stack_bytes == 0, f"{where}: {report.spills} B spills, {report.stack_bytes} B stack"
    assert report.registers <= min(255, 65536 // cfg.threads)


# --- config validation: one line each -------------------------------------------------------

BAD_CONFIGS = [
    (TensorCoreConfig(warp_m=24, block_m=96), ("warp_m", "multiple of 16")),
    (TensorCoreConfig(warp_n=40, block_n=80), ("warp_n", "multiple of 16")),
    (TensorCoreConfig(block_k=12), ("block_k", "multiple of 8")),
    (TensorCoreConfig(block_m=96, warp_m=64), ("warp_m", "divide", "block_m")),
    (TensorCoreConfig(block_n=96, warp_n=64), ("warp_n", "divide", "block_n")),
    (TensorCoreConfig(block_m=256, block_n=256, warp_m=32, warp_n=32), ("64 warps", "2048 threads", "1024")),
    (TensorCoreConfig(vector=3), ("vector", "1, 2 or 4")),
    (TensorCoreConfig(block_m=0), ("block_m", "positive integer")),
    (TensorCoreConfig(warp_n=16.0), ("warp_n", "positive integer")),
    (TensorCorePipelineConfig(stages=1), ("stages", "2 to 5")),
    (TensorCorePipelineConfig(stages=6), ("stages", "2 to 5")),
    (TensorCorePipelineConfig(pad_a=2), ("pad_a", "multiple of 4")),
    (TensorCorePipelineConfig(pad_b=32), ("pad_b", "below 32")),
    (TensorCorePipelineConfig(pad_b=-4), ("pad_b", "non-negative")),
    (TensorCorePipelineConfig(block_k=128, stages=5), ("shared memory", "227 KB")),
    (TF32x3Config(promote=3), ("promote", "0, 1 or 2")),
    (TF32x3Config(promote=True), ("promote", "0, 1 or 2")),
    (TF32x3Config(promote=-1), ("promote", "0, 1 or 2")),
    (TF32x3Config(stages=0), ("stages", "2 to 5")),
    (TensorCorePipelineConfig(fragment_buffers=3), ("fragment_buffers", "1 or 2")),
    (TensorCorePipelineConfig(fragment_buffers=True), ("fragment_buffers", "1 or 2")),
    (TensorCorePipelineConfig(fragment_buffers=2, stages=2), ("fragment_buffers 2", "stages >= 3")),
    (TF32x3Config(fragment_buffers=2), ("step 14", "fragment_buffers must be 1")),
    (TensorCorePipelineConfig(barriers=0), ("barriers", "1 or 2")),
    (TensorCorePipelineConfig(barriers=True), ("barriers", "1 or 2")),
    (TF32x3Config(barriers=3), ("barriers", "1 or 2")),
]


@pytest.mark.parametrize("cfg, words", BAD_CONFIGS, ids=lambda v: repr(v) if isinstance(v, tuple) else "")
def test_bad_configs_are_one_line_errors(cfg, words):
    config_error(lambda: cfg.validate(1024, 1024, 1024), *words)
    step = next(s for s in TC_STEPS if s.Config is type(cfg))
    config_error(lambda: step.schedule(1000, 1500, 700, cfg), *words)


def test_the_tile_copies_must_split_evenly():
    # 16 warps (512 threads) x float4 = 2048 floats per round; A's 64 x 8 tile is 512.
    cfg = TensorCoreConfig(block_m=64, block_n=512, block_k=8, warp_m=16, warp_n=128)
    config_error(lambda: cfg.validate(1024, 1024, 1024), "A tile", "evenly", "512 threads")


def test_good_configs_validate_at_any_shape():
    for cls in (TensorCoreConfig, TensorCorePipelineConfig, TF32x3Config):
        for shape in SHAPES + [(1, 1, 1), (3, 5, 7)]:
            cls().validate(*shape)
    TensorCorePipelineConfig(stages=2, pad_a=0, pad_b=0).validate(64, 64, 64)
    TF32x3Config(promote=0, stages=5, block_k=16).validate(64, 64, 64)
    TF32x3Config(promote=2, stages=2, block_k=64).validate(1000, 1500, 700)
    TensorCorePipelineConfig(fragment_buffers=2, stages=3).validate(3, 5, 33)  # 2 slices of 32


# --- step 13's fragment double buffering ----------------------------------------------------

@pytest.mark.parametrize("shape", [(512, 512, 512), (1000, 1500, 700)], ids=_id)
@pytest.mark.parametrize("stages", [3, 4])
def test_double_buffered_fragments_wait_for_the_next_slice(stages, shape):
    # With one fragment set the k loop waits for this slice's copy: stages - 1 copy groups may
    # stay in flight. With two, the next slice's first fragments load before this slice's last
    # mma, so the loop waits for the next slice's copy instead: one group fewer in flight. And
    # the k-step loop is pipelined, so its fragment registers come in two sets.
    tiles = dict(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=stages)
    waits = {}
    for buffers in (1, 2):
        src = _source(13, shape, TensorCorePipelineConfig(**tiles, fragment_buffers=buffers))
        waits[buffers] = max(int(n) for n in re.findall(r"cp\.async\.wait_group (\d+)", src))
        frag = re.search(r"float A(?:_pad)?_shared(?:_dyn)?_local_ptr\[(\d+)\]", src)
        assert frag, "no A fragment registers in the CUDA"
        waits[buffers, "regs"] = int(frag.group(1))
    assert waits[1] == stages - 1 and waits[2] == stages - 2, waits
    assert waits[2, "regs"] == 2 * waits[1, "regs"], waits


def test_double_buffered_fragments_need_stages_minus_one_slices():
    # Fewer slices than that and TVM 0.27 leaves the nested pipeline's wait count a run-time
    # value, which its codegen rejects: a one-line error instead, and the default keeps one set.
    cfg = TensorCorePipelineConfig(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=4,
                                   fragment_buffers=2)
    cfg.validate(64, 64, 65)  # 3 slices
    config_error(lambda: cfg.validate(64, 64, 64), "fragment_buffers 2", "3 slices", "K=64", "got 2")


@pytest.mark.parametrize("shape", [(7, 4096, 13), (512, 512, 64), (512, 512, 65), (1024, 1024, 32)], ids=_id)
def test_step13_default_builds_at_any_k(shape):
    cfg = schedules.get_step(13).default_config(*shape)
    slices = -(-shape[2] // cfg.block_k)
    assert cfg.fragment_buffers == (2 if slices >= cfg.stages - 1 else 1), cfg
    assert MMA in _source(13, shape)


# --- the fragment maps (PTX ISA, mma.m16n8k8 TF32) ------------------------------------------


def _bijection(fragment, rows: int, cols: int, regs: int) -> dict:
    owners = {(r, c): fragment(r, c) for r in range(rows) for c in range(cols)}
    assert len(set(owners.values())) == rows * cols, "two elements in one (lane, register)"
    assert set(owners.values()) == {(lane, reg) for lane in range(ti.WARP) for reg in range(regs)}
    return owners


def test_fragment_maps_are_bijections_onto_32_lanes():
    a = _bijection(ti.a_fragment, ti.TILE_M, ti.TILE_K, ti.FRAG_AB)
    b = _bijection(ti.b_fragment, ti.TILE_K, ti.TILE_N, ti.FRAG_AB)
    c = _bijection(ti.c_fragment, ti.TILE_M, ti.TILE_N, ti.FRAG_C)
    # Spot checks against the PTX ISA's tables (g = lane // 4, t = lane % 4).
    assert a[(9, 5)] == (4 * 1 + 1, 3)  # a3 holds (g + 8, t + 4)
    assert b[(5, 3)] == (4 * 3 + 1, 1)  # b1 holds (t + 4, g)
    assert b[(2, 12)] == (4 * 4 + 2, 2)  # n + 8: registers 2, 3
    assert c[(8, 3)] == (4 * 0 + 1, 3)  # c3 holds (g + 8, 2t + 1)
    assert c[(1, 14)] == (4 * 1 + 3, 4)  # n + 8: registers 4-7


def test_b_element_inverts_b_fragment():
    for lane in range(ti.WARP):
        for reg in range(ti.FRAG_AB):
            assert ti.b_fragment(*ti.b_element(lane, reg)) == (lane, reg)


def test_ldmatrix_row_addresses_give_the_a_fragment():
    """ldmatrix.x4: lane l gives the row address of matrix l // 8 (row l % 8); lane l receives
    element (l // 4, l % 4) of each 8 x 4 fp32 matrix. The load's address for lane tx is
    row tx % 16, column 4 (tx // 16): matrices (rows 0-7, k 0-3), (8-15, 0-3), (0-7, 4-7),
    (8-15, 4-7), which must be what a_fragment puts in registers 0-3."""
    starts = {tx: (tx % 16, 4 * (tx // 16)) for tx in range(ti.WARP)}
    for lane in range(ti.WARP):
        for reg in range(ti.FRAG_AB):
            row0, col0 = starts[8 * reg]  # matrix `reg` is addressed by lanes 8 reg .. 8 reg + 7
            assert [starts[8 * reg + r] for r in range(8)] == [(row0 + r, col0) for r in range(8)]
            element = (row0 + lane // 4, col0 + lane % 4)
            assert ti.a_fragment(*element) == (lane, reg)


def test_store_formula_inverts_c_fragment():
    """The store implementation writes register r of lane tx to (tx // 4 + 8 (r // 2 % 2),
    8 (r // 4) + 2 (tx % 4) + r % 2): that must be c_fragment's inverse."""
    import inspect

    source = inspect.getsource(ti._store)
    assert "O[tx // 4 + 8 * (r // 2 % 2), 8 * (r // 4) + 2 * (tx % 4) + r % 2] = C[r]" in source
    for tx in range(ti.WARP):
        for r in range(ti.FRAG_C):
            i, j = tx // 4 + 8 * (r // 2 % 2), 8 * (r // 4) + 2 * (tx % 4) + r % 2
            assert ti.c_fragment(i, j) == (tx, r)


def test_mma_register_halves_match_the_maps():
    """The mma implementation issues n 0-7 with B registers 0-1 and C registers 0-3, n 8-15
    with B 2-3 and C 4-7: what b_fragment and c_fragment say."""
    for k in range(ti.TILE_K):
        for n in range(ti.TILE_N):
            assert ti.b_fragment(k, n)[1] // 2 == n // 8
    for i in range(ti.TILE_M):
        for j in range(ti.TILE_N):
            assert ti.c_fragment(i, j)[1] // 4 == j // 8


# --- 3xTF32 arithmetic, emulated in numpy ---------------------------------------------------


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def tf32_big(x):
    return (_bits(x) & np.uint32(ti.TF32_MASK)).view(np.float32)


def tf32_split(x):
    big = tf32_big(x)
    return big, x - big  # x - big is exact in fp32


def seen_by_tensor_core(x):
    """What mma.sync reads of an fp32 register given as TF32: its top 11 significant bits."""
    return tf32_big(x)


def test_split_recovers_x_as_the_tensor_core_reads_it():
    """big + small is x exactly; the tensor core, which reads the top 11 bits of each, sees x to
    within 2^-21 (2^-22 if small were rounded: not worth its two integer ops, tensor_intrin.py)."""
    rng = np.random.default_rng(12)
    # Normal fp32 values whose `small` is normal too (|x| above ~1e-34; below, small is
    # subnormal and keeps fewer bits, as it would on the GPU).
    x = np.concatenate([rng.uniform(-1, 1, 200_000), rng.standard_normal(100_000) * 1e30,
                        rng.standard_normal(100_000) * 1e-25]).astype(np.float32)
    big, small = tf32_split(x)
    assert not np.any(_bits(big) & np.uint32(0x1FFF))  # big is a TF32 value: low 13 bits zero
    x64, big64, small64 = (v.astype(np.float64) for v in (x, big, small))
    assert np.array_equal(big64 + small64, x64)  # x - big is exact
    assert np.all(np.abs(x64 - big64) < 2.0**-10 * np.abs(x64))  # big: truncated, below one TF32 ulp
    seen = big64 + seen_by_tensor_core(small).astype(np.float64)
    assert np.all(np.abs(x64 - seen) <= 2.0**-21 * np.abs(x64))
    assert np.max(np.abs(x64 - seen) / np.abs(x64)) > 2.0**-23  # small's truncation does show
    assert np.all(np.sign(big64) * np.sign(x64) >= 0)  # truncation: toward zero, same sign
    # Without small, TF32 alone is a thousand times coarser.
    assert np.max(np.abs(x64 - big64) / np.abs(x64)) > 2.0**-11


def test_split_matches_the_tir_expression():
    """The numpy emulation above is the intrinsics' own arithmetic: tf32_split in TensorIR,
    compiled for the CPU, gives bit-identical big and small."""
    from tvm.script import tirx as T

    n = 4096

    @T.prim_func(s_tir=True)
    def split(X: T.Buffer((n,), "float32"), Y: T.Buffer((n, 2), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i, p in T.grid(n, 2):
            with T.sblock("split"):
                vi, vp = T.axis.remap("SS", [i, p])
                Y[vi, vp] = ti.tf32_split(X[vi], vp)

    lib = tvm.compile(tvm.IRModule({"main": split}), target="llvm")
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    y = tvm.runtime.tensor(np.full((n, 2), np.nan, np.float32))
    lib["main"](tvm.runtime.tensor(x), y)
    big, small = tf32_split(x)
    assert np.array_equal(y.numpy()[:, 0].view(np.uint32), big.view(np.uint32))
    assert np.array_equal(y.numpy()[:, 1].view(np.uint32), small.view(np.uint32))


@pytest.mark.parametrize("promote", [1, 2])
@pytest.mark.parametrize("shape", [(33, 65, 129), (1, 24, 7), (64, 64, 512)], ids=_id)
def test_3xtf32_computation_is_fp32_accurate_on_the_cpu(shape, promote):
    """Step 14's computation (split operands, its own pad blocks, before any schedule) run on
    the CPU: the three products recover fp32 accuracy (a plain TF32 product would be ~1e-4).
    promote 2's two-level sum (per block_k slice, then over slices) is the same product."""
    M, N, K = shape
    cfg = dataclasses.replace(step14_3xtf32.default_config(M, N, K), promote=promote)
    lib = tvm.compile(tvm.IRModule({"main": step14_3xtf32.computation(M, N, K, cfg)}), target="llvm")
    a, b = harness.random_operands(M, N, K, np.random.default_rng(M + N + K))
    c = tvm.runtime.tensor(np.full((M, N), np.nan, np.float32))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert harness.relative_error(c.numpy(), ref) <= harness.TOLERANCE
    tf32_only = tf32_big(a).astype(np.float64) @ tf32_big(b).astype(np.float64)
    assert harness.relative_error(tf32_only.astype(np.float32), ref) > 10 * harness.TOLERANCE


def _truncate_to_fp32(x: np.ndarray) -> np.ndarray:
    """float64 -> fp32 rounding toward zero (the tensor core's accumulation)."""
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


def test_truncating_accumulation_bias_grows_with_k_and_promotion_removes_it():
    """An emulation of the two accumulations of step 14 (products exact, as the split makes
    them to within 2^-22): each 8-k step's sum added into C with truncation (promote 0), or
    truncated into a fresh accumulator and added to C with fp32's round-to-nearest (promote 1).
    Truncation pulls every partial sum toward zero: a bias linear in K that crosses 1e-5 by
    K = 4096; promotion's error grows like a rounded sum's, far below."""
    rng = np.random.default_rng(20261122)
    errors = {}
    for K in (256, 1024, 4096):
        a, b = harness.random_operands(48, 48, K, rng)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        ref = a64 @ b64
        truncated = np.zeros(ref.shape, np.float32)
        promoted = np.zeros(ref.shape, np.float32)
        for k in range(0, K, 8):
            step = a64[:, k:k + 8] @ b64[k:k + 8]
            truncated = _truncate_to_fp32(truncated.astype(np.float64) + step)
            promoted = promoted + _truncate_to_fp32(step)  # fp32 add: round to nearest
        bias = float(np.mean((truncated - ref) * np.sign(ref)) / np.sqrt(np.mean(ref**2)))
        errors[K] = (harness.relative_error(truncated, ref), harness.relative_error(promoted, ref), bias)
    (t256, p256, bias256), (t1024, _, _), (t4096, p4096, bias4096) = (errors[k] for k in (256, 1024, 4096))
    assert bias4096 < bias256 < 0  # toward zero, and more of it with K
    assert 8 < t4096 / t256 < 32  # linear in K: 16x for 16x the steps
    assert t256 < t1024 < t4096 and t4096 > harness.TOLERANCE
    assert p4096 / p256 < 8 and p4096 < harness.TOLERANCE / 10


def _emulate_3xtf32(a, b, promote: int, block_k: int = 32) -> np.ndarray:
    """Step 14's arithmetic, mma by mma: the operands split as the load intrinsic splits them,
    each mma (one of small*big, big*small, big*big over 8 k) summing its products exactly and
    adding them to its accumulator with truncation (the tensor core), accumulators folded into
    C with fp32's round to nearest. promote 0: the mma accumulate into C; 1: into a fresh
    accumulator per 8-k step; 2: per block_k slice."""
    (a_big, a_small), (b_big, b_small) = tf32_split(a), tf32_split(b)
    a_small, b_small = seen_by_tensor_core(a_small), seen_by_tensor_core(b_small)
    a_big, a_small, b_big, b_small = (v.astype(np.float64) for v in (a_big, a_small, b_big, b_small))
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    span = {1: 8, 2: block_k}.get(promote)  # the k that one promoted accumulator sums
    acc = c
    for k in range(0, a.shape[1], 8):
        if span and k % span == 0:
            acc = np.zeros_like(c)
        s = slice(k, k + 8)
        for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):  # the intrinsic's order
            acc = _truncate_to_fp32(acc.astype(np.float64) + x[:, s] @ y[s])
        if not span:
            c = acc
        elif (k + 8) % span == 0:
            c = c + acc  # fp32 add: round to nearest
    return c


def test_promote_per_slice_error_does_not_grow_with_k():
    """promote 2 in emulation: within a slice the tensor core truncates, but relative to that
    slice's partial sum (block_k / K of C), and the slices add up rounding to nearest; so the
    error stays ~3e-7-5e-7 from K = 1024 to 16384, while promote 0's grows linearly (this
    emulation gives 3.8e-5 / 1.5e-4 at 4096 / 16384, the GPU measured 2.9e-5 / 1.2e-4 for
    promote 0 and 4.3e-7 / 8.2e-7 for promote 1, which it gives as 4.1e-7 / 8.1e-7)."""
    rng = np.random.default_rng(20261122)
    errors = {}
    for K in (1024, 4096, 16384):
        a, b = harness.random_operands(48, 48, K, rng)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        errors[K] = {p: harness.relative_error(_emulate_3xtf32(a, b, p), ref) for p in (0, 2)}
    truncated = [errors[K][0] for K in (1024, 4096, 16384)]
    sliced = [errors[K][2] for K in (1024, 4096, 16384)]
    assert 3 < truncated[1] / truncated[0] < 5 and 3 < truncated[2] / truncated[1] < 5  # linear in K
    assert truncated[1] > harness.TOLERANCE
    assert max(sliced) < 1e-6 and sliced[2] / sliced[0] < 2, sliced  # flat in K
    # A whole-K "slice" is promote 0 again: the slice length is what bounds the error.
    a, b = harness.random_operands(48, 48, 4096, rng)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert harness.relative_error(_emulate_3xtf32(a, b, 2, block_k=4096), ref) > harness.TOLERANCE


# --- on the GPU ------------------------------------------------------------------------------

GPU_ODD = [(1000, 1500, 700), (2047, 2047, 2047), (33, 65, 129), (1, 300, 77), (513, 257, 1025), (7, 4096, 13)]


@pytest.fixture(scope="module")
def runner():
    with harness.KernelRunner(repeat=3, seed=20261122) as r:
        yield r


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_ODD, ids=_id)
@pytest.mark.parametrize("step", TC_STEPS, ids=_id)
def test_gpu_odd_shapes_within_the_steps_bound(step, shape, runner):
    lib = schedules.build(step, *shape, arch=harness.gpu_arch())
    err = runner.check(lib["main"], *shape)
    bound = harness.tolerance(step)
    assert err <= bound, f"step {step.number} at {_id(shape)}: relative error {err:.3g} > {bound:g}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (256, 256, 16384)], ids=_id)
def test_gpu_3xtf32_is_fp32_accurate_at_large_k(shape, runner):
    lib = schedules.build(14, *shape, arch=harness.gpu_arch())
    errors = [runner.check(lib["main"], *shape) for _ in range(2)]
    assert all(e <= harness.TOLERANCE for e in errors), f"3xTF32 at {_id(shape)}: relative errors {errors}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (256, 256, 16384), (1000, 1500, 700), (257, 129, 131)], ids=_id)
def test_gpu_promote_per_slice_is_fp32_accurate(shape, runner):
    """promote 2 at its first recommended config: within 1e-5 of float64 at large K and at odd
    shapes (predicted ~4e-7-5e-7 at K = 4096-16384, step 14's docstring)."""
    cfg = TF32x3Config(**SLICE_CONFIGS[0], promote=2)
    lib = schedules.build(14, *shape, arch=harness.gpu_arch(), config=cfg)
    errors = [runner.check(lib["main"], *shape) for _ in range(2)]
    assert all(e <= harness.TOLERANCE for e in errors), f"promote 2 at {_id(shape)}: relative errors {errors}"


# --- one barrier per slice (schedules/lowering/one_barrier.py) ---------------------------------------

LOOP_SYNC_RE = re.compile(r"wait_group_async_wait_group_(?P<wait>\d)|(?P<commit>commit_group_async_commit_group\(\))|"
                          r"(?P<sync>__syncthreads\(\))|(?P<copy>ptx_cp_async_legacy_(?:pred_)?c[ag]_\d+)")


def _k_loop_head(src: str) -> list[str]:
    """The k loop's synchronisation, in order, up to its first mma: 'wait N', 'commit', 'sync'
    and 'copy' (a run of cp.async calls counts once), from the names of the inlined helpers."""
    start = src.index("for (int k_0_0 = 0;")
    out = []
    for m in LOOP_SYNC_RE.finditer(src[start:src.index(MMA, start)]):
        item = f"wait {m['wait']}" if m["wait"] else m.lastgroup
        if not (item == "copy" and out and out[-1] == "copy"):
            out.append(item)
    return out


@pytest.mark.parametrize("tiles", [
    dict(block_m=128, block_n=256, block_k=32, warp_m=64, warp_n=64, stages=4, fragment_buffers=2),
    dict(block_m=128, block_n=128, block_k=32, warp_m=64, warp_n=64, stages=3, fragment_buffers=1),
    dict(block_m=64, block_n=64, block_k=32, warp_m=32, warp_n=32, stages=2, fragment_buffers=1),
], ids=lambda t: f"{t['block_m']}x{t['block_n']}_s{t['stages']}_fb{t['fragment_buffers']}")
def test_one_barrier_per_slice_reorders_the_k_loop(tiles):
    # TVM: sync; copies; commit; wait N; sync. One barrier: wait N - 1; sync; copies; commit
    # (the same copy groups are complete when the mma start), and one __syncthreads fewer.
    shape = (2048, 2048, 2048)
    two = _source(13, shape, TensorCorePipelineConfig(**tiles, barriers=2))
    one = _source(13, shape, TensorCorePipelineConfig(**tiles, barriers=1))
    n = tiles["stages"] - tiles["fragment_buffers"]
    assert _k_loop_head(two) == ["sync", "copy", "commit", f"wait {n}", "sync"]
    assert _k_loop_head(one) == [f"wait {n - 1}", "sync", "copy", "commit"]
    assert one.count("__syncthreads()") == two.count("__syncthreads()") - 1
    assert one.count(MMA) == two.count(MMA)
    # Only the k loop changes: the prologue and the epilogue keep their waits.
    waits = [re.findall(r"wait_group_\d\(\);", src) for src in (one, two)]
    assert waits[0] and len(waits[0]) == len(waits[1])


def test_step13_default_from_2048_is_one_8_warp_block_per_sm_with_one_barrier():
    cfg = schedules.get_step(13).default_config(2048, 2048, 2048)
    assert (cfg.block_m, cfg.block_n, cfg.threads, cfg.stages, cfg.fragment_buffers) == (128, 256, 256, 4, 2)
    # One barrier per slice (no measurable effect, kept by a rule decided in advance); step 14
    # keeps TVM's two.
    assert cfg.barriers == 1 and schedules.get_step(14).default_config(2048, 2048, 2048).barriers == 2
    assert _k_loop_head(_source(13, (2048, 2048, 2048))) == ["wait 1", "sync", "copy", "commit"]
    # Outputs of fewer 128 x 256 tiles than that keep two 4-warp blocks per SM.
    for shape in [(1000, 1500, 700), (2048, 1024, 2048), (4096, 512, 4096)]:
        small = schedules.get_step(13).default_config(*shape)
        assert (small.block_m, small.block_n, small.threads, small.barriers) == (128, 128, 128, 2), shape


@pytest.mark.parametrize("shape", [(2048, 2048, 32), (2048, 2048, 64), (2047, 2049, 700), (4096, 4096, 4096)], ids=_id)
def test_one_barrier_builds_where_the_loop_is_short_or_absent(shape):
    # K of one or two slices leaves no k loop (or one of one iteration): nothing to rewrite,
    # and the pass must leave such kernels intact; padded shapes keep their predicates.
    cfg = dataclasses.replace(schedules.get_step(13).default_config(*shape), barriers=1)
    src = _source(13, shape, cfg)
    assert MMA in src
    if "for (int k_0_0 = 0;" in src:
        assert _k_loop_head(src)[1:3] == ["sync", "copy"]


# --- the fp32 fallback for NaN and tiny outputs (schedules/lowering/fp32_fallback.py) ----------------------

# One lane's test, in two halves: NaN (|x|'s bits above +inf's), or 0 < |x| < the tiny bound
# (|x|'s bits - 1 below the bound's bits - 1, group 1).
IS_NAN = re.compile(r"\(uint\)2139095040 < \(\(\*\(uint \*\)\(&\(v__\d+\)\)\) & \(uint\)2147483647\)")
IS_TINY = re.compile(r"\(\(\(\*\(uint \*\)\(&\(v__\d+\)\)\) & \(uint\)2147483647\) - \(uint\)1\) < \(uint\)(\d+)")
NAN_CHECK = re.compile(r"if \(+\(uint\)2139095040 < [^\n]*\{")  # a line that branches on the test
C_STORE = re.compile(r"\*\((float\d?)\*\)\(C_ptr \+|C_ptr\[[^;]*\] = (?!fp32_fallback)")


@pytest.mark.parametrize("shape", [(256, 256, 256), (100, 130, 70), (2048, 2048, 2048)], ids=_id)
def test_step14_recomputes_its_nan_and_tiny_outputs_in_fp32(shape):
    """After each store of C, one test over the stored lanes (re-read from the shared tile): is any
    NaN, or non-zero and under the tiny bound for this K? Where one is, a loop over the lanes tests
    each and computes that output again, K serial fmaf of A's row and B's column from global
    memory, stored over it. 3xTF32 makes NaN wherever an infinity reaches an output (small = inf
    - inf), where fp32 has +-inf; and the tensor core truncates tiny sums by whole subnormal ulps."""
    from schedules.lowering import fp32_fallback

    M, N, K = shape
    src = _source(14, shape)
    stores = [{"float4": 4, "float2": 2}.get(m.group(1), 1) for m in C_STORE.finditer(src)]
    lane_loops = [int(n) for n in re.findall(r"for \(int lane = 0; lane < (\d+); \+\+lane\)", src)]
    fallbacks = re.findall(rf"for \(int (k(?:_\d+)?) = 0; \1 < {K}; \+\+\1\) \{{\s*fp32_fallback_ptr\[0\] = "
                           rf"fmaf\(A_ptr\[[^;]*\], B_ptr\[\(\(k(?:_\d+)? \* {N}\) \+[^;]*\], fp32_fallback_ptr\[0\]\);", src)
    assert stores and len(fallbacks) == len(stores)
    # A vector store: one branch over all its lanes, then one per lane inside the loop; a scalar: one.
    branches = sum(2 if n > 1 else 1 for n in stores)
    assert len(NAN_CHECK.findall(src)) == branches
    lane_tests = sum(n + 1 if n > 1 else 1 for n in stores)  # each lane once, and the loop's one
    assert len(IS_NAN.findall(src)) == len(IS_TINY.findall(src)) == lane_tests
    tiny_bits = int(np.float32(fp32_fallback.tiny_bound(K)).view(np.uint32))
    assert {int(t) for t in IS_TINY.findall(src)} == {tiny_bits - 1}
    assert sorted(lane_loops) == sorted(n for n in stores if n > 1)  # one loop over each vector store's lanes
    assert src.count("] = fp32_fallback_ptr[0];") == len(stores)  # each writes C back
    # The hot loop is untouched: the same mma count as without the pass.
    plain = schedules.cuda_source(tvm.compile(schedules.get_step(14).schedule(*shape).mod, target=schedules.target()))
    assert src.count(MMA) == plain.count(MMA) and "fp32_fallback" not in plain


@pytest.mark.parametrize("K, exponent", [(1, -122), (8, -122), (9, -121), (1024, -115), (4096, -113), (2**20, -105)])
def test_the_tiny_bound_covers_the_truncations(K, exponent):
    """3 * ceil(K / 8) truncations of at most 2^-149 each stay under 2^-25 of the bound."""
    from schedules.lowering import fp32_fallback

    bound = fp32_fallback.tiny_bound(K)
    assert bound == 2.0 ** exponent
    truncations = 3 * -(-K // 8)
    assert truncations * 2.0 ** -149 <= 2.0 ** -25 * bound < 2 * truncations * 2.0 ** -149


@T.prim_func
def _classify(X: T.Buffer((12,), "float32"), Y: T.Buffer((12,), "int32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in range(12):
        Y[i] = T.Cast("int32", X[i])  # replaced below by the pass's test of X[i]


def test_the_fallback_test_on_values_either_side_of_each_bound():
    """The pass's per-lane test, compiled for the CPU and run on fp32 values: NaN and tiny
    non-zero values need fp32; infinities, zeros, the bound itself and ordinary values do not."""
    from schedules.lowering import fp32_fallback

    bound = fp32_fallback.tiny_bound(1024)
    bits = int(np.float32(bound).view(np.uint32))

    def visit(node):
        if isinstance(node, tvm.tirx.BufferStore):  # Y[i] = int32(X[i])
            test = fp32_fallback._needs_fp32(node.value.value, bits)
            return tvm.tirx.BufferStore(node.buffer, tvm.tirx.Cast("int32", test), node.indices)
        return None

    from schedules.lowering import pipelines

    func = _classify.with_body(pipelines.rewrite(_classify.body, visit))
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    cases = [(np.nan, 1), (-np.nan, 1), (np.inf, 0), (-np.inf, 0), (0.0, 0), (-0.0, 0), (bound, 0), (-bound, 0),
             (np.nextafter(np.float32(bound), np.float32(0)), 1), (-bound / 2, 1), (2.0 ** -149, 1), (1.0, 0)]
    x = np.array([v for v, _ in cases], np.float32)
    y = tvm.runtime.tensor(np.full(12, -1, np.int32))
    lib["main"](tvm.runtime.tensor(x), y)
    assert y.numpy().tolist() == [want for _, want in cases]


def test_only_3xtf32_gets_the_fallback():
    assert not NAN_CHECK.search(_source(13, (256, 256, 256))) and not NAN_CHECK.search(_source(12, (256, 256, 256)))
    assert getattr(step14_3xtf32, "FP32_FALLBACK", False)


def test_the_fallback_reads_m_n_k_from_the_flat_sizes():
    from schedules.lowering import fp32_fallback

    def flat(n, name):
        return tvm.tirx.decl_buffer((n,), "float32", name=name)

    f = fp32_fallback._Fallback(flat(100 * 70, "A"), flat(70 * 130, "B"), flat(100 * 130, "C"))
    assert (f.M, f.N, f.K) == (100, 130, 70)
    with pytest.raises(ValueError, match="not M\\*K, K\\*N, M\\*N"):
        fp32_fallback._Fallback(flat(100 * 70, "A"), flat(71 * 130, "B"), flat(100 * 130, "C"))


def test_pipelines_compose_the_device_passes():
    from schedules.lowering import fp32_fallback, one_barrier, pipelines

    assert pipelines.with_device_passes() == "default"
    name = pipelines.with_device_passes(one_barrier.single_barrier_pass, fp32_fallback.fp32_fallback_pass)
    assert name == "matmul_ladder:SingleBarrierPerSlice+Fp32Fallback"
    assert name == pipelines.with_device_passes(one_barrier.single_barrier_pass, fp32_fallback.fp32_fallback_pass)
    # step 14 at one barrier per slice runs both passes (its k loop, with the promote in it, is not
    # one the barrier pass rewrites; step 13's is: test_one_barrier_per_slice_reorders_the_k_loop)
    cfg = dataclasses.replace(schedules.get_step(14).default_config(2048, 2048, 2048), barriers=1)
    assert NAN_CHECK.search(_source(14, (2048, 2048, 2048), cfg))
