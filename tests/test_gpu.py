"""On a CUDA GPU: every step is correct, no slower than 0.85x its committed GFLOPS, and at
2048 no slower than the step before it (unless its committed results expect that, and say why).

Correctness: fresh random inputs, C poisoned with NaN, ‖C − ref‖/‖ref‖ against float64 within
the step's own bound, harness.tolerance(step): 1e-5 for fp32 steps (3xTF32's 14 included), the
labelled TF32_TOLERANCE for the TF32 steps 12, 13 and 15-18 (the Hopper rungs skip on
another GPU).
Performance gate: results/<this GPU's slug>/stepN.json holds the committed numbers; a GPU
model with none committed skips the gate with that reason.
"""

import math

import numpy as np
import pytest

import schedules
from steps import results
from steps.commands import cli
from .checks import skip_unless_it_runs_here
from steps.measure import harness

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
    skip_unless_it_runs_here(step, arch)
    lib = schedules.build(step, size, size, size, arch=arch)
    errors = [runner.check(lib["main"], size, size, size) for _ in range(2)]  # two fresh draws
    bound = harness.tolerance(step)
    assert bound == (harness.TF32_TOLERANCE if step.precision == "tf32" else harness.TOLERANCE)
    assert all(e <= bound for e in errors), f"relative errors {errors} (bound {bound:g})"


# Step 8's alternative layout (A k-major, transpose_a=1; not the default, see its docstring):
# correct at the ladder's sizes and on shapes that pad (predicated 4-byte cp.async).
TRANSPOSED_A = dict(block_m=64, block_n=128, thread_m=8, thread_n=8, block_k=16, stages=3, pad_a=4, transpose_a=1)


@pytest.mark.parametrize("shape", [(512,) * 3, (1024,) * 3, (2048,) * 3, (1000, 1500, 700), (127, 255, 33)],
                         ids=lambda s: "x".join(map(str, s)))
def test_transposed_A_layout_is_correct(shape, runner, arch):
    from schedules.config import ConflictFreeConfig

    lib = schedules.build(8, *shape, arch=arch, config=ConflictFreeConfig(**TRANSPOSED_A))
    error = runner.check(lib["main"], *shape)
    assert error <= harness.TOLERANCE, f"relative error {error}"


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
    skip_unless_it_runs_here(step, arch)
    doc = results.committed(gpu_name, step.number)
    if doc is None:
        pytest.skip(f"no committed results for {gpu_name} ({results.gpu_slug(gpu_name)}) step {step.number}")
    row = results.row_for(doc, size, size, size)
    if row is None:
        pytest.skip(f"committed results for step {step.number} have no {size}^3 row")
    refused = results.not_comparable(row)
    if refused:
        pytest.skip(f"step {step.number} at {size}: committed row refused by the host-bound guard: {refused}")
    m = runner.measure(step, size, size, size, arch)
    assert m.ok, m.error
    if m.host_bound:
        pytest.skip(f"step {step.number} at {size}: host-bound now ({m.host_us:.1f} us host per launch, "
                    f"{m.median_ms * 1e3:.1f} us GPU): not a kernel time, not compared")
    assert m.gflops >= GATE * row["gflops"], (
        f"step {step.number} at {size}: {m.gflops:.0f} GFLOPS < {GATE} x committed {row['gflops']:.0f}")


# Step over step: N must not be slower than N-1 at this size, both measured here, now. The 3%
# margin covers run-to-run noise between two back-to-back measurements (steps 4->5->6 gain only
# 2-3% at 2048); a pair the committed stepN.json marks in expected_regression skips with why.
PAIR_SIZE = 2048
PAIR_MARGIN = 0.97


@pytest.mark.parametrize("step", [p for p in STEPS if p.values[0] is not schedules.STEPS[0]])
def test_step_not_slower_than_prior(step, runner, arch, gpu_name):
    skip_unless_it_runs_here(step, arch)
    doc = results.committed(gpu_name, step.number)
    if doc is None:
        pytest.skip(f"no committed results for {gpu_name} ({results.gpu_slug(gpu_name)}) step {step.number}")
    n = PAIR_SIZE
    reason = results.expected_regression(doc, n, n, n, module=step.module)
    if reason:
        pytest.skip(f"step {step.number} vs its prior at {n}: expected regression: {reason}")
    prior = cli.prior_step(step)  # the step before it, or the module's PRIOR (step 20's is 18)
    before = runner.measure(prior, n, n, n, arch)
    after = runner.measure(step, n, n, n, arch)
    assert before.ok and after.ok, before.error or after.error
    bound = [m for m in (before, after) if m.host_bound]
    if bound:
        pytest.skip(f"step {step.number} vs {prior.number} at {n}: host-bound timing, not compared")
    assert after.gflops >= PAIR_MARGIN * before.gflops, (
        f"step {step.number} at {n}: {after.gflops:.0f} GFLOPS < {PAIR_MARGIN} x step {prior.number}'s "
        f"{before.gflops:.0f} in the same run; if intended, add {n} to EXPECTED_REGRESSION in "
        f"{step.module.__name__} with the reason and re-save")
