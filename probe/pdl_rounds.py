"""Probe (issue 49): step 29 (step 23's kernels with programmatic dependent launch) against step 23,
its two triggers ("top": the next grid may launch at once; "exit": as the blocks exit), rounds
alternated, cuBLAS in the same process. Step 29 at the top trigger lost 8-13% to plain launches
on step 20's persistent 4096^3 kernel in this session's first probe: the long shapes are here to
see whether step 23's do too, and whether the exit trigger keeps the short shapes' gain.

    python probe/pdl_rounds.py OUT.jsonl          (on the GPU)
"""
from __future__ import annotations

import json
import sys
import time

import schedules


def _builder(step, trigger=None):
    def build(M, N, K, arch, config, dtype="fp32"):
        import schedules.step29_dependent_launch as s29
        s29.TRIGGER = trigger or "top"  # the worker keeps it: every build here sets it
        return schedules.build(step, M, N, K, arch=arch, config=config, dtype=dtype)
    return build


s23 = _builder(23)
s29_top = _builder(29, "top")
s29_exit = _builder(29, "exit")

BF16 = [(8192, 32, 2048), (4096, 128, 4096), (4096, 16, 4096), (64, 1024, 8192), (128, 8192, 1024),
        (256, 256, 16384), (64, 64, 65536), (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048),
        (8192, 1024, 256), (4096, 4096, 4096)]
TF32 = [(4096, 16, 4096), (1024, 1024, 1024), (4096, 4096, 4096)]

out = None


def row(**kw):
    line = json.dumps(kw, default=str)
    out.write(line + "\n"); out.flush(); print(line, flush=True)


def main():
    global out
    from steps.measure import harness
    out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    t00 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    row(arch=arch)
    for rnd in (1, 2):
        for dt, shapes in (("bf16", BF16), ("fp32", TF32)):
            for sh in shapes:
                if time.time() - t00 > 270:
                    row(note="budget out", at=sh, round=rnd); return
                t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt, tf32=dt == "fp32")
                row(round=rnd, shape=sh, dt=dt, label="cuBLAS", us=round(t.median_ms * 1e3, 2), err=e)
                cfg = schedules.get_step(23).default_config(*sh, dt)
                names = ["s23", "s29_top", "s29_exit"] if rnd == 1 else ["s29_top", "s23"]
                for name in names:
                    c = cfg if name == "s23" else schedules.get_step(29).Config(**cfg.__dict__)
                    m = runner.measure(f"probe.pdl_rounds:{name}", *sh, arch, config=c, dtype=dt, seed=1)
                    row(round=rnd, shape=sh, dt=dt, label=name, cfg=str(cfg),
                        us=None if m.median_ms is None else round(m.median_ms * 1e3, 2),
                        err=m.rel_err, hb=m.host_bound, host_us=m.host_us)


if __name__ == "__main__":
    main()
