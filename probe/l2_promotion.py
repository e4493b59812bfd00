"""Probe (issue 49): the skinny 16-bit shapes where the H200's picks stream A at ~3 TB/s while cuBLAS
reaches ~4.4 (8192x32x2048: 11.4 us against 7.4; the same time on 64 blocks as on 128, so the limit is
not one SM's pipeline). Question 1: does the tensor maps' L2 promotion (128 B now; 256 B is what
DeepGEMM asks for) change it? Question 2: do tiles that read B fewer times (4096x128x4096: 64x64 tiles
read B 64 times from L2, 128 MB into the SMs) or fill 128 SMs (64x1024x8192) beat the picks?
Rounds alternate the promotion; cuBLAS in the same process.

    python probe/l2_promotion.py OUT.jsonl          (on the GPU)
"""
from __future__ import annotations

import json
import sys
import time

import schedules
from schedules.config import WgmmaClusterSplitConfig as S26
from schedules.config import WgmmaSplitKConfig as S23


def _builder(step, promo):
    def build(M, N, K, arch, config, dtype="fp32"):
        import schedules.transforms.wgmma as w
        w.L2_PROMOTION_128B = promo  # the worker keeps it: every build here sets it
        return schedules.build(step, M, N, K, arch=arch, config=config, dtype=dtype)
    return build


for _s in (18, 20, 21, 22, 23, 26, 27):
    for _p in (2, 3):
        globals()[f"s{_s}_p{_p}"] = _builder(_s, _p)

PLAN = {
    (8192, 32, 2048): [(23, S23(block_m=64, block_n=64, stages=8, ctas=128, split_k=1))],
    (4096, 128, 4096): [(23, S23(block_m=128, block_n=128, stages=6, ctas=128, split_k=4)),
                        (26, S26(block_m=128, block_n=128, stages=4, ctas=128, split_k=4)),
                        (26, S26(block_m=64, block_n=128, stages=7, ctas=128, split_k=2))],
    (64, 1024, 8192): [(26, S26(block_m=64, block_n=64, stages=8, ctas=128, split_k=8)),
                       (23, S23(block_m=64, block_n=64, stages=8, ctas=128, split_k=8))],
    (4096, 16, 4096): [(23, S23(block_m=64, block_n=64, stages=8, ctas=128, split_k=1))],
    (4096, 4096, 4096): [],
    (1536, 1536, 1536): [],
}

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
        for sh, extra in PLAN.items():
            if time.time() - t00 > 300:
                row(note="budget out", at=sh, round=rnd); return
            dt = "bf16"
            t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
            row(round=rnd, shape=sh, dt=dt, label="cuBLAS", us=round(t.median_ms * 1e3, 2), err=e)
            pick = schedules.fastest(*sh, precision=dt, gpu="nvidia-h200")
            cfgs = [(pick.step.number, pick.config, "pick")] + [(s, c, "") for s, c in (extra if rnd == 1 else extra[:1])]
            for step, cfg, tag in cfgs:
                for promo in ((2, 3) if rnd == 1 else (3, 2)):
                    t0 = time.time()
                    try:
                        m = runner.measure(f"probe.l2_promotion:s{step}_p{promo}", *sh, arch, config=cfg, dtype=dt, seed=1)
                    except Exception as ex:  # noqa: BLE001
                        row(shape=sh, step=step, error=f"raise {type(ex).__name__}: {ex}"); continue
                    row(round=rnd, shape=sh, dt=dt, label=f"{tag} step {step} promo {promo}", cfg=str(cfg),
                        us=None if m.median_ms is None else round(m.median_ms * 1e3, 2), err=m.rel_err,
                        error=m.error, hb=m.host_bound, s=round(time.time() - t0, 1))


if __name__ == "__main__":
    main()
