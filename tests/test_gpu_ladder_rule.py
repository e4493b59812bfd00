"""On a CUDA GPU: functions the dlight rule scheduled (schedules/integration/ladder_rule.py) compute what
their TensorIR says: NT with a folded batch and a ReLU, the model's fused bias + GELU, and
batched products (NN, and attention's scaled q k^T over two leading dims) over blockIdx.z."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from schedules.integration import relax_dispatch
from schedules.integration.ladder_rule import LadderMatmul
from steps.measure import harness

from .test_ladder_rule import TARGET, batched, fused_functions, nt_relu, scores

pytestmark = pytest.mark.gpu


def run(func, arrays):
    sch = LadderMatmul().apply(func, TARGET, False)
    assert sch is not None
    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
    with tvm.transform.PassContext(opt_level=3, config=relax_dispatch.PASS_CONFIG):
        lib = tvm.compile(mod, target=TARGET)
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    lib["main"](*tensors)
    dev.sync()
    return tensors[-1].numpy()


def test_nt_with_a_folded_batch_and_relu():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2, 48, 64)).astype(np.float32)
    w = rng.uniform(-1, 1, (80, 64)).astype(np.float32)
    out = run(nt_relu, [x, w, np.full((2, 48, 80), np.nan, np.float32)])
    ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64).T, 0)
    assert harness.relative_error(out, ref) <= harness.TOLERANCE


def test_the_models_bias_and_gelu_fused():
    from math import erf, sqrt

    func = fused_functions(256, 128)["fused_matmul2_add3_gelu"]
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (1, 128, 256)).astype(np.float32)
    w = rng.uniform(-0.1, 0.1, (256, 1024)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, 1024).astype(np.float32)
    out = run(func, [x, w, b, np.full((1, 128, 1024), np.nan, np.float32)])
    v = x.astype(np.float64) @ w.astype(np.float64) + b
    ref = 0.5 * v * (1 + np.vectorize(erf)(v / sqrt(2)))
    assert harness.relative_error(out, ref) <= harness.TOLERANCE


@pytest.mark.parametrize("func, shapes, ref", [
    (batched, [(4, 32, 64), (4, 64, 16), (4, 32, 16)], lambda x, w: x @ w),
    (scores, [(2, 3, 40, 64), (2, 3, 56, 64), (2, 3, 40, 56)], lambda q, k: (q @ k.swapaxes(-1, -2)) * 0.125),
], ids=["batched-NN", "batched-NT-scaled"])
def test_batched_products(func, shapes, ref):
    rng = np.random.default_rng(4)
    ins = [rng.uniform(-1, 1, sh).astype(np.float32) for sh in shapes[:-1]]
    out = run(func, [*ins, np.full(shapes[-1], np.nan, np.float32)])
    assert harness.relative_error(out, ref(*(a.astype(np.float64) for a in ins))) <= harness.TOLERANCE


@pytest.mark.parametrize("args", [(12, 128, 128, 64, True), (8, 100, 77, 64, False), (32, 1, 512, 128, True)],
                         ids=lambda a: "x".join(map(str, a[:4])) + ("-NT" if a[4] else "-NN"))
def test_batched_matmul_builds_run_against_float64(args):
    from schedules.integration import batched as batched_, ladder_rule

    nb, M, N, K, transposed = args
    lib = ladder_rule.build(batched_.batched_matmul(*args))
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (nb, M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (nb, N, K) if transposed else (nb, K, N)).astype(np.float32)
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(x, dev) for x in (a, b, np.full((nb, M, N), np.nan, np.float32))]
    lib["main"](*tensors)
    dev.sync()
    b64 = b.astype(np.float64)
    ref = a.astype(np.float64) @ (b64.swapaxes(-1, -2) if transposed else b64)
    assert harness.relative_error(tensors[-1].numpy(), ref) <= harness.TOLERANCE


@pytest.mark.parametrize("number, M, N, K", [(4, 96, 80, 64), (7, 256, 192, 128), (8, 256, 192, 128),
                                             (11, 16, 3072, 1024), (11, 512, 1024, 4096), (11, 1, 4096, 1024)])
def test_each_step_takes_a_transposed_b(number, M, N, K):
    # B stored N x K through each step's own schedule: the copy one float at a time in the
    # source's order (tests/test_ladder_rule.py says why), against float64
    import schedules
    from schedules.integration import ladder_rule
    from schedules.integration.ladder_rule import match

    from .test_ladder_rule import nt

    func = nt(M, N, K)
    step = schedules.get_step(number)
    sch = ladder_rule.schedule(func, match(func), step, step.default_config(M, N, K))
    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
    with tvm.transform.PassContext(opt_level=3, config=relax_dispatch.PASS_CONFIG):
        lib = tvm.compile(mod, target=TARGET)
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (N, K)).astype(np.float32)
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(x, dev) for x in (a, b, np.full((M, N), np.nan, np.float32))]
    lib["main"](*tensors)
    dev.sync()
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert harness.relative_error(tensors[-1].numpy(), ref) <= harness.TOLERANCE
