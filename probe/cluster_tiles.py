"""Probe (issue 49): do the cluster rungs (21, 22: A's tile multicast to a pair of blocks) with
the tiles step 23 picks beat step 23 where the H200's 16-bit rows lose to cuBLAS?

1536^3 and 3072^3: 192 x 128 tiles (whole waves) with A multicast; 4096 x 128 x 4096: 64 x 64
tiles in pairs across N = 128, so A is read from L2 once, not twice, deeper rings (cuBLAS runs
nvjet_sm90_tst_64x64_64x13_2x1 there); 8192 x 32 x 2048: step 23 at narrower tiles on 128 SMs.
Two rounds, the configs in turn, cuBLAS in the same process.

    python probe/cluster_tiles.py OUT.jsonl [fixed]     (on the GPU; fixed: step 22's 192-row
                                                        tiles again, after StorePlan.rows)
"""
from __future__ import annotations

import json
import sys
import time

from schedules.config import WgmmaClusterConfig as S21
from schedules.config import WgmmaSplitKConfig as S23
from schedules.config import WgmmaTmaStoreConfig as S22

PLAN = {
    (1536, 1536, 1536): [(21, S21(block_m=192, block_n=128, stages=4, ctas=96)),
                         (22, S22(block_m=192, block_n=128, stages=4, ctas=96)),
                         (22, S22(block_m=192, block_n=128, stages=5, ctas=96, chunk=8192))],
    (3072, 3072, 3072): [(21, S21(block_m=192, block_n=128, stages=4, ctas=132)),
                         (22, S22(block_m=192, block_n=128, stages=4, ctas=132))],
    (4096, 128, 4096): [(21, S21(block_m=64, block_n=64, stages=8, ctas=128)),
                        (21, S21(block_m=64, block_n=64, stages=13, ctas=128)),
                        (22, S22(block_m=64, block_n=64, stages=12, ctas=128)),
                        (23, S23(block_m=64, block_n=64, stages=13, ctas=128))],
    (8192, 32, 2048): [(23, S23(block_m=64, block_n=64, stages=8, ctas=128)),
                       (23, S23(block_m=64, block_n=64, stages=13, ctas=128)),
                       (23, S23(block_m=32, block_n=64, stages=13, ctas=128))],
}

# After StorePlan.rows was fixed (192-row tiles in whole chunks): step 22 at 192 x 128 again.
FIXED = {
    (1536, 1536, 1536): [(22, S22(block_m=192, block_n=128, stages=4, ctas=96)),
                         (22, S22(block_m=192, block_n=128, stages=5, ctas=96, chunk=8192))],
    (3072, 3072, 3072): [(22, S22(block_m=192, block_n=128, stages=4, ctas=132))],
}

out = None


def row(**kw):
    line = json.dumps(kw, default=str)
    out.write(line + "\n"); out.flush(); print(line, flush=True)


def main():
    global out
    from steps.measure import harness
    import schedules
    out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    gpu = harness.gpu_name() if hasattr(harness, "gpu_name") else None
    t00 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)

    def meas(sh, dt, step, cfg, label, rnd):
        t0 = time.time()
        try:
            m = runner.measure(step, *sh, arch, config=cfg, dtype=dt, seed=1)
        except Exception as e:  # noqa: BLE001
            row(shape=sh, dt=dt, label=label, error=f"raise {type(e).__name__}: {e}"); return
        row(round=rnd, shape=sh, dt=dt, label=label, step=step, cfg=str(cfg),
            us=None if m.median_ms is None else round(m.median_ms * 1e3, 2), err=m.rel_err, error=m.error,
            hb=m.host_bound, s=round(time.time() - t0, 1))

    row(gpu=gpu, arch=arch)
    fixed = sys.argv[2:] == ["fixed"]
    plan = FIXED if fixed else PLAN
    for rnd in (1, 2, 3) if fixed else (1, 2):
        for dt in ("bf16", "fp16") if rnd == 1 else ("bf16",):
            for sh, cfgs in plan.items():
                if time.time() - t00 > 440:
                    row(note="budget out", at=sh, round=rnd); break
                t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
                row(round=rnd, shape=sh, dt=dt, label="cublas", us=round(t.median_ms * 1e3, 2), err=e)
                pick = schedules.fastest(*sh, precision=dt, gpu="nvidia-h200")
                meas(sh, dt, pick.step.number, pick.config, "pick", rnd)
                for step, cfg in cfgs:
                    meas(sh, dt, step, cfg, "try", rnd)
    runner.close()
    row(note="done", s=round(time.time() - t00, 1))


if __name__ == "__main__":
    main()
