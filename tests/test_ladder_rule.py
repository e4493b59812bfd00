"""The dlight rule (schedules/integration/ladder_rule.py): which functions it takes, what it declines, and
that what it schedules builds for CUDA with the epilogue in the matmul's kernel. Numbers on a
GPU: tests/test_gpu_model.py (the model, whose small token counts go through this rule) and
tests/test_gpu_ladder_rule.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

import schedules
from schedules import ConfigError
from schedules.transforms import padding
from schedules.integration import relax_dispatch
from schedules.integration.ladder_rule import LadderMatmul, match
from steps.measure import model as block
from steps.measure import nvcc

from . import checks

TARGET = schedules.target("sm_90")


def fused_functions(d=256, tokens=128):
    mod = block.relax_block(d, tokens)[0]
    seq = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                    relax.transform.FoldConstant(), relax.transform.FuseOps(),
                                    relax.transform.FuseTIR()])
    return {gv.name_hint: f for gv, f in seq(mod).functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


@T.prim_func(s_tir=True)
def nt_relu(x: T.Buffer((2, 48, 64), "float32"), w: T.Buffer((80, 64), "float32"), y: T.Buffer((2, 48, 80), "float32")):
    mm = T.sblock_alloc_buffer((2, 48, 80), "float32")
    for b, i, j, k in T.grid(2, 48, 80, 64):
        with T.sblock("matmul"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                mm[vb, vi, vj] = T.float32(0)
            mm[vb, vi, vj] = mm[vb, vi, vj] + x[vb, vi, vk] * w[vj, vk]
    for b, i, j in T.grid(2, 48, 80):
        with T.sblock("relu"):
            vb, vi, vj = T.axis.remap("SSS", [b, i, j])
            y[vb, vi, vj] = T.max(mm[vb, vi, vj], T.float32(0))


@T.prim_func(s_tir=True)
def batched(x: T.Buffer((4, 32, 64), "float32"), w: T.Buffer((4, 64, 16), "float32"), y: T.Buffer((4, 32, 16), "float32")):
    for b, i, j, k in T.grid(4, 32, 16, 64):
        with T.sblock("matmul"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                y[vb, vi, vj] = T.float32(0)
            y[vb, vi, vj] = y[vb, vi, vj] + x[vb, vi, vk] * w[vb, vk, vj]


@T.prim_func(s_tir=True)
def broadcast_b(x: T.Buffer((2, 4, 32, 64), "float32"), w: T.Buffer((4, 64, 16), "float32"),
                y: T.Buffer((2, 4, 32, 16), "float32")):
    # B batched over the second leading dimension only: neither one matrix nor a full batch
    for a, b, i, j, k in T.grid(2, 4, 32, 16, 64):
        with T.sblock("matmul"):
            va, vb, vi, vj, vk = T.axis.remap("SSSSR", [a, b, i, j, k])
            with T.init():
                y[va, vb, vi, vj] = T.float32(0)
            y[va, vb, vi, vj] = y[va, vb, vi, vj] + x[va, vb, vi, vk] * w[vb, vk, vj]


@T.prim_func(s_tir=True)
def scores(q: T.Buffer((2, 3, 40, 64), "float32"), k: T.Buffer((2, 3, 56, 64), "float32"),
           s: T.Buffer((2, 3, 40, 56), "float32")):
    # attention's q k^T over (batch, head), scaled: batched, B N x K, an elementwise epilogue
    mm = T.sblock_alloc_buffer((2, 3, 40, 56), "float32")
    for a, h, i, j, kk in T.grid(2, 3, 40, 56, 64):
        with T.sblock("matmul"):
            va, vh, vi, vj, vk = T.axis.remap("SSSSR", [a, h, i, j, kk])
            with T.init():
                mm[va, vh, vi, vj] = T.float32(0)
            mm[va, vh, vi, vj] = mm[va, vh, vi, vj] + q[va, vh, vi, vk] * k[va, vh, vj, vk]
    for a, h, i, j in T.grid(2, 3, 40, 56):
        with T.sblock("scale"):
            va, vh, vi, vj = T.axis.remap("SSSS", [a, h, i, j])
            s[va, vh, vi, vj] = mm[va, vh, vi, vj] * T.float32(0.125)


@T.prim_func(s_tir=True)
def half(x: T.Buffer((32, 64), "float16"), w: T.Buffer((64, 16), "float16"), y: T.Buffer((32, 16), "float16")):
    for i, j, k in T.grid(32, 16, 64):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                y[vi, vj] = T.float16(0)
            y[vi, vj] = y[vi, vj] + x[vi, vk] * w[vk, vj]


@T.prim_func(s_tir=True)
def producer_first(x: T.Buffer((32, 64), "float32"), w: T.Buffer((64, 16), "float32"), y: T.Buffer((32, 16), "float32")):
    xs = T.sblock_alloc_buffer((32, 64), "float32")
    for i, k in T.grid(32, 64):
        with T.sblock("scale"):
            vi, vk = T.axis.remap("SS", [i, k])
            xs[vi, vk] = x[vi, vk] * T.float32(2)
    for i, j, k in T.grid(32, 16, 64):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                y[vi, vj] = T.float32(0)
            y[vi, vj] = y[vi, vj] + xs[vi, vk] * w[vk, vj]


def cuda_source(func) -> str:
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    with tvm.transform.PassContext(opt_level=3, config=relax_dispatch.PASS_CONFIG):
        lib = tvm.compile(mod, target=TARGET)
    return lib.mod.imports[0].inspect_source()


def cuda_kernels(func) -> dict[str, str]:
    return checks.cuda_kernels(cuda_source(func))


def test_the_models_fused_matmuls_are_recognised_with_their_epilogues():
    funcs = fused_functions()
    found = {name: match(f) for name, f in funcs.items()}
    matmuls = {n: p for n, p in found.items() if p is not None}
    assert len(matmuls) == 4 and all(n.startswith("fused_matmul") for n in matmuls)
    shapes = sorted((p.M, p.N, p.K) for p in matmuls.values())
    assert shapes == sorted([(128, 768, 256), (128, 256, 256), (128, 1024, 256), (128, 256, 1024)])
    for p in matmuls.values():
        assert p.lead == (1,) and not p.transposed_b and p.epilogue[0] == "T_add"  # the bias first
    gelu = next(p for n, p in matmuls.items() if "gelu" in n)
    assert len(gelu.epilogue) == 6  # add, multiply, erf, multiply, add, multiply
    # the transposes and the split/multiply function are not matmuls
    assert all(found[n] is None for n in funcs if not n.startswith("fused_matmul"))


def test_nt_and_a_folded_batch_are_recognised():
    p = match(nt_relu)
    assert p is not None and p.transposed_b and p.lead == (2,) and (p.M, p.N, p.K) == (96, 80, 64)
    assert p.epilogue == ("relu",)


def test_a_batched_b_is_a_batch_not_folded():
    p = match(batched)
    assert p is not None and p.batch == (4,) and p.lead == () and (p.M, p.N, p.K) == (32, 16, 64)
    assert not p.transposed_b and p.epilogue == ()
    p = match(scores)
    assert p is not None and p.batch == (2, 3) and p.transposed_b and (p.M, p.N, p.K) == (40, 56, 64)
    assert p.epilogue == ("scale",)


@pytest.mark.parametrize("func", [batched, scores], ids=["batched-NN", "batched-NT-scaled"])
def test_a_batched_product_is_one_kernel_over_blockidx_z(func):
    rule = LadderMatmul()
    sch = rule.apply(func, TARGET, False)
    assert sch is not None and rule.chosen[0][1] == 11
    kernels = cuda_kernels(sch.mod["main"])
    assert len(kernels) == 1
    (src,) = kernels.values()
    assert "blockIdx.z" in src and "A_pad_shared" in src and "matmul_intermediate" not in src
    if nvcc.available():
        report = nvcc.compile_report(cuda_source(sch.mod["main"]), "sm_90")
        assert report.ok and report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]


def _run_on_cpu(func, arrays):
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    lib = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*tensors)
    return tensors[-1].numpy()


@pytest.mark.parametrize("func, shapes, ref", [
    (batched, [(4, 32, 64), (4, 64, 16), (4, 32, 16)], lambda x, w: x @ w),
    (scores, [(2, 3, 40, 64), (2, 3, 56, 64), (2, 3, 40, 56)], lambda q, k: (q @ k.swapaxes(-1, -2)) * 0.125),
    (nt_relu, [(2, 48, 64), (80, 64), (2, 48, 80)], lambda x, w: np.maximum(x @ w.T, 0)),
], ids=["batched-NN", "batched-NT-scaled", "NT-folded"])
def test_the_rewritten_product_computes_the_function_on_a_cpu(func, shapes, ref):
    # The rule's rewrite (padded blocks reading the function's own buffers, the batch unravelled
    # into its leading dims) before any schedule, run on the CPU: the index arithmetic a GPU
    # kernel inherits, checked against float64 here. Padded to a tile that divides nothing.
    from schedules.integration import ladder_rule

    p = match(func)
    step, cfg = ladder_rule.choose(p, "fp32", "sm_90")
    cfg = dataclasses.replace(cfg, block_m=64, block_n=64, block_k=32)
    rewritten = ladder_rule.rewrite(func, p, cfg)
    assert any(d > n for d, n in zip(padding.padded_shape(cfg, p.M, p.N, p.K), (p.M, p.N, p.K)))
    rng = np.random.default_rng(3)
    ins = [rng.uniform(-1, 1, sh).astype(np.float32) for sh in shapes[:-1]]
    out = _run_on_cpu(rewritten, [*ins, np.full(shapes[-1], np.nan, np.float32)])
    want = ref(*(a.astype(np.float64) for a in ins))
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 1e-6


def test_the_batched_form_is_for_the_cuda_core_steps():
    from schedules.integration import batched as batched_

    with pytest.raises(ConfigError, match="no batched form"):
        batched_.config(schedules.get_step(13), 4, 128, 128, 64)
    with pytest.raises(ConfigError, match="blockIdx.z"):
        batched_.config(schedules.get_step(11), 70000, 16, 16, 16)
    with pytest.raises(ConfigError, match="long_k"):
        batched_.config(schedules.get_step(11), 4, 64, 64, 16384)
    cfg = batched_.config(schedules.get_step(11), 8, 128, 128, 64)
    assert cfg.split_k == 1 and cfg.k_threads == 1


@pytest.mark.parametrize("number", range(1, 12))
def test_every_cuda_core_step_has_a_batched_form(number):
    # padded in every dimension, B as N x K: the batch outside each step's own schedule
    from schedules.integration import batched as batched_, ladder_rule

    func = batched_.batched_matmul(6, 100, 72, 60, transposed_b=True)
    p = match(func)
    step = schedules.get_step(number)
    sch = ladder_rule.schedule(func, p, step, batched_.config(step, p.batches, p.M, p.N, p.K))
    (src,) = cuda_kernels(sch.mod["main"]).values()
    assert "blockIdx.z" in src


def test_build_compiles_a_batched_matmul_and_refuses_what_the_rule_declines():
    from schedules.integration import batched as batched_, ladder_rule

    lib = ladder_rule.build(batched_.batched_matmul(6, 96, 80, 64, transposed_b=True))
    assert "blockIdx.z" in schedules.cuda_source(lib)
    with pytest.raises(ConfigError, match="does not take"):
        ladder_rule.build(half)


@pytest.mark.parametrize("func", [broadcast_b, half, producer_first], ids=["partly-broadcast-B", "fp16", "producer-first"])
def test_what_the_rule_cannot_do_it_declines(func):
    assert match(func) is None
    assert LadderMatmul().apply(func, TARGET, False) is None


def test_only_cuda_targets():
    assert LadderMatmul().apply(nt_relu, tvm.target.Target("llvm"), False) is None


@pytest.mark.parametrize("name", ["fused_matmul_add", "fused_matmul2_add3_gelu", "fused_matmul1_add2_add1"])
def test_a_scheduled_function_is_one_kernel_with_its_epilogue(name):
    func = fused_functions()[name]
    rule = LadderMatmul()
    sch = rule.apply(func, TARGET, False)
    assert sch is not None and len(rule.chosen) == 1
    (M, N, K), step, epilogue = rule.chosen[0]
    assert schedules.get_step(step).schedules_a_block
    kernels = cuda_kernels(sch.mod["main"])
    matmul_kernels = [k for k, src in kernels.items() if "A_pad_shared" in src]
    assert len(matmul_kernels) == 1
    if "gelu" in name:
        assert "erff(" in kernels[matmul_kernels[0]]
    # no buffer between the product and its epilogue: the product's intermediate is gone
    assert "matmul_intermediate" not in kernels[matmul_kernels[0]]


def test_a_matrix_vector_product_with_its_epilogue_builds():
    # one token: step 11's vector-matrix mode, whose sum runs across threadIdx.y; the store and
    # the epilogue go outside that loop (TVM lowers no cross-thread reduction with a sibling)
    funcs = fused_functions(1024, 1)
    rule = LadderMatmul()
    for name in ("fused_matmul_add", "fused_matmul2_add3_gelu"):
        sch = rule.apply(funcs[name], TARGET, False)
        assert sch is not None
        assert any("A_pad" in src for src in cuda_kernels(sch.mod["main"]).values())
    assert all(schedules.get_step(11).default_config(*mnk).k_threads > 1 for mnk, _, _ in rule.chosen)


def nt(M, N, K):
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((N, K), "float32"), C: T.Buffer((M, N), "float32")):
        for i, j, k in T.grid(M, N, K):
            with T.sblock("matmul"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]

    return main


@pytest.mark.parametrize("number, M, N, K", [(7, 256, 192, 128), (11, 16, 3072, 1024), (11, 512, 1024, 4096),
                                             (13, 256, 256, 128), (11, 0, 100, 72)])
def test_a_transposed_b_is_copied_a_float_at_a_time(number, M, N, K):
    # TVM 0.27's cp.async injection turns a vector copy into one 16-byte cp.async from the
    # ramp's base, stride ignored: for B stored N x K that read four floats of one row where
    # four rows were meant (a misaligned-address fault on the H100, or wrong data). The copy of
    # a transposed B must go one float at a time, consecutive threads along K (the source's
    # contiguous axis). M = 0: batched (3 x 100 x 100 x 72).
    from schedules.integration import batched as batched_, ladder_rule

    step = schedules.get_step(number)
    if M:
        func = nt(M, N, K)
        p = match(func)
        cfg = step.default_config(M, N, K)
    else:
        func = batched_.batched_matmul(3, N, N, K, transposed_b=True)
        p = match(func)
        cfg = batched_.config(step, p.batches, p.M, p.N, p.K)
    src = "\n".join(cuda_kernels(ladder_rule.schedule(func, p, step, cfg).mod["main"]).values())
    copies = [line.split("(")[0].strip() for line in src.splitlines() if "cp_async" in line and "B_ptr" in line]
    assert copies and all("_4_4_4" in c for c in copies), copies
    if number == 7:  # A, K-contiguous as the tile is, keeps its 16-byte copies
        assert any("cp_async" in ln and "_16_" in ln and "A_ptr" in ln for ln in src.splitlines())


def test_nt_builds():
    sch = LadderMatmul().apply(nt_relu, TARGET, False)
    kernels = cuda_kernels(sch.mod["main"])
    assert any("fmaxf(" in src or "max(" in src for src in kernels.values())


def test_the_rule_in_dlights_pass_takes_every_matmul_and_leaves_the_rest():
    mod = tvm.IRModule(fused_functions())
    rule = LadderMatmul()
    with TARGET:
        out = dl.ApplyDefaultSchedule(rule, dl.gpu.Fallback())(mod)
    assert len(rule.chosen) == 4
    assert all(out[gv].attrs["tirx.is_scheduled"] for gv in out.get_global_vars())


def test_bad_precision_is_one_line():
    with pytest.raises(ConfigError, match="precision"):
        LadderMatmul(precision="fp8")
    # fastest() takes fp16 and bf16; a model's matmuls here are fp32 (16-bit models: issue 50).
    with pytest.raises(ConfigError, match="a model's fp32 matmuls") as err:
        LadderMatmul(precision="bf16")
    assert "\n" not in str(err.value)
