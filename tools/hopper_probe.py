"""Device probe for the Hopper TF32 rungs (schedules/transforms/wgmma.py): builds each config, checks it
against float64 on fresh inputs (C poisoned with NaN), times it and cuBLAS TF32 in the same
process, alternating. Prints JSON lines; writes $OUT/hopper_probe.json."""
import json, os, sys, time
import numpy as np
import schedules
from schedules.config import WgmmaConfig, WgmmaPipelineConfig, WgmmaRegisterAConfig
from steps import results
from steps.measure import harness

OUT = os.environ.get("OUT", "/tmp")
STEP_OF = {WgmmaConfig: 15, WgmmaPipelineConfig: 16, WgmmaRegisterAConfig: 18}  # the step each config is
runner = harness.KernelRunner(repeat=20, isolate=False, seed=1)
rows = []


def log(row):
    print(json.dumps(row), flush=True)
    rows.append(row)


def build(cfg, M, N, K):
    return schedules.build(STEP_OF[type(cfg)], M, N, K, config=cfg)


CONFIGS = {
    "15": WgmmaConfig(),
    "16": WgmmaPipelineConfig(),
    "17": WgmmaPipelineConfig(block_n=256, stages=4),
    "18": WgmmaRegisterAConfig(),
}
for arg in sys.argv[1:]:
    name, _, spec = arg.partition("=")
    cls = {"p": WgmmaPipelineConfig, "r": WgmmaRegisterAConfig, "w": WgmmaConfig}[name[0]]
    CONFIGS[name] = cls(**json.loads(spec))

log(harness.environment())
for n in (2048, 4096):
    libs = {k: build(c, n, n, n) for k, c in CONFIGS.items()}
    for k, lib in libs.items():
        log(dict(cfg=k, n=n, err=runner.check(lib["main"], n, n, n)))
    for rnd in range(2):
        t, e = harness.time_cublas(n, n, n, repeat=20, seed=rnd, tf32=True)
        log(dict(cfg="cublas_tf32", n=n, round=rnd, ms=t.median_ms, tflops=2 * n**3 / t.median_ms / 1e9))
        for k, lib in libs.items():
            tm = runner.time(lib, n, n, n)
            log(dict(cfg=k, n=n, round=rnd, ms=tm.median_ms, tflops=2 * n**3 / tm.median_ms / 1e9, host_us=tm.host_us))
for shape in [(512, 512, 512), (1000, 777, 1001), (1, 1, 1), (7, 4096, 13), (4096, 64, 4096), (260, 1028, 96), (2047, 2047, 2047), (1, 2048, 2048)]:
    for k, c in CONFIGS.items():
        try:
            log(dict(cfg=k, shape=shape, err=runner.check(build(c, *shape)["main"], *shape)))
        except Exception as exc:
            log(dict(cfg=k, shape=shape, fail=repr(exc)[:300]))
open(os.path.join(OUT, "hopper_probe.json"), "w").write(results.dumps(rows))
