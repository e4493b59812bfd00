"""Probe (issue 49): step 24's mirror (N <= 16 < M, rows of A streamed), on the GPU.

1. correct on odd shapes in every dtype (KernelRunner.measure: against float64, within the
   dtype's tolerance, C poisoned with NaN);
2. the guard past K: +-inf in A's last column where threads' ranges of K pass K, fp32 (both kernels);
3. timed: the default and other configs, against cuBLAS in the dtype, the committed pick
   (schedules.fastest) and a device-to-device copy's bandwidth, all in this process.

    python probe/matvec_n.py OUT.jsonl
"""
import json, sys, time

import numpy as np

import schedules
from schedules.config import MatvecConfig as MC
from steps.measure import harness, roofline
from steps.measure import special as data

out = None


def row(**kw):
    line = json.dumps(kw, default=str)
    out.write(line + "\n"); out.flush(); print(line, flush=True)


def meas(runner, arch, step, sh, dt, cfg, label, seed=1):
    t0 = time.time()
    try:
        m = runner.measure(step, *sh, arch, config=cfg, dtype=dt, seed=seed)
    except Exception as e:  # noqa: BLE001
        row(shape=sh, dt=dt, label=label, error=f"raise {type(e).__name__}: {e}"); return None
    us = None if m.median_ms is None else m.median_ms * 1e3
    row(shape=sh, dt=dt, label=label, cfg=None if cfg is None else cfg.as_dict(), us=us,
        gbs=None if us is None else (sh[0] * sh[2] + sh[2] * sh[1] + sh[0] * sh[1]) * (4 if dt == "fp32" else 2) / us / 1e3,
        err=m.rel_err, error=m.error, hb=m.host_bound, s=round(time.time() - t0, 1))
    return us


def main():
    global out
    out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    t00 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    row(copy=roofline.measure_bandwidth(arch))
    step24 = schedules.get_step(24)
    # 1. correctness, odd shapes, every dtype
    for sh in [(2048, 1, 2048), (1000, 3, 777), (17, 16, 3001), (64, 1, 65536), (12345, 1, 777), (513, 7, 1025)]:
        for dt in ("fp32", "bf16", "fp16"):
            meas(runner, arch, 24, sh, dt, None, "check", seed=2)
    # 2. the guard past K: fp32, inf in A's last column
    kern = data.StepKernels(arch)
    for sh in [(3, 1001, 777), (1, 16384, 512), (1000, 3, 777), (2048, 1, 2047), (64, 1, 65535)]:
        M, N, K = sh
        rng = np.random.default_rng(5)
        a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        b = rng.uniform(0.5, 1, (K, N)).astype(np.float32)
        a[0, K - 1], a[M - 1, K - 1] = np.inf, -np.inf
        got = kern.run(step24, a, b).astype(np.float64)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        same = all(np.array_equal(f(got), f(ref)) for f in (np.isnan, np.isposinf, np.isneginf))
        fin = np.isfinite(ref)
        err = float(np.linalg.norm(got[fin] - ref[fin]) / np.linalg.norm(ref[fin])) if fin.any() else 0.0
        row(special=sh, cfg=step24.default_config(*sh).as_dict(), same_pattern=same, nans=int(np.isnan(got).sum()),
            ref_inf=int(np.isinf(ref).sum()), err_finite=err)
    # 3. timing
    variants = [MC(lanes_n=32, lanes_k=32, unroll=8), MC(lanes_n=16, lanes_k=32, unroll=4),
                MC(lanes_n=8, lanes_k=64, unroll=4), MC(lanes_n=32, lanes_k=16, unroll=4)]
    shapes = [(4096, 1, 4096), (8192, 1, 1024), (2048, 1, 2048), (16384, 1, 4096), (4096, 4, 4096),
              (4096, 16, 4096), (12345, 1, 777)]
    for dt in ("bf16", "fp32", "fp16"):
        for sh in shapes:
            if time.time() - t00 > 470:
                row(note="budget out", at=sh, dt=dt); break
            t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
            row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
            pick = schedules.fastest(*sh, precision=dt)
            meas(runner, arch, pick.step.number, sh, dt, pick.config, f"pick step {pick.step.number}")
            meas(runner, arch, 24, sh, dt, None, "s24 default")
            if dt != "fp16" and sh[1] == 1 or sh == (4096, 16, 4096):
                for cfg in variants:
                    meas(runner, arch, 24, sh, dt, cfg, "s24 variant")
            t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
            row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
    row(copy=roofline.measure_bandwidth(arch))
    runner.close()
    row(note="done", s=round(time.time() - t00, 1))


if __name__ == "__main__":
    main()
