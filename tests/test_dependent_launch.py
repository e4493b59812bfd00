"""Steps 29-31 (programmatic dependent launch) without a GPU: their kernels are steps 23's, 26's
and 27's, each with a wait for its predecessor at its very top, and launched so by TVM only where
that wait is there."""

import dataclasses
import itertools
from collections import Counter

import pytest
import tvm

import schedules
from schedules.integration import relax_dispatch
from schedules.lowering import pipelines
from schedules import step29_dependent_launch as step29_module

STEP = schedules.get_step(29)
_RECORDERS = itertools.count()
STEP23 = schedules.get_step(23)
WAIT_CALL = "  tvm_builtin_ptx_griddepcontrol_wait();"
WAIT_HELPER = ['__forceinline__ __device__ void tvm_builtin_ptx_griddepcontrol_wait() {',
               '  asm volatile("griddepcontrol.wait;" :  :  : "memory");', '}']
# One kernel (fp32, 2048^3); the GEMM and the sum of K's parts (256 x 256 x 16384); two copies to
# padded rows and the GEMM (bf16 rows of 98 values, 196 bytes: TMA needs multiples of 16).
SHAPES = [((2048, 2048, 2048), "fp32", 1), ((256, 256, 16384), "bf16", 2), ((333, 98, 98), "bf16", 3)]


def _source(step, shape, dtype, cfg=None):
    return schedules.cuda_source(schedules.build(step, *shape, arch="sm_90a", config=cfg, dtype=dtype))


def _kernels(src):
    return src.count("__global__ void __launch_bounds__") // 2  # each declared, then defined


def _only_waits_added(mine, theirs, kernels):
    """`mine` is `theirs` line for line, plus one wait in each of `kernels` kernels and its helper."""
    more, fewer = Counter(mine.splitlines()) - Counter(theirs.splitlines()), Counter(theirs.splitlines()) - Counter(mine.splitlines())
    return not fewer and more == Counter(WAIT_HELPER + [WAIT_CALL] * kernels)


