"""Why do a sweep's finalists rank differently from run to run (issue 33)? Probes of one shape's finalists.

Two sweeps' confirmations ranked the same finalists up to 2% apart, each ranking steady over its
rounds. These probes time a shape's finalists (CONFIGS.json: {"MxNxK": [config, ...]}) in turns
(harness.alternating_timings), each probe changing one thing:

    python tools/load_probe.py build CONFIGS.json DIR [--history]  # once: DIR/<shape>_<i>.so (+ _cand<j>.so)
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py time CONFIGS.json DIR [--loads 3]
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py places CONFIGS.json DIR [--places 8 --rounds 3]
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py procedures CONFIGS.json DIR
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py history CONFIGS.json DIR       # needs build --history
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py workspace CONFIGS.json DIR --history
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py levels CONFIGS.json DIR --loads 2
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py placement CONFIGS.json DIR --loads 6   # build --history
    CUDA_VISIBLE_DEVICES=0 python tools/load_probe.py variants CONFIGS.json - --loads 12   # builds itself

- `time`: each library loaded `--loads` times (copies under other names: separate modules).
- `places`: each config on `--places` allocations, each after a random spacer; median over them.
- `procedures`: as a sweep's confirmation times (3 allocations by round, 10 rounds of 5) and on one
  allocation (6 rounds of 10), twice each, in one process.
- `history`: `procedures` before and after timing the shape's 25 sweep candidates once each (what a
  sweep's screening does), and each finalist's host submission time.
- `workspace`: the median over `--places` placements of TVM's workspace page (the split-K partials').
- `levels`: each config as `--loads` module instances on 3 allocations, its fastest pair.
- `placement`: `--loads` file copies of each library, the j-th loaded after j other modules.
- `variants`: each config's CUDA compiled `--loads` times (is NVRTC deterministic here?), each distinct
  cubin timed as 2 modules.

Found on two H200s (2026-11-26; results/nvidia-h200/rpc_scaling_tries.txt, sessions 6 and 7; raw
lines of session 7 in finalist_probes.txt): the load, the data's and the workspace's placement, the
procedure, the compiler (one cubin in 12 compiles there) and where a module's code is loaded do not
explain it. One compiled kernel reads ~1.9% faster or slower in one process than in another, or than
a byte-identical copy of itself in the same process, and a process's history moves that, so
finalists within ~2% have no order that a timing reproduces.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil

import numpy as np


def _build_one(job: tuple) -> str:
    import schedules

    key, name, cfg, arch, directory = job
    M, N, K = map(int, key.split("x"))
    step = schedules.get_step(11)
    lib = schedules.build(step, M, N, K, arch=arch, config=step.Config.from_dict(cfg)).mod
    lib.export_library(os.path.join(directory, f"{key}_{name}.so"))
    return f"{key}_{name}"


def build(configs: dict, directory: str, history: bool = False) -> None:
    """DIR/<shape>_<i>.so for each config; with `history`, also DIR/<shape>_cand<j>.so for each of
    the shape's sweep candidates (step 11's sweep_candidates, 25 as a sweep's), in processes."""
    from concurrent import futures

    from steps.measure import harness

    arch = harness.gpu_arch() if os.environ.get("ARCH") is None else os.environ["ARCH"]
    os.makedirs(directory, exist_ok=True)
    jobs = [(key, str(i), c, arch, directory) for key, cfgs in configs.items() for i, c in enumerate(cfgs)]
    if history:
        jobs += [(key, f"cand{j}", c, arch, directory) for key in configs for j, c in enumerate(_candidates(key, arch))]
    # spawned: this process has initialised CUDA (gpu_arch), which a forked child cannot use
    with futures.ProcessPoolExecutor(min(16, os.cpu_count() or 1), mp_context=multiprocessing.get_context("spawn")) as pool:
        for name in pool.map(_build_one, jobs):
            print("built", name, flush=True)


