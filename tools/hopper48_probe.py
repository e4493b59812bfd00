"""Issue 48 probe: correctness and alternating-round timing of Hopper rungs against cuBLAS.
usage: python tools/hopper48_probe.py SPEC.json (on a GPU, TVM from .gpu/setup.sh); spec: {"check": [[step, dtype, cfg, [M,N,K]],...],
 "time": {"shapes": [[M,N,K],...], "kernels": [[label, step, dtype, cfg],...], "rounds": 3}}"""
import json, sys, time
from dataclasses import replace
import numpy as np
import torch
import tvm
import schedules
sys.path.insert(0, __import__('os').path.dirname(__file__))

spec = json.load(open(sys.argv[1]))
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
print(json.dumps({"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d %H:%M"),
                  "tvm": tvm.__version__}), flush=True)

def tv(t):
    return tvm.runtime.from_dlpack(t)

def cfg_for(step, dt, over, M, N, K):
    s = schedules.get_step(step)
    c = s.default_config(M, N, K, dt) if dt != "fp32" else s.default_config(M, N, K)
    return replace(c, **over) if over else c

libs = {}
def get(step, dt, over, M, N, K):
    key = (step, dt, json.dumps(over, sort_keys=True), M, N, K)
    if key not in libs:
        t = time.time()
        if isinstance(step, str):  # a probe variant: "name:base step"
            import hopper48_variants as variants
            name, base = step.split(":")
            libs[key] = variants.build(name, M, N, K, dt, cfg_for(int(base), dt, over, M, N, K))
        else:
            libs[key] = schedules.build(step, M, N, K, arch="sm_90a", config=cfg_for(step, dt, over, M, N, K), dtype=dt)["main"]
        print(json.dumps({"built": list(key), "s": round(time.time() - t, 1)}), flush=True)
    return libs[key]

def inputs(M, N, K, dt, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    A = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).to(TORCH[dt])
    B = (torch.rand(K, N, device="cuda", generator=g) * 2 - 1).to(TORCH[dt])
    return A, B

for step, dt, over, (M, N, K) in spec.get("check", []):
    rec = {"check": step, "dtype": dt, "cfg": over, "shape": f"{M}x{N}x{K}"}
    try:
        f = get(step, dt, over, M, N, K)
        A, B = inputs(M, N, K, dt, M * 7 + N * 3 + K)
        C = torch.full((M, N), float("nan"), device="cuda", dtype=TORCH[dt])
        f(tv(A), tv(B), tv(C)); torch.cuda.synchronize()
        ref = A.double() @ B.double(); nref = torch.linalg.norm(ref).item()
        rec["nan"] = int(torch.isnan(C).sum())
        rec["err"] = torch.linalg.norm(C.double() - ref).item() / nref
        torch.backends.cuda.matmul.allow_tf32 = True
        rec["cublas_err"] = torch.linalg.norm(torch.mm(A, B).double() - ref).item() / nref
        torch.backends.cuda.matmul.allow_tf32 = False
    except Exception as e:
        rec["error"] = type(e).__name__ + ": " + str(e).strip().splitlines()[-1][:300]
    print(json.dumps(rec), flush=True)

def ev(fn, reps=20, samples=7):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(samples):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / reps / 1e3)
    return float(np.median(ts))

tm = spec.get("time")
if tm:
    for M, N, K in tm["shapes"]:
        rows = {}
        dts = sorted({k[2] for k in tm["kernels"]})
        data = {dt: inputs(M, N, K, dt, 1) for dt in dts}
        outs = {dt: torch.empty(M, N, device="cuda", dtype=TORCH[dt]) for dt in dts}
        fns = {}
        for dt in dts:
            A, B = data[dt]
            def cub(A=A, B=B, C=outs[dt], dt=dt):
                torch.backends.cuda.matmul.allow_tf32 = dt == "fp32"
                torch.mm(A, B, out=C)
            fns[f"cublas_{dt}"] = cub
        for label, step, dt, over in tm["kernels"]:
            try:
                f = get(step, dt, over, M, N, K)
                A, B = data[dt]
                a, b, c = tv(A), tv(B), tv(outs[dt])
                fns[label] = (lambda f=f, a=a, b=b, c=c: f(a, b, c))
            except Exception as e:
                print(json.dumps({"label": label, "error": str(e)[:300]}), flush=True)
        labels = list(fns)
        for r in range(tm.get("rounds", 3)):
            k = r % len(labels)  # rotate the order: no kernel always first after a pause
            for label in labels[k:] + labels[:k]:
                rows.setdefault(label, []).append(2 * M * N * K / ev(fns[label], tm.get("reps", 20), tm.get("samples", 7)) / 1e12)
        out = {"shape": f"{M}x{N}x{K}"}
        for label, v in rows.items():
            out[label] = [round(x, 1) for x in v]
        print(json.dumps(out), flush=True)

if spec.get("names"):
    from torch.profiler import profile, ProfilerActivity
    for M, N, K in spec["names"]:
        for dt in ("bf16", "fp16", "fp32"):
            A, B = inputs(M, N, K, dt, 1)
            torch.backends.cuda.matmul.allow_tf32 = dt == "fp32"
            torch.mm(A, B); torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.mm(A, B); torch.cuda.synchronize()
            names = [e.name for e in prof.events() if e.device_type is not None and "gemm" in e.name.lower() or "sm90" in e.name]
            print(json.dumps({"cublas_kernel": f"{M}x{N}x{K}", "dtype": dt, "names": sorted(set(names))[:3]}), flush=True)
