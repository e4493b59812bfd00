"""The Hopper rungs in fp16 and bf16 (steps 15-18 and 20-22 with --dtype) without a GPU: the instructions
their ideas name, what step 18 changes for 16-bit (a transposed descriptor, no copy of B), the
consumers' wait, ptxas's report, odd shapes, and step 19's one line. Their results on a GPU are
tests/test_gpu_sixteen_bit.py's."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import schedules
from schedules import ConfigError
from schedules.transforms import wgmma
from steps.measure import nvcc

SIXTEEN = ("fp16", "bf16")
PTX_TYPE = {"fp16": "f16", "bf16": "bf16"}
RUNGS = (15, 16, 17, 18, 20, 21, 22)


def source(step, M, N, K, dtype, cfg=None) -> str:
    return schedules.cuda_source(schedules.build(step, M, N, K, arch="sm_90a", config=cfg, dtype=dtype))


def wgmma_lines(src: str) -> set[str]:
    """The wgmma mnemonics in the helpers' asm, with the trans-a / trans-b immediates of each
    (the last two numbers of the helper's name)."""
    return set(re.findall(r"tvm_builtin_ptx_wgmma_\w+_ss_mma_async_sync_aligned_(m64n\d+k\d+)_f32_(\w+?)_\w+?_1_1_(\d)_(\d)\(", src))


@pytest.mark.parametrize("dtype", SIXTEEN)
@pytest.mark.parametrize("step", RUNGS)
def test_each_rung_has_a_16_bit_form_on_k16_wgmma(step, dtype):
    s = schedules.get_step(step)
    assert dtype in s.dtypes and s.precision_of(dtype) == dtype and s.precision_of() == "tf32"
    src = source(step, 1024, 1024, 1024, dtype)
    n = {15: 128, 16: 128}.get(step, 256)
    trans_a = "1" if step >= 18 else "0"  # step 18 on read B^T through a transposed descriptor
    assert wgmma_lines(src) == {(f"m64n{n}k16", PTX_TYPE[dtype], trans_a, "0")}
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{PTX_TYPE[dtype]}.{PTX_TYPE[dtype]}" in src
    assert "tf32" not in src
    # C is written in the dtype (step 22: through shared memory, by a TMA store), from fp32
    # accumulators fenced by reference before the store.
    ctype = {"fp16": "half", "bf16": "nv_bfloat16"}[dtype]
    assert bool(re.search(rf"{ctype}\* __restrict__ C_ptr", src)) == (step != 22)
    assert "void ptx_wgmma_fence_operand(float& reg)" in src


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_step_18_reads_b_as_stored_and_the_others_copy_it(dtype):
    """Steps 15-17 transpose B with a copy kernel (K-major for both dtypes); step 18 maps B itself
    and reads it through a transposed descriptor: one kernel, no Bt."""
    for step in (15, 16, 17):
        assert "Bt_ptr" in source(step, 512, 512, 512, dtype)
    src = source(18, 512, 512, 512, dtype)
    assert "Bt_ptr" not in src
    assert len(re.findall(r'extern "C" __global__ [^;{]*\{', src)) == 1  # defined kernels: the GEMM only


@pytest.mark.parametrize("step", (16, 17, 18, 20, 21, 22))
def test_tf32_and_small_16_bit_tiles_hand_a_stage_back_with_one_group_in_flight(step):
    """Plan.in_flight: TF32 consumers hand a stage back with one wgmma group running (wait_group
    1) and wait for all on the tile's last slice, inside the loop (wgmma.wait_for_slice); 16-bit
    ones do so where the accumulator is at most 64 registers a thread (64 x 64 tiles here) and
    wait for every group on larger tiles, where it measured no faster (the default tiles at
    1024^3: 256 x 128 in most rungs)."""
    def loop_waits(dtype, cfg=None):
        src = source(step, 1024, 1024, 1024, dtype, cfg)
        return re.findall(r"wait_group_sync_aligned_(\d)\(\);", src[src.index("for (int kt2"):])

    one_in_flight = lambda waits: "1" in waits[:-1] and "0" in waits[:-1] and waits[-1] == "0"
    cfg = schedules.get_step(step).default_config(1024, 1024, 1024)
    small = replace(cfg, block_m=64, block_n=64)
    assert one_in_flight(loop_waits("fp32")) and one_in_flight(loop_waits("bf16", small))
    assert wgmma.plan(1024, 1024, 1024, cfg).in_flight == wgmma.plan(1024, 1024, 1024, small, "bf16").in_flight == 1
    default = wgmma.plan(1024, 1024, 1024, cfg, "bf16")
    if default.acc_n > 64:
        assert default.in_flight == 0 and set(loop_waits("bf16")) == {"0"}
    else:
        assert default.in_flight == 1 and one_in_flight(loop_waits("bf16"))


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_a_stage_is_a_128_byte_row_of_k(dtype):
    """64 halves a row (32 floats for TF32): the same bytes per stage, twice the k."""
    cfg = schedules.get_step(17).default_config(4096, 4096, 4096)
    p16, p32 = wgmma.plan(4096, 4096, 4096, cfg, dtype), wgmma.plan(4096, 4096, 4096, cfg)
    assert (p16.BK, p16.wg_k, p32.BK, p32.wg_k) == (64, 16, 32, 8)
    assert p16.tx_bytes == p32.tx_bytes == (128 + 256) * 128
    assert p16.smem_fl * 2 == p32.smem_fl * 4  # bytes


@pytest.mark.skipif(not nvcc.available(), reason="nvcc is not installed")
@pytest.mark.parametrize("dtype", SIXTEEN)
@pytest.mark.parametrize("step", RUNGS)
def test_ptxas_no_spills_no_stack(step, dtype):
    report = nvcc.compile_report(source(step, 4096, 4096, 4096, dtype), "sm_90a")
    assert report.ok and report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]


@pytest.mark.parametrize("shape", [(1000, 1500, 700), (33, 65, 129), (1, 4096, 4096), (257, 130, 95), (4097, 33, 1001)],
                         ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_build(shape):
    """TMA needs 16-byte row strides: K (and step 18's N) not a multiple of 8 halves pads."""
    for step in RUNGS:
        src = source(step, *shape, "bf16")
        assert "wgmma" in src
    M, N, K = shape
    assert ("A_pad" in source(15, *shape, "bf16")) == (K % 8 != 0)
    assert ("B_pad" in source(18, *shape, "bf16")) == (N % 8 != 0)


def test_step_19_has_no_16_bit_form():
    with pytest.raises(ConfigError) as err:
        schedules.build(19, 256, 256, 256, arch="sm_90a", dtype="bf16")
    assert str(err.value).startswith("step 19 has no bf16 form; steps with one:")
    assert "\n" not in str(err.value) and "18" in str(err.value)
