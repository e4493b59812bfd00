"""How fast can a host build step-11 candidates? The builds of an RPC sweep (issue 33) on the
processes of one host, under two ways of compiling with NVRTC:

  plain  TVM's compile as it is: every kernel parses libcu++'s headers (~1 s of ~1.7 s);
  pch    schedules/lowering/nvrtc.py's precompile_headers (what a sweep's build processes use now).

    python tools/build_probe.py [--procs 32 16] [--candidates 192] [--out logs/build_probe.json]

On the H100's host (2026-11-25, 32 processes, 256 candidates): plain 9.8 candidates/s, pch 47.9/s,
every cubin byte for byte plain's (results/nvidia-h100-80gb-hbm3/rpc_scaling_tries.txt, try 3).

For each variant and process count: a pool of spawned processes, each warmed with one build (its
imports, its first NVRTC compile, the precompiled header), then `--candidates` candidates of the
sweep's shape set (bench/shapes.toml, 25 per shape, every n-th) built and exported as
rpc.build_job does, timed wall clock: candidates per second. Each build's cubin is hashed as TVM's
compile callback returns it, so plain and pch can be compared byte for byte on this NVRTC.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_hashes: list[str] = []


def _init(variant: str, scratch: str) -> None:
    import tvm_ffi

    import schedules

    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = None
    if variant == "pch":
        schedules.lowering.nvrtc.precompile_headers()
    import tvm

    compile_ = tvm.get_global_func("tvm_callback_cuda_compile")

    def hashed(code):
        out = compile_(code)
        _hashes.append(hashlib.sha1(bytes(out)).hexdigest()[:16])
        return out

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", hashed, override=True)


def _build(step_number, size, config, arch, directory):
    from steps.measure import rpc

    started = time.monotonic()
    res = rpc.build_job("steps.measure.rpc:build_cuda", step_number, size, config, arch, directory)
    if "path" in res:
        os.remove(res["path"])
    return {"key": json.dumps([size, config], sort_keys=True), "error": res.get("error"),
            "cubin": _hashes[-1] if _hashes else None, "s": time.monotonic() - started, "pid": os.getpid()}


def candidates(count: int, per_shape: int = 25) -> list[tuple]:
    import schedules
    from steps.commands import sweep

    step = schedules.get_step(11)
    jobs = []
    for size in sweep.read_shape_file(Path("bench/shapes.toml")):
        jobs += [(11, size, c.as_dict(), "sm_90") for c in step.module.sweep_candidates(*size, "sm_90", 132, per_shape)]
    stride = max(1, len(jobs) // count)
    return jobs[::stride][:count]


def measure(variant: str, procs: int, jobs: list[tuple]) -> dict:
    scratch = tempfile.mkdtemp(prefix=f"build-probe-{variant}-")
    out_dir = tempfile.mkdtemp(prefix="build-probe-out-")
    ctx = multiprocessing.get_context("spawn")
    started = time.monotonic()
    try:
        with futures.ProcessPoolExecutor(procs, mp_context=ctx, initializer=_init,
                                         initargs=(variant, scratch)) as pool:
            # one warm-up build per process (a process may take two: close enough)
            warm = list(pool.map(_build, *zip(*[(*jobs[i % len(jobs)], out_dir) for i in range(procs)])))
            warm_s = time.monotonic() - started
            t0 = time.monotonic()
            rows = list(pool.map(_build, *zip(*[(*j, out_dir) for j in jobs])))
            wall = time.monotonic() - t0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    each = sorted(r["s"] for r in rows)
    return {"variant": variant, "procs": procs, "candidates": len(rows), "wall_s": round(wall, 2),
            "per_s": round(len(rows) / wall, 2), "median_build_s": round(each[len(each) // 2], 3),
            "warm_s": round(warm_s, 1), "first_build_s": round(max(r["s"] for r in warm), 2),
            "failed": sum(bool(r["error"]) for r in rows), "cubins": {r["key"]: r["cubin"] for r in rows}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/build_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, nargs="+", default=[os.cpu_count() or 1])
    p.add_argument("--variants", nargs="+", choices=["plain", "pch"], default=["plain", "pch"])
    p.add_argument("--candidates", type=int, default=192)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    jobs = candidates(args.candidates)
    runs = []
    for procs in args.procs:
        for variant in args.variants:
            r = measure(variant, procs, jobs)
            runs.append(r)
            print(f"{variant:6s} {procs:3d} procs: {r['per_s']:6.2f} candidates/s, median build {r['median_build_s']:.2f} s,"
                  f" warm-up {r['warm_s']:.1f} s (first build {r['first_build_s']:.1f} s), {r['failed']} failed", flush=True)
    plain = next((r for r in runs if r["variant"] == "plain"), None)
    for r in runs:
        if plain is not None and r is not plain:
            if all(v is None for v in r["cubins"].values()):
                print(f"{r['variant']}: no cubins to compare (no GPU here: TVM left the CUDA as source)")
                continue
            same = sum(v is not None and plain["cubins"].get(k) == v for k, v in r["cubins"].items())
            print(f"{r['variant']} ({r['procs']} procs): {same}/{len(r['cubins'])} cubins byte for byte plain's")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
