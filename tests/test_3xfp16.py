"""Step 28 (3xFP16, issue 48) without a GPU: the copies before the GEMM (maxima, shifts, the split
with its paddings), the GEMM's three fp16 products and its unscaling store, its configs and prior.
ptxas (no spills, no stack frame) and odd shapes are tests/test_hopper.py's, which runs every
Hopper rung; correctness and the fp32 contract on the GPU are tests/test_gpu_shapes.py's and
tests/test_gpu_special.py's, which take every fp32-accurate step."""

from __future__ import annotations

import re

import pytest

import schedules
from schedules.config import Wgmma3xFP16Config
from schedules.step28_3xfp16 import TOP, SplitPlan
from steps.commands import cli

from .checks import config_error

STEP25, STEP28 = schedules.get_step(25), schedules.get_step(28)


def source(M, N, K, cfg=None) -> str:
    return schedules.cuda_source(schedules.build(STEP28, M, N, K, arch="sm_90a", config=cfg))


def kernels(src: str) -> dict:
    """Each __global__ function's name and body."""
    out = {}
    for match in re.finditer(r'extern "C" __global__ void __launch_bounds__\(\d+\) (main_kernel\w*)\(([^)]*)\) \{', src):
        end = src.find('\nextern "C" __global__', match.end())
        out[match.group(1)] = (match.group(2), src[match.end():end if end > 0 else len(src)])
    return out


def gemm_of(src: str) -> tuple:
    """The GEMM kernel's parameters and body: the one that takes tensor maps."""
    (found,) = [pb for pb in kernels(src).values() if "CUtensorMap" in pb[0]]
    return found


def test_an_fp32_accurate_rung_after_step_25():
    assert STEP28.precision == "fp32" and STEP28.dtypes == ("fp32",) and STEP28.arch == "sm_90a"
    assert cli.prior_step(STEP28, "fp32").number == 25
    cfg = STEP28.default_config(8192, 8192, 8192)
    assert (cfg.block_m, cfg.block_n, cfg.stages, cfg.promote) == (128, 128, 3, 1)
    # Four tiles a stage (A's and B's hi and lo): 64 KB, three stages and their barriers.
    assert cfg.operand_bytes == 65536 and cfg.shared_bytes == 3 * (65536 + 16)
    # Below a wave of 128 x 128 tiles, step 19's rule: 64 x 64 tiles, one consumer, six stages.
    small = STEP28.default_config(1024, 1024, 1024)
    assert (small.block_m, small.block_n, small.stages, small.consumers) == (64, 64, 6, 1)


@pytest.mark.parametrize("cfg, words", [(Wgmma3xFP16Config(promote=0), "promote must be 1 to 8"),
                                        (Wgmma3xFP16Config(block_m=256), "block_m must be at most 128 for 3xFP16"),
                                        (Wgmma3xFP16Config(stages=4), "shared memory")], ids=str)
def test_bad_configs_are_one_line(cfg, words):
    config_error(lambda: schedules.build(STEP28, 1024, 1024, 1024, arch="sm_90a", config=cfg), words)


def test_no_16_bit_form():
    config_error(lambda: schedules.build(STEP28, 256, 256, 256, arch="sm_90a", dtype="bf16"), "no bf16 form")


def test_the_split_operands_and_their_tensor_maps():
    """A's halves side by side along K, B's stacked along K, each K rounded up to a slice (64)
    so a box of the hi half never reads the lo half; B's rows to 16 bytes (8 halves)."""
    p = SplitPlan(1000, 1501, 700, Wgmma3xFP16Config(), "float16")
    assert (p.BK, p.Kr, p.Nq) == (64, 704, 1504)
    assert p.stage_fl == 4 * 128 * 64 and p.tx_bytes == 65536
    assert [p.a_tile(1, h) for h in (0, 1)] == [32768, 32768 + 8192]
    assert [p.b_tile(1, h) for h in (0, 1)] == [32768 + 16384, 32768 + 24576]
    assert p.A_tma[:5] == [1408, 1000, 2816, 64, 128] and p.B_tma[:5] == [1504, 1408, 3008, 64, 64]


def test_the_copies_before_the_gemm():
    src = source(1000, 1501, 700)
    k = kernels(src)
    # Maxima (A's rows a cross-thread reduction; B's columns by chunks, then over them), the shifts,
    # the two splits, the paddings of A's columns and B's rows past K and B's columns past N, the GEMM.
    assert len(k) == 11
    bodies = "\n".join(body for _, body in k.values())
    assert "__shfl_down_sync" in bodies and bodies.count("ilogbf(") >= 2
    assert f"({TOP} - ilogbf(" in bodies
    # The shift as two powers of two, each a normal fp32: s >> 1 and s - (s >> 1).
    assert re.search(r"ldexpf\(0x1p\+0f[^,]*, \(condval\w* >> 1\)\)", bodies)
    # The split: hi = half(x 2^s), lo = half(x 2^s - float(hi)); float4 loads where rows allow.
    assert re.search(r"\(\(half\)\(\w+ - \(\(float\)\(\(half\)\w+\)\)\)\)", bodies) or "__float2half" in bodies
    gemm_params, gemm = gemm_of(src)
    assert gemm_params.count("CUtensorMap") == 2 and gemm_params.count("half*") == 2  # the halves, kept live
    # Three fp16 wgmma per 16 k (four k steps a slice), the store's ldexpf and the fallback's FFMA.
    # (64 x 64 tiles here: 96 of 128 x 128 would not fill the SMs; B^T MN-major: trans-a 1)
    assert len(re.findall(r"ptx_wgmma_f16_ss_mma_async_sync_aligned_m64n64k16_f32_f16_f16_1_1_1_0\(", gemm)) == 12
    assert re.search(r"= ldexpf\(total_ptr\[\d+\], \(\(0 - ", gemm)
    assert re.search(r"for \(int k = 0; k < 700; \+\+k\) \{\s*fallback_ptr\[0\] = fmaf\(A_ptr\[", gemm)