@pytest.mark.parametrize("shape, dtype, kernels", SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_step29_is_step23s_kernels_each_waiting_at_its_top(shape, dtype, kernels):
    s23 = _source(STEP23, shape, dtype)
    s29 = _source(STEP, shape, dtype)
    assert _kernels(s29) == _kernels(s23) == kernels
    # The wait is each kernel's first statement ...
    assert s29.count("{\n" + WAIT_CALL + "\n") == kernels
    # ... and all that differs from step 23's source, but the helper that issues it.
    assert _only_waits_added(s29, s23, kernels)
    assert "launch_dependents" not in s29  # the exit trigger: the successor launches as the blocks exit


def test_the_top_trigger_lets_the_successor_launch_at_once(monkeypatch):
    monkeypatch.setattr(step29_module, "TRIGGER", "top")
    src = _source(STEP, (256, 256, 16384), "bf16")
    top = "{\n" + WAIT_CALL + "\n  tvm_builtin_ptx_griddepcontrol_launch_dependents();\n"
    assert src.count(top) == _kernels(src) == 2


def _launch_params(step, shape, dtype, first=True):
    """Each kernel's launch parameters, as TVM's split of host and kernels left them."""
    seen = []

    # A name of its own: pipelines are registered once per name of their passes.
    @tvm.tirx.transform.prim_func_pass(opt_level=0, name=f"record_launch_params_{next(_RECORDERS)}")
    def record(func, mod, ctx):
        seen.append([str(t) for t in func.attrs["tirx.kernel_launch_params"]])
        return func

    cfg = step.default_config(*shape, dtype)
    sch = step.schedule(*shape, cfg, None, True, dtype)
    passes = [*schedules.device_passes(step, cfg, shape[2]), record]
    name = pipelines.with_device_passes(*passes, first=schedules.first_passes(step) if first else ())
    with tvm.transform.PassContext(opt_level=3):
        tvm.compile(sch.mod, target=schedules.target("sm_90a"), tir_pipeline=name)
    return seen


@pytest.mark.parametrize("shape, dtype, kernels", SHAPES[1:], ids=["split", "copies"])
def test_every_kernel_is_launched_dependent_in_schedules_build(shape, dtype, kernels):
    params = _launch_params(STEP, shape, dtype)
    assert len(params) == kernels and all(step29_module.DEPENDENT_LAUNCH in p for p in params)
    # Step 23's kernels are launched as before.
    assert not any(step29_module.DEPENDENT_LAUNCH in p for p in _launch_params(STEP23, shape, dtype))


def test_without_the_ladders_pipeline_there_is_neither_mark_nor_wait():
    """The mark and the wait travel in one pipeline: TVM's own lowering of step 29's schedule
    launches its kernels as step 23's (no kernel marked without its wait)."""
    shape, dtype = (256, 256, 16384), "bf16"
    assert not any(step29_module.DEPENDENT_LAUNCH in p for p in _launch_params(STEP, shape, dtype, first=False))
    sch = STEP.schedule(*shape, None, None, True, dtype)
    with tvm.transform.PassContext(opt_level=3):
        lib = tvm.compile(sch.mod, target=schedules.target("sm_90a"))
    assert "griddepcontrol" not in schedules.cuda_source(lib)


def test_step29_takes_step23s_config_and_stays_out_of_models():
    for shape, dtype in (((4096, 16, 4096), "bf16"), ((1536, 1536, 1536), "fp16"), ((4096, 4096, 4096), "fp32")):
        cfg = STEP.default_config(*shape, dtype)
        assert type(cfg) is STEP.Config and dataclasses.asdict(cfg) == dataclasses.asdict(STEP23.default_config(*shape, dtype))
    # A model lowers all its functions with one TIR pipeline, which has no place for the mark.
    assert not STEP.builds_in_model(1024, 1024, 1024) and STEP23.builds_in_model(1024, 1024, 1024)
    assert not relax_dispatch.in_model(STEP, 1024, 1024, 1024, "bf16") and relax_dispatch.in_model(STEP23, 1024, 1024, 1024, "bf16")


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_fused_epilogue_is_step23s_too(dtype):
    """D = gelu(AB + bias + C_in) in the store: step 23's kernels (the GEMM and the sum of the
    parts, which applies it), each with its wait."""
    from schedules.transforms.epilogue import Epilogue

    ep, shape = Epilogue(bias=True, activation="gelu", beta=1.0), (256, 256, 16384)
    s23, s29 = (schedules.cuda_source(schedules.build(s, *shape, arch="sm_90a", epilogue=ep, dtype=dtype))
                for s in (STEP23, STEP))
    assert "erff(" in s29 and _only_waits_added(s29, s23, _kernels(s29))


# Steps 30 and 31: step 29's launch on steps 26's and 27's kernels. One kernel (the parts added in
# a cluster; stream-K where it streams, at 8192^3, and step 22's kernel where it does not), or
# copies to padded rows and the GEMM.
LATER = [(30, 26, (64, 1024, 8192), "bf16", 1), (30, 26, (333, 98, 98), "fp16", 3), (30, 26, (1024, 1024, 1024), "fp32", 1),
         (31, 27, (8192, 8192, 8192), "bf16", 1), (31, 27, (8192, 1024, 256), "fp16", 1), (31, 27, (333, 98, 98), "bf16", 3)]


@pytest.mark.parametrize("step, prior, shape, dtype, kernels", LATER,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_steps_30_and_31_are_their_priors_kernels_each_waiting_at_its_top(step, prior, shape, dtype, kernels):
    mine, theirs = _source(step, shape, dtype), _source(prior, shape, dtype)
    assert _kernels(mine) == _kernels(theirs) == kernels
    assert _only_waits_added(mine, theirs, kernels)
    assert mine.count("{\n" + WAIT_CALL + "\n") == kernels
    params = _launch_params(schedules.get_step(step), shape, dtype)
    assert len(params) == kernels and all(step29_module.DEPENDENT_LAUNCH in p for p in params)


@pytest.mark.parametrize("step, prior", [(30, 26), (31, 27)])
def test_steps_30_and_31_take_their_priors_configs_and_stay_out_of_models(step, prior):
    s, p = schedules.get_step(step), schedules.get_step(prior)
    assert s.module.PRIOR == prior and s.module.launch_passes is step29_module.launch_passes
    for shape, dtype in (((4096, 16, 4096), "bf16"), ((8192, 8192, 8192), "fp16"), ((4096, 4096, 4096), "fp32")):
        cfg = s.default_config(*shape, dtype)
        assert type(cfg) is s.Config and isinstance(cfg, p.Config)
        assert dataclasses.asdict(cfg) == dataclasses.asdict(p.default_config(*shape, dtype))
    assert not s.builds_in_model(16, 1024, 4096) and p.builds_in_model(16, 1024, 4096)
    assert not relax_dispatch.in_model(s, 16, 1024, 4096, "bf16")
