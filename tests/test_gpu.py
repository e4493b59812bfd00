"""On a CUDA GPU: every step is correct, and no slower than 0.85x its committed GFLOPS.

Correctness: fresh random inputs, C poisoned with NaN, ‖C − ref‖/‖ref‖ ≤ 1e-5 against float64.
Performance gate: results/<this GPU's slug>/stepN.json holds the committed numbers; a GPU
model with none committed skips the gate with that reason.
"""

import math

import numpy as np
import pytest

import schedules
from steps import harness, results

pytestmark = pytest.mark.gpu

SIZES = (512, 1024, 2048)
GATE = 0.85
STEPS = [pytest.param(s, id=f"step{s.number}") for s in schedules.STEPS]


@pytest.fixture(scope="module")
def runner():
    return harness.KernelRunner(repeat=20)


@pytest.fixture(scope="module")
def arch():
    return harness.gpu_arch()


@pytest.fixture(scope="module")
def gpu_name():
    import tvm

    return tvm.cuda(0).device_name


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("step", STEPS)
def test_step_is_correct(step, size, runner, arch):
    lib = schedules.build(step, size, size, size, arch=arch)
    errors = [runner.check(lib["main"], size, size, size) for _ in range(2)]  # two fresh draws
    assert all(e <= harness.TOLERANCE for e in errors), f"relative errors {errors}"


def test_nan_poisoning_is_caught(runner, arch):
    """A kernel that skips part of C must fail the check, never pass on stale memory."""
    lib = schedules.build(1, 256, 256, 256, arch=arch)
    import tvm

    def half_kernel(a, b, c):
        lib["main"](a, b, c)
        out = c.numpy()
        out[128:] = np.nan  # as if the second half were never written
        c.copyfrom(out)

    assert math.isinf(runner.check(half_kernel, 256, 256, 256))
    assert tvm.cuda(0).exist


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("step", STEPS)
def test_gflops_at_least_85pct_of_committed(step, size, runner, arch, gpu_name):
    doc = results.committed(gpu_name, step.number)
    if doc is None:
        pytest.skip(f"no committed results for {gpu_name} ({results.gpu_slug(gpu_name)}) step {step.number}")
    row = results.row_for(doc, size, size, size)
    if row is None:
        pytest.skip(f"committed results for step {step.number} have no {size}^3 row")
    m = runner.measure(step, size, size, size, arch)
    assert m.ok, m.error
    assert m.gflops >= GATE * row["gflops"], (
        f"step {step.number} at {size}: {m.gflops:.0f} GFLOPS < {GATE} x committed {row['gflops']:.0f}")
