"""Probe (issue 49): at 3072^3 the picks run whole waves (16 bits: step 23's 384 tiles of 192 x 128,
three waves on 132 SMs; TF32: step 29's 288 tiles of 256 x 128, 2.25 waves on 128, so three). Step 27's
stream-K streams only where the streamed pairs are at most an eighth (stream_share 8), so it does
not stream there. With stream_share 1 on 132 blocks, 144 pairs on 66 clusters are 1 whole pair and
1.18 streamed pairs a cluster: 2.18 pairs' work against three waves.

Prediction: 16 bits, 2.18 waves at 256 x 128's rate (1.0) against 3 of 192 x 128 at 0.8 (2.25 of
256 x 128's work / 0.8 = 2.81) plus the fix-up (5-6% at 4096^3): ~0.82 of the pick's time;
TF32: 2.18 against 3 waves of the same tile, plus the fix-up: ~0.78.

Each kernel is checked, then the TVM kernels are timed in alternating rounds, then the pick and the
best other each in turns with cuBLAS (harness.time_beside_cublas)."""

import sys
from dataclasses import replace

import numpy as np

import schedules
from steps.measure import harness

SHAPES = [tuple(int(x) for x in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else "3072x3072x3072").split(",")]
PRECISIONS = (sys.argv[2] if len(sys.argv) > 2 else "bf16,fp16,tf32").split(",")
ARCH = "sm_90a"


def candidates(M, N, K, precision, dtype):
    pick = schedules.fastest(M, N, K, precision=precision, arch="sm_90", gpu="NVIDIA H200")
    yield f"pick: step {pick.step.number} {pick.config}", pick.step.number, pick.config
    for number in (27, 31):
        s = schedules.get_step(number)
        for share in (1, 2):
            cfg = replace(s.default_config(M, N, K, dtype), stream_share=share, ctas=132)
            yield f"step {number} share {share} {cfg}", number, cfg


def main():
    import tvm
    dev = tvm.cuda(0)
    run = harness.KernelRunner(repeat=10, isolate=False)
    for (M, N, K) in SHAPES:
        for precision in PRECISIONS:
            dtype = "fp32" if precision == "tf32" else precision
            names, libs, steps = [], [], []
            for name, number, cfg in candidates(M, N, K, precision, dtype):
                lib = schedules.build(number, M, N, K, arch=ARCH, config=cfg, dtype=dtype)
                err = run.check(lib["main"], M, N, K, dtype)
                tol = harness.tolerance(number, dtype)
                print(f"{M}x{N}x{K} {precision} {name}: rel err {err:.3g} ({'ok' if err <= tol else 'WRONG'})", flush=True)
                if err <= tol:
                    names.append(name), libs.append(lib), steps.append(number)
            rng = np.random.default_rng(0)
            sets = []
            for _ in range(3):
                a, b = harness.random_operands(M, N, K, rng, dtype)
                sets.append([run._tensor(x, dtype) for x in (a, b, harness.dtypes.zeros((M, N), dtype))])
            timings = harness.alternating_timings([lib.mod for lib in libs], dev, sets, repeat=10, rounds=8)
            base = timings[0].median_ms
            for name, t in zip(names, timings):
                print(f"  {name}: {t.median_ms * 1e3:.1f} us  x pick {base / t.median_ms:.3f}  rounds "
                      + " ".join(f"{r * 1e3:.1f}" for r in t.rounds_ms), flush=True)
            best = min(range(1, len(timings)), key=lambda i: timings[i].median_ms)
            for i in (0, best):
                for _ in range(2):
                    mine, theirs, _ = harness.time_beside_cublas(libs[i], dev, M, N, K, repeat=10, rounds=3,
                                                                 tf32=precision == "tf32", dtype=dtype)
                    print(f"  in turns: {names[i]}: {mine.median_ms * 1e3:.1f} us, cuBLAS {theirs.median_ms * 1e3:.1f}: "
                          f"{theirs.median_ms / mine.median_ms:.3f}x cuBLAS", flush=True)


if __name__ == "__main__":
    main()
