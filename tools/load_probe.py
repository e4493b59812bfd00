"""Is a finalist's speed a property of its config, or of the one load of its library (issue 33)?

Two sweeps' confirmations ranked the same finalists up to 2% apart, each ranking steady over
its 10 rounds and 3 allocations: at 1x4096x4096 (one block row), raster 2, 4 and 8 launch the
blocks in the same order, yet one session read raster 4 2.3% slower than raster 2 in every
round, another read them equal. So each config's library is loaded several times here (copies
under other names: separate modules), and every (config, copy) pair is timed in turns on one
allocation of the inputs. Copies of one config apart by as much as configs are: the load
decides, not the config.

    python tools/load_probe.py build CONFIGS.json DIR          # once: DIR/<shape>_<i>.so
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py time CONFIGS.json DIR [--loads 3]
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py places CONFIGS.json DIR [--places 8 --rounds 3]
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py procedures CONFIGS.json DIR

Each `time` line: a shape, then per config its copies' speeds as fractions of the fastest pair.
`places` times each config once per allocation (8, far apart) and ranks them by the median over
those; `procedures` times them as a sweep's confirmation does and as `time` does, in one process.
What `time` and `places` found on two H200s (2026-11-26), with results/nvidia-h200/load_probe_configs.json:
results/nvidia-h200/rpc_scaling_tries.txt, session 6. `procedures` was written then and has not run yet
(results/nvidia-h200/load_probe_finalists_1x4096x4096.json is its input: try 10's ten finalists).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import numpy as np


def build(configs: dict, directory: str) -> None:
    import schedules
    from steps.measure import harness

    step = schedules.get_step(11)
    arch = harness.gpu_arch() if os.environ.get("ARCH") is None else os.environ["ARCH"]
    os.makedirs(directory, exist_ok=True)
    for key, cfgs in configs.items():
        M, N, K = map(int, key.split("x"))
        for i, c in enumerate(cfgs):
            lib = schedules.build(step, M, N, K, arch=arch, config=step.Config.from_dict(c)).mod
            lib.export_library(os.path.join(directory, f"{key}_{i}.so"))
            print("built", key, i, flush=True)


def _operands(dev, M: int, N: int, K: int, rng) -> list:
    """A, B (harness.random_operands, on `dev`) and an empty C: one allocation of a shape's arguments."""
    import tvm

    from steps.measure import harness

    a, b = harness.random_operands(M, N, K, rng)
    return [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), tvm.runtime.empty((M, N), "float32", dev)]


def _libraries(directory: str, key: str, count: int) -> list:
    """The `build` command's libraries of one shape, each loaded once."""
    import tvm

    return [tvm.runtime.load_module(os.path.join(directory, f"{key}_{i}.so")) for i in range(count)]


def time_loads(configs: dict, directory: str, loads: int, rounds: int) -> dict:
    import tempfile

    import tvm

    from steps.measure import harness

    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    scratch = tempfile.mkdtemp()
    rng = np.random.default_rng()
    for key, cfgs in configs.items():
        M, N, K = map(int, key.split("x"))
        mods, labels = [], []
        for i in range(len(cfgs)):
            for copy in range(loads):
                path = os.path.join(scratch, f"{key}_{i}_copy{copy}.so")
                shutil.copy(os.path.join(directory, f"{key}_{i}.so"), path)
                mods.append(tvm.runtime.load_module(path))
                labels.append((i, copy))
        t = harness.alternating_timings(mods, dev, [_operands(dev, M, N, K, rng)], 10, rounds)
        best = min(x.median_ms for x in t)
        rel = [[0.0] * loads for _ in cfgs]
        for (i, copy), x in zip(labels, t):
            rel[i][copy] = round(best / x.median_ms, 4)
        out["shapes"][key] = {"best_us": round(best * 1e3, 2), "rel": rel}
        print(key, f"best {best * 1e3:.2f} us", " | ".join(" ".join(f"{v:.4f}" for v in r) for r in rel), flush=True)
    return out


def time_places(configs: dict, directory: str, places: int, rounds: int) -> dict:
    """Each config loaded once, timed in turns on `places` allocations of A, B and C, each after a
    spacer of a random size (0-512 MiB, kept alive) so that they land far apart in memory."""
    import statistics

    import tvm

    from steps.measure import harness

    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    for key, cfgs in configs.items():
        M, N, K = map(int, key.split("x"))
        mods = _libraries(directory, key, len(cfgs))
        kept, per_place = [], []
        for _ in range(places):
            kept.append(tvm.runtime.empty((int(rng.integers(1, 512 << 18)),), "float32", dev))
            kept.append(_operands(dev, M, N, K, rng))
            t = harness.alternating_timings(mods, dev, [kept[-1]], 10, rounds)
            per_place.append([x.median_ms for x in t])
        med = [statistics.median(p[i] for p in per_place) for i in range(len(cfgs))]
        best = min(med)
        rel = [round(best / m, 4) for m in med]
        places_rel = [[round(min(p) / x, 4) for x in p] for p in per_place]
        out["shapes"][key] = {"best_us": round(best * 1e3, 2), "rel": rel, "places": places_rel}
        print(key, f"median over {places} places", " ".join(f"{v:.4f}" for v in rel), flush=True)
        for p in places_rel:
            print("    ", " ".join(f"{v:.4f}" for v in p), flush=True)
    return out


def time_procedures(configs: dict, directory: str) -> dict:
    """The same libraries timed in turns two ways, twice each, in one process: as a sweep's
    confirmation does (3 allocations taking turns by round, 10 rounds of 5 samples) and as
    `time` does (one allocation, 6 rounds of 10 samples)."""
    import tvm

    from steps.measure import harness

    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    for key, cfgs in configs.items():
        M, N, K = map(int, key.split("x"))
        mods = _libraries(directory, key, len(cfgs))
        sets = [_operands(dev, M, N, K, rng) for _ in range(3)]
        rows = []
        for name, arg_sets, repeat, rounds in [("sweep", sets, 5, 10), ("one", sets[:1], 10, 6)] * 2:
            t = harness.alternating_timings(mods, dev, arg_sets, repeat, rounds)
            best = min(x.median_ms for x in t)
            rel = [round(best / x.median_ms, 4) for x in t]
            rows.append({"procedure": name, "rel": rel, "best_us": round(best * 1e3, 2)})
            print(key, f"{name:5s}", " ".join(f"{v:.4f}" for v in rel), f"best {best * 1e3:.2f} us", flush=True)
        out["shapes"][key] = rows
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["build", "time", "places", "procedures"])
    p.add_argument("configs", help="JSON: {'MxNxK': [config, ...]}")
    p.add_argument("directory")
    p.add_argument("--loads", type=int, default=3)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--places", type=int, default=8)
    args = p.parse_args()
    configs = json.load(open(args.configs))
    if args.what == "build":
        build(configs, args.directory)
    elif args.what == "time":
        print("JSON " + json.dumps(time_loads(configs, args.directory, args.loads, args.rounds)))
    elif args.what == "places":
        print("JSON " + json.dumps(time_places(configs, args.directory, args.places, args.rounds)))
    else:
        print("JSON " + json.dumps(time_procedures(configs, args.directory)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
