"""The dlight rule (schedules/ladder_rule.py): which functions it takes, what it declines, and
that what it schedules builds for CUDA with the epilogue in the matmul's kernel. Numbers on a
GPU: tests/test_gpu_model.py (the model, whose small token counts go through this rule) and
tests/test_gpu_ladder_rule.py."""

from __future__ import annotations

import pytest
import tvm
from tvm import relax
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

import schedules
from schedules import ConfigError, relax_dispatch
from schedules.ladder_rule import LadderMatmul, match
from steps.measure import model as block

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


def cuda_kernels(func) -> dict[str, str]:
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    with tvm.transform.PassContext(opt_level=3, config=relax_dispatch.PASS_CONFIG):
        lib = tvm.compile(mod, target=TARGET)
    return checks.cuda_kernels(lib.mod.imports[0].inspect_source())


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


@pytest.mark.parametrize("func", [batched, half, producer_first], ids=["batched-B", "fp16", "producer-first"])
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
