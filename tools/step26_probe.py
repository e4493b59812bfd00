"""Probe (issue 49, step 26): step 26 (split-K in a cluster) against step 23's own config and cuBLAS in the dtype,
one process, per shape: python tools/step26_probe.py OUT.jsonl  [DTYPES=bf16,fp32] [BUDGET=seconds]
SHAPES: each shape with the step 26 tiles (block_m, block_n, split_k) timed beside its default."""
import json, sys, time, os
import schedules
from schedules.config import WgmmaClusterSplitConfig as C
from schedules import step26_cluster_split_k as s26
from steps.measure import harness

out = None

def row(**kw):
    out.write(json.dumps(kw) + "\n"); out.flush(); print(json.dumps(kw), flush=True)

def meas(step, sh, dt, cfg, label):
    global runner, arch
    try:
        m = runner.measure(step, *sh, arch, config=cfg, dtype=dt, seed=1)
    except Exception as e:
        row(shape=sh, dt=dt, label=label, cfg=str(cfg), error=f"raise {type(e).__name__}: {e}"); return
    row(shape=sh, dt=dt, label=label, cfg=(None if cfg is None else [cfg.block_m, cfg.block_n, getattr(cfg, 'split_k', None), cfg.stages]),
        us=None if m.median_ms is None else m.median_ms * 1e3, min_us=None if m.min_ms is None else m.min_ms * 1e3,
        err=m.rel_err, error=m.error, hb=m.host_bound, host_us=m.host_us)

SHAPES = [
    ((16, 1024, 4096), []),
    ((16, 3072, 1024), []),
    ((16, 4096, 1024), []),
    ((16, 1024, 1024), []),
    ((128, 1024, 1024), [(64, 64, 2)]),
    ((128, 3072, 1024), [(64, 128, 2)]),
    ((128, 4096, 1024), [(64, 128, 2)]),
    ((128, 1024, 4096), []),
    ((4096, 128, 4096), [(64, 128, 2)]),
    ((1024, 64, 8192), []),
    ((512, 512, 8192), []),
    ((256, 256, 16384), []),
    ((1000, 1500, 700), []),
]
def main():
    global out, runner, arch
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    budget = float(os.environ.get("BUDGET", "400"))
    t0 = time.time()
    runner = harness.KernelRunner(repeat=30, seed=1, timeout_s=60)
    dts = os.environ.get("DTYPES", "bf16").split(",")
    for dt in dts:
        for sh, cfgs in SHAPES:
            if time.time() - t0 > budget:
                row(note="budget out", at=sh, dt=dt); break
            try:
                t, e = harness.time_cublas(*sh, repeat=30, seed=1, tf32=(dt == "fp32"), dtype=dt)
                row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
            except Exception as ex:
                row(shape=sh, dt=dt, label="cublas", error=str(ex))
            meas(23, sh, dt, None, "s23")
            meas(26, sh, dt, None, "s26default")
            for bm, bn, sp in cfgs:
                cfg = s26._config(bm, bn, sp)
                meas(26, sh, dt, cfg, "s26")
    runner.close()

if __name__ == "__main__":
    main()
