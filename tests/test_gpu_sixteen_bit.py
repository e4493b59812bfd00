"""On a CUDA GPU: the 16-bit ladder's measurements (issue 47; docs/sixteen-bit.md).

Every step with a 16-bit form is correct in that dtype (fresh inputs, C poisoned with NaN, the
float64 product of the 16-bit inputs, dtypes.TOLERANCE); cuBLAS in the dtype (cublasGemmEx,
CUBLAS_COMPUTE_32F) and dlight's default schedule of the 16-bit matmul pass the same check and
show the store's rounding (an error of a sizeable fraction of the unit roundoff: C really is
16-bit); a bf16 output left unwritten is caught. The regression gates per dtype: each 16-bit step
at each size at least 0.85x its committed results/<gpu>/<dtype>/stepN.json, and at 2048 at least
0.97x the step before it that has the dtype, unless the step module's EXPECTED_REGRESSION_<DTYPE>
names the size; a GPU with none committed skips with that reason.
"""

import math

import numpy as np
import pytest

import schedules
from steps import results
from steps.commands import cli
from steps.measure import dtypes, harness, references

from .checks import skip_unless_it_runs_here

pytestmark = pytest.mark.gpu

SIZES = (512, 2048)
GATE = 0.85
PAIR_SIZE = 2048
PAIR_MARGIN = 0.97
CASES = [pytest.param(s, d, id=f"step{s.number}-{d}") for s in schedules.STEPS for d in dtypes.SIXTEEN_BIT
         if d in s.dtypes]


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
@pytest.mark.parametrize("step, dtype", CASES)
def test_16_bit_step_is_correct(step, dtype, size, runner, arch):
    skip_unless_it_runs_here(step, arch)
    lib = schedules.build(step, size, size, size, arch=arch, dtype=dtype)
    errors = [runner.check(lib["main"], size, size, size, dtype) for _ in range(2)]
    bound = harness.tolerance(step, dtype)
    assert bound == dtypes.TOLERANCE[dtype]
    assert all(e <= bound for e in errors), f"relative errors {errors} (bound {bound:g})"


@pytest.mark.parametrize("dtype", dtypes.SIXTEEN_BIT)
def test_cublas_in_the_dtype_is_checked_and_timed(dtype):
    if not harness.cublas_available():
        pytest.skip("CuPy or cuBLAS not installed")
    timing, err = harness.time_cublas(1024, 1024, 1024, repeat=5, seed=0, dtype=dtype)
    u = dtypes.UNIT_ROUNDOFF[dtype]
    # within the bound, and the store's rounding is there: C is in the dtype, read as such
    assert 0.2 * u < err <= dtypes.TOLERANCE[dtype], err
    assert timing.median_ms > 0 and not timing.host_bound


@pytest.mark.parametrize("dtype", dtypes.SIXTEEN_BIT)
def test_dlight_in_the_dtype_is_correct(dtype, runner, arch):
    ref = references.SIXTEEN_BIT[dtype][1]
    m = references.measure(ref, (1024, 1024, 1024), runner, arch, None, 5)
    assert m.ok, m.error
    assert 0.2 * dtypes.UNIT_ROUNDOFF[dtype] < m.rel_err <= dtypes.TOLERANCE[dtype]


def test_an_unwritten_bf16_output_is_caught(runner, arch):
    from schedules.integration import references as tvm_refs

    lib = tvm_refs.build_dlight(256, 256, 256, arch, dtype="bf16")

    def half_kernel(a, b, c):
        lib["main"](a, b, c)
        out = dtypes.from_device(c, "bf16")
        out[128:] = dtypes.BF16_NAN  # as if the second half were never written
        c.copyfrom(out)

    assert math.isinf(runner.check(half_kernel, 256, 256, 256, "bf16"))
    assert runner.check(lib["main"], 256, 256, 256, "bf16") <= dtypes.TOLERANCE["bf16"]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("step, dtype", CASES)
