"""Steps 12 and 13 in fp16 and bf16 (issue 47): mma.sync.m16n8k16 with fp32 accumulation,
fragments by ldmatrix (B by ldmatrix.trans), C rounded to the dtype in the write-back.

CPU tests build the kernels and read their CUDA (and ptxas's report, where nvcc is installed);
the GPU test runs them against the float64 product of their 16-bit inputs."""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import pytest

import schedules
from schedules.config import TensorCoreConfig, TensorCorePipelineConfig, TF32x3Config
from steps.measure import nvcc

from .checks import config_error

STEPS = (12, 13)
DTYPES = ("fp16", "bf16")
PTX_TYPE = {"fp16": "f16", "bf16": "bf16"}
C_TYPE = {"fp16": "half", "bf16": "nv_bfloat16"}
ODD_SHAPES = ((1000, 1500, 700), (33, 65, 129), (1, 4096, 4096), (257, 130, 95))


@functools.lru_cache(maxsize=None)
def _source(step: int, dtype: str, shape=(512, 512, 512), config=None) -> str:
    return schedules.cuda_source(schedules.build(step, *shape, config=config, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS)
def test_cuda_has_m16n8k16_and_ldmatrix(step, dtype):
    src = _source(step, dtype)
    t = PTX_TYPE[dtype]
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32" in src
    assert "m16n8k8" not in src and "tf32" not in src
    # A by ldmatrix, B by ldmatrix.trans: one instruction per 16 x 16 fragment each.
    plain = len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", src))
    trans = len(re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16", src))
    assert plain > 0 and trans > 0
    # The kernel's parameters are the 16-bit A, B, C; no fp32 C_acc in global memory.
    assert f"{C_TYPE[dtype]}* __restrict__ C_ptr" in src
    assert "C_acc_ptr" not in src and "C_acc_pad_ptr" not in src
    # The rounding to the dtype happens in the store of C.
    assert f"({C_TYPE[dtype]})" in src


@pytest.mark.parametrize("dtype", DTYPES)
def test_step13_pipelines_the_16bit_copies(dtype):
    src = _source(13, dtype, (2048, 2048, 2048))
    assert re.search(r'cp\.async\.cg\.shared\.global[^\n]*\n[^\n]*"n"\(16\)', src)  # 16-byte copies
    assert "cp.async.commit_group" in src and "cp.async.wait_group" in src
    assert "cp.async" not in _source(12, dtype, (2048, 2048, 2048))


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not found on PATH")
@pytest.mark.parametrize("shape", ((4096, 4096, 4096), (1024, 1024, 1024), (1000, 1500, 700)), ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS)
def test_ptxas_no_spills_no_stack(step, dtype, shape):
    report = nvcc.compile_report(_source(step, dtype, shape), "sm_90")
    assert report.ok, report.log
    assert report.spills == 0, report.log
    assert report.stack_bytes == 0, report.log
    assert report.registers is not None and report.registers <= 255


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS)
def test_builds_at_odd_shapes(step, dtype, shape):
    src = _source(step, dtype, shape)
    assert f"m16n8k16.row.col.f32.{PTX_TYPE[dtype]}" in src
    assert "C_acc_ptr" not in src and "C_acc_pad_ptr" not in src  # the padding folded, nothing left on the host


@pytest.mark.parametrize("step", STEPS)
def test_default_configs_carry_the_dtype(step):
    s = schedules.get_step(step)
    for n in (512, 1024, 2048, 4096):
        fp32 = s.default_config(n, n, n)
        assert fp32.dtype == "fp32" and "dtype" not in fp32.as_dict()  # fp32 configs read as before
        for dtype in DTYPES:
            cfg = s.default_config(n, n, n, dtype)
            assert cfg.dtype == dtype and cfg.as_dict()["dtype"] == dtype
            assert cfg.block_k % 16 == 0 and cfg.vector == 8
            assert type(cfg).from_dict(cfg.as_dict()) == cfg
            cfg.validate(n, n, n)
    assert schedules.get_step(12).dtypes == schedules.get_step(13).dtypes == ("fp32", "fp16", "bf16")


def test_16bit_stage_is_half_the_bytes():
    fp32 = TensorCorePipelineConfig(pad_a=0, pad_b=0)
    bf16 = dataclasses.replace(fp32, dtype="bf16", vector=8)
    assert bf16.operand_bytes * 2 == fp32.operand_bytes
    assert bf16.output_bytes == fp32.output_bytes  # the C tile stays fp32 in shared memory


@pytest.mark.parametrize(
    "cfg, words",
    [
        (TensorCoreConfig(block_k=8, dtype="bf16", vector=8), ("block_k", "multiple of 16", "bf16")),
        (TensorCoreConfig(block_k=24, dtype="fp16", vector=8), ("block_k", "multiple of 16")),
        (TensorCoreConfig(dtype="bf16", vector=16), ("vector", "16 bytes")),
        (TensorCoreConfig(dtype="fp8", vector=8), ("dtype", "fp8")),
        (TensorCorePipelineConfig(dtype="bf16", vector=8, pad_a=4), ("pad_a", "multiple of 8")),
        (TensorCorePipelineConfig(dtype="fp16", vector=8, pad_a=8, pad_b=64), ("pad_b", "below 64")),
        (TF32x3Config(dtype="bf16"), ("step 14", "fp32")),
    ],
    ids=repr,
)
def test_bad_16bit_configs(cfg, words):
    config_error(lambda: cfg.validate(2048, 2048, 2048), *words)


def test_config_and_dtype_must_agree():
    s12 = schedules.get_step(12)
    fp32_cfg = s12.default_config(512, 512, 512)
    bf16_cfg = s12.default_config(512, 512, 512, "bf16")
    config_error(lambda: schedules.build(12, 512, 512, 512, config=fp32_cfg, dtype="bf16"), "fp32", "bf16")
    config_error(lambda: schedules.build(12, 512, 512, 512, config=bf16_cfg), "bf16", "fp32")
    config_error(lambda: schedules.build(14, 512, 512, 512, dtype="bf16"), "step 14", "bf16")


def test_fp32_config_unchanged_by_the_dtype_field():
    """The field is keyword-only and left out of fp32's as_dict: positional construction and
    the printed/saved fp32 configs are as before."""
    cfg = TensorCorePipelineConfig(128, 256, 32, 64, 64, 4, 4, 4, 8, 4, 2, 1)
    assert cfg.dtype == "fp32" and cfg.barriers == 1
    assert list(cfg.as_dict()) == ["block_m", "block_n", "block_k", "warp_m", "warp_n", "vector", "stages",
                                   "pad_a", "pad_b", "raster", "fragment_buffers", "barriers"]


# --- on the GPU ------------------------------------------------------------------------------

BOUND = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}  # the unit roundoff: the store's rounding is about half


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ((512, 512, 512), (1000, 1500, 700), (33, 65, 129), (257, 130, 95)), ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", STEPS)
def test_gpu_matches_float64_of_the_16bit_inputs(step, dtype, shape):
    torch = pytest.importorskip("torch")
    import tvm

    M, N, K = shape
    kind = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    g = torch.Generator(device="cuda").manual_seed(M + 3 * N + 7 * K)
    a = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).to(kind)
    b = (torch.rand(K, N, device="cuda", generator=g) * 2 - 1).to(kind)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=kind)
    lib = schedules.build(step, M, N, K, dtype=dtype)
    lib["main"](*(tvm.runtime.from_dlpack(t) for t in (a, b, c)))
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    out = c.double()
    assert not torch.isnan(out).any()
    err = (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()
    rounding = (torch.linalg.norm(ref.to(kind).double() - ref) / torch.linalg.norm(ref)).item()
    assert err < BOUND[dtype], err
    assert err < 1.05 * rounding + 1e-6, (err, rounding)
    assert np.isfinite(err)
