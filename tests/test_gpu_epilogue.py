"""On a CUDA GPU: the fused epilogue (schedules/transforms/epilogue.py) is correct for every step that takes
it, fused and separate, on shapes that pad, split K and divide; python -m steps.epilogue runs."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import schedules
from schedules.transforms.epilogue import Epilogue
from steps.commands import epilogue as command
from steps.measure import harness

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("step", [3, 6, 10, 11, 13])
@pytest.mark.parametrize("shape", [(256, 256, 256), (1000, 1500, 700), (128, 128, 8192), (1, 4096, 1024), (4099, 1, 1000)])
@pytest.mark.parametrize("fused", [True, False])
def test_the_epilogue_is_correct_on_the_gpu(step, shape, fused):
    import tvm

    M, N, K = shape
    ep = Epilogue(bias=True, activation="gelu", alpha=0.5, beta=1.0)
    lib = schedules.build(step, M, N, K, arch=harness.gpu_arch(), epilogue=ep, fused=fused)
    rng = np.random.default_rng(7)
    a, b = harness.random_operands(M, N, K, rng)
    bias, c_in = rng.uniform(-1, 1, N).astype(np.float32), rng.uniform(-1, 1, (M, N)).astype(np.float32)
    dev = tvm.cuda(0)
    args = [tvm.runtime.tensor(v, dev) for v in (a, b, bias, c_in, np.full((M, N), np.nan, np.float32))]
    lib["main"](*args)
    dev.sync()
    ref = command.reference(a, b, bias, c_in, ep)
    bound = harness.TF32_TOLERANCE if schedules.get_step(step).precision == "tf32" else harness.TOLERANCE
    assert harness.relative_error(args[-1].numpy(), ref) <= bound


def _hopper_epilogue(step, shape, ep, dtype, fused=True, seed=11, config=None):
    """(relative error of `step`'s kernel with `ep` (and `config`, default the step's) against
    float64, the dtype's bound): fresh operands, bias and C_in, D poisoned with NaN."""
    import tvm

    from steps.measure import dtypes

    if harness.gpu_arch() not in ("sm_90", "sm_90a"):
        pytest.skip("the Hopper rungs need an sm_90 GPU")
    M, N, K = shape
    lib = schedules.build(step, M, N, K, arch="sm_90a", config=config, epilogue=ep, fused=fused, dtype=dtype)
    rng = np.random.default_rng(seed)
    a, b = dtypes.random_operands(M, N, K, rng, dtype)
    bias = dtypes.from_float32(rng.uniform(-1, 1, N).astype(np.float32), dtype)
    c_in = dtypes.from_float32(rng.uniform(-1, 1, (M, N)).astype(np.float32), dtype)
    dev = tvm.cuda(0)
    args = [dtypes.to_device(tvm, v, dtype, dev) for v in (a, b, bias, c_in, dtypes.nan_filled((M, N), dtype))]
    lib["main"](*args)
    dev.sync()
    ref = command.reference(a, b, bias, c_in, ep, dtype)
    # TF32's bound for the TF32 rungs, fp32's for the fp32-accurate ones (19, 25, 28), the dtype's in 16 bits.
    bound = harness.tolerance(step, dtype)
    return harness.relative_error(dtypes.from_device(args[-1], dtype), ref, dtype), bound


def _rungs_and_dtypes(dtypes_asked):
    """(step, dtype) for every epilogue rung and each of `dtypes_asked` it has (19, 25 and 28: fp32 only)."""
    return [(s, d) for s in schedules.EPILOGUE_RUNGS for d in dtypes_asked if d in schedules.get_step(s).dtypes]


@pytest.mark.parametrize("step, dtype", _rungs_and_dtypes(["bf16", "fp16", "fp32"]))
@pytest.mark.parametrize("shape", [(1000, 1500, 700), (256, 256, 16384), (4096, 2048, 512), (33, 64, 129)])
@pytest.mark.parametrize("fused", [True, False])
def test_the_hopper_rungs_epilogue_is_correct_in_every_dtype(step, shape, fused, dtype):
    """Steps 20, 21 and 23 (256 x 256 x 16384: split K, the epilogue in the sum of the parts):
    D = gelu(0.5 AB + bias + C_in), from the fp32 sums, rounded once to the dtype; steps 19 and 25
    (3xTF32) held to fp32's bound."""
    error, bound = _hopper_epilogue(step, shape, Epilogue(bias=True, activation="gelu", alpha=0.5, beta=1.0),
                                    dtype, fused)
    assert error <= bound


@pytest.mark.parametrize("step, dtype", _rungs_and_dtypes(["bf16", "fp32"]))
@pytest.mark.parametrize("shape", [(1000, 1500, 700), (256, 256, 16384), (16, 1024, 4096)])
def test_a_gated_pairs_second_product_is_correct_in_each_hopper_rung(step, shape, dtype):
    """D = silu(AB + bias) * C_in (the SwiGLU gate the Relax pass folds: relax_dispatch's gated
    chain), fused, in bf16 and TF32, against float64."""
    error, bound = _hopper_epilogue(step, shape, Epilogue(bias=True, activation="silu", gate=True), dtype, seed=13)
    assert error <= bound


@pytest.mark.parametrize("step, shape", [(19, (256, 256, 256)), (19, (1000, 777, 1001)), (25, (2048, 1536, 256)),
                                         (28, (1000, 777, 1001)), (28, (2048, 1536, 256))])
@pytest.mark.parametrize("data", ["scale 2^-64", "scale 2^-70", "inf and NaN", "fp32 max"])
def test_an_fp32_accurate_rungs_epilogue_applies_to_what_its_fallback_stores(step, shape, data):
    """Steps 19, 25 and 28 test each raw total (NaN, or tiny: recomputed by serial FFMA; 28: NaN) before the
    epilogue: with D = 2 * AB, D is twice the bare kernel's C bit for bit (doubling is exact),
    NaN and inf where C has them, on the classes whose outputs take the fallback (tiny sums, inf
    and NaN) and where the fast path's sums are near fp32's largest. Step 25 at 2048 x 1536 walks
    its tiles (192 of 128 x 128 on 128 blocks)."""
    import tvm

    from steps.measure import special as special_data

    if harness.gpu_arch() not in ("sm_90", "sm_90a"):
        pytest.skip("the Hopper rungs need an sm_90 GPU")
    M, N, K = shape
    a, b = special_data.BY_NAME[data].make(np.random.default_rng(5), M, N, K)
    dev = tvm.cuda(0)
    outs = []
    for ep in (None, Epilogue(alpha=2.0)):
        lib = schedules.build(step, M, N, K, arch="sm_90a", epilogue=ep)
        args = [tvm.runtime.tensor(v, dev) for v in (a, b, np.full((M, N), np.nan, np.float32))]
        lib["main"](*args)
        dev.sync()
        outs.append(args[-1].numpy())
    bare, doubled = outs
    tiny = np.abs(bare) < 2.0**-100
    assert data not in ("scale 2^-64", "scale 2^-70") or tiny.mean() > 0.5  # the fallback's outputs
    assert data != "inf and NaN" or np.isnan(bare).any()
    with np.errstate(over="ignore"):
        assert np.array_equal(doubled, np.float32(2) * bare, equal_nan=True)


def test_the_command_measures_and_checks_a_small_size():
    proc = subprocess.run([sys.executable, "-m", "steps.epilogue", "--sizes", "512", "--rounds", "2", "--repeat", "5",
                           "--activation", "relu", "--beta", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "fused/bare" in proc.stdout and "FAILED" not in proc.stdout + proc.stderr
