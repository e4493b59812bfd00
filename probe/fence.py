"""Probe: does CUTLASS's warpgroup_fence_operand (an empty asm on every accumulator register before
wgmma.fence and after wait_group) make the 16-bit group in flight right (git show 10fba2d's wrong rings)?
Builders: probe.fence:lag (a544f7a's loop: wait_group 1, hand back two behind), probe.fence:lagfence
(the same with the fences). Each imported in a worker of its own. python probe/fence.py OUT.jsonl"""
import json, sys

from tvm.script import tirx as T

import schedules
from schedules import step20_persistent as s20
from schedules.transforms.wgmma import _ceil

FENCE = [False]


def accumulate_lag(plan, multiply, release=None, slices=None):
    stages, acc_n = plan.stages, plan.acc_n
    KT = plan.KT if slices is None else slices
    release = release or s20.release_here(plan)
    last2, fence = KT > 1, FENCE[0]

    @T.macro
    def accumulate(smem, acc, frag, descA, descB, g0, tid, wg, warp, lane):
        for i in T.unroll(acc_n):
            acc[i] = T.float32(0)
            T.cuda.wgmma.noop_barrier(acc[i])
        for kt2 in T.serial(_ceil(KT, 2)):
            for p in T.unroll(2):
                if kt2 * 2 + p < KT:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((g0 + kt2 * 2 + p) % stages)]),
                                         ((g0 + kt2 * 2 + p) // stages) & 1)
                    if fence:
                        for i in T.unroll(acc_n):
                            T.cuda.wgmma.noop_barrier(acc[i])
                    multiply(smem, acc, frag, descA, descB, (g0 + kt2 * 2 + p) % stages, p, wg, warp, lane)
                    T.ptx.wgmma.wait_group.sync.aligned(1)
                    if fence:
                        for i in T.unroll(acc_n):
                            T.cuda.wgmma.noop_barrier(acc[i])
                    if kt2 * 2 + p > 1:
                        release(smem, g0 + kt2 * 2 + p - 2, tid)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        if last2:
            release(smem, g0 + KT - 2, tid)
        release(smem, g0 + KT - 1, tid)
        for i in T.unroll(acc_n):
            T.cuda.wgmma.noop_barrier(acc[i])

    return accumulate


def _build(M, N, K, arch, config, dtype, fence):
    FENCE[0] = fence
    s20.accumulate_tile = accumulate_lag
    return schedules.build(20, M, N, K, arch=arch, config=config, dtype=dtype)


def lag(M, N, K, arch, config, dtype="fp32"):
    return _build(M, N, K, arch, config, dtype, False)


def lagfence(M, N, K, arch, config, dtype="fp32"):
    return _build(M, N, K, arch, config, dtype, True)


def main():
    from schedules.config import WgmmaPersistentConfig as P
    from steps.measure import harness
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    runners = {v: harness.KernelRunner(repeat=30, seed=1) for v in ("wait", "lag", "lagfence")}
    cases = [((2048, 256, 640), 12), ((8192, 128, 1024), 9), ((8192, 128, 1024), 10), ((8192, 128, 1024), 12),
             ((4096, 128, 4096), 8), ((128, 4096, 4096), 8), ((8192, 128, 1024), 8)]
    for sh, st in cases:
        cfg = P(block_m=64, block_n=64, stages=st, ctas=128)
        for v in ("lagfence", "lag", "wait"):
            spec = 20 if v == "wait" else f"probe.fence:{v}"
            try:
                m = runners[v].measure(spec, *sh, arch, config=cfg, dtype="bf16", seed=1)
                r = dict(shape=sh, stages=st, var=v, us=None if m.median_ms is None else m.median_ms * 1e3,
                         err=m.rel_err, error=m.error)
            except Exception as e:
                r = dict(shape=sh, stages=st, var=v, error=f"raise {e}")
            out.write(json.dumps(r) + "\n"); out.flush(); print(json.dumps(r), flush=True)
    for r in runners.values():
        r.close()


if __name__ == "__main__":
    main()
