"""Probe (issue 49): the 16-bit consumer with one wgmma group left in flight, handing back the stage
two slices behind (the right variant of git show 46678e3's probe; Plan.in_flight's docstring).
Imported only by the builder below, in a worker of its own: it patches step 20's accumulate_tile
(and step 23's and 26's copies) for the whole process. (Written before Plan.hand_back, which is this.)"""
from tvm.script import tirx as T

import schedules
from schedules import step20_persistent as s20, step23_split_k_wgmma as s23, step26_cluster_split_k as s26
from schedules.transforms.wgmma import _ceil


def accumulate_lag(plan, multiply, release=None, slices=None):
    stages, acc_n = plan.stages, plan.acc_n
    KT = plan.KT if slices is None else slices
    release = release or s20.release_here(plan)
    last2 = KT > 1

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
                    multiply(smem, acc, frag, descA, descB, (g0 + kt2 * 2 + p) % stages, p, wg, warp, lane)
                    T.ptx.wgmma.wait_group.sync.aligned(1)
                    if kt2 * 2 + p > 1:
                        release(smem, g0 + kt2 * 2 + p - 2, tid)
        T.ptx.wgmma.wait_group.sync.aligned(0)
        if last2:
            release(smem, g0 + KT - 2, tid)
        release(smem, g0 + KT - 1, tid)
        for i in T.unroll(acc_n):
            T.cuda.wgmma.noop_barrier(acc[i])

    return accumulate


s20.accumulate_tile = s23.accumulate_tile = s26.accumulate_tile = accumulate_lag


def build(M, N, K, arch, config, dtype="fp32"):
    step, cfg = config
    return schedules.build(step, M, N, K, arch=arch, config=cfg, dtype=dtype)