def _candidates(key: str, arch: str) -> list[dict]:
    """What a sweep screens at this shape: step 11's 25 sweep candidates (an H200's 132 SMs)."""
    import schedules

    M, N, K = map(int, key.split("x"))
    return [c.as_dict() for c in schedules.get_step(11).module.sweep_candidates(M, N, K, arch, 132, 25)]


def _operands(dev, M: int, N: int, K: int, rng) -> list:
    """A, B (harness.random_operands, on `dev`) and an empty C: one allocation of a shape's arguments."""
    import tvm

    from steps.measure import harness

    a, b = harness.random_operands(M, N, K, rng)
    return [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), tvm.runtime.empty((M, N), "float32", dev)]


def _allocations(dev, key: str, count: int, rng) -> list:
    """`count` allocations of the arguments of shape `key` ("MxNxK"), each with inputs of its own."""
    M, N, K = map(int, key.split("x"))
    return [_operands(dev, M, N, K, rng) for _ in range(count)]


def _libraries(directory: str, key: str, count: int) -> list:
    """The `build` command's libraries of one shape, each loaded once."""
    import tvm

    return [tvm.runtime.load_module(os.path.join(directory, f"{key}_{i}.so")) for i in range(count)]


def _screen(directory: str, key: str, dev, args) -> int:
    """What a sweep's screening does to a process: each of the shape's candidates (`build --history`)
    loaded and timed once (harness.evaluator_timing, 10 samples) on `args`. How many there were."""
    import tvm

    from steps.measure import harness

    count = 0
    while os.path.exists(os.path.join(directory, f"{key}_cand{count}.so")):
        harness.evaluator_timing(tvm.runtime.load_module(os.path.join(directory, f"{key}_cand{count}.so")), dev, args, 10)
        count += 1
    return count


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


PROCEDURES = [("sweep", 3, 5, 10), ("one", 1, 10, 6)]  # name, allocations, samples a round, rounds


def _procedures(key: str, mods: list, dev, sets: list, stage: str) -> list[dict]:
    """`mods` timed in turns by each of PROCEDURES, twice over, on the first allocations of `sets`."""
    from steps.measure import harness

    rows = []
    for name, places, repeat, rounds in PROCEDURES * 2:
        t = harness.alternating_timings(mods, dev, sets[:places], repeat, rounds)
        best = min(x.median_ms for x in t)
        rel = [round(best / x.median_ms, 4) for x in t]
        rows.append({"stage": stage, "procedure": name, "rel": rel, "best_us": round(best * 1e3, 2)})
        print(key, f"{stage:9s} {name:5s}", " ".join(f"{v:.4f}" for v in rel), f"best {best * 1e3:.2f} us", flush=True)
    return rows


def time_procedures(configs: dict, directory: str) -> dict:
    """The same libraries timed in turns two ways, twice each, in one process: as a sweep's
    confirmation does (3 allocations taking turns by round, 10 rounds of 5 samples) and as
    `time` does (one allocation, 6 rounds of 10 samples)."""
    import tvm

    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    for key, cfgs in configs.items():
        mods, sets = _libraries(directory, key, len(cfgs)), _allocations(dev, key, 3, rng)
        out["shapes"][key] = _procedures(key, mods, dev, sets, "fresh")
    return out


def time_history(configs: dict, directory: str) -> dict:
    """Does a sweep's history move its ranking? Per shape, in one process: the finalists by both
    procedures (`fresh`); the host's submission time of each; then the shape's sweep candidates
    (`build --history`) loaded and timed once each, as a sweep's screening does
    (harness.evaluator_timing, 10 samples, on one allocation); then both procedures again
    (`screened`). Rankings that move only after the screening: the history decides."""
    import tvm

    import schedules
    from steps.measure import harness

    schedules.lowering.nvrtc.precompile_headers()  # as a sweep's workers: ~40 loads a shape
    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    for key, cfgs in configs.items():
        mods, sets = _libraries(directory, key, len(cfgs)), _allocations(dev, key, 3, rng)
        rows = _procedures(key, mods, dev, sets, "fresh")
        gpu = [harness.evaluator_timing(m, dev, sets[0], 10).median_ms for m in mods]
        host = [round(harness.host_submit_us(lambda m=m: m["main"](*sets[0]), dev.sync, g), 2) for m, g in zip(mods, gpu)]
        print(key, "host us", host, "gpu us", [round(g * 1e3, 2) for g in gpu], flush=True)
        print(key, f"screened {_screen(directory, key, dev, *_allocations(dev, key, 1, rng))} candidates", flush=True)
        rows += _procedures(key, mods, dev, sets, "screened")
        out["shapes"][key] = {"rows": rows, "host_us": host, "gpu_us": [round(g * 1e3, 2) for g in gpu]}
    return out


