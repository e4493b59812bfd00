"""Probe (issue 49): Plan.hand_back (a 16-bit ring of >= 8 stages leaves a wgmma group in flight) against the
consumers before it, step 23's and 26's default configs, bf16, one process, variants alternating per shape:
python probe/verify.py OUT.jsonl [BUDGET=seconds]"""
import json, os, sys, time

import schedules
from steps.measure import harness

out = arch = None
runners = {}


def row(**kw):
    out.write(json.dumps(kw) + "\n"); out.flush(); print(json.dumps(kw), flush=True)


def meas(variant, step, sh, dt):
    cfg = schedules.get_step(step).default_config(*sh, dt)
    try:
        if variant == "new":
            m = runners[variant].measure(step, *sh, arch, config=cfg, dtype=dt, seed=1)
        else:
            m = runners[variant].measure(f"probe.{variant}:build", *sh, arch, config=(step, cfg), dtype=dt, seed=1)
    except Exception as e:
        row(shape=sh, dt=dt, step=step, label=variant, error=f"raise {type(e).__name__}: {e}"); return
    row(shape=sh, dt=dt, step=step, label=f"s{step} {variant}", cfg=[cfg.block_m, cfg.block_n, cfg.stages, cfg.split_k],
        us=None if m.median_ms is None else m.median_ms * 1e3, err=m.rel_err, error=m.error, hb=m.host_bound)


SHAPES = [(4096, 128, 4096), (128, 4096, 4096), (8192, 32, 2048), (4096, 16, 4096), (1024, 1024, 1024),
          (16, 1024, 4096), (128, 1024, 1024), (16, 3072, 1024), (512, 1024, 4096), (1024, 64, 8192),
          (8192, 128, 1024), (16, 4096, 4096), (256, 256, 16384), (64, 64, 65536), (128, 3072, 1024),
          (768, 768, 768), (2048, 64, 2048), (128, 128, 32768), (997, 1009, 1013), (1, 4096, 4096),
          (512, 1024, 1024), (33, 65, 129)]


def main():
    global out, arch
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    budget = float(os.environ.get("BUDGET", "330"))
    t0 = time.time()
    for v in ("new", "old", "lag6"):
        runners[v] = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    dt = "bf16"
    for i, sh in enumerate(SHAPES):
        if time.time() - t0 > budget:
            row(note="budget out", at=sh); break
        t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
        row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
        order = ("new", "old") if i % 2 == 0 else ("old", "new")
        for v in order:
            meas(v, 23, sh, dt)
        st26 = schedules.get_step(26).default_config(*sh, dt).stages
        if st26 >= 8:
            for v in order:
                meas(v, 26, sh, dt)
        elif st26 >= 6:
            for v in (("lag6", "old") if i % 2 == 0 else ("old", "lag6")):
                meas(v, 26, sh, dt)
    for r in runners.values():
        r.close()
    row(note="done", s=time.time() - t0)


if __name__ == "__main__":
    main()
