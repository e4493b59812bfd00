"""On a Hopper GPU: step 29's kernels, launched before their predecessors finish, never read or
write memory those are still using.

The chain: X <- X @ P a hundred and one times back to back, no synchronisation between, two
buffers in turn, so each launch reads what the one before it wrote and overwrites what that one
read. P is a permutation matrix and X's values are exact in every input precision (TF32's 10
mantissa bits), so the answer is exact: X's columns permuted 101 times. A kernel that read its
input before the previous launch had written it, or wrote before that one had read, leaves wrong
columns. The shapes take every kind of kernel step 29 launches: the GEMM alone, the GEMM and the
sum of K's parts (split-K), and the copies an operand needs first (rows not 16-byte aligned).
"""

import dataclasses

import numpy as np
import pytest

import schedules
from steps.measure import dtypes, harness

pytestmark = pytest.mark.gpu

STEP = schedules.get_step(29)
LAUNCHES = 101
# (M, N = K, split_k or None for the default): the GEMM alone; split-K (a second kernel sums
# the parts); K = 98 values a row (196 or 392 bytes), so A and B are copied to padded rows first.
CHAINS = [(1024, 1024, None), (4096, 128, None), (256, 256, 4), (333, 98, None)]
KERNELS = {(256, 256, 4): 2, (333, 98, None): 3}  # the GEMM and the sum of the parts; two copies and the GEMM


@pytest.fixture(scope="module")
def dev():
    if harness.gpu_arch() not in ("sm_90", "sm_90a"):
        pytest.skip("step 29 needs a Hopper GPU (sm_90a)")
    import tvm

    return tvm.cuda(0)


def _exact(x: np.ndarray, dtype: str) -> np.ndarray:
    """x in `dtype`'s storage, its values exact in TF32 too (bf16's 8 bits of mantissa)."""
    x = dtypes.bf16_to_float32(dtypes.bf16_bits(x))
    return dtypes.from_float32(x, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("M, N, split", CHAINS, ids=lambda v: str(v))
def test_a_chain_of_dependent_launches_is_exact(M, N, split, dtype, dev):
    import tvm

    cfg = STEP.default_config(M, N, N, dtype)
    if split is not None:
        cfg = dataclasses.replace(cfg, block_m=64, block_n=64, split_k=split)
    lib = schedules.build(STEP, M, N, N, arch="sm_90a", config=cfg, dtype=dtype)
    kernels = schedules.cuda_source(lib).count("__global__ void __launch_bounds__") // 2
    assert kernels == KERNELS.get((M, N, split), kernels)
    rng = np.random.default_rng(29)
    perm = rng.permutation(N)
    p = np.zeros((N, N), np.float32)
    p[perm, np.arange(N)] = 1.0  # (X @ P)[:, j] = X[:, perm[j]]
    x0 = _exact(rng.uniform(-1, 1, (M, N)).astype(np.float32), dtype)
    bufs = [dtypes.to_device(tvm, x0, dtype, dev), dtypes.to_device(tvm, dtypes.nan_filled((M, N), dtype), dtype, dev)]
    P = dtypes.to_device(tvm, dtypes.from_float32(p, dtype), dtype, dev)
    for i in range(LAUNCHES):
        lib["main"](bufs[i % 2], P, bufs[(i + 1) % 2])
    dev.sync()
    got = dtypes.to_float64(dtypes.from_device(bufs[LAUNCHES % 2], dtype), dtype)
    columns = np.arange(N)
    for _ in range(LAUNCHES):
        columns = columns[perm]
    want = dtypes.to_float64(x0, dtype)[:, columns]
    wrong = int(np.sum(got != want))
    assert wrong == 0, f"{wrong} of {M * N} elements wrong after {LAUNCHES} dependent launches"


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("shape", [(1000, 1512, 700), (8192, 32, 2048), (64, 1024, 8192), (17, 31, 4099)],
                         ids=lambda s: "x".join(map(str, s)))
def test_step29_is_correct_on_fresh_inputs(shape, dtype, dev):
    runner = harness.KernelRunner(repeat=5)
    lib = schedules.build(STEP, *shape, arch="sm_90a", dtype=dtype)
    errors = [runner.check(lib["main"], *shape, dtype) for _ in range(2)]
    bound = harness.tolerance(STEP, dtype)
    assert all(e <= bound for e in errors), f"relative errors {errors} (bound {bound:g})"
