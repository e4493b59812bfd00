"""Step 14's large-size default against spill-free alternatives, on the GPU.

ptxas (nvcc 13.0, sm_90) reports for step 14's default at 2048^3 and 1000x1500x700
(256 x 128 blocks of 16 warps of 64 x 32, 512 threads, so at most 128 registers a thread):
60-72 bytes of spills and a 24-byte stack frame; tests/test_tensor_cores.py and
tests/test_schedules.py fail on it. Candidates that compile with none (checked on the CPU):
128 x 128 blocks of 8 warps of 64 x 32 (256 threads, 150 registers) and of 16 warps of
32 x 32 (512 threads, 110 registers). This times them beside the default.

    python tools/step14_spill_free.py            # writes $OUT/step14_spill_free.json (or ./)

About 2-3 minutes on an H100 (4 configs x 3 shapes: builds, checks and times).
"""

import json
import os
import sys
from pathlib import Path

import schedules
from schedules.config import TF32x3Config
from steps import harness, nvcc

SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (1000, 1500, 700)]
COMMON = dict(block_k=32, stages=3, raster=8, promote=1, pad_a=4, pad_b=8, vector=4)
CANDIDATES = {
    "default 256x128, 16 warps 64x32": dict(block_m=256, block_n=128, warp_m=64, warp_n=32),
    "128x128, 8 warps 64x32": dict(block_m=128, block_n=128, warp_m=64, warp_n=32),
    "128x128, 16 warps 32x32": dict(block_m=128, block_n=128, warp_m=32, warp_n=32),
    "128x128, 8 warps 64x32, 4 stages": dict(block_m=128, block_n=128, warp_m=64, warp_n=32, stages=4),
}


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    arch = harness.gpu_arch()
    rows = []
    with harness.KernelRunner(repeat=20, seed=20261122) as runner:
        for name, fields in CANDIDATES.items():
            cfg = TF32x3Config(**{**COMMON, **fields})
            for shape in SHAPES:
                report = nvcc.compile_report(schedules.cuda_source(schedules.build(14, *shape, config=cfg)), arch)
                m = runner.measure(14, *shape, arch, config=cfg)
                row = dict(name=name, config=cfg.as_dict(), shape=shape, gflops=m.gflops, rel_err=m.rel_err,
                           error=m.error, median_ms=m.median_ms,
                           registers=report and report.registers, spills=report and report.spills,
                           stack=report and report.stack_bytes)
                rows.append(row)
                print(f"{name:36s} {'x'.join(map(str, shape)):>15s} {m.gflops or 0:9.0f} GFLOP/s "
                      f"err {m.rel_err if m.rel_err is not None else float('nan'):.2e} "
                      f"regs {row['registers']} spills {row['spills']} stack {row['stack']} {m.error or ''}",
                      flush=True)
    (out / "step14_spill_free.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
