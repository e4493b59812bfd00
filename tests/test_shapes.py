"""Any M, N, K without a GPU: padding, predicates, vector width, validation, CLI exit codes.

What a GPU adds (correctness of the CUDA on the device, the fault isolation) is in
tests/test_gpu_shapes.py. Here:
- every step builds for odd and non-square shapes, 1 x N x K and M x 1 x K included;
- shapes the tiles divide get exactly the IR (and CUDA) they had before shape support, so
  the speed at 512/1024/2048 is unchanged by construction;
- odd shapes whose N and K are multiples of 4 keep every float4 global access the step has,
  now predicated; others fall back to narrower accesses (schedules.transforms.padding.global_vector);
- the padded TensorIR computes the right product when run on the CPU with its GPU threads
  made serial loops (the semantics of the padding and predicates, not of the CUDA);
- nvcc compiles a few odd shapes without spills; bad input is one line and exit 2.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re

import numpy as np
import pytest
import tvm
from tvm import s_tir

import schedules
from schedules.transforms import padding
from schedules.config import CooperativeFetchConfig, GridConfig, RegisterTileConfig, SharedTileConfig
from schedules.matmul import matmul
from schedules.transforms.cuda_core import hoist_init
from steps.commands import cli
from steps.measure import harness, nvcc

from .checks import config_error, one_line_error

STEPS = schedules.STEPS
# The steps that schedule the base matmul (and pad it to their tiles); the Hopper rungs' written
# kernels take odd shapes by TMA's zero fill and padded copies: tests/test_hopper.py; the
# matrix-vector kernel (24) guards its loads and stores: tests/test_matvec.py.
SCHEDULED = [s for s in STEPS if s.arch is None and s.number != 24]
ODD_SHAPES = [(1000, 1500, 700), (2047, 2047, 2047), (1, 2048, 2048), (2048, 1, 2048)]
NO_GPU = not harness.gpu_present()


def _step_id(step) -> str:
    return f"step{step.number}"


@functools.lru_cache(maxsize=None)
def _source(number: int, M: int, N: int, K: int) -> str:
    return schedules.cuda_source(schedules.build(number, M, N, K, arch="sm_90"))


def _uses_vector(step) -> bool:
    return "vector" in {f.name for f in dataclasses.fields(step.Config)}


# --- the padding rule -------------------------------------------------------------------


def test_round_up_and_padded_shape():
    assert padding.round_up(1000, 64) == 1024 and padding.round_up(1024, 64) == 1024
    assert padding.round_up(1, 32) == 32
    cfg = CooperativeFetchConfig(block_m=64, block_n=64, thread_m=4, thread_n=4, block_k=16)
    assert padding.padded_shape(cfg, 1000, 1500, 700) == (1024, 1536, 704)
    assert padding.padded_shape(GridConfig(8, 32), 1, 33, 7) == (8, 64, 7)  # step 1 does not tile k
    assert not padding.needs_padding(cfg, 1024, 64, 2048)
    assert padding.needs_padding(cfg, 1024, 64, 2047)


@pytest.mark.parametrize("vector, N, K, width", [
    (4, 1500, 700, 4), (4, 2048, 2048, 4), (4, 2047, 2048, 1), (4, 2048, 2047, 1),
    (4, 66, 130, 2), (4, 68, 130, 2), (4, 1, 2048, 1), (2, 2048, 2048, 2), (1, 2048, 2048, 1),
])
def test_global_vector(vector, N, K, width):
    assert padding.global_vector(vector, N, K) == width


def test_effective_config_narrows_only_the_vector():
    cfg = CooperativeFetchConfig()
    assert padding.effective_config(cfg, 1000, 1500, 700) is cfg
    narrow = padding.effective_config(cfg, 64, 64, 66)
    assert narrow == CooperativeFetchConfig(vector=2) and type(narrow) is CooperativeFetchConfig
    for c in (GridConfig(), RegisterTileConfig(), SharedTileConfig()):  # no vector: untouched
        assert padding.effective_config(c, 3, 5, 7) is c
    assert padding.describe(cfg, 1024, 1024, 1024) == ""
    assert padding.describe(cfg, 33, 65, 129) == "padded to 128x128x144, vector 1"


# --- divisible shapes: the IR of before --------------------------------------------------


def _unpadded_schedule(step, n: int):
    """The schedule path as it was before shape support: no padding calls at all."""
    cfg = step.default_config(n, n, n)
    cfg.validate(n, n, n)
    sch = s_tir.Schedule(matmul(n, n, n))
    tiles = step.module.apply(sch, cfg, sch.get_sblock("C"))
    hoist_init(sch, tiles)
    return sch


@pytest.mark.parametrize("n", (512, 1024, 2048))
@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
def test_divisible_shapes_get_the_unpadded_ir(step, n):
    """Same TensorIR as the path without padding, and the same pass configs, so the same CUDA
    and the same speed: no pad block, no narrowed vector, no predicate."""
    if getattr(step.module, "computation", None) is not None:
        # Step 14 computes over split operands, a PrimFunc of its own with its own A_pad, B_pad
        # and C_pad blocks (no pad-free path to compare with): where the tiles divide, the pads
        # are the identity, their bounds checks fold away, and the kernel has no predicate.
        assert padding.padded_shape(step.default_config(n, n, n), n, n, n) == (n, n, n)
        # (Its branches are the fp32 fallback's tests after the store, schedules/lowering/fp32_fallback.py.)
        kernel = re.sub(r"if \(+\(uint\)2139095040 < [^\n]*", "", cli.kernel_only(_source(step.number, n, n, n)))
        assert not re.search(r"\bif \(|condval|\?", kernel), "a predicate where the tiles divide"
        assert re.search(r"\bif \(|condval", cli.kernel_only(_source(step.number, n - 1, n, n)))
        return
    padded_path = step.schedule(n, n, n).mod
    tvm.ir.assert_structural_equal(padded_path, _unpadded_schedule(step, n).mod)
    assert "_pad" not in padded_path.script()


# sha256[:16] of the sm_90 CUDA of steps 1-6 at n^3, generated at the commit before shape
# support (d3bf712). Regenerate only for a deliberate change to a step's schedule:
#   python -c "import hashlib,schedules;print({(s,n):hashlib.sha256(schedules.cuda_source(
#   schedules.build(s,n,n,n)).encode()).hexdigest()[:16] for s in range(1,7) for n in (512,1024,2048)})"
CUDA_BEFORE_SHAPE_SUPPORT = {
    (1, 512): "900ef77a1f3c1e99", (1, 1024): "de7c7d0fa19f2e42", (1, 2048): "a2239131712d114d",
    (2, 512): "f98c0e42793785f2", (2, 1024): "4b2e3a6d629653cc", (2, 2048): "13d1aa64ecbd6db0",
    (3, 512): "54594d9e92130bc4", (3, 1024): "ba9d1e7352c41955", (3, 2048): "b9e60193ed459a87",
    (4, 512): "bf16a781fc619842", (4, 1024): "5fcc2e72bdcd51b3", (4, 2048): "78f44cd0ac1f16af",
    (5, 512): "d74f269cf4fdeb83", (5, 1024): "fb7d458e28aade3c", (5, 2048): "2874f9355d0a9623",
    (6, 512): "1c23d046415b9cba", (6, 1024): "3cc50b240beb63dc", (6, 2048): "cbf983458d6ee865",
}


@pytest.mark.parametrize("number, n", sorted(CUDA_BEFORE_SHAPE_SUPPORT), ids=lambda v: str(v))
def test_cuda_at_ladder_sizes_is_byte_identical_to_before_shape_support(number, n):
    digest = hashlib.sha256(_source(number, n, n, n).encode()).hexdigest()[:16]
    assert digest == CUDA_BEFORE_SHAPE_SUPPORT[(number, n)], (
        f"step {number} at {n}^3 generates different CUDA than before shape support")


# --- odd shapes build, pad, predicate, and keep their float4s ----------------------------


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("step", SCHEDULED, ids=_step_id)
def test_odd_shapes_build(step, shape):
    M, N, K = shape
    src = _source(step.number, M, N, K)
    assert 'extern "C" __global__' in src
    # One kernel on the caller's M x N x K buffers: no padded copy of A, B or C in global memory.
    kernels = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\)\s*\{', src)
    cfg = step.default_config(M, N, K)
    staged = padding.staged_operands(cfg, M, N, K)
    # Staged padding (step 11's stage_pads): first one copy kernel per misaligned operand,
    # X -> X_pad, and the matmul reads X_pad instead of X.
    copies, kernels = kernels[:len(staged)], kernels[len(staged):]
    for name, params in zip(staged, copies):
        assert re.findall(r"\w+_ptr", params) == [f"{name}_ptr", f"{name}_pad_ptr"], params
        assert f"{name}_pad_ptr" in kernels[0] and not re.search(rf"\b{name}_ptr", kernels[0]), kernels
        kernels = [k.replace(f"{name}_pad_ptr", "") for k in kernels]
    if getattr(cfg, "split_k", 1) > 1:
        # Split-K (step 11): the matmul writes its partial sums to a (padded) [split, M, N]
        # buffer, C_pad_rf, that a second kernel reduces into C; A and B still are not copied.
        assert len(kernels) == 2 and not re.search(r"\b[AB]_pad", " ".join(kernels)), kernels
        kernels = [re.sub(r"\w+_rf_ptr", "", kernels[1])]  # the reduction: partials in, C out
    assert len(kernels) == 1 and "_pad" not in kernels[0], kernels
    assert re.search(r"\bC_ptr\b", src.split(kernels[0])[-1]), "no store to C"


def _float4_globals(src: str, op: str) -> int:
    """float4 (16-byte) global accesses of operand `op`: plain loads/stores or 16-byte cp.async."""
    plain = len(re.findall(rf"\*\(float4\*\)\({op}_ptr \+", src))
    async16 = len(re.findall(rf"ptx_cp_async\w*_16\w*\([^;]*\b{op}_ptr\b", src))
    return plain + async16


@pytest.mark.parametrize("step", [s for s in STEPS if _uses_vector(s)], ids=_step_id)
def test_float4_survives_odd_shapes_that_are_multiples_of_4(step):
    """1000 x 1500 x 700: every operand that moves as float4 at 1024^3 still does, under a
    condition (a float4 is wholly in or out of bounds when 4 | N and 4 | K)."""
    whole, odd = _source(step.number, 1024, 1024, 1024), _source(step.number, 1000, 1500, 700)
    for op in "ABC":
        if _float4_globals(whole, op):
            assert _float4_globals(odd, op), f"{op}: float4 access lost at 1000x1500x700"
    kernel = cli.kernel_only(odd)
    assert re.search(r"if \(|pred", kernel), "no bounds predicate in the padded kernel"


@pytest.mark.parametrize("step", [s for s in STEPS if _uses_vector(s)], ids=_step_id)
def test_no_float4_where_rows_are_not_16_byte_aligned(step):
    """K = N = 2047: a float4 of a row would straddle rows and be misaligned; scalar accesses.
    (Step 11's own pick at 2047^3 stages A and B into aligned copies instead, whose kernel then
    copies 16 bytes at a time: tests/test_stage_pads.py; here its config without staging.)"""
    cfg = step.default_config(2047, 2047, 2047)
    if getattr(cfg, "stage_pads", 0):
        cfg = dataclasses.replace(cfg, stage_pads=0)
    src = schedules.cuda_source(schedules.build(step.number, 2047, 2047, 2047, arch="sm_90", config=cfg))
    assert all(_float4_globals(src, op) == 0 for op in "ABC")
    assert not re.search(r"ptx_cp_async\w*_(?:16|8)_", src)  # 4-byte cp.async only


# --- the padded TensorIR is right: run it on the CPU, threads as serial loops -------------


def serial_cpu_build(step, M: int, N: int, K: int, config=None):
    """The step's schedule for M x N x K (its default config, or `config`) with every GPU
    thread loop made serial and every buffer plain memory, compiled for the host CPU.
    Cooperative copies then run once per (serial) thread, redundantly but with the same
    result, so this checks what the padding, the inlined pad blocks and the predicates
    compute, independently of CUDA."""
    text = step.schedule(M, N, K, config).mod.script()
    text = re.sub(r'T\.thread_binding\((\d+), thread="[^"]+"\)', r"range(\1)", text)
    text = re.sub(r', scope="(?:shared|shared\.dyn|local)"', "", text)
    text = re.sub(r'"software_pipeline_async_stages": \[[0-9, ]*\],? ?', "", text)
    return tvm.compile(tvm.script.from_source(text), target="llvm")


SERIAL_SHAPES = [(33, 65, 129), (1, 24, 7), (9, 1, 20)]


# CUDA-core steps only: the tensor-core steps' tensorized blocks are PTX (ldmatrix, mma.sync)
# with no CPU lowering. Step 14's split computation (its padding included) is run on the CPU in
# tests/test_tensor_cores.py; the tensorized kernels are checked on the GPU, and so is step 24's
# (its threads bound as written, with warp shuffles).
SERIAL_STEPS = [s for s in STEPS if not s.tensor_cores and s.schedules_a_block]


@pytest.mark.parametrize("shape", SERIAL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("step", SERIAL_STEPS, ids=_step_id)
def test_padded_ir_computes_the_product(step, shape):
    if shape != SERIAL_SHAPES[0] and step.number not in (2, SERIAL_STEPS[-1].number):
        pytest.skip("degenerate shapes on a representative subset of steps (CPU time)")
    M, N, K = shape
    lib = serial_cpu_build(step, M, N, K)
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    a, b = harness.random_operands(M, N, K, rng)
    c = tvm.runtime.tensor(np.full((M, N), np.nan, np.float32))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    err = harness.relative_error(c.numpy(), a.astype(np.float64) @ b.astype(np.float64))
    assert err <= harness.TOLERANCE, f"relative error {err}"


# --- nvcc: odd shapes compile without spills --------------------------------------------

NVCC_CASES = [(2, (1000, 1500, 700)), (4, (33, 65, 129)), (5, (2047, 2047, 2047)),
              (6, (1000, 1500, 700)), (SCHEDULED[-1].number, (1, 2048, 2048))]


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("number, shape", NVCC_CASES, ids=lambda v: str(v))
def test_nvcc_compiles_odd_shapes_without_spills(number, shape):
    report = nvcc.compile_report(_source(number, *shape), "sm_90")
    assert report.ok, report.log[-2000:]
    assert report.spills == 0, f"{report.spill_stores} B spill stores, {report.spill_loads} B spill loads"


# --- validation: what still fails, in one line -------------------------------------------


@pytest.mark.parametrize("cfg, words", [
    (RegisterTileConfig(block_m=64, thread_m=3), ("thread_m", "divide", "block_m")),
    (RegisterTileConfig(block_m=256, block_n=256, thread_m=1, thread_n=2), ("threads per block", "1024")),
    (CooperativeFetchConfig(vector=3), ("vector", "1, 2 or 4")),
    (CooperativeFetchConfig(block_k=2, vector=4), ("vector", "block_k")),
    (CooperativeFetchConfig(block_m=128, block_n=128, thread_m=8, thread_n=8, block_k=4), ("A tile", "evenly")),
], ids=lambda v: type(v).__name__ if not isinstance(v, tuple) else v[0])
def test_internal_tile_constraints_stay_errors_at_odd_shapes(cfg, words):
    config_error(lambda: cfg.validate(1000, 1500, 700), *words)


def test_unknown_step_is_one_line_exit_2(capsys):
    assert cli.main(99, ["--build-only"]) == 2
    one_line_error(capsys.readouterr().err, "steps.step99", "unknown step 99")


def test_unknown_arch_is_one_line_exit_2(capsys):
    assert cli.main(4, ["--arch", "sm_75", "--shape", "33", "65", "129"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown arch 'sm_75'" in err[0]


def test_build_only_odd_shapes(capsys):
    assert cli.main(5, ["--build-only", "--shape", "33", "65", "129", "--shape", "1000", "1500", "700"]) == 0
    out = capsys.readouterr().out
    assert "33x65x129" in out and "(padded to 64x128x144, vector 1)" in out
    assert "1000x1500x700" in out and "(padded to 1024x1536x704)" in out


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_odd_shape_builds_only_exit_0(capsys):
    assert cli.main(6, ["--shape", "1", "2048", "2048", "--shape", "2048", "1", "2048"]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "python -m steps.step6: no CUDA GPU found; building only (timing needs a GPU)"]
    assert "1x2048x2048" in captured.out and "2048x1x2048" in captured.out


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_save_with_odd_shape_is_exit_2(capsys):
    assert cli.main(6, ["--save", "--shape", "1000", "1500", "700"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == "python -m steps.step6: error: --save needs a CUDA GPU and none was found"
    assert captured.out == ""
