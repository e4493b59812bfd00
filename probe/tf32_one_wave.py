"""Probe (issue 49): TF32's tile rule takes 256 x 128 wherever 128 x 128 tiles fill half the SMs or
more. At 1280^3 that is 50 tiles for 132 SMs (the pick 0.70x cuBLAS TF32 in the H200's audit), at
1000 x 1500 x 700 48 (0.86x in the rows), while 1024^3, below the line, runs 128 x 128 at 1.20x.

Prediction: where 128 x 128 tiles still fit one wave (66-132 of them), they halve each SM's work
against one wave of 256 x 128; at 16-bit's measured rate for the smaller tile (0.85 of 256 x 128's)
that is ~0.59 of the time: 1280^3 0.70x -> ~1.1x cuBLAS TF32. 1536^3 (144 tiles of 128 x 128, two
waves) is the control, where 256 x 128 should stay ahead.

Each kernel is checked, then timed in alternating rounds, then the pick and the best other each in
turns with cuBLAS TF32 (harness.time_beside_cublas)."""

import sys
from dataclasses import replace

import numpy as np

import schedules
from steps.measure import harness

SHAPES = [tuple(int(x) for x in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else
          "1280x1280x1280,1000x1500x700,769x1543x2049,1531x769x3067,1536x1536x1536").split(",")]
ARCH = "sm_90a"


def candidates(M, N, K):
    pick = schedules.fastest(M, N, K, precision="tf32", arch="sm_90", gpu="NVIDIA H200")
    yield f"pick: step {pick.step.number} {pick.config}", pick.step.number, pick.config
    s29 = schedules.get_step(29)
    tiles = -(-M // 128) * -(-N // 128)
    small = replace(s29.default_config(M, N, K), block_m=128, block_n=128, split_k=1, stages=6, ctas=min(132, tiles))
    yield f"step 29 128x128 {small}", 29, small
    s30 = schedules.get_step(30)
    yield f"step 30 {s30.default_config(M, N, K)}", 30, s30.default_config(M, N, K)


def main():
    import tvm
    dev = tvm.cuda(0)
    run = harness.KernelRunner(repeat=10, isolate=False)
    for (M, N, K) in SHAPES:
        names, libs, seen = [], [], []
        for name, number, cfg in candidates(M, N, K):
            if (number, cfg) in seen:
                continue
            seen.append((number, cfg))
            lib = schedules.build(number, M, N, K, arch=ARCH, config=cfg)
            err = run.check(lib["main"], M, N, K)
            tol = harness.tolerance(number)
            print(f"{M}x{N}x{K} {name}: rel err {err:.3g} ({'ok' if err <= tol else 'WRONG'})", flush=True)
            if err <= tol:
                names.append(name), libs.append(lib)
        rng = np.random.default_rng(0)
        sets = []
        for _ in range(3):
            a, b = harness.random_operands(M, N, K, rng)
            sets.append([run._tensor(x) for x in (a, b, np.zeros((M, N), np.float32))])
        timings = harness.alternating_timings([lib.mod for lib in libs], dev, sets, repeat=10, rounds=8)
        base = timings[0].median_ms
        for name, t in zip(names, timings):
            print(f"  {name}: {t.median_ms * 1e3:.1f} us  x pick {base / t.median_ms:.3f}  rounds "
                  + " ".join(f"{r * 1e3:.1f}" for r in t.rounds_ms), flush=True)
        best = min(range(1, len(timings)), key=lambda i: timings[i].median_ms)
        for i in (0, best):
            for _ in range(2):
                mine, theirs, _ = harness.time_beside_cublas(libs[i], dev, M, N, K, repeat=10, rounds=3, tf32=True)
                print(f"  in turns: {names[i]}: {mine.median_ms * 1e3:.1f} us, cuBLAS {theirs.median_ms * 1e3:.1f}: "
                      f"{theirs.median_ms / mine.median_ms:.3f}x cuBLAS", flush=True)


if __name__ == "__main__":
    main()
