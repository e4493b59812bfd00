"""On a CUDA GPU: functions the dlight rule scheduled (schedules/ladder_rule.py) compute what
their TensorIR says: NT with a folded batch and a ReLU, and the model's fused bias + GELU."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from schedules import relax_dispatch
from schedules.ladder_rule import LadderMatmul
from steps.measure import harness

from .test_ladder_rule import TARGET, fused_functions, nt_relu

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
