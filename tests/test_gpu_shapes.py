"""On a CUDA GPU: every step is correct on odd and non-square shapes, and a faulting kernel
costs one measurement, not the run.

Correctness: 8 shapes per step (1 x N x K, M x 1 x K, 1 x 1 x 1, multiples of 4 that are not
multiples of the tiles, odd sizes that are not even multiples of 2), seeded inputs in
[-1, 1), C poisoned with NaN, ‖C − ref‖/‖ref‖ against float64 within the step's bound,
harness.tolerance(step): 1e-5, or TF32_TOLERANCE for the TF32 steps (12, 13). The operands and the
reference are computed once per shape and shared by all steps, so the file's time is mostly
the builds (one per step and shape).
"""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import schedules
from steps.measure import harness
from .checks import skip_unless_it_runs_here

pytestmark = pytest.mark.gpu

SHAPES = [
    (1, 2048, 2048),     # one row of C
    (2048, 1, 2048),     # one column of C
    (1000, 1500, 700),   # multiples of 4, not of the tiles: float4 copies, predicated
    (2047, 2047, 2047),  # odd everywhere: scalar copies
    (33, 65, 129),       # one past a tile in every dimension
    (7, 4096, 13),       # short and wide, K smaller than a k slice
    (513, 257, 1025),
    (1, 1, 1),
]
STEPS = [pytest.param(s, id=f"step{s.number}") for s in schedules.STEPS]
SEED = 20261121


@pytest.fixture(scope="module")
def arch():
    return harness.gpu_arch()


@functools.lru_cache(maxsize=None)
def operands(M: int, N: int, K: int):
    rng = np.random.default_rng([SEED, M, N, K])
    a, b = harness.random_operands(M, N, K, rng)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def run_once(lib, M: int, N: int, K: int) -> float:
    dev = tvm.cuda(0)
    a, b, ref = operands(M, N, K)
    c = tvm.runtime.tensor(np.full((M, N), np.nan, dtype=np.float32), dev)
    lib["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    dev.sync()
    return harness.relative_error(c.numpy(), ref)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("step", STEPS)
def test_odd_shape_is_correct(step, shape, arch):
    skip_unless_it_runs_here(step, arch)
    lib = schedules.build(step, *shape, arch=arch)
    err = run_once(lib, *shape)
    bound = harness.tolerance(step)
    assert err <= bound, f"step {step.number} at {shape}: relative error {err} > {bound:g}"


# --- fault isolation --------------------------------------------------------------------


def misaligned_kernel(M: int, N: int, K: int, arch: str, config=None):
    """A kernel that stores float4s one float off alignment: cudaErrorMisalignedAddress,
    which poisons the CUDA context of the process that launched it."""

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A_flat = T.decl_buffer((M * K,), "float32", data=A.data)
        C_flat = T.decl_buffer((M * N,), "float32", data=C.data)
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            for v in T.vectorized(4):
                C_flat[tx * 4 + v + 1] = A_flat[tx * 4 + v + 1]

    return tvm.compile(tvm.IRModule({"main": main}), target=schedules.target(arch))


def test_misaligned_kernel_really_is_misaligned():
    src = schedules.cuda_source(misaligned_kernel(256, 256, 256, "sm_90"))
    assert "*(float4*)(C_flat_ptr + ((((int)threadIdx.x) * 4) + 1))" in src


def test_a_fault_fails_one_measurement_and_the_run_goes_on(arch):
    with harness.KernelRunner(repeat=3, seed=1) as runner:
        before = runner.measure(6, 256, 256, 256, arch)
        assert before.ok, before.error
        bad = runner.measure(f"{__name__}:misaligned_kernel", 256, 256, 256, arch)
        assert not bad.ok and bad.error and "\n" not in bad.error
        print("fault reported as:", bad.error)
        after = runner.measure(6, 256, 256, 256, arch)  # in the same process this would fail too
        assert after.ok, after.error
        odd = runner.measure(6, 33, 65, 129, arch)
        assert odd.ok, odd.error
        assert runner.worker_starts == 2


def test_cli_times_odd_shapes_against_the_prior():
    proc = subprocess.run(
        [sys.executable, "-m", "steps.step6", "--shape", "33", "65", "129", "--shape", "1", "2048", "2048",
         "--repeat", "3", "--seed", "1"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "33x65x129" in proc.stdout and "1x2048x2048" in proc.stdout
    assert "FAILED" not in proc.stdout + proc.stderr
