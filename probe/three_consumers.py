"""Probe (issue 49): cuBLAS runs 1536^3 bf16 as nvjet_sm90_tst_192x96_64x5_1x2 (Nsight Compute on
the H200, 2026-11-29): 128 tiles of 192 x 96 on 128 SMs in one wave, 5 stages, clusters of two,
384 threads. The ladder's best there is 96 tiles of 192 x 128 (step 22, 15.4 us against 11.5).
Does a tile that fills 120-128 SMs close the gap: 160 x 128 (two consumers, 120 tiles), or
96 x 192 (three consumer warpgroups of 64 columns, 512 threads, setmaxnreg 152 instead of 232:
the ladder allows two consumers; patched here)?

    python probe/three_consumers.py OUT.jsonl      (on the GPU)
"""
from __future__ import annotations

import importlib
import json
import sys
import time

import schedules
from schedules import config as config_module
from schedules.config import WgmmaSplitKConfig as S23
from schedules.config import WgmmaTmaStoreConfig as S22

config_module_max = config_module.WGMMA_MAX_CONSUMERS
THREE_REGS = 152  # 40 x 128 + 152 x 384 = 63,488 of 65,536


def build3(M, N, K, arch, config=None, dtype="fp32"):
    """Step 22 or 23 (by the config's class) with three consumer warpgroups allowed; the modules'
    constants are put back after the build (a worker builds the other configs too)."""
    import schedules.transforms.wgmma as W
    mods = [importlib.import_module("schedules." + name) for name in
            ("step16_warp_specialized", "step20_persistent", "step21_cluster", "step26_cluster_split_k")] + [W]
    saved = config_module_max, [m.CONSUMER_REGS for m in mods]
    try:
        config_module.WGMMA_MAX_CONSUMERS = 3
        for m in mods:
            m.CONSUMER_REGS = THREE_REGS
        number = 22 if isinstance(config, S22) else 23
        return schedules.build(number, M, N, K, arch=arch, config=config, dtype=dtype)
    finally:
        config_module.WGMMA_MAX_CONSUMERS = saved[0]
        for m, regs in zip(mods, saved[1]):
            m.CONSUMER_REGS = regs


PLAN = {
    (1536, 1536, 1536): [(22, S22(block_m=192, block_n=128, stages=4, ctas=96)),
                         (23, S23(block_m=160, block_n=128, stages=4, ctas=120)),
                         (22, S22(block_m=160, block_n=128, stages=4, ctas=120)),
                         ("probe.three_consumers:build3", S23(block_m=96, block_n=192, stages=5, ctas=128)),
                         ("probe.three_consumers:build3", S22(block_m=96, block_n=192, stages=5, ctas=128, chunk=8192)),
                         ("probe.three_consumers:build3", S22(block_m=96, block_n=192, stages=4, ctas=128))],
    (3072, 3072, 3072): [(22, S22(block_m=256, block_n=128, stages=4, ctas=132)),
                         (22, S22(block_m=160, block_n=128, stages=4, ctas=132)),
                         ("probe.three_consumers:build3", S22(block_m=96, block_n=192, stages=5, ctas=132, chunk=8192))],
}
CHECKS = [((1000, 1512, 700), "fp32"), ((1000, 1512, 700), "bf16"), ((77, 200, 4104), "fp16")]

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

    def meas(sh, dt, step, cfg, label, rnd):
        t0 = time.time()
        try:
            m = runner.measure(step, *sh, arch, config=cfg, dtype=dt, seed=1)
        except Exception as e:  # noqa: BLE001
            row(shape=sh, dt=dt, label=label, error=f"raise {type(e).__name__}: {e}"); return
        row(round=rnd, shape=sh, dt=dt, label=label, step=step, cfg=str(cfg),
            us=None if m.median_ms is None else round(m.median_ms * 1e3, 2), err=m.rel_err, error=m.error,
            hb=m.host_bound, s=round(time.time() - t0, 1))

    for sh, dt in CHECKS:
        for cfg in (S23(block_m=96, block_n=192, stages=5, ctas=128), S22(block_m=96, block_n=192, stages=4, ctas=128)):
            meas(sh, dt, "probe.three_consumers:build3", cfg, "check", 0)
    for rnd in (1, 2, 3):
        for dt in ("bf16", "fp16") if rnd == 1 else ("bf16",):
            for sh, cfgs in PLAN.items():
                if time.time() - t00 > 400:
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
