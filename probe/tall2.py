"""Probe (issue 49): after Plan.hand_back, the tall-skinny bf16 shapes with narrower tiles (32 rows of C:
wgmma n = 32), two consumers, two blocks per SM, 7-10 stages; default configs beside; cuBLAS in the dtype.
python probe/tall2.py OUT.jsonl [BUDGET=seconds]"""
import json, os, sys, time

from schedules.config import WgmmaPersistentConfig as P, WgmmaSplitKConfig as SK
from steps.measure import harness

out = runner = arch = None


def row(**kw):
    out.write(json.dumps(kw) + "\n"); out.flush(); print(json.dumps(kw), flush=True)


def meas(step, sh, dt, cfg, label):
    try:
        m = runner.measure(step, *sh, arch, config=cfg, dtype=dt, seed=1)
    except Exception as e:
        row(shape=sh, dt=dt, label=label, error=f"raise {type(e).__name__}: {e}"); return
    d = None if cfg is None else {k: getattr(cfg, k) for k in ("block_m", "block_n", "stages", "ctas", "split_k") if hasattr(cfg, k)}
    row(shape=sh, dt=dt, label=label, step=step, cfg=d, us=None if m.median_ms is None else m.median_ms * 1e3,
        err=m.rel_err, error=m.error, hb=m.host_bound)


def tall(sh):
    return [(23, None, "s23default"),
            (20, P(block_m=64, block_n=64, stages=8, ctas=128), "s20 64x64 8st"),
            (20, P(block_m=64, block_n=64, stages=10, ctas=128), "s20 64x64 10st"),
            (20, P(block_m=32, block_n=64, stages=8, ctas=256), "s20 32x64 8st 256"),
            (20, P(block_m=32, block_n=64, stages=8, ctas=132), "s20 32x64 8st 132"),
            (20, P(block_m=32, block_n=128, stages=8, ctas=132), "s20 32x128 8st"),
            (20, P(block_m=64, block_n=128, stages=8, ctas=132), "s20 64x128 8st"),
            (23, SK(block_m=64, block_n=64, stages=7, ctas=256, split_k=2), "s23 64x64x2 7st 256"),
            (26, None, "s26default")]


def wide(sh):
    return [(23, None, "s23default"),
            (20, P(block_m=64, block_n=64, stages=10, ctas=128), "s20 64x64 10st"),
            (20, P(block_m=128, block_n=64, stages=8, ctas=64), "s20 128x64 8st"),
            (23, SK(block_m=128, block_n=64, stages=8, ctas=128, split_k=2), "s23 128x64x2 8st"),
            (23, SK(block_m=64, block_n=64, stages=7, ctas=256, split_k=2), "s23 64x64x2 7st 256"),
            (26, None, "s26default")]


PLAN = [((4096, 128, 4096), tall), ((128, 4096, 4096), wide), ((8192, 128, 1024), tall),
        ((4096, 16, 4096), tall), ((8192, 32, 2048), tall)]


def main():
    global out, runner, arch
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    budget = float(os.environ.get("BUDGET", "240"))
    t0 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    for sh, configs in PLAN:
        if time.time() - t0 > budget:
            row(note="budget out", at=sh); break
        t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype="bf16")
        row(shape=sh, dt="bf16", label="cublas", us=t.median_ms * 1e3, err=e)
        for step, cfg, label in configs(sh):
            meas(step, sh, "bf16", cfg, label)
    runner.close()
    row(note="done", s=time.time() - t0)


if __name__ == "__main__":
    main()
