"""The float64 check that runs where C is (schedules/integration/device_check.py), against the host's.

An RPC sweep checks each candidate on its server's device so that C never crosses the socket;
it must say what the local check (harness.relative_error on numpy's float64 product) says:
the same error on a good output, and inf, never a pass, on NaN, inf or an element never
written. On the CPU (llvm) here; on the GPU, the scheduled CUDA build against a step's kernel.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import schedules
from schedules.integration import device_check
from steps.measure import harness, rpc

SIZES = [(33, 17, 65), (128, 96, 256), (1, 300, 7)]


def on_device(lib, dev, a: np.ndarray, b: np.ndarray) -> rpc._SizeOnDevice:
    t = rpc._SizeOnDevice.empty(dev, (a.shape[0], b.shape[1], a.shape[1]))
    t.a.copyfrom(a)
    t.b.copyfrom(b)
    lib["reference"](t.a, t.b, t.ref)
    return t


def writes(c: np.ndarray):
    """A kernel (as a packed function) that writes `c` into its output, whatever its inputs."""
    import tvm

    def kernel(a, b, out):
        tvm.runtime.tensor(c, out.device).copyto(out)

    return kernel


@pytest.fixture(scope="module")
def cpu_checker():
    return device_check.build("cpu")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_the_reference_is_numpys_float64_product(cpu_checker, size):
    import tvm

    a, b = harness.random_operands(*size, np.random.default_rng(1))
    t = on_device(cpu_checker, tvm.cpu(0), a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(t.ref.numpy(), ref, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("noise", [0.0, 1e-7, 1e-3])
def test_the_error_is_the_host_checks(cpu_checker, noise):
    import tvm

    rng = np.random.default_rng(2)
    a, b = harness.random_operands(96, 80, 200, rng)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    c = (ref * (1 + rng.normal(0, noise, ref.shape))).astype(np.float32)
    t = on_device(cpu_checker, tvm.cpu(0), a, b)
    err = rpc.check_on_device(cpu_checker, writes(c), t)
    host = harness.relative_error(c, ref)
    assert host > 0  # float32 rounding alone makes it nonzero
    assert err == pytest.approx(host, rel=1e-9)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_anywhere_never_passes(cpu_checker, bad):
    import tvm

    a, b = harness.random_operands(64, 48, 32, np.random.default_rng(3))
    c = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    c[63, 47] = bad
    t = on_device(cpu_checker, tvm.cpu(0), a, b)
    assert rpc.check_on_device(cpu_checker, writes(c), t) == math.inf
    assert harness.relative_error(c, a.astype(np.float64) @ b.astype(np.float64)) == math.inf


def test_an_element_never_written_reads_the_poison(cpu_checker):
    import tvm

    a, b = harness.random_operands(40, 24, 16, np.random.default_rng(4))
    good = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    t = on_device(cpu_checker, tvm.cpu(0), a, b)

    def all_but_one(a_, b_, out):
        c = out.numpy()  # the poison the check put there
        assert np.isnan(c).all()
        c[:] = good
        c[17, 5] = np.nan  # one element left as it was
        tvm.runtime.tensor(c, out.device).copyto(out)

    assert rpc.check_on_device(cpu_checker, all_but_one, t) == math.inf
    assert rpc.check_on_device(cpu_checker, writes(good), t) < 1e-6  # the same tensors, written: passes


def pcg_hash(x: np.ndarray) -> np.ndarray:
    """PCG's output permutation of 32-bit values, in numpy (the kernel's own arithmetic, apart)."""
    x = x.astype(np.uint64) & 0xFFFFFFFF
    state = (x * 747796405 + 2891336453) & 0xFFFFFFFF
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & 0xFFFFFFFF
    return (word >> 22) ^ word


def uniform_in_numpy(shape, seed: int) -> np.ndarray:
    index = np.arange(shape[0] * shape[1], dtype=np.uint64).reshape(shape)
    bits = pcg_hash(index ^ pcg_hash(np.uint64(seed))) >> 8
    return (bits.astype(np.float64) / 2**23 - 1).astype(np.float32)


def test_the_inputs_drawn_on_the_device_are_uniform_and_fresh(cpu_checker):
    import tvm

    def draw(seed, shape=(300, 700)):
        x = tvm.runtime.empty(shape, "float32", tvm.cpu(0))
        cpu_checker["uniform"](x, seed)
        return x.numpy()

    a, b = draw(12345), draw(12346)
    np.testing.assert_array_equal(a, uniform_in_numpy(a.shape, 12345))  # the hash, as written
    assert -1.0 <= a.min() < -0.999 and 0.999 < a.max() < 1.0
    assert abs(a.mean()) < 0.01 and abs(a.var() - 1 / 3) < 0.01  # uniform on [-1, 1): var 1/3
    assert len(np.unique(a)) > 0.99 * a.size  # 24 bits for 210000 values: few repeats
    assert (a != b).mean() > 0.999 and abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(a[:, :-1].ravel(), a[:, 1:].ravel())[0, 1]) < 0.02  # neighbours too
    assert (draw(2**32 + 5, (4, 4)) == draw(5, (4, 4))).all()  # a seed is 32 bits


def test_the_cuda_build_binds_every_kernel():
    lib = device_check.build("cuda", "sm_90")
    source = schedules.cuda_source(lib)
    for kernel in ("uniform_kernel", "poison_kernel", "reference_kernel", "error_sums_kernel"):
        assert f"__launch_bounds__({device_check.THREADS}) {kernel}(" in source
    assert "R_local" in source  # the reference's sum stays in a register, stored once


def test_an_unknown_device_is_refused():
    with pytest.raises(ValueError, match="no device 'tpu'"):
        device_check.build("tpu")


@pytest.mark.gpu
@pytest.mark.parametrize("size", [(1000, 1500, 700), (513, 257, 1025)], ids=lambda s: "x".join(map(str, s)))
def test_on_the_gpu_it_agrees_with_the_host_check(size):
    """Step 11's kernel on the GPU: the device check's error is the host check's, and a kernel
    that leaves C alone fails it."""
    import tvm

    dev = tvm.cuda(0)
    checker = device_check.build("cuda", harness.gpu_arch())
    lib = schedules.build(11, *size, arch=harness.gpu_arch())
    a, b = harness.random_operands(*size, np.random.default_rng(5))
    t = on_device(checker, dev, a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(t.ref.numpy(), ref, rtol=1e-12, atol=1e-12)
    err = rpc.check_on_device(checker, lib["main"], t)
    host = harness.relative_error(t.checked.numpy(), ref)
    assert 0 < err < harness.tolerance(11)
    assert err == pytest.approx(host, rel=1e-9)
    assert rpc.check_on_device(checker, lambda a_, b_, out: None, t) == math.inf
    x = tvm.runtime.empty((257, 1000), "float32", dev)
    checker["uniform"](x, 987654321)
    np.testing.assert_array_equal(x.numpy(), uniform_in_numpy((257, 1000), 987654321))  # CUDA's int64 hash too
