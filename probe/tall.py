"""Probe (issue 49): the bf16/TF32 shapes below 0.9x cuBLAS on the H100 (tall-skinny, tiny K, 1536^3),
each config of steps 20-23/26 against cuBLAS in the dtype, one process:
python probe/tall.py OUT.jsonl   [BUDGET=seconds]
'lag' rows: the 16-bit consumer leaving one wgmma group in flight (probe/lag.py), in a worker of its own."""
import json, os, sys, time

from schedules.config import (WgmmaPersistentConfig as P, WgmmaClusterConfig as CL, WgmmaTmaStoreConfig as TS,
                              WgmmaSplitKConfig as SK, WgmmaClusterSplitConfig as CS)
from steps.measure import harness

out = runner = lag_runner = arch = None


def row(**kw):
    out.write(json.dumps(kw) + "\n"); out.flush(); print(json.dumps(kw), flush=True)


def desc(cfg):
    if cfg is None:
        return None
    d = {k: getattr(cfg, k) for k in ("block_m", "block_n", "stages", "ctas", "split_k", "chunk") if hasattr(cfg, k)}
    return d


def meas(step, sh, dt, cfg, label, lag=False):
    try:
        if lag:
            m = lag_runner.measure("probe.lag:build", *sh, arch, config=(step, cfg), dtype=dt, seed=1)
        else:
            m = runner.measure(step, *sh, arch, config=cfg, dtype=dt, seed=1)
    except Exception as e:
        row(shape=sh, dt=dt, label=label, cfg=desc(cfg), error=f"raise {type(e).__name__}: {e}"); return
    row(shape=sh, dt=dt, label=label, step=step, lag=lag, cfg=desc(cfg),
        us=None if m.median_ms is None else m.median_ms * 1e3, min_us=None if m.min_ms is None else m.min_ms * 1e3,
        err=m.rel_err, error=m.error, hb=m.host_bound)


def tall(sh):
    """Memory-bound tall-skinny: 64 x 64 tiles, deeper rings, lag, clusters, two blocks per SM."""
    return [
        (23, None, "s23default", False),
        (20, P(block_m=64, block_n=64, stages=8, ctas=128), "s20 8st", False),
        (20, P(block_m=64, block_n=64, stages=8, ctas=128), "s20 8st lag", True),
        (20, P(block_m=64, block_n=64, stages=13, ctas=128), "s20 13st", False),
        (20, P(block_m=64, block_n=64, stages=13, ctas=128), "s20 13st lag", True),
        (21, CL(block_m=64, block_n=64, stages=8, ctas=128), "s21 8st", False),
        (21, CL(block_m=64, block_n=64, stages=13, ctas=128), "s21 13st lag", True),
        (26, None, "s26default", False),
        (26, CS(block_m=64, block_n=64, stages=4, split_k=2), "s26 64x64x2 4st", False),
        (26, CS(block_m=64, block_n=64, stages=6, split_k=2), "s26 64x64x2 6st lag", True),
        (26, CS(block_m=64, block_n=64, stages=4, split_k=4), "s26 64x64x4 4st lag", True),
        (23, SK(block_m=64, block_n=64, stages=6, ctas=256, split_k=2), "s23 64x64x2 6st 256", False),
        (23, SK(block_m=64, block_n=64, stages=6, ctas=256, split_k=2), "s23 64x64x2 6st 256 lag", True),
    ]


def wide(sh):
    """M small, N wide (B streamed): tiles covering M, split in two."""
    return [
        (23, None, "s23default", False),
        (20, P(block_m=64, block_n=64, stages=8, ctas=128), "s20 64x64 8st lag", True),
        (20, P(block_m=128, block_n=64, stages=8, ctas=64), "s20 128x64 8st lag", True),
        (26, None, "s26default", False),
        (26, CS(block_m=128, block_n=64, stages=4, split_k=2), "s26 128x64x2 4st", False),
        (26, CS(block_m=128, block_n=64, stages=4, split_k=2), "s26 128x64x2 4st lag", True),
        (26, CS(block_m=128, block_n=64, stages=6, split_k=2), "s26 128x64x2 6st lag", True),
        (23, SK(block_m=128, block_n=64, stages=6, ctas=128, split_k=2), "s23 128x64x2 6st lag", True),
    ]


