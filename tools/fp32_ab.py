"""What fp32 semantics cost in speed (issue 28): A/B in one process, alternating rounds.

    CUDA_CACHE_DISABLE=1 python tools/fp32_ab.py [--sizes 2048 4096] [--rounds 8]

Pairs, each built twice in this process and timed in alternating rounds (the order flipped
every round), on the harness's method (CUDA events, warm-up, medians):

- step 14 with the fp32 fallback pass (schedules/lowering/fp32_fallback.py) against TVM's default pipeline;
- steps 11, 13 and 14 compiled with ``--ftz=false`` (schedules/lowering/nvrtc.py) against TVM's fast
  math alone. ``CUDA_CACHE_DISABLE=1`` is required: the driver's compute cache would hand the
  second build of a source the first one's SASS (schedules/lowering/nvrtc.py says why).

Prints one JSON line per pair: TFLOP/s of each (median of the rounds), new/old, the rounds.
The last run: results/nvidia-h100-80gb-hbm3/fp32_contract_speed.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import tvm

import schedules
from schedules.lowering import nvrtc
from steps.measure import harness


def build(step: int, n: int, fallback: bool = True, ftz_false: bool = True):
    opts = os.environ[nvrtc.EXTRA_OPTS]
    os.environ[nvrtc.EXTRA_OPTS] = opts if ftz_false else opts.replace(nvrtc.KEEP_SUBNORMALS, "")
    try:
        if fallback:
            lib = schedules.build(step, n, n, n)
        else:
            s = schedules.get_step(step)
            with tvm.transform.PassContext(opt_level=3, config=s.pass_config):
                lib = tvm.compile(s.schedule(n, n, n).mod, target=schedules.target(), tir_pipeline="default")
        runner.check(lib["main"], n, n, n)  # loads it: NVRTC compiles under these flags
    finally:
        os.environ[nvrtc.EXTRA_OPTS] = opts
    return lib


def alternate(new, old, n: int, rounds: int) -> dict:
    times = {"new": [], "old": []}
    for r in range(rounds):
        for name in (("new", "old") if r % 2 == 0 else ("old", "new")):
            times[name].append(runner.time(new if name == "new" else old, n, n, n).median_ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"new_tflops": round(2 * n**3 / med["new"] / 1e9, 2), "old_tflops": round(2 * n**3 / med["old"] / 1e9, 2),
            "new/old": round(med["old"] / med["new"], 4), "rounds_ms": {k: [round(x, 4) for x in v] for k, v in times.items()}}


def main() -> int:
    global runner
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--only", choices=("fallback", "ftz"), default=None, help="one kind of pair (default: both)")
    args = p.parse_args()
    if os.environ.get("CUDA_CACHE_DISABLE") != "1":
        print("fp32_ab.py: error: set CUDA_CACHE_DISABLE=1 (the two builds of a pair must not share SASS)",
              file=sys.stderr)
        return 2
    runner = harness.KernelRunner(repeat=20, seed=5, isolate=False)
    for n in args.sizes:
        pairs = []
        if args.only in (None, "fallback"):
            pairs += [("step14: fp32 fallback vs none", build(14, n), build(14, n, fallback=False))]
        if args.only in (None, "ftz"):
            pairs += [(f"step{s}: --ftz=false vs fast math", build(s, n), build(s, n, ftz_false=False)) for s in (11, 13, 14)]
        for name, new, old in pairs:
            print(json.dumps({"pair": name, "n": n, **alternate(new, old, n, args.rounds)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
