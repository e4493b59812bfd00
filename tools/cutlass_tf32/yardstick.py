"""CUTLASS's TF32 mma.sync GEMMs against step 13 and cuBLAS TF32, timed alike, in one run.

Issue 12 asks step 13 (TVM, tensorized onto mma.sync TF32) for 0.5x cuBLAS TF32, whose H100
kernels use Hopper's wgmma and TMA. This measures what NVIDIA's own hand-written mma.sync
kernels reach on the same GPU, so a shortfall can be split into "mma.sync" and "this schedule".

    CUTLASS_DIR=... bash tools/cutlass_tf32/build.sh          # no GPU needed
    python tools/cutlass_tf32/yardstick.py tools/cutlass_tf32/build [--sizes 2048,4096]
    ncu ... python tools/cutlass_tf32/yardstick.py DIR --once c256x128x32_3 --size 2048

Per size: every config is checked against float64 (output poisoned with NaN) and timed once;
then ``--rounds`` rounds alternate step 13's default, the ``--best`` fastest configs and cuBLAS
TF32 (order reversed every round, so none always follows the hottest kernel). Everything is
timed by the harness's kernel-time method: CUTLASS and cuBLAS as CUDA-graph replays
(``harness.time_graph``), step 13 by TVM's time_evaluator (``KernelRunner.time``). JSON lines go
to stdout, a summary of medians to stderr. Needs TVM, CuPy and a GPU of compute capability 9.0.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import site
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np


def load_library(build_dir: str):
    """The built library and its config names; libcudart.so.13 loaded first if not on the path."""
    try:
        ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        roots = ["/usr/local/cuda*/lib64", "/usr/local/cuda*/targets/*/lib"]
        roots += [os.path.join(p, "nvidia/**/lib") for p in site.getsitepackages()]
        found = sorted(f for r in roots for f in glob.glob(os.path.join(r, "libcudart.so.13*"), recursive=True))
        if not found:
            raise
        ctypes.CDLL(found[0], mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(build_dir, "cutlass_tf32.so"))
    with open(os.path.join(build_dir, "cutlass_tf32.configs")) as f:
        return lib, f.read().split()


class CutlassGemm:
    """C = A @ B with one CUTLASS config on `stream`; construction runs it once (and sets its
    shared-memory attribute), each call then only launches the kernel, so it can be captured."""

    def __init__(self, lib, name, a, b, c, stream):
        (M, K), (_, N) = a.shape, b.shape
        self.stream = stream
        self.launch = getattr(lib, "launch_" + name)
        self.launch.argtypes = [ctypes.c_void_p]
        prepare = getattr(lib, "prepare_" + name)
        prepare.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4
        rc = prepare(M, N, K, a.data.ptr, b.data.ptr, c.data.ptr, stream.ptr)
        if rc:
            raise RuntimeError(f"{name}: CUTLASS refused {M}x{N}x{K} (status {rc})")
        self.shared_bytes = getattr(lib, "smem_" + name)()

    def __call__(self):
        if self.launch(self.stream.ptr):
            raise RuntimeError("CUTLASS launch failed")


def gpu_state() -> str:
    q = "clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active"
    r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def measure(build_dir: str, sizes, rounds: int, repeat: int, best: int) -> dict:
    import cupy as cp

    import schedules
    from steps.measure import harness

    lib, configs = load_library(build_dir)
    runner = harness.KernelRunner(repeat=repeat, isolate=False)
    stream = cp.cuda.Stream(non_blocking=True)
    medians = {}
    for n in sizes:
        a, b = harness.random_operands(n, n, n, np.random.default_rng(n))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        da, db = cp.asarray(a), cp.asarray(b)
        step13 = schedules.build(13, n, n, n)
        emit({"phase": "check", "name": "step13", "size": n,
              "rel_err": runner.verify(step13["main"], runner._tensor(a), runner._tensor(b), ref)})
        cublas_c = cp.full((n, n), np.nan, cp.float32)
        cublas = harness.CublasGemm(da, db, cublas_c, tf32=True)
        cublas()
        cublas.stream.synchronize()
        emit({"phase": "check", "name": "cublas_tf32", "size": n,
              "rel_err": harness.relative_error(cp.asnumpy(cublas_c), ref)})
        gemms, first = {}, {}
        for name in configs:
            c = cp.full((n, n), np.nan, cp.float32)
            gemm = CutlassGemm(lib, name, da, db, c, stream)
            stream.synchronize()
            err = harness.relative_error(cp.asnumpy(c), ref)
            t = harness.time_graph(gemm, stream, repeat)
            gemms[name], first[name] = gemm, t.gflops(n, n, n) / 1e3
            emit({"phase": "check", "name": name, "size": n, "rel_err": err, "shared_bytes": gemm.shared_bytes,
                  "tflops": first[name], "host_us": t.host_us})
        names = ["step13"] + sorted(first, key=first.get, reverse=True)[:best]
        samples = defaultdict(list)
        for r in range(rounds):
            order = ["cublas_tf32"] + names if r % 2 == 0 else names[::-1] + ["cublas_tf32"]
            for name in order:
                if name == "cublas_tf32":
                    t = harness.time_graph(cublas, cublas.stream, repeat)
                elif name == "step13":
                    t = runner.time(step13, n, n, n)
                else:
                    t = harness.time_graph(gemms[name], stream, repeat)
                tflops = t.gflops(n, n, n) / 1e3
                samples[name].append(tflops)
                emit({"phase": "round", "round": r, "name": name, "size": n, "tflops": tflops,
                      "host_us": t.host_us, "gpu": gpu_state(), "t": time.time()})
        cublas.close()
        medians[n] = {name: statistics.median(v) for name, v in samples.items()}
    return medians


def once(build_dir: str, names, n: int) -> None:
    """One launch of step 13 and of each named config, for Nsight Compute to profile."""
    import cupy as cp
    import tvm

    import schedules
    from steps.measure import harness

    lib, _ = load_library(build_dir)
    a, b = harness.random_operands(n, n, n, np.random.default_rng(n))
    dev = tvm.cuda(0)
    x, y, z = (tvm.runtime.tensor(v, dev) for v in (a, b, np.zeros((n, n), np.float32)))
    schedules.build(13, n, n, n)["main"](x, y, z)
    dev.sync()
    stream = cp.cuda.Stream(non_blocking=True)
    da, db, dc = cp.asarray(a), cp.asarray(b), cp.zeros((n, n), cp.float32)
    for name in names:
        CutlassGemm(lib, name, da, db, dc, stream)
    stream.synchronize()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build_dir", help="build.sh's output directory")
    p.add_argument("--sizes", default="2048,4096", help="square sizes, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=30, help="timing samples per measurement")
    p.add_argument("--best", type=int, default=2, help="CUTLASS configs in the rounds")
    p.add_argument("--once", help="configs to launch once each (for ncu), with --size")
    p.add_argument("--size", type=int, default=2048)
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.build_dir, "cutlass_tf32.so")):
        print(f"yardstick.py: error: no cutlass_tf32.so in {args.build_dir} (run build.sh first)", file=sys.stderr)
        return 2
    if args.once:
        once(args.build_dir, args.once.split(","), args.size)
        return 0
    medians = measure(args.build_dir, [int(s) for s in args.sizes.split(",")], args.rounds, args.repeat, args.best)
    for n, by_name in medians.items():
        ref = by_name["cublas_tf32"]
        for name, v in sorted(by_name.items(), key=lambda x: -x[1]):
            print(f"{n}^3  {name:15s} {v:6.1f} TFLOP/s  {v / ref:5.3f}x cuBLAS TF32", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
