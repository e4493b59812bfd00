"""Probe: where is the 16-bit group-in-flight ring wrong? For each (shape, stages, variant): the
output of three runs (deterministic?), the per-tile error, and for the worst tiles the least-squares
coefficients of the error on the 16-k partial products A[:, k16] @ B[k16, :] (a lost k step shows
as -1, a doubled one as +1). Also the SASS of what NVRTC builds here. python probe/inflight.py OUTDIR"""
import json, os, subprocess, sys

import numpy as np
import tvm

import schedules
from schedules import step20_persistent as s20
from schedules.config import WgmmaPersistentConfig as P
from steps.measure import dtypes
import probe.fence as pf

ORIG = s20.accumulate_tile


def build(variant, shape, stages):
    s20.accumulate_tile = ORIG if variant == "wait" else pf.accumulate_lag
    pf.FENCE[0] = False
    M, N, K = shape
    return schedules.build(20, M, N, K, arch="sm_90a",
                           config=P(block_m=64, block_n=64, stages=stages, ctas=128), dtype="bf16")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    log = open(os.path.join(out_dir, "inflight.txt"), "w")

    def say(*a):
        print(*a, flush=True)
        print(*a, file=log, flush=True)

    dev = tvm.cuda(0)
    cases = [((2048, 256, 640), 12, "lag"), ((2048, 256, 640), 12, "wait"), ((2048, 256, 640), 10, "lag"),
             ((8192, 128, 1024), 9, "lag"), ((8192, 128, 1024), 8, "lag")]
    for shape, stages, variant in cases:
        M, N, K = shape
        lib = build(variant, shape, stages)
        src = schedules.cuda_source(lib)
        tag = f"{variant}_{M}x{N}x{K}_{stages}"
        open(os.path.join(out_dir, tag + ".cu"), "w").write(src)
        try:
            from tvm.support import nvcc
            cubin = nvcc.compile_cuda(src, target_format="cubin", arch="sm_90a")
            open(os.path.join(out_dir, tag + ".cubin"), "wb").write(cubin)
            sass = subprocess.run(["cuobjdump", "-sass", os.path.join(out_dir, tag + ".cubin")],
                                  capture_output=True, text=True).stdout
            open(os.path.join(out_dir, tag + ".sass"), "w").write(sass)
        except Exception as e:
            say("sass failed", e)
        rng = np.random.default_rng(7)
        a, b = dtypes.random_operands(M, N, K, rng, "bf16")
        A64, B64 = dtypes.to_float64(a, "bf16"), dtypes.to_float64(b, "bf16")
        ref = A64 @ B64
        outs = []
        for rep in range(3):
            ta, tb = dtypes.to_device(tvm, a, "bf16", dev), dtypes.to_device(tvm, b, "bf16", dev)
            c = dtypes.to_device(tvm, dtypes.nan_filled((M, N), "bf16"), "bf16", dev)
            lib["main"](ta, tb, c)
            dev.sync()
            outs.append(dtypes.to_float64(dtypes.from_device(c, "bf16"), "bf16"))
        same = all(np.array_equal(outs[0], o) for o in outs[1:])
        D = outs[0] - ref
        err = float(np.linalg.norm(D) / np.linalg.norm(ref))
        say(f"== {tag}: err {err:.3e} deterministic {same}; run errs",
            [f"{np.linalg.norm(o - ref) / np.linalg.norm(ref):.3e}" for o in outs])
        if err < 5e-3:
            continue
        tm, tn = M // 64, N // 64
        terr = np.zeros((tm, tn))
        for i in range(tm):
            for j in range(tn):
                r = ref[i*64:(i+1)*64, j*64:(j+1)*64]
                terr[i, j] = np.linalg.norm(D[i*64:(i+1)*64, j*64:(j+1)*64]) / np.linalg.norm(r)
        bad = np.argwhere(terr > 5e-3)
        say(f"  tiles wrong: {len(bad)} of {tm*tn}; tile err quantiles",
            np.quantile(terr, [0, .25, .5, .75, 1]).round(4).tolist())
        # row / column pattern inside tiles (over all wrong tiles)
        rows = np.zeros(64); cols = np.zeros(64)
        for i, j in bad:
            d = D[i*64:(i+1)*64, j*64:(j+1)*64]
            rows += np.sqrt((d**2).sum(1)); cols += np.sqrt((d**2).sum(0))
        say("  err by row in tile:", (rows / max(rows.max(), 1e-30)).round(2).tolist())
        say("  err by col in tile:", (cols / max(cols.max(), 1e-30)).round(2).tolist())
        # which blocks (tile index -> bid) are wrong: raster order unknown here, print the tile grid
        say("  wrong tile map (rows = tile m, cols = tile n), first 40 m:")
        for i in range(min(tm, 40)):
            say("   ", "".join("X" if terr[i, j] > 5e-3 else "." for j in range(tn)))
        for i, j in bad[:6]:
            d = D[i*64:(i+1)*64, j*64:(j+1)*64].ravel()
            parts = np.stack([(A64[i*64:(i+1)*64, k:k+16] @ B64[k:k+16, j*64:(j+1)*64]).ravel()
                              for k in range(0, K, 16)], 1)
            coef, res, *_ = np.linalg.lstsq(parts, d, rcond=None)
            resid = np.linalg.norm(d - parts @ coef) / max(np.linalg.norm(d), 1e-30)
            big = [(int(k), round(float(coef[k]), 3)) for k in np.argsort(-np.abs(coef))[:6]]
            say(f"  tile ({i},{j}) err {terr[i, j]:.3e}: largest k16 coefficients (k step, coef) {big}; "
                f"unexplained {resid:.3f}")
            # per-row version: which rows lose which k steps
            for rr in (0, 8, 16, 32, 63):
                drow = D[i*64 + rr, j*64:(j+1)*64]
                prow = np.stack([A64[i*64 + rr, k:k+16] @ B64[k:k+16, j*64:(j+1)*64] for k in range(0, K, 16)], 1)
                cr, *_ = np.linalg.lstsq(prow, drow, rcond=None)
                say(f"     row {rr}: |d| {np.linalg.norm(drow):.3e} coef>0.3:",
                    [(int(k), round(float(cr[k]), 2)) for k in range(len(cr)) if abs(cr[k]) > 0.3])
    log.close()


if __name__ == "__main__":
    main()