def test_16_bit_gflops_at_least_85pct_of_committed(step, dtype, size, runner, arch, gpu_name):
    skip_unless_it_runs_here(step, arch)
    doc = results.committed(gpu_name, step.number, dtype=dtype)
    if doc is None:
        pytest.skip(f"no committed {dtype} results for {gpu_name} ({results.gpu_slug(gpu_name)}) step {step.number}")
    row = results.row_for(doc, size, size, size)
    if row is None:
        pytest.skip(f"committed {dtype} results for step {step.number} have no {size}^3 row")
    refused = results.not_comparable(row)
    if refused:
        pytest.skip(f"step {step.number} {dtype} at {size}: committed row refused by the host-bound guard: {refused}")
    m = runner.measure(step, size, size, size, arch, dtype=dtype)
    assert m.ok, m.error
    if m.host_bound:
        pytest.skip(f"step {step.number} {dtype} at {size}: host-bound now, not compared")
    assert m.gflops >= GATE * row["gflops"], (
        f"step {step.number} {dtype} at {size}: {m.gflops:.0f} GFLOPS < {GATE} x committed {row['gflops']:.0f}")


@pytest.mark.parametrize("step, dtype", CASES)
def test_16_bit_step_not_slower_than_its_prior(step, dtype, runner, arch, gpu_name):
    skip_unless_it_runs_here(step, arch)
    prior = cli.prior_step(step, dtype)
    if prior is None:
        pytest.skip(f"step {step.number} is the first with {dtype}: no prior")
    doc = results.committed(gpu_name, step.number, dtype=dtype)
    if doc is None:
        pytest.skip(f"no committed {dtype} results for {gpu_name} ({results.gpu_slug(gpu_name)}) step {step.number}")
    n = PAIR_SIZE
    reason = results.expected_regression(doc, n, n, n, module=step.module)
    if reason:
        pytest.skip(f"step {step.number} vs {prior.number} ({dtype}) at {n}: expected regression: {reason}")
    before = runner.measure(prior, n, n, n, arch, dtype=dtype)
    after = runner.measure(step, n, n, n, arch, dtype=dtype)
    assert before.ok and after.ok, before.error or after.error
    if before.host_bound or after.host_bound:
        pytest.skip(f"step {step.number} vs {prior.number} ({dtype}) at {n}: host-bound timing, not compared")
    attribute = results.regression_attribute(dtype)
    assert after.gflops >= PAIR_MARGIN * before.gflops, (
        f"step {step.number} ({dtype}) at {n}: {after.gflops:.0f} GFLOPS < {PAIR_MARGIN} x step {prior.number}'s "
        f"{before.gflops:.0f} in the same run; if intended, add {n} to {attribute} in {step.module.__name__} "
        "with the reason and re-save")


def test_16_bit_operands_reach_the_gpu_bit_for_bit():
    import tvm

    dev = tvm.cuda(0)
    bits = dtypes.bf16_bits(np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype(np.float32))
    assert np.array_equal(dtypes.from_device(dtypes.to_device(tvm, bits, "bf16", dev), "bf16"), bits)


@pytest.mark.parametrize("dtype", dtypes.SIXTEEN_BIT)
def test_16_bit_special_values(dtype, arch):
    """python -m steps.special --dtype's classes at 256^3: cuBLAS in the dtype puts inf and NaN
    where the float64 product rounded to the dtype has them (the yardstick is what the suite says
    it is) on every class but those whose pattern depends on the order of an fp32 sum (bf16's
    scale 2^63: cuBLAS differs there on an H200 at 256^3 and on an H100 at 1024^3), and every step
    with the dtype meets the contract on every class."""
    if not harness.cublas_available():
        pytest.skip("CuPy or cuBLAS not installed")
    from steps.commands import special as command
    from steps.measure import special as data
    from steps.results import special

    steps = [s for s in command.steps_of(dtype) if s.runs_on(arch)]
    doc = command.run(steps, list(data.classes_for(dtype)), 256, command.DEFAULT_SEED, arch, progress=lambda _: None,
                      dtype=dtype)
    order_dependent = {c.name for c in data.classes_for(dtype) if c.order_dependent}
    cublas = [r for r in doc["rows"] if r["impl"] == special.BASELINE]
    assert all(r["error"] is None for r in cublas), cublas
    assert [r["class"] for r in cublas if not r["pattern_equal"] and r["class"] not in order_dependent] == [], cublas
    assert special.failures(doc) == []
