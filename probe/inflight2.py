"""Probe: the wgmma group in flight with the tile's last slice waiting for all (wait_for_slice),
against the kernels as committed before (16-bit: every group waited for; TF32: no wait in the
loop's last slice). Builders probe.inflight2:old / :new, config (step, cfg or None). Each in a worker
of its own; rounds alternate. python probe/inflight2.py OUT.jsonl"""
import json, sys, time

import schedules
from schedules.config import WgmmaPersistentConfig as P
from schedules.transforms import wgmma
from tvm.script import tirx as T

NEW_WAIT = wgmma.wait_for_slice


def _old_wait(p, slices):
    n = p.in_flight

    @T.macro
    def wait(kt):
        T.ptx.wgmma.wait_group.sync.aligned(n)

    return wait


def old(M, N, K, arch, config, dtype="fp32"):
    wgmma.Plan.in_flight = property(lambda self: 0 if self.sixteen_bit else 1)
    wgmma.wait_for_slice = _old_wait
    step, cfg = config
    return schedules.build(step, M, N, K, arch=arch, config=cfg, dtype=dtype)


def new(M, N, K, arch, config, dtype="fp32"):
    step, cfg = config
    return schedules.build(step, M, N, K, arch=arch, config=cfg, dtype=dtype)


R = lambda st: P(block_m=64, block_n=64, stages=st, ctas=128)
SPEED = [(21, (8192,) * 3, "bf16", None), (22, (8192,) * 3, "bf16", None), (21, (4096,) * 3, "bf16", None),
         (22, (4096,) * 3, "bf16", None), (21, (8192,) * 3, "fp16", None), (22, (4096,) * 3, "fp16", None),
         (22, (4096,) * 3, "fp32", None), (23, (4096, 128, 4096), "fp32", None)]
ONCE = [(23, (4096, 128, 4096), "bf16", None), (23, (128, 4096, 4096), "bf16", None),
        (23, (8192, 128, 1024), "bf16", None), (23, (1536,) * 3, "bf16", None),
        (23, (8192, 1024, 256), "bf16", None), (22, (4096, 4096, 64), "bf16", None),
        (23, (8192, 32, 2048), "bf16", None), (26, (8192, 128, 1024), "bf16", None),
        (20, (2048, 256, 640), "bf16", R(12)), (20, (8192, 128, 1024), "bf16", R(9)),
        (20, (8192, 128, 1024), "bf16", R(10)), (18, (256, 256, 1024), "bf16", None),
        (16, (256, 256, 1024), "bf16", None), (18, (4096,) * 3, "bf16", None)]


def main():
    from steps.measure import harness
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    runners = {v: harness.KernelRunner(repeat=30, seed=1) for v in ("old", "new")}

    def one(step, shape, dtype, cfg, rnd, order):
        for v in order:
            t = time.time()
            try:
                m = runners[v].measure(f"probe.inflight2:{v}", *shape, arch, config=(step, cfg), dtype=dtype, seed=3)
                r = dict(step=step, shape=shape, dtype=dtype, cfg=None if cfg is None else cfg.stages, var=v, rnd=rnd,
                         us=None if m.median_ms is None else m.median_ms * 1e3, err=m.rel_err, error=m.error)
            except Exception as e:
                r = dict(step=step, shape=shape, dtype=dtype, var=v, rnd=rnd, error=f"raise {e}")
            r["s"] = round(time.time() - t, 1)
            out.write(json.dumps(r) + "\n"); out.flush(); print(json.dumps(r), flush=True)

    for rnd, order in ((0, ("old", "new")), (1, ("new", "old"))):
        for step, shape, dtype, cfg in SPEED:
            one(step, shape, dtype, cfg, rnd, order)
    for step, shape, dtype, cfg in ONCE:
        one(step, shape, dtype, cfg, 0, ("old", "new"))
    for dtype, shape in (("bf16", (8192,) * 3), ("bf16", (4096,) * 3), ("bf16", (4096, 128, 4096)), ("fp16", (8192,) * 3)):
        t, err = harness.time_cublas(*shape, repeat=30, seed=3, dtype=dtype)
        r = dict(step="cublas", shape=shape, dtype=dtype, us=t.median_ms * 1e3, err=err)
        out.write(json.dumps(r) + "\n"); out.flush(); print(json.dumps(r), flush=True)
    for r in runners.values():
        r.close()


if __name__ == "__main__":
    main()
