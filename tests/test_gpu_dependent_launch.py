"""On a Hopper GPU: steps 29-31's kernels, launched before their predecessors finish, never read
or write memory those are still using.

The chain: X <- X @ P a hundred and one times back to back, no synchronisation between, two
buffers in turn, so each launch reads what the one before it wrote and overwrites what that one
read. P is a permutation matrix and X's values are exact in every input precision (TF32's 10
mantissa bits), so the answer is exact: X's columns permuted 101 times. A kernel that read its
input before the previous launch had written it, or wrote before that one had read, leaves wrong
columns. The chains take every kind of kernel those steps launch: the GEMM alone, step 23's GEMM
and the sum of K's parts, step 26's parts added in a cluster, step 27's tiles streamed (a tile's
parts meeting through the module's workspace and flags), and the copies an operand needs first
(rows not 16-byte aligned).
"""

import dataclasses

import numpy as np
import pytest

import schedules
from schedules.config import DTYPES, HOPPER_SMS
from schedules.step22_tma_store import StorePlan
from schedules.step27_stream_k import stream_of
from steps.measure import dtypes, harness

pytestmark = pytest.mark.gpu

LAUNCHES = 101


def _split(split):
    return lambda cfg: dataclasses.replace(cfg, block_m=64, block_n=64, split_k=split)


def _streamed(cfg):
    """Step 27's config on all 132 SMs, streaming wherever the pairs do not divide evenly."""
    return dataclasses.replace(cfg, ctas=HOPPER_SMS, stream_share=1)


# (step, M, N = K, a change to the default config or None, kernels a call where the chain is about
# them, or None): the default's kernels (the GEMM alone; step 29 at 1024^3 in TF32 splits K); the
# GEMM and the sum of the parts (step 29: 23's split-K); K = 98 values a row (196 or 392 bytes),
# so A and B are copied to padded rows first; step 30's parts in a cluster; step 31 streaming
# (4608 x 1024: 72 pairs of 256 x 128 tiles on 66 clusters).
CHAINS = [(29, 1024, 1024, None, None), (29, 4096, 128, None, None), (29, 256, 256, _split(4), 2), (29, 333, 98, None, 3),
          (30, 1024, 1024, None, None), (30, 256, 256, _split(4), 1), (30, 333, 98, None, 3),
          (31, 1024, 1024, None, None), (31, 4608, 1024, _streamed, 1), (31, 333, 98, None, 3)]


@pytest.fixture(scope="module")
def dev():
    if harness.gpu_arch() not in ("sm_90", "sm_90a"):
        pytest.skip("steps 29-31 need a Hopper GPU (sm_90a)")
    import tvm

    return tvm.cuda(0)


def _exact(x: np.ndarray, dtype: str) -> np.ndarray:
    """x in `dtype`'s storage, its values exact in TF32 too (bf16's 8 bits of mantissa)."""
    x = dtypes.bf16_to_float32(dtypes.bf16_bits(x))
    return dtypes.from_float32(x, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("step, M, N, change, kernels", CHAINS,
                         ids=lambda v: getattr(v, "__name__", str(v)) if callable(v) else str(v))
def test_a_chain_of_dependent_launches_is_exact(step, M, N, change, kernels, dtype, dev):
    import tvm

    cfg = schedules.get_step(step).default_config(M, N, N, dtype)
    if change is not None:
        cfg = change(cfg)
    if change is _streamed:
        assert stream_of(StorePlan(M, N, N, cfg, DTYPES[dtype])).streams
    lib = schedules.build(step, M, N, N, arch="sm_90a", config=cfg, dtype=dtype)
    assert kernels is None or schedules.cuda_source(lib).count("__global__ void __launch_bounds__") // 2 == kernels
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
@pytest.mark.parametrize("step", [29, 30, 31])
def test_steps_29_to_31_are_correct_on_fresh_inputs(step, shape, dtype, dev):
    runner = harness.KernelRunner(repeat=5)
    lib = schedules.build(step, *shape, arch="sm_90a", dtype=dtype)
    errors = [runner.check(lib["main"], *shape, dtype) for _ in range(2)]
    bound = harness.tolerance(schedules.get_step(step), dtype)
    assert all(e <= bound for e in errors), f"relative errors {errors} (bound {bound:g})"