def tiny_k(sh):
    """Store-bound (K of one to four slices): blocks per SM, TMA store chunks."""
    return [
        (22, None, "s22default", False),
        (20, None, "s20default", False),
        (22, TS(block_m=256, block_n=128, stages=2, ctas=128), "s22 256x128 2st", False),
        (22, TS(block_m=128, block_n=128, stages=2, ctas=264), "s22 128x128 2st 264", False),
        (22, TS(block_m=128, block_n=128, stages=2, ctas=264, chunk=32768), "s22 128x128 2st 264 32K", False),
        (20, P(block_m=128, block_n=128, stages=2, ctas=264), "s20 128x128 2st 264", False),
        (20, P(block_m=128, block_n=128, stages=2, ctas=396), "s20 128x128 2st 396", False),
        (20, P(block_m=128, block_n=64, stages=2, ctas=528), "s20 128x64 2st 528", False),
    ]


def waves(sh):
    return [
        (23, None, "s23default", False),
        (20, P(block_m=128, block_n=128, stages=4, ctas=132), "s20 128x128", False),
        (20, P(block_m=128, block_n=128, stages=4, ctas=132), "s20 128x128 lag", True),
        (20, P(block_m=128, block_n=64, stages=4, ctas=264), "s20 128x64 264", False),
        (20, P(block_m=128, block_n=64, stages=4, ctas=264), "s20 128x64 264 lag", True),
        (22, TS(block_m=128, block_n=128, stages=4, ctas=132), "s22 128x128", False),
        (26, CS(block_m=128, block_n=128, stages=4, split_k=2), "s26 128x128x2", False),
        (26, CS(block_m=192, block_n=128, stages=3, split_k=2), "s26 192x128x2 3st", False),
    ]


def tf32_tall(sh):
    return [
        (13, None, "s13default", False),
        (23, None, "s23default", False),
        (26, None, "s26default", False),
        (20, P(block_m=64, block_n=64, stages=8, ctas=128), "s20 64x64 8st", False),
        (20, P(block_m=64, block_n=64, stages=6, ctas=256), "s20 64x64 6st 256", False),
        (20, P(block_m=128, block_n=64, stages=6, ctas=132), "s20 128x64 6st", False),
        (26, CS(block_m=64, block_n=64, stages=4, split_k=2), "s26 64x64x2 4st", False),
    ]


PLAN = [
    ((4096, 128, 4096), "bf16", tall),
    ((8192, 32, 2048), "bf16", tall),
    ((4096, 16, 4096), "bf16", tall),
    ((128, 4096, 4096), "bf16", wide),
    ((4096, 4096, 16), "bf16", tiny_k),
    ((8192, 1024, 256), "bf16", tiny_k),
    ((1536, 1536, 1536), "bf16", waves),
    ((8192, 128, 1024), "fp32", tf32_tall),
    ((128, 8192, 1024), "fp32", tf32_tall),
    ((4096, 4096, 64), "bf16", tiny_k),
]


def main():
    global out, runner, lag_runner, arch
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    budget = float(os.environ.get("BUDGET", "500"))
    t0 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    lag_runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    for sh, dt, configs in PLAN:
        if time.time() - t0 > budget:
            row(note="budget out", at=sh); break
        t, e = harness.time_cublas(*sh, repeat=50, seed=1, tf32=(dt == "fp32"), dtype=dt)
        row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
        for step, cfg, label, lag in configs(sh):
            meas(step, sh, dt, cfg, label, lag)
        t, e = harness.time_cublas(*sh, repeat=50, seed=1, tf32=(dt == "fp32"), dtype=dt)
        row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
    runner.close(); lag_runner.close()
    row(note="done", s=time.time() - t0)


if __name__ == "__main__":
    main()
