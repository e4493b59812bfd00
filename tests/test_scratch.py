"""A kernel's global scratch made a tensor of the model (schedules/integration/scratch.py): the
rewrite computes what the kernel computed (on the CPU), and a model built for a CUDA graph takes
nothing from TVM's workspace pool, whose pages a graph would replay after the pool lent or freed
them. On a GPU: tests/test_gpu_model.py (the block under compute-sanitizer)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import schedules
from schedules.integration import relax_dispatch, scratch
from steps.measure import model as block


@I.ir_module
class TwoPasses:
    """y = 2x + 1 through a global buffer t, and a tuple-output kernel with one too."""

    @T.prim_func(s_tir=True)
    def twice_plus_one(x: T.Buffer((8, 16), "float32"), y: T.Buffer((8, 16), "float32")):
        t = T.alloc_buffer((8, 16))
        for i, j in T.grid(8, 16):
            with T.sblock("t"):
                vi, vj = T.axis.remap("SS", [i, j])
                t[vi, vj] = x[vi, vj] * T.float32(2)
        for i, j in T.grid(8, 16):
            with T.sblock("y"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = t[vi, vj] + T.float32(1)

    @T.prim_func(s_tir=True)
    def sum_and_diff(x: T.Buffer((8, 16), "float32"), s: T.Buffer((8, 16), "float32"),
                     d: T.Buffer((8, 16), "float32")):
        t = T.alloc_buffer((8, 16))
        for i, j in T.grid(8, 16):
            with T.sblock("t"):
                vi, vj = T.axis.remap("SS", [i, j])
                t[vi, vj] = x[vi, vj] * x[vi, vj]
        for i, j in T.grid(8, 16):
            with T.sblock("sd"):
                vi, vj = T.axis.remap("SS", [i, j])
                s[vi, vj] = t[vi, vj] + x[vi, vj]
                d[vi, vj] = t[vi, vj] - x[vi, vj]

    @R.function
    def main(x: R.Tensor((8, 16), "float32")):
        cls = TwoPasses
        with R.dataflow():
            y = R.call_tir(cls.twice_plus_one, (x,), out_ty=R.Tensor((8, 16), "float32"))
            sd = R.call_tir(cls.sum_and_diff, (y,), out_ty=[R.Tensor((8, 16), "float32"), R.Tensor((8, 16), "float32")])
            out = R.add(sd[0], sd[1])
            R.output(out)
        return out


def _cpu(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_the_lifted_module_computes_the_same_on_the_cpu():
    lifted = scratch.LiftScratch()(TwoPasses)
    for name in ("twice_plus_one", "sum_and_diff"):
        assert [b.name for b in scratch.global_scratch(TwoPasses[name])] == ["t"]
        assert scratch.global_scratch(lifted[name]) == []
        assert len(lifted[name].params) == len(TwoPasses[name].params) + 1
    x = np.random.default_rng(3).uniform(-1, 1, (8, 16)).astype(np.float32)
    y = 2 * x + 1
    expected = 2 * y * y  # (y² + y) + (y² - y)
    np.testing.assert_allclose(_cpu(TwoPasses, x), expected, rtol=1e-6)
    np.testing.assert_allclose(_cpu(lifted, x), expected, rtol=1e-6)
    assert scratch.LiftScratch()(lifted).same_as(lifted)  # nothing left: the module as it was


def test_only_names_what_it_lifts():
    lifted = scratch.LiftScratch(only=["twice_plus_one"])(TwoPasses)
    assert scratch.global_scratch(lifted["twice_plus_one"]) == []
    assert [b.name for b in scratch.global_scratch(lifted["sum_and_diff"])] == ["t"]


def test_a_ladder_kernels_scratch_becomes_its_outputs_and_what_it_skips_goes():
    # step 23 (bf16, 16 tokens): its split-K partial sums W are written; the pads and B's
    # transpose, which aligned operands skip, are never named and are dropped, not lifted
    func = schedules.get_step(23).schedule(16, 3072, 1024, dtype="bf16").mod["main"]
    assert [b.name for b in scratch.global_scratch(func)] == ["A_pad", "B_pad", "Bt", "W"]
    new, lifted = scratch.lift(func)
    assert [b.name for b in lifted] == ["W"] and scratch.global_scratch(new) == []
    assert len(new.params) == len(func.params) + 1
    # step 25 (fp32) where K = 1001 leaves A's rows unaligned for TMA: A's padded copy is written
    func = schedules.get_step(25).schedule(1000, 3000, 1001).mod["main"]
    new, lifted = scratch.lift(func)
    assert [b.name for b in lifted] == ["A_pad"] and scratch.global_scratch(new) == []
    # at 1024^3 nothing is padded: the function keeps its signature and loses the allocations
    func = schedules.get_step(25).schedule(1024, 1024, 1024).mod["main"]
    assert len(scratch.global_scratch(func)) == 4
    new, lifted = scratch.lift(func)
    assert lifted == [] and scratch.global_scratch(new) == [] and len(new.params) == len(func.params)


@I.ir_module
class Unused:
    """A kernel with a buffer it writes and one it never names, and one with only the latter."""

    @T.prim_func(s_tir=True)
    def twice(x: T.Buffer((8, 16), "float32"), y: T.Buffer((8, 16), "float32")):
        t = T.alloc_buffer((8, 16))
        never = T.alloc_buffer((64,))
        for i, j in T.grid(8, 16):
            with T.sblock("t"):
                vi, vj = T.axis.remap("SS", [i, j])
                t[vi, vj] = x[vi, vj] * T.float32(2)
        for i, j in T.grid(8, 16):
            with T.sblock("y"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = t[vi, vj]

    @T.prim_func(s_tir=True)
    def plus_one(x: T.Buffer((8, 16), "float32"), y: T.Buffer((8, 16), "float32")):
        never = T.alloc_buffer((64,))
        for i, j in T.grid(8, 16):
            with T.sblock("y"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = x[vi, vj] + T.float32(1)

    @R.function
    def main(x: R.Tensor((8, 16), "float32")):
        cls = Unused
        with R.dataflow():
            y = R.call_tir(cls.twice, (x,), out_ty=R.Tensor((8, 16), "float32"))
            z = R.call_tir(cls.plus_one, (y,), out_ty=R.Tensor((8, 16), "float32"))
            R.output(z)
        return z


def test_a_buffer_never_named_is_dropped_and_the_rest_computes_the_same():
    lifted = scratch.LiftScratch()(Unused)
    assert scratch.global_scratch(lifted["twice"]) == [] and len(lifted["twice"].params) == 3  # t only
    assert scratch.global_scratch(lifted["plus_one"]) == [] and len(lifted["plus_one"].params) == 2
    x = np.random.default_rng(4).uniform(-1, 1, (8, 16)).astype(np.float32)
    np.testing.assert_allclose(_cpu(lifted, x), 2 * x + 1, rtol=1e-6)
    np.testing.assert_allclose(_cpu(Unused, x), 2 * x + 1, rtol=1e-6)


def _workspace_calls(ex) -> int:
    """TVMBackendAllocWorkspace calls in the model's host code (each loads the function pointer)."""
    (host,) = [m for m in ex.mod.imports if m.kind == "llvm"]
    return host.inspect_source("ll").count("ptr @__TVMBackendAllocWorkspace")


