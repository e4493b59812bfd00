"""On a CUDA GPU: the reference rows are correct and timed as kernel time, not host time.

The cuBLAS baseline replays captured calls from a CUDA graph (steps/measure/harness.time_graph), so the
host's submission per GEMM must be far below the GEMM's GPU time at every ladder size: this is
the guard's verdict on the real thing. dlight and MetaSchedule are built and checked like steps.
"""

import pytest

from steps.measure import harness, references

pytestmark = pytest.mark.gpu

SIZES = [(n, n, n) for n in (512, 1024, 2048)]


@pytest.fixture(scope="module")
def runner():
    r = harness.KernelRunner(repeat=10)
    yield r
    r.close()


@pytest.fixture(scope="module")
def gpu_name():
    import tvm

    return tvm.cuda(0).device_name


@pytest.mark.parametrize("size", SIZES, ids=lambda s: str(s[0]))
@pytest.mark.parametrize("ref", [references.CUBLAS, references.CUBLAS_TF32], ids=lambda r: r.key)
def test_cublas_is_correct_and_not_host_bound(ref, size, runner, gpu_name):
    if not harness.cublas_available():
        pytest.skip("CuPy or libcublas not available")
    m = references.measure(ref, size, runner, harness.gpu_arch(), gpu_name, repeat=10)
    assert m.ok, m.error
    assert m.host_bound is False, f"host {m.host_us:.2f} us per GEMM vs GPU {m.median_ms * 1e3:.2f} us"
    if ref.tf32:  # reduced precision: its own bound, and visibly above fp32's
        assert 1e-5 < m.rel_err <= harness.TF32_TOLERANCE, m.rel_err


@pytest.mark.parametrize("size", SIZES, ids=lambda s: str(s[0]))
@pytest.mark.parametrize("ref", [references.DLIGHT, references.METASCHEDULE], ids=lambda r: r.key)
def test_tvm_references_are_correct(ref, size, runner, gpu_name):
    why_not = references.available(ref, size, gpu_name)
    if why_not:
        pytest.skip(why_not)
    m = references.measure(ref, size, runner, harness.gpu_arch(), gpu_name, repeat=10)
    assert m.ok, m.error
    assert m.rel_err <= harness.TOLERANCE