def _levels(key: str, mods: list, instances: int, dev, sets: list, stage: str) -> dict:
    """Each config's speed as its best (instance, allocation) pair: `mods` holds `instances`
    module instances of each config (config-major), each timed in turns on each of `sets`
    (4 rounds of 5 samples); a config's level is the fastest of its pairs' medians."""
    from steps.measure import harness

    per = [[] for _ in range(len(mods) // instances)]
    for args in sets:
        for j, t in enumerate(harness.alternating_timings(mods, dev, [args], 5, 4)):
            per[j // instances].append(t.median_ms)
    level = [min(p) for p in per]
    best = min(level)
    rel = [round(best / x, 4) for x in level]
    picks = {band: next(i for i, r in enumerate(rel) if r >= 1 - band) for band in (0.0, 0.005, 0.01)}
    print(key, f"{stage:9s} levels", " ".join(f"{v:.4f}" for v in rel), f"best {best * 1e3:.2f} us  picks (band: config)",
          picks, flush=True)
    return {"stage": stage, "rel": rel, "best_us": round(best * 1e3, 2), "picks": picks,
            "pairs_us": [[round(x * 1e3, 2) for x in p] for p in per]}


def time_levels(configs: dict, directory: str, instances: int) -> dict:
    """Does a config's best (module instance, allocation) pair rank the finalists the same way in
    every process, before and after a screening? `instances` copies of each library loaded as
    modules of their own, 3 allocations (_levels); then the shape's sweep candidates (`build
    --history`) timed once each, as a screening does; then the levels again."""
    import tempfile

    import tvm

    import schedules

    schedules.lowering.nvrtc.precompile_headers()
    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    scratch = tempfile.mkdtemp()
    for key, cfgs in configs.items():
        mods = []
        for i in range(len(cfgs)):
            for copy in range(instances):
                path = os.path.join(scratch, f"{key}_{i}_copy{copy}.so")
                shutil.copy(os.path.join(directory, f"{key}_{i}.so"), path)
                mods.append(tvm.runtime.load_module(path))
        sets = _allocations(dev, key, 3, rng)
        rows = [_levels(key, mods, instances, dev, sets, "fresh")]
        _screen(directory, key, dev, *_allocations(dev, key, 1, rng))
        rows.append(_levels(key, mods, instances, dev, sets, "screened"))
        out["shapes"][key] = rows
    return out


def time_placement(configs: dict, directory: str, instances: int) -> dict:
    """Does where a module's code lands decide its level? Per config: `instances` modules of its one
    library (file copies: the same cubin), the j-th loaded after j other modules (the shape's
    sweep candidates, `build --history`), so each one's code lands elsewhere; all timed in turns
    on 3 allocations: each instance's median per allocation (µs). Instances of one cubin that read
    apart on one allocation: the code's placement decides."""
    import tempfile

    import tvm

    import schedules
    from steps.measure import harness

    schedules.lowering.nvrtc.precompile_headers()
    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    scratch = tempfile.mkdtemp()
    kept = []
    for key, cfgs in configs.items():
        sets = _allocations(dev, key, 3, rng)
        rows = []
        spacer = 0
        for i in range(len(cfgs)):
            mods = []
            for j in range(instances):
                for _ in range(j):  # j other modules' code first
                    kept.append(tvm.runtime.load_module(os.path.join(directory, f"{key}_cand{spacer % 25}.so")))
                    kept[-1]["main"]
                    spacer += 1
                path = os.path.join(scratch, f"{key}_{i}_copy{j}.so")
                shutil.copy(os.path.join(directory, f"{key}_{i}.so"), path)
                mods.append(tvm.runtime.load_module(path))
                mods[-1]["main"]
            per = [[round(t.median_ms * 1e3, 2) for t in harness.alternating_timings(mods, dev, [args], 5, 4)]
                   for args in sets]
            by_instance = [[p[j] for p in per] for j in range(instances)]
            print(key, f"config {i}: instances (after 0, 1, ... other modules) x 3 allocations, us", flush=True)
            for j, us in enumerate(by_instance):
                print(f"    {j}  {us}", flush=True)
            rows.append({"config": i, "us": by_instance})
        out["shapes"][key] = rows
    return out


def time_variants(configs: dict, compiles: int) -> dict:
    """Is NVRTC deterministic here, and do its variants run at different speeds? Per config: the
    CUDA that building it hands TVM's compile callback (tvm_callback_cuda_compile; with a GPU
    present, the build compiles), compiled `compiles` times in this process; the distinct cubins
    and how often each came; then each variant built into 2 modules (the callback made to return
    that cubin) and all timed in turns on 3 allocations: each module's median per allocation (µs)."""
    import hashlib

    import tvm
    import tvm_ffi
    from tvm.support import nvcc

    import schedules
    from steps.measure import harness

    schedules.lowering.nvrtc.precompile_headers()  # the same bytes (tests/test_nvrtc.py), faster
    real = nvcc.tvm_callback_cuda_compile
    state = {"code": None, "force": None}

    def callback(code, *rest):
        state["code"] = code
        return state["force"] if state["force"] is not None else real(code, *rest)

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", callback, override=True)
    step = schedules.get_step(11)
    arch = harness.gpu_arch()
    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    for key, cfgs in configs.items():
        M, N, K = map(int, key.split("x"))
        sets = _allocations(dev, key, 3, rng)
        rows = []
        for i, c in enumerate(cfgs):
            def built():
                return schedules.build(step, M, N, K, arch=arch, config=step.Config.from_dict(c)).mod

            state["force"], state["code"] = None, None
            built()
            if state["code"] is None:
                raise SystemExit("the build never called the compile callback")
            cubins = [bytes(real(state["code"])) for _ in range(compiles)]
            digest = [hashlib.sha256(b).hexdigest()[:8] for b in cubins]
            counts = {h: digest.count(h) for h in dict.fromkeys(digest)}
            mods, labels = [], []
            for h in list(counts)[:3]:
                state["force"] = cubins[digest.index(h)]
                for copy in range(2):
                    mods.append(built())
                    labels.append(f"{h}/{copy}")
            state["force"] = None
            per = [[round(t.median_ms * 1e3, 2) for t in harness.alternating_timings(mods, dev, [args], 5, 4)]
                   for args in sets]
            by_module = {label: [p[j] for p in per] for j, label in enumerate(labels)}
            print(key, f"config {i}: {len(counts)} cubins in {compiles} compiles {counts}", flush=True)
            for label, us in by_module.items():
                print(f"    {label}  {us} us", flush=True)
            rows.append({"config": i, "counts": counts, "us": by_module})
        out["shapes"][key] = rows
    return out


def _workspace_api():
    """TVM's workspace pool, the one a built kernel's host code allocates split-K partials from
    (TVMBackendAllocWorkspace): (alloc(nbytes) -> pointer, free(pointer)) on CUDA device 0."""
    import ctypes
    import glob

    import tvm

    path = sorted(glob.glob(os.path.join(os.path.dirname(tvm.__file__), "**", "libtvm_runtime.so"), recursive=True))[0]
    lib = ctypes.CDLL(path)
    lib.TVMBackendAllocWorkspace.restype = ctypes.c_void_p
    lib.TVMBackendAllocWorkspace.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
    lib.TVMBackendFreeWorkspace.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return (lambda n: lib.TVMBackendAllocWorkspace(2, 0, n, 2, 32)), (lambda ptr: lib.TVMBackendFreeWorkspace(2, 0, ptr))


def time_workspace(configs: dict, directory: str, placements: int, rounds: int, history: bool) -> dict:
    """Does the workspace's placement move a split-K finalist's speed? The finalists timed in
    turns on one allocation of the inputs, `placements` times, each time after moving the
    workspace pool's page (this thread's: the one their partial sums go in) elsewhere: a spacer
    of 0-512 MiB kept, then one workspace allocation larger than any before, freed, so the pool
    frees its page and allocates a larger one. The ranking per placement and by the median over
    placements; with `history`, the shape's sweep candidates (`build --history`) are then timed
    once each as a screening does, and the placements measured again."""
    import statistics

    import tvm

    import schedules
    from steps.measure import harness

    schedules.lowering.nvrtc.precompile_headers()
    alloc, free = _workspace_api()
    dev = tvm.cuda(0)
    out = {"gpu": dev.device_name, "shapes": {}}
    rng = np.random.default_rng()
    page = [1 << 20]
    kept = []

    def measure(key, mods, args, stage):
        per_place = []
        for _ in range(placements):
            kept.append(tvm.runtime.empty((int(rng.integers(1, 512 << 18)),), "float32", dev))
            page[0] += int(rng.integers(1, 4096)) * 4096
            free(alloc(page[0]))
            t = harness.alternating_timings(mods, dev, [args], 10, rounds)
            per_place.append([x.median_ms for x in t])
        med = [statistics.median(p[i] for p in per_place) for i in range(len(mods))]
        rel = [round(min(med) / m, 4) for m in med]
        places_rel = [[round(min(p) / x, 4) for x in p] for p in per_place]
        print(key, f"{stage:9s} median over {placements} workspace placements", " ".join(f"{v:.4f}" for v in rel),
              f"best {min(med) * 1e3:.2f} us", flush=True)
        for p in places_rel:
            print("    ", " ".join(f"{v:.4f}" for v in p), flush=True)
        return {"stage": stage, "rel": rel, "best_us": round(min(med) * 1e3, 2), "placements": places_rel}

    for key, cfgs in configs.items():
        mods = _libraries(directory, key, len(cfgs))
        (args,) = _allocations(dev, key, 1, rng)
        rows = [measure(key, mods, args, "fresh")]
        if history:
            _screen(directory, key, dev, *_allocations(dev, key, 1, rng))
            rows.append(measure(key, mods, args, "screened"))
        out["shapes"][key] = rows
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["build", "time", "places", "procedures", "history", "workspace", "levels", "variants", "placement"])
    p.add_argument("configs", help="JSON: {'MxNxK': [config, ...]}")
    p.add_argument("directory")
    p.add_argument("--loads", type=int, default=3)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--places", type=int, default=8)
    p.add_argument("--history", action="store_true", help="build: the shapes' sweep candidates too")
    args = p.parse_args()
    configs = json.load(open(args.configs))
    if args.what == "build":
        build(configs, args.directory, args.history)
    elif args.what == "time":
        print("JSON " + json.dumps(time_loads(configs, args.directory, args.loads, args.rounds)))
    elif args.what == "places":
        print("JSON " + json.dumps(time_places(configs, args.directory, args.places, args.rounds)))
    elif args.what == "procedures":
        print("JSON " + json.dumps(time_procedures(configs, args.directory)))
    elif args.what == "history":
        print("JSON " + json.dumps(time_history(configs, args.directory)))
    elif args.what == "placement":
        print("JSON " + json.dumps(time_placement(configs, args.directory, args.loads)))
    elif args.what == "variants":
        print("JSON " + json.dumps(time_variants(configs, args.loads)))
    elif args.what == "levels":
        print("JSON " + json.dumps(time_levels(configs, args.directory, args.loads)))
    else:
        print("JSON " + json.dumps(time_workspace(configs, args.directory, args.places, args.rounds, args.history)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
