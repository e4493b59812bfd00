"""Device probe for step 19 (3xTF32 on wgmma): check shapes, or time configs against steps 14, 18
and cuBLAS strict fp32 in alternating rounds, in one process. Prints JSON lines.

    python tools/step19_probe.py check 2048x2048x2048 1000x1500x700 '256x256x65536:{"promote": 2}'
    python tools/step19_probe.py time 4096 6 "" '{"promote": 2}' '{"raster": 4}'

``check`` builds each shape (with the config after the colon, if any) and prints its error
against float64 on fresh inputs, C poisoned with NaN. ``time N ROUNDS CONFIG...`` builds steps
14, 18 and each step 19 config ("" is the default) at N^3, checks them, then times each once per
round (the order reversed every other round) with cuBLAS SGEMM, and prints the median TFLOP/s.
The numbers in schedules/step19_3xtf32_wgmma.py came from it."""
import json, statistics, sys, time
import numpy as np
import schedules
from schedules.config import Wgmma3xTF32Config
from steps.measure import harness

runner = harness.KernelRunner(repeat=20, isolate=False, seed=1)


def log(**row):
    print(json.dumps(row), flush=True)


def cfg_of(text):
    return Wgmma3xTF32Config(**json.loads(text)) if text else None


mode = sys.argv[1]
if mode == "check":
    for spec in sys.argv[2:]:
        shape, _, cfg = spec.partition(":")
        M, N, K = map(int, shape.split("x"))
        t = time.time()
        lib = schedules.build(19, M, N, K, config=cfg_of(cfg))
        err = runner.check(lib["main"], M, N, K)
        log(shape=shape, cfg=cfg, err=err, s=round(time.time() - t, 1))
elif mode == "time":
    n = int(sys.argv[2])
    rounds = int(sys.argv[3])
    libs = {"step14": schedules.build(14, n, n, n), "step18": schedules.build(18, n, n, n)}
    for c in sys.argv[4:]:
        libs[f"19 {c}"] = schedules.build(19, n, n, n, config=cfg_of(c))
    for k, lib in libs.items():
        log(impl=k, n=n, err=runner.check(lib["main"], n, n, n))
    times = {k: [] for k in [*libs, "cublas_fp32"]}
    for r in range(rounds):
        order = list(libs) if r % 2 == 0 else list(libs)[::-1]
        for k in order:
            times[k].append(runner.time(libs[k], n, n, n).median_ms)
        times["cublas_fp32"].append(harness.time_cublas(n, n, n, seed=r)[0].median_ms)
    for k, v in times.items():
        log(impl=k, n=n, tflops=round(2 * n**3 / statistics.median(v) / 1e9, 1), ms=[round(x, 4) for x in v])
