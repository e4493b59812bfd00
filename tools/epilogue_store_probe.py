"""A probe (issue 50, answered: docs/models.md, results/nvidia-h200/evidence/epilogue_store_probe.txt):
what a fused epilogue costs a Hopper rung's store at 4096^3 in 16-bit, epilogue by epilogue, in one
process (alternating rounds), and the kernels for Nsight Compute and cuobjdump.

    [VARIANTS=bare,bias,gelu,resid] python tools/epilogue_store_probe.py time DTYPE [STEP]
    python tools/epilogue_store_probe.py run DTYPE VARIANT [STEP]      # 3 launches, for ncu
    python tools/epilogue_store_probe.py src DTYPE DIR [STEP]          # each variant's CUDA into DIR

Variants: bare; bias (acc + bias); gelu (gelu(acc + bias)); resid (acc + bias + C_in); gelu_sel
(gelu with libdevice's erff written with selects for its one branch: ptxas had predicated it
already, no faster). STEP defaults to 20."""
import statistics, struct, sys
import numpy as np
import tvm
from tvm import tirx
import schedules
from schedules.transforms.epilogue import Epilogue, SQRT1_2
from steps.measure import dtypes, harness
from steps.commands.epilogue import reference

def _f(h):
    return tirx.const(struct.unpack(">f", bytes.fromhex(h))[0], "float32")

BIG = ["38EB4C3A", "BAAE005B", "3C09919F", "BD24D99A", "3E235519", "3F69B4F9", "3F210A14"]
SMALL = ["38B1E96A", "BA574D20", "3BAAD5EA", "BCDC1BE7", "3DE718AF", "BEC093AC", "3E0375D3"]

def erf_select(x):
    """libdevice's erff (its PTX: a polynomial in x^2 below 1.003, in |x| with 1 - 2^p above, one
    branch), written with selects and let-bound values so every value's code is straight-line."""
    xv = tirx.Var("erf_x", "float32"); tv = tirx.Var("erf_t", "float32"); bv = tirx.Var("erf_big", "bool")
    rv = tirx.Var("erf_r", "float32")
    u = tirx.Select(bv, tv, xv * xv)
    r = tirx.Select(bv, _f(BIG[0]), _f(SMALL[0]))
    for b, s in zip(BIG[1:], SMALL[1:]):
        r = r * u + tirx.Select(bv, _f(b), _f(s))
    s = tirx.Select(bv, -tv, xv)
    one = tirx.const(1.0, "float32")
    tail = tirx.call_pure_extern("float32", "copysignf", one - tirx.call_pure_extern("float32", "exp2f", rv), xv)
    body = tirx.Let(rv, r * s + s, tirx.Select(bv, tail, rv))
    return tirx.Let(xv, x, tirx.Let(tv, tirx.abs(xv), tirx.Let(bv, tv >= _f("3F8060FE"), body)))

class GeluSel(Epilogue):
    def value(self, acc, i, j, bias=None, c_in=None):
        f32 = lambda v: tirx.const(float(v), "float32")
        wide = lambda buf, *at: buf[at] if buf.dtype == "float32" else tirx.Cast("float32", buf[at])
        vv = tirx.Var("gelu_v", "float32")
        return tirx.Let(vv, acc + wide(bias, j), f32(0.5) * vv * (f32(1) + erf_select(vv * f32(SQRT1_2))))

VARIANTS = {"bare": None, "bias": Epilogue(bias=True), "gelu": Epilogue(bias=True, activation="gelu"), "resid": Epilogue(bias=True, beta=1.0),
            "gelu_sel": GeluSel(bias=True, activation="gelu")}
REF_EP = {"resid": Epilogue(bias=True, beta=1.0), "bias": Epilogue(bias=True), "gelu": Epilogue(bias=True, activation="gelu"),
          "gelu_sel": Epilogue(bias=True, activation="gelu")}

def libs(dtype, step, names, n=4096):
    cfg = schedules.get_step(step).default_config(n, n, n, dtype)
    out = {}
    for v in names:
        kw = {} if VARIANTS[v] is None else {"epilogue": VARIANTS[v]}
        out[v] = schedules.build(step, n, n, n, arch="sm_90", config=cfg, dtype=dtype, **kw)
    return out

def main():
    mode, dtype = sys.argv[1], sys.argv[2]
    global VARIANTS
    only = __import__("os").environ.get("VARIANTS")
    if only:
        VARIANTS = {k: VARIANTS[k] for k in only.split(",")}
    if mode == "src":
        step = int(sys.argv[4]) if len(sys.argv) > 4 else 20
        for v, lib in libs(dtype, step, list(VARIANTS)).items():
            open(f"{sys.argv[3]}/s{step}_{dtype}_{v}.cu", "w").write(schedules.cuda_source(lib))
        return
    step = int(sys.argv[4 if mode == "run" else 3]) if len(sys.argv) > (4 if mode == "run" else 3) else 20
    names = [sys.argv[3]] if mode == "run" else list(VARIANTS)
    n = 4096
    L = libs(dtype, step, names, n)
    dev = tvm.cuda(0)
    rng = np.random.default_rng(0)
    t = lambda x: dtypes.to_device(tvm, x, dtype, dev)
    a, b = dtypes.random_operands(n, n, n, rng, dtype)
    bias = dtypes.from_float32(rng.uniform(-1, 1, n).astype(np.float32), dtype)
    c_in = dtypes.from_float32(rng.uniform(-1, 1, (n, n)).astype(np.float32), dtype)
    ep = lambda v: VARIANTS[v]
    args = {v: [t(a), t(b)] + ([] if ep(v) is None else [t(bias)]) + ([t(c_in)] if ep(v) is not None and ep(v).reads_c else [])
            + [t(dtypes.nan_filled((n, n), dtype))] for v in names}
    if mode == "run":
        for _ in range(3):
            L[names[0]]["main"](*args[names[0]])
        dev.sync(); print("ran", names[0]); return
    for v in names:
        L[v]["main"](*args[v]); dev.sync()
        ref = dtypes.reference(a, b, dtype) if VARIANTS[v] is None else reference(a, b, bias, c_in, REF_EP[v], dtype)
        print(v, "rel err", harness.relative_error(dtypes.from_device(args[v][-1], dtype), ref, dtype), flush=True)
    for v in names:
        L[v].mod.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)(*args[v])
    samples = {v: [] for v in names}
    for r in range(8):
        for v in names:
            res = L[v].mod.time_evaluator("main", dev, number=10, repeat=10)(*args[v])
            samples[v].append(statistics.median(x * 1e3 for x in res.results))
        print("round", r, " ".join(f"{v} {samples[v][-1]:.4f}" for v in names), flush=True)
    base = statistics.median(samples["bare"])
    for v in names:
        m = statistics.median(samples[v])
        ratios = [x / y for x, y in zip(samples[v], samples["bare"])]
        print(f"{dtype} step{step} {v}: median {m:.4f} ms, {2*n**3/m/1e9:.1f} TFLOP/s, x bare {m/base:.3f} "
              f"(rounds {min(ratios):.3f}-{max(ratios):.3f})")

main()
