"""The fused epilogue (schedules/transforms/epilogue.py): D = act(alpha * A @ B + bias + beta * C_in) in the
step's store. The math runs here on the CPU (the unscheduled function, built for llvm); the
schedules are built for CUDA and read: one kernel fused, two separate. On a GPU:
tests/test_gpu_epilogue.py and python -m steps.epilogue."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import tvm

import schedules
from schedules import ConfigError
from schedules.transforms.epilogue import Epilogue
from schedules.matmul import matmul_epilogue

EPILOGUES = [Epilogue(bias=True), Epilogue(bias=True, activation="relu"), Epilogue(bias=True, activation="gelu"),
             Epilogue(alpha=2.0, beta=-0.5), Epilogue(bias=True, activation="gelu", alpha=0.5, beta=1.0),
             Epilogue(bias=True, activation="silu"), Epilogue(gate=True), Epilogue(bias=True, activation="silu", gate=True),
             Epilogue()]


def reference(a, b, bias, c_in, ep):
    v = ep.alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if ep.bias:
        v = v + bias[None, :]
    if ep.beta != 0:
        v = v + ep.beta * c_in
    if ep.activation == "relu":
        v = np.maximum(v, 0)
    elif ep.activation == "gelu":
        v = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    elif ep.activation == "silu":
        v = v / (1 + np.exp(-v))
    if ep.gate:
        v = v * c_in
    return v


@pytest.mark.parametrize("ep", EPILOGUES, ids=lambda e: e.describe())
def test_the_epilogue_computes_what_it_says_on_the_cpu(ep):
    M, N, K = 24, 40, 16
    lib = tvm.compile(matmul_epilogue(M, N, K, ep), target="llvm")
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((M, K), (K, N)))
    bias, c_in = rng.uniform(-1, 1, N).astype(np.float32), rng.uniform(-1, 1, (M, N)).astype(np.float32)
    dev = tvm.cpu()
    args = [a, b] + ([bias] if ep.bias else []) + ([c_in] if ep.reads_c else []) + [np.full((M, N), np.nan, np.float32)]
    assert len(args) == len(ep.params())
    tensors = [tvm.runtime.tensor(x, dev) for x in args]
    lib["main"](*tensors)
    out = tensors[-1].numpy().astype(np.float64)
    ref = reference(a, b, bias, c_in, ep)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6


def kernels(source: str) -> set[str]:
    return set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", source))


@pytest.mark.parametrize("step", [1, 3, 6, 9, 10, 11, 12, 13])
@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1000, 1500, 700), (256, 256, 16384)])
def test_fused_is_one_kernel_and_separate_is_two_more(step, shape):
    ep = Epilogue(bias=True, activation="gelu")
    bare = kernels(schedules.cuda_source(schedules.build(step, *shape)))
    fused = schedules.cuda_source(schedules.build(step, *shape, epilogue=ep))
    separate = schedules.cuda_source(schedules.build(step, *shape, epilogue=ep, fused=False))
    assert len(kernels(fused)) == len(bare)  # the epilogue adds no kernel
    assert len(kernels(separate)) == len(bare) + 1
    assert "erff(" in fused and "erff(" in separate
    # fused: no global buffer between the product and the epilogue (the product stays in registers)
    assert "C_ptr" not in fused and "C_ptr" in separate and "D_ptr" in fused


def test_steps_without_the_base_matmul_say_so_in_one_line():
    for step in (14, 15):
        with pytest.raises(ConfigError, match=f"step {step} has no fused epilogue"):
            schedules.get_step(step).schedule(512, 512, 512, None, Epilogue(bias=True))
    with pytest.raises(ConfigError, match="step 13's fused epilogue is written for fp32 inputs only; in bf16, the "
                                          "Hopper rungs 20, 21, 22, 23, 26, 27, 29, 30, 31 have one"):
        schedules.get_step(13).schedule(512, 512, 512, None, Epilogue(bias=True), dtype="bf16")


# --- the Hopper rungs (steps 20, 21, 23): the epilogue in the consumers' register store; 22: staged ---


def hopper_source(step, shape, dtype, ep=None, fused=True):
    return schedules.cuda_source(schedules.build(step, *shape, arch="sm_90a", epilogue=ep, fused=fused, dtype=dtype))


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("step, shape", [(20, (2048, 2048, 2048)), (21, (2048, 2048, 2048)), (23, (2048, 2048, 2048)),
                                         (20, (1000, 777, 1001)), (23, (256, 256, 16384))])
def test_the_hopper_rungs_take_the_epilogue_in_their_store(step, shape, dtype):
    assert schedules.EPILOGUE_RUNGS == (19, 20, 21, 22, 23, 25, 26, 27, 28, 29, 30, 31)
    ep = Epilogue(bias=True, activation="gelu", beta=1.0)
    bare, fused = hopper_source(step, shape, dtype), hopper_source(step, shape, dtype, ep)
    separate = hopper_source(step, shape, dtype, ep, fused=False)
    assert len(kernels(fused)) == len(kernels(bare)) and len(kernels(separate)) == len(kernels(bare)) + 1
    # The kernel's parameters (Epilogue.params): A, B, bias, C_in, D; fused, no C between them.
    assert all(p in fused for p in ("bias_ptr", "C_in_ptr", "D_ptr")) and "C_ptr" not in fused
    split = "W_ptr" in bare  # step 23 at 256 x 256 x 16384: the epilogue in the sum of the parts
    assert split == (step == 23 and shape[0] == 256)
    assert "erff(" in fused and "erff(" not in bare and "C_ptr" in separate
    # Unfused, C sits between the kernels: the epilogue's kernel keeps the GEMM's operands live, so
    # the storage planner does not hand C the padded copies' memory the GEMM reads (wgmma.keep_live).
    assert "prefetch.global.L2" in separate and ("prefetch.global.L2" in fused) == split  # (step 23's sum does too)
    if dtype == "bf16":  # 16-bit bias and C_in are read as fp32, and the result rounded once
        assert "((float)bias_ptr[" in fused and "((float)C_in_ptr[" in fused
    # The epilogue, once per stored value: the register store's 4 per 4 accumulator registers
    # (x2 consumers' code paths unrolled into one), or the sum of the parts' one per thread.
    assert fused.count("erff(") == (1 if split else {"bf16": 128, "fp32": 128}[dtype])


@pytest.mark.parametrize("step, shape", [(19, (2048, 2048, 2048)), (19, (1000, 777, 1001)), (19, (16, 16, 1 << 17)),
                                         (25, (4096, 4096, 4096)), (25, (512, 512, 512)), (28, (2048, 2048, 2048)),
                                         (28, (1000, 777, 1001)), (28, (16, 16, 1 << 17))])
def test_the_fp32_accurate_rungs_take_the_epilogue_after_their_fallbacks_test(step, shape):
    """Steps 19, 25 (3xTF32) and 28 (3xFP16, after its unscale): D = the epilogue of the fp32 total in the consumers' store, one
    kernel; the fallback tests the raw total, and where it fires (NaN or tiny sums) the thread
    writes its raw totals back, recomputes, then applies the epilogue in place: one more erff in
    that rare loop. 16 x 16 x 2^17 flushes partial sums into D every 512 chunks first."""
    ep = Epilogue(bias=True, activation="gelu", beta=1.0)
    bare, fused = hopper_source(step, shape, "fp32"), hopper_source(step, shape, "fp32", ep)
    separate = hopper_source(step, shape, "fp32", ep, fused=False)
    assert len(kernels(fused)) == len(kernels(bare)) and len(kernels(separate)) == len(kernels(bare)) + 1
    assert all(p in fused for p in ("bias_ptr", "C_in_ptr", "D_ptr")) and "C_ptr" not in fused
    assert "fmaf(" in fused and "fmaf(" in bare  # the fallback's serial FFMA, in both
    per_thread = {(2048, 2048, 2048): 64, (1000, 777, 1001): 32, (16, 16, 1 << 17): 8,
                  (4096, 4096, 4096): 64, (512, 512, 512): 32}[shape]  # a consumer's accumulator registers
    # (128 x 128 tiles or 64 x 64; at 16 x 16 the stores past row 16 fold away)
    assert fused.count("erff(") == per_thread + 1 and "erff(" not in bare


@pytest.mark.skipif(not __import__("steps.measure.nvcc", fromlist=["x"]).available(), reason="nvcc not installed")
@pytest.mark.parametrize("step", [19, 25, 28])
def test_ptxas_on_the_fp32_accurate_rungs_fused_store(step):
    """No spill, no stack frame, wgmma still async (no C7518) with bias, GELU and C_in at 4096^3."""
    from steps.measure import nvcc

    ep = Epilogue(bias=True, activation="gelu", beta=1.0)
    report = nvcc.compile_report(hopper_source(step, (4096, 4096, 4096), "fp32", ep), "sm_90a")
    assert report.ok and "C7518" not in report.log and report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1000, 776, 1001)])
def test_step_22_applies_the_epilogue_as_it_stages_the_tile_for_its_tma_store(shape, dtype):
    ep = Epilogue(bias=True, activation="gelu", beta=1.0)
    bare, fused = hopper_source(22, shape, dtype), hopper_source(22, shape, dtype, ep)
    separate = hopper_source(22, shape, dtype, ep, fused=False)
    assert len(kernels(fused)) == len(kernels(bare)) and len(kernels(separate)) == len(kernels(bare)) + 1
    # The kernel reads bias and C_in; the tile still leaves through shared memory and TMA (D's
    # tensor map, which the host encodes): no pointer to D or C in the kernel.
    assert "bias_ptr" in fused and "C_in_ptr" in fused and "D_ptr" not in fused and "C_ptr" not in fused
    tma_store = "cp.async.bulk.tensor.2d.global.shared::cta"
    assert tma_store in fused and tma_store in bare
    assert fused.count("erff(") == 128 and "erff(" not in bare
    # A chunk's rows and columns past D's edge are staged too (TMA clips them): the epilogue's
    # reads are clamped into the tensors, so at 1000 x 776 the bias is read at min(col, 775) and
    # C_in at min(row, 999) (where the row can pass 999).
    edge = shape != (2048, 2048, 2048)
    assert ("bias_ptr[min(" in fused) == edge and (", 999) * 776" in fused) == edge


def test_step_22_hands_an_output_tma_cannot_address_to_step_21_with_its_epilogue():
    ep = Epilogue(bias=True)
    # 777 bf16 columns are not 16-byte rows: step 21's kernel, its register store with the epilogue.
    assert hopper_source(22, (1000, 777, 1001), "bf16", ep) == hopper_source(21, (1000, 777, 1001), "bf16", ep)


def test_the_hopper_epilogue_leaves_the_bare_kernel_alone():
    # Without an epilogue the GEMM writes C as before: the same source as the rung's own kernel.
    from schedules import step20_persistent

    cfg = schedules.get_step(20).default_config(2048, 2048, 2048, "bf16")
    plain = schedules.cuda_source(schedules.build(20, 2048, 2048, 2048, arch="sm_90a", dtype="bf16"))
    assert step20_persistent.kernel(2048, 2048, 2048, cfg, "bf16").script() == \
        step20_persistent.kernel(2048, 2048, 2048, cfg, "bf16", None, True).script()
    assert "D_ptr" not in plain and "C_ptr" in plain


def test_bad_epilogues_are_one_line():
    with pytest.raises(ConfigError, match="activation"):
        Epilogue(activation="tanh")
    with pytest.raises(ConfigError, match="alpha"):
        Epilogue(alpha=float("nan"))
    assert Epilogue().is_identity and not Epilogue(beta=1).is_identity
    assert Epilogue(bias=True, beta=1).params() == ("A", "B", "bias", "C_in", "D")
    with pytest.raises(ConfigError, match="gate"):
        Epilogue(beta=1, gate=True)  # C_in added or multiplied, not both
    gated = Epilogue(bias=True, activation="silu", gate=True)
    assert gated.params() == ("A", "B", "bias", "C_in", "D") and not gated.is_identity
    assert (gated.tag(), gated.describe()) == ("bias_silu_gate", "silu(acc + bias) * C_in")


def test_a_measuring_command_saves_whole_or_not_at_all(tmp_path, capsys):
    from steps.commands import options

    doc = {"environment": {"gpu": "Fake GPU"}, "rows": [1]}
    assert options.report_and_save(doc, "table", ["x at 1: wrong"], True, tmp_path, "e.json", "e.txt") == 1
    assert not any(tmp_path.iterdir()) and "FAILED x at 1: wrong" in capsys.readouterr().err
    extra = lambda gpu_dir: [(gpu_dir / "e.png").write_bytes(b"png") and "e.png"]  # noqa: E731
    assert options.report_and_save(doc, "table", [], True, tmp_path, "e.json", "e.txt", extra) == 0
    assert sorted(p.name for p in (tmp_path / "fake-gpu").iterdir()) == ["e.json", "e.png", "e.txt"]
    assert (tmp_path / "fake-gpu" / "e.txt").read_text() == "table\n"


@pytest.mark.skipif(not __import__("steps.measure.nvcc", fromlist=["x"]).available(), reason="nvcc not installed")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("ep", [Epilogue(bias=True), Epilogue(bias=True, beta=1.0), Epilogue(bias=True, activation="gelu")],
                         ids=lambda e: e.describe())
@pytest.mark.parametrize("step", [20, 22])
def test_ptxas_on_the_fused_hopper_store(ep, dtype, step):
    """No spill, no stack frame, wgmma still async; except step 20's bf16 GELU, which spills 12
    bytes in the store of its 128 accumulator registers a thread (docs/models.md). Step 22's
    store, chunk by chunk, spills nothing."""
    from steps.measure import nvcc

    report = nvcc.compile_report(hopper_source(step, (4096, 4096, 4096), dtype, ep), "sm_90a")
    assert report.ok and "C7518" not in report.log, report.log[-2000:]
    gelu_16 = ep.activation == "gelu" and dtype == "bf16" and step == 20
    assert (report.spills == 0 and report.stack_bytes == 0) != gelu_16, report.log[-2000:]


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("step, shape", [(20, (4096, 4096, 4096)), (21, (2048, 2048, 2048)), (22, (4096, 4096, 4096)),
                                         (23, (256, 256, 16384)), (26, (16, 1024, 4096))])
def test_every_hopper_epilogue_rung_stores_a_gated_pairs_second_product(step, shape, dtype):
    """D = silu(acc + bias) * C_in (a SwiGLU pair's gate, relax_dispatch's gated chain): in each
    rung's store, C_in read and multiplied, one SiLU per stored value (the register stores' 128,
    step 23's sum of the parts and step 26's cluster sum theirs); ptxas spills nothing."""
    from steps.measure import nvcc

    ep = Epilogue(bias=True, activation="silu", gate=True)
    src = hopper_source(step, shape, dtype, ep)
    assert "C_in_ptr" in src and "bias_ptr" in src and "erff(" not in src
    silu = len(re.findall(r"(?<!_)expf\(", src)) + src.count("__expf(")
    assert silu == {20: 128, 21: 128, 22: 128, 23: 1, 26: 4}[step], silu
    if nvcc.available():
        report = nvcc.compile_report(src, "sm_90a")
        assert report.ok and report.spills == report.stack_bytes == 0, report.log[-2000:]


def test_the_epilogue_command_names_its_files_by_step_dtype_and_epilogue():
    from steps.commands.epilogue import saved_names

    gelu = Epilogue(bias=True, activation="gelu")
    assert saved_names(11, "fp32", gelu) == ("epilogue.json", "epilogue.txt")  # the first files' names
    assert saved_names(20, "fp16", gelu) == ("fp16/epilogue_step20.json", "fp16/epilogue_step20.txt")
    assert saved_names(22, "bf16", Epilogue(bias=True))[1] == "bf16/epilogue_step22_bias.txt"
    assert saved_names(22, "bf16", Epilogue(bias=True, beta=1.0))[1] == "bf16/epilogue_step22_bias_res.txt"
    assert saved_names(11, "fp32", Epilogue(activation="relu", alpha=2.0))[1] == "epilogue_step11_relu_alpha.txt"
    assert saved_names(11, "fp32", Epilogue())[1] == "epilogue_step11_none.txt"
