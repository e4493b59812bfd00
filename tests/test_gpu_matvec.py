"""On a CUDA GPU: step 24's two kernels on the shapes each is for, in every dtype, and the fp32
contract where a thread's range of K passes K (0 x inf must not make a NaN there).

The row kernel (M <= 16) and the mirror (N <= 16 < M, rows of A streamed): odd sizes, sizes no
16-byte vector divides, one row or column, a long K; C poisoned with NaN, the relative error
against float64 within the dtype's bound (harness.tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

import schedules
from schedules.step24_matvec import streams_a
from steps.measure import harness
from steps.measure import special as data

pytestmark = pytest.mark.gpu

STEP24 = schedules.get_step(24)
SHAPES = [(4096, 1, 4096), (2048, 2, 2048), (1000, 3, 777), (513, 7, 1025), (4096, 16, 4096), (17, 16, 3001),
          (64, 1, 65536), (12345, 1, 777), (3, 1001, 777), (16, 16, 4099)]


@pytest.fixture(scope="module")
def runner():
    if not harness.gpu_present():
        pytest.skip("no CUDA GPU: tvm.cuda(0) does not exist on this machine")
    r = harness.KernelRunner(repeat=3, seed=24, timeout_s=120)
    yield r
    r.close()


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_both_kernels_correct_in_every_dtype(runner, shape, dtype):
    m = runner.measure(STEP24, *shape, harness.gpu_arch(), dtype=dtype, seed=24)
    assert m.error is None, m.error
    assert m.rel_err <= harness.tolerance(24, dtype), (shape, dtype, m.rel_err)


@pytest.mark.parametrize("shape", [(3, 1001, 777), (1, 16384, 512), (1000, 3, 777), (2048, 1, 2047), (64, 1, 65535)],
                         ids=lambda s: "x".join(map(str, s)))
def test_inf_in_a_last_column_stays_inf_where_ranges_pass_k(shape):
    if not harness.gpu_present():
        pytest.skip("no CUDA GPU: tvm.cuda(0) does not exist on this machine")
    M, N, K = shape
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(0.5, 1, (K, N)).astype(np.float32)
    a[0, K - 1], a[M - 1, K - 1] = np.inf, -np.inf
    got = data.StepKernels(harness.gpu_arch()).run(STEP24, a, b).astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isinf(ref).any() and (streams_a(M, N) or M <= 16)
    for mark in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(mark(got), mark(ref)), (shape, mark.__name__, int(mark(got).sum()), int(mark(ref).sum()))
    finite = np.isfinite(ref)
    assert np.linalg.norm(got[finite] - ref[finite]) <= 1e-6 * np.linalg.norm(ref[finite])
