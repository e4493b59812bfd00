"""Why two sweeps' confirmations rank a shape's finalists differently (issue 33): the same
finalists timed in turns (harness.alternating_timings, 5 rounds of 10 samples) on several fresh
allocations of the inputs and output in one process, and twice on the same allocation; run once
per GPU. Each line: a shape, an allocation, each finalist's speed as a fraction of the fastest.

    CUDA_VISIBLE_DEVICES=0 python tools/confirm_probe.py CONFIGS.json [--allocations 4]

results/nvidia-h200/confirm_probe_configs.json holds the finalists it was run with (2026-11-26),
and rpc_scaling_tries.txt beside it what it printed.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("configs", help="JSON: {'MxNxK': [config, ...]}")
    p.add_argument("--allocations", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    import tvm

    import schedules
    from steps.measure import harness

    step = schedules.get_step(11)
    dev = tvm.cuda(0)
    arch = harness.gpu_arch()
    out = {"gpu": dev.device_name, "shapes": {}}
    for key, cfgs in json.load(open(args.configs)).items():
        M, N, K = map(int, key.split("x"))
        mods = [schedules.build(step, M, N, K, arch=arch, config=step.Config.from_dict(c)).mod for c in cfgs]
        kept, rows = [], []
        rng = np.random.default_rng(0)
        for alloc in range(args.allocations):
            a = tvm.runtime.tensor(rng.uniform(-1, 1, (M, K)).astype(np.float32), dev)
            b = tvm.runtime.tensor(rng.uniform(-1, 1, (K, N)).astype(np.float32), dev)
            c = tvm.runtime.empty((M, N), "float32", dev)
            kept.append((a, b, c))  # alive: the next allocation lands elsewhere
            for again in range(2 if alloc == 0 else 1):
                t = harness.alternating_timings(mods, dev, [a, b, c], 10, args.rounds)
                best = min(x.median_ms for x in t)
                rel = [round(best / x.median_ms, 4) for x in t]
                rows.append({"alloc": alloc, "again": again, "rel": rel, "best_us": round(best * 1e3, 2)})
                print(key, alloc, again, rel, f"best {best * 1e3:.2f} us", flush=True)
        out["shapes"][key] = {"configs": cfgs, "rows": rows}
    print("JSON " + json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