@pytest.mark.parametrize("dtype, tokens, gpu", [("fp32", 16, "nvidia-h200"), ("fp32", 1024, "nvidia-h200"),
                                               ("fp32", 16, "nvidia-h100-80gb-hbm3"), ("bf16", 16, "nvidia-h200")])
def test_a_model_for_cuda_graphs_takes_nothing_from_the_workspace_pool(dtype, tokens, gpu, monkeypatch):
    mod = block.relax_block(1024, tokens, block.weights(1024, 1, dtype), dtype)[0]
    ex, chosen = block.compile_block(mod, "ladder", "sm_90a", True, dtype, gpu)
    assert chosen and _workspace_calls(ex) == 0
    # without the pass the same model's kernels take their scratch from the pool
    monkeypatch.setattr(relax_dispatch, "LiftScratch", lambda only=None: tvm.transform.Sequential([]))
    ex, _ = block.compile_block(mod, "ladder", "sm_90a", True, dtype, gpu)
    assert _workspace_calls(ex) > 0


def test_a_kernel_reached_other_than_by_call_tir_keeps_its_signature():
    @I.ir_module
    class Inplace:
        @T.prim_func(s_tir=True)
        def double_in_place(x: T.Buffer((8, 16), "float32")):
            t = T.alloc_buffer((8, 16))
            for i, j in T.grid(8, 16):
                with T.sblock("t"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    t[vi, vj] = x[vi, vj] * T.float32(2)
            for i, j in T.grid(8, 16):
                with T.sblock("x"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    x[vi, vj] = t[vi, vj]

        @R.function
        def main(x: R.Tensor((8, 16), "float32")):
            cls = Inplace
            y = R.call_tir_inplace(cls.double_in_place, (x,), inplace_indices=[0],
                                   out_ty=R.Tensor((8, 16), "float32"))
            return y

    assert scratch.LiftScratch()(Inplace).same_as(Inplace)
    assert [b.name for b in scratch.global_scratch(Inplace["double_in_place"])] == ["t"]
