"""The harness's timing of step 18 and cuBLAS TF32 at 2048^3 and 4096^3, with nvidia-smi sampling
the SM clock, power and clock-event reasons every 20 ms meanwhile (one JSON line each).

    python tools/harness_clocks.py

Written for step 18's cross-check gap; the outcome, with ncu's side of it:
results/nvidia-h100-80gb-hbm3/crosscheck_clocks_2026-11-25.txt."""
import subprocess, sys, time, statistics, json
import numpy as np
import schedules
from steps.measure import harness

def sampler():
    return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                             "--format=csv,noheader,nounits", "-lms", "20"], stdout=subprocess.PIPE, text=True)

def stop(p):
    p.terminate(); out = p.communicate()[0]
    rows = [l.split(",") for l in out.strip().splitlines() if l.strip()]
    clocks = [float(r[0]) for r in rows]; power = [float(r[1]) for r in rows]
    reasons = sorted({r[3].strip() for r in rows})
    return {"samples": len(rows), "sm_mhz_median": statistics.median(clocks) if clocks else None,
            "sm_mhz_min": min(clocks, default=None), "power_w_median": statistics.median(power) if power else None,
            "reasons": reasons}

runner = harness.KernelRunner(repeat=30, seed=3, isolate=False)
for n in (2048, 4096):
    lib = schedules.build(18, n, n, n)
    runner.check(lib["main"], n, n, n)
    time.sleep(1.0)
    p = sampler(); time.sleep(0.3)
    t = runner.time(lib, n, n, n)
    s = stop(p)
    print(json.dumps({"impl": "step18", "n": n, "median_us": round(t.median_ms * 1e3, 2), "number": t.launches_per_sample, **s}), flush=True)
    time.sleep(1.0)
    p = sampler(); time.sleep(0.3)
    tc, err = harness.time_cublas(n, n, n, tf32=True, seed=3)
    s = stop(p)
    print(json.dumps({"impl": "cublas_tf32", "n": n, "median_us": round(tc.median_ms * 1e3, 2), **s}), flush=True)
