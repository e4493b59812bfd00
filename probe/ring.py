"""Probe: is a ring of 9-12 stages on a tile walk (K's slices not a multiple of the stages) right, with and
without Plan.hand_back's lag (probe/old.py), and in TF32? python probe/ring.py OUT.jsonl"""
import json, sys

from schedules.config import WgmmaPersistentConfig as P
from steps.measure import harness


def main():
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    new, old = harness.KernelRunner(repeat=3, seed=1), harness.KernelRunner(repeat=3, seed=1)
    for sh in [(8192, 128, 1024), (4096, 128, 1024), (2048, 256, 640)]:
        for st in (8, 9, 10, 12):
            cfg = P(block_m=64, block_n=64, stages=st, ctas=128)
            for dt, var in (("bf16", "new"), ("bf16", "old"), ("fp32", "new")):
                try:
                    if var == "new":
                        m = new.measure(20, *sh, arch, config=cfg, dtype=dt, seed=1)
                    else:
                        m = old.measure("probe.old:build", *sh, arch, config=(20, cfg), dtype=dt, seed=1)
                    r = dict(shape=sh, stages=st, dt=dt, var=var, err=m.rel_err, error=m.error)
                except Exception as e:
                    r = dict(shape=sh, stages=st, dt=dt, var=var, error=f"raise {e}")
                out.write(json.dumps(r) + "\n"); out.flush(); print(json.dumps(r), flush=True)
    new.close(); old.close()


if __name__ == "__main__":
    main()
