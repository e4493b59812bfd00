"""Probe (issue 47): bf16 steps 16-18 with a consumer that leaves 1 or 0 wgmma groups in flight, or releases
two slices behind: errors against float64 and TFLOP/s against cuBLAS bf16, one process. Run on the GPU from the
project root: python tools/sixteen_bit_in_flight_probe.py"""
import numpy as np, torch, tvm, sys, json
sys.path.insert(0, "tools")
import sixteen_bit_in_flight_variants as variants, schedules
def err(c, a, b):
    ref = a.double().cpu().numpy() @ b.double().cpu().numpy()
    out = c.double().cpu().numpy()
    if not np.isfinite(out).all(): return float("nan")
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
def bench(fn, reps=20):
    for _ in range(3): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return float(np.median(ts))
g = torch.Generator().manual_seed(0)
kws = [dict(wait_n=1, lag=1), dict(wait_n=0, lag=1), dict(wait_n=1, lag=2)]
for (M, N, K) in [(256, 256, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]:
    a = torch.randn(M, K, generator=g).to(torch.bfloat16).cuda(); b = torch.randn(K, N, generator=g).to(torch.bfloat16).cuda()
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    ta, tb, tc = (tvm.runtime.from_dlpack(x) for x in (a, b, c))
    fns = {"cublas": lambda: torch.mm(a, b, out=c)}
    for step in (16, 17, 18):
        for kw in kws:
            lib = variants.build(variants.kernel_lag(M, N, K, "bf16", step=step, **kw))
            c.fill_(float("nan")); lib["main"](ta, tb, tc); torch.cuda.synchronize()
            e = err(c, a, b) if M <= 4096 else None
            f = lib["main"]
            fns[(step, kw["wait_n"], kw["lag"])] = (lambda f=f: f(ta, tb, tc))
            print(M, N, K, step, kw, "err", e, flush=True)
    if M >= 4096:
        times = {k: [] for k in fns}
        for r in range(3):
            for k, fn in fns.items():
                times[k].append(bench(fn))
        fl = 2 * M * N * K
        cb = fl / min(times["cublas"]) / 1e9
        for k, v in times.items():
            t = fl / min(v) / 1e9
            print(M, k, f"{t:.0f} TFLOP/s  {t / cb:.3f}x cublas", flush=True)