def test_aligned_rows_split_four_values_a_thread():
    src = source(2048, 2048, 2048)
    assert len(re.findall(r"ptx_wgmma_f16_ss_mma_async_sync_aligned_m64n128k16_f32_f16_f16_1_1_1_0\(", gemm_of(src)[1])) == 12
    k = kernels(src)
    assert len(k) == 8  # no padding
    splits = [body for params, body in k.values() if "float* __restrict__ A_ptr" in params and "half*" in params
              and "CUtensorMap" not in params]
    assert len(splits) == 1 and "*(float4*)(A_ptr" in splits[0]


def test_the_store_promotes_every_slice_and_flushes_at_a_long_k():
    # K = 70000: 1094 chunks, past step 19's 2 x 512: the total goes into C every 512 chunks.
    gemm = gemm_of(source(64, 64, 70000))[1]
    assert "% 512" in gemm or "& 511" in gemm
    short = gemm_of(source(2048, 2048, 2048))[1]
    assert "& 511" not in short and "% 512" not in short



@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 4096, 13), (2047, 2047, 2047), (1000, 777, 1001)], ids=str)
def test_odd_shapes_build_with_their_paddings(shape):
    """K rounded up to the slice pads A's columns and B's rows (both halves); N not a multiple of
    8 pads B's columns; the split runs a value a thread where a row's length is not a multiple of 4."""
    M, N, K = shape
    src = source(M, N, K)
    k = kernels(src)
    assert len(k) == 8 + (K % 64 != 0) * 2 + (N % 8 != 0)
    # (A's split: the kernel that reads A and writes halves; TVM's storage planner may give the
    # halves the memory of a buffer dead by then, and its name)
    splits = [body for params, body in k.values() if "float* __restrict__ A_ptr" in params and "half*" in params
              and "CUtensorMap" not in params]
    assert len(splits) == 1 and ("*(float4*)(A_ptr" in splits[0]) == (K % 4 == 0)
    assert "ptx_wgmma_f16_ss_mma_async" in gemm_of(src)[1]


def test_a_step_28_pick_builds_in_an_fp32_model_beside_step_25_with_its_epilogues(monkeypatch):
    """Step 28 has no measured rows on the H100; given a table whose fp32 rows pick it at two of a
    block's four products (1024 tokens) and step 25 at the others, the Relax pass places both,
    each kernel with its chain's epilogue, and the block builds for sm_90a. A model's kernels share
    one CUDA source: step 28's shared memory (halves) is named apart from step 25's (floats), or
    NVRTC refuses the source (the H200, 2026-11-29: "declaration is incompatible with previous
    smem_ptr"); nvcc checks that here."""
    import json

    from steps.measure import model as block
    from steps.measure import nvcc

    from . import checks

    doc = json.loads(schedules.dispatch.TABLE_PATH.read_text())
    shapes = [(1024, 768, 256), (1024, 256, 256), (1024, 1024, 256), (1024, 256, 1024)]
    doc["gpus"][0]["precisions"]["fp32"] = {"steps": [25, 28], "shapes": [
        [*s, [2e-3, 1e-3] if i % 2 else [1e-3, 2e-3]] for i, s in enumerate(shapes)]}
    monkeypatch.setattr(schedules.dispatch, "table", lambda path=None: doc)
    ex, chosen = block.compile_block(block.relax_block(256, 1024)[0], "ladder", "sm_90a")
    assert sorted(chosen) == sorted((s, 28 if i % 2 else 25) for i, s in enumerate(shapes))
    src = next(m.inspect_source() for m in _modules(ex.mod) if "__global__" in m.inspect_source())
    names = {name.split("_kernel")[0] for name in checks.cuda_kernels(src) if name.startswith("ladder_step")}
    assert names == {"ladder_step25_1024x768x256_bias", "ladder_step28_1024x256x256_bias_res",
                     "ladder_step25_1024x1024x256_bias_gelu", "ladder_step28_1024x256x1024_bias_res"}
    assert src.count("ldexpf(") >= 2 and "extern __shared__ __align__(1024) half smem_halves_ptr[];" in src
    if nvcc.available():
        report = nvcc.compile_report(src, "sm_90a")
        assert report.ok, report.log[-2000:]


def _modules(m):
    yield m
    for i in m.imports:
        yield from _modules(i)
