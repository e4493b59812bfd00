"""Probe (issue 49): tall-skinny 16-bit products on clusters of two blocks *along M* sharing B.

Nsight Compute (git show 26280bd:results/nvidia-h200/evidence/ncu_skinny_8192x32.txt) read step
29's kernel at 8192 x 32 x 2048 bf16 L2-bound with warm caches: every kernel at ~45% of the L2's
throughput, cuBLAS moving the fewest bytes for its 128 SMs, as its pairs of blocks along M share
B's tile (one multicast). Step 21 pairs blocks along N and multicasts A. Here step 21's kernel
with the pair turned: the two blocks of a cluster take tiles (2p, j) and (2p + 1, j), block 0
multicasts B's boxes to both, each loads its own A tile. A probe: step 21's module functions
monkeypatched in the build.

    python probe/m_pairs.py OUT.jsonl          (on the GPU)
"""
from __future__ import annotations

import json
import sys
import time

from tvm.script import tirx as T

import schedules
import schedules.step21_cluster as s21
from schedules.config import WgmmaClusterConfig
from schedules.transforms.wgmma import TMA_LOAD, _ceil

STOCK = {name: getattr(s21, name) for name in ("grid", "pair_corner", "pair_loop", "load_multicast")}


def grid(plan):
    return min(_ceil(plan.tm, 2) * plan.tn, plan.cfg.ctas // 2) * 2


def pair_corner(plan, i, rank):
    rows, cols = _ceil(plan.tm, 2), plan.tn  # rows of pairs of tiles
    group = min(plan.cfg.raster, rows)
    g = i // (group * cols)
    height = T.min(group, rows - g * group) if not isinstance(i, int) else min(group, rows - g * group)
    return (((g * group + i % (group * cols) % height) * 2 + rank) * plan.BM, (i % (group * cols) // height) * plan.BN)


def pair_loop(plan, bid):
    rows, cols, clusters = _ceil(plan.tm, 2), plan.tn, grid(plan) // 2
    cid = bid // 2
    return ((rows * cols - cid + clusters - 1) // clusters, lambda t: pair_corner(plan, cid + t * clusters, bid % 2))


def load_multicast(plan):
    BK, A_fl, stage_fl, BN, box = plan.BK, plan.A_fl, plan.stage_fl, plan.BN, plan.box_n

    @T.macro
    def load(smem, A_map, B_map, kt, s, m0, n0, rank):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(smem[plan.full_bar(s)]), T.uint32(plan.tx_bytes))
        T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl]), T.address_of(A_map), kt * BK, m0, T.address_of(smem[plan.full_bar(s)]))
        if rank == 0:
            for c in T.unroll(BN // box):
                T.ptx[s21.TMA_MULTICAST](T.address_of(smem[s * stage_fl + A_fl + c * BK * box]), T.address_of(B_map),
                                         n0 + c * box, kt * BK, T.address_of(smem[plan.full_bar(s)]), T.uint16(s21.BOTH))

    return load


def build_m_pairs(M, N, K, arch, config, dtype="fp32"):
    for name, f in (("grid", grid), ("pair_corner", pair_corner), ("pair_loop", pair_loop), ("load_multicast", load_multicast)):
        setattr(s21, name, f)
    try:
        return schedules.build(21, M, N, K, arch=arch, config=config, dtype=dtype)
    finally:
        for name, f in STOCK.items():
            setattr(s21, name, f)


def build_step(M, N, K, arch, config, dtype="fp32"):
    return schedules.build(29, M, N, K, arch=arch, config=config, dtype=dtype)


def main():
    from steps.measure import harness
    out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    t00 = time.time()
    variants = [("m_pairs 64x64 s8", 64, 64, 8), ("m_pairs 64x64 s13", 64, 64, 13)]
    for rnd, sh in ((1, (8192, 32, 2048)), (1, (4096, 128, 4096)), (2, (8192, 32, 2048))):
            if time.time() - t00 > 85:
                break
            t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype="bf16")
            rows = [dict(label="cuBLAS", us=round(t.median_ms * 1e3, 2), err=e)]
            m = runner.measure("probe.m_pairs:build_step", *sh, arch, config=None, dtype="bf16", seed=1)
            rows.append(dict(label="step 29 default", us=m.median_ms and round(m.median_ms * 1e3, 2), err=m.rel_err, error=m.error))
            for label, bm, bn, st in variants:
                cfg = WgmmaClusterConfig(block_m=bm, block_n=bn, stages=st, ctas=132)
                m = runner.measure("probe.m_pairs:build_m_pairs", *sh, arch, config=cfg, dtype="bf16", seed=1)
                rows.append(dict(label=label, us=m.median_ms and round(m.median_ms * 1e3, 2), err=m.rel_err,
                                 error=m.error, hb=m.host_bound))
            for r in rows:
                line = json.dumps(dict(round=rnd, shape=sh, **r), default=str)
                out.write(line + "\n"); out.flush(); print(line, flush=True)


if __name__ == "__main__":
    main()
