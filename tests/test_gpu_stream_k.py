"""On a Hopper GPU: step 27 (stream-K) is correct where it streams, launch after launch.

The shapes are ones whose pairs of tiles do not divide over the clusters (asserted: the kernel
streams there), so every case runs the fix-up: a tile's last slices written to the workspace by
one cluster and added by another. Each kernel runs twice on fresh inputs, C poisoned with
NaN each time: a flag left raised by one launch would let the next add stale sums.
"""

import dataclasses

import pytest

import schedules
from schedules.config import HOPPER_SMS
from schedules.step22_tma_store import StorePlan
from schedules.step27_stream_k import stream_of
from schedules.transforms.epilogue import Epilogue
from steps.measure import harness

from .test_gpu_epilogue import _hopper_epilogue

pytestmark = pytest.mark.gpu

STEP = schedules.get_step(27)
# Shapes whose pairs stream on 66 clusters (asserted), square and not, N a multiple of 8 (TMA
# stores C), K from one slice to 96 of them.
SHAPES = [(6144, 6144, 6144), (8192, 8192, 256), (8192, 4104, 1000), (7000, 6000, 333), (6000, 8192, 777),
          (4608, 8192, 64), (8192, 6000, 200), (5120, 8192, 1024)]


def _everywhere(shape, dtype):
    """Step 27's config on all 132 SMs, streaming wherever the pairs do not divide evenly (its
    default streams only where they are at most an eighth of all: ``stream_share``)."""
    return dataclasses.replace(STEP.default_config(*shape, dtype), ctas=HOPPER_SMS, stream_share=1)


def _streams(shape, dtype):
    p = StorePlan(*shape, _everywhere(shape, dtype), schedules.config.DTYPES[dtype])
    return stream_of(p).streams


@pytest.fixture(scope="module")
def runner():
    if harness.gpu_arch() not in ("sm_90", "sm_90a"):
        pytest.skip("step 27 needs a Hopper GPU (sm_90a)")
    return harness.KernelRunner(repeat=20)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_stream_k_is_correct_launch_after_launch(shape, dtype, runner):
    assert _streams(shape, dtype)
    lib = schedules.build(STEP, *shape, arch="sm_90a", config=_everywhere(shape, dtype), dtype=dtype)
    errors = [runner.check(lib["main"], *shape, dtype) for _ in range(2)]
    bound = harness.tolerance(STEP, dtype)
    assert all(e <= bound for e in errors), f"relative errors {errors} (bound {bound:g})"


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_stream_k_is_correct_on_fewer_clusters(dtype, runner):
    """32 clusters (ctas 64): the walk's arithmetic is the kernel's for any count of clusters."""
    shape = (6000, 2504, 1000)
    cfg = dataclasses.replace(_everywhere(shape, dtype), ctas=64)
    assert stream_of(StorePlan(*shape, cfg, schedules.config.DTYPES[dtype])).clusters == 32
    assert stream_of(StorePlan(*shape, cfg, schedules.config.DTYPES[dtype])).streams
    lib = schedules.build(STEP, *shape, arch="sm_90a", config=cfg, dtype=dtype)
    error = runner.check(lib["main"], *shape, dtype)
    assert error <= harness.tolerance(STEP, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_stream_k_applies_the_epilogue_once_to_the_whole_sum(dtype):
    """D = gelu(0.5 AB + bias + C_in): the owner adds its partner's raw sums before the epilogue."""
    shape = (7000, 6000, 333)
    assert _streams(shape, dtype)
    error, bound = _hopper_epilogue(27, shape, Epilogue(bias=True, activation="gelu", alpha=0.5, beta=1.0), dtype,
                                    seed=5, config=_everywhere(shape, dtype))
    assert bound == harness.tolerance(STEP, dtype) and error <= bound


def test_stream_k_finishes_with_more_clusters_than_fit(runner):
    """132 clusters of two on 132 SMs: half wait until others exit (one block fills an SM). A
    cluster writes its partial sums before it waits for any, so the kernel still finishes (step
    27's docstring); a hang here is the deadlock that argument rules out."""
    shape, dtype = (8192, 8192, 1024), "bf16"
    cfg = dataclasses.replace(_everywhere(shape, dtype), ctas=2 * HOPPER_SMS)
    walk = stream_of(StorePlan(*shape, cfg, schedules.config.DTYPES[dtype]))
    assert walk.clusters == HOPPER_SMS and walk.streams
    lib = schedules.build(STEP, *shape, arch="sm_90a", config=cfg, dtype=dtype)
    assert runner.check(lib["main"], *shape, dtype) <= harness.tolerance(STEP, dtype)
