"""python -m steps.crosscheck: the harness's times against Nsight Compute's kernel times.

    python -m steps.crosscheck                          # final step, cuBLAS fp32, cuBLAS TF32 at 512 1024 2048
    python -m steps.crosscheck --steps 10 --sizes 2048 --save

The harness times back-to-back launches with CUDA events and guards against a host that
cannot keep up (steps/measure/harness.py). This is the independent check that those numbers are kernel
time: for each implementation and size it measures the harness's median, then runs the same
call under Nsight Compute,

    ncu --metrics gpu__time_duration.sum --csv --print-units base
        --clock-control none --cache-control none --profile-from-start off ...

(clocks and L2 left as the harness finds them), profiles ``--calls`` calls after a warm-up,
sums the kernels of each call (cuBLAS's split-K launches a GEMM and a reduction kernel per
call) and takes the median per call. A ratio harness / ncu within 5% passes. ``--save`` writes
``results/<gpu>/crosscheck.json``, which docs/measured.md summarises.

Needs a GPU and ``ncu`` (on PATH, or in the CUDA toolkit's usual places).
"""

from __future__ import annotations

import argparse
import csv
import glob
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import schedules
from schedules import ConfigError

from .. import results
from ..measure import harness, references
from ..report.pipes import quiet_broken_pipe
from ..results.crosscheck import JSON_NAME
from . import options

PROG = "python -m steps.crosscheck"
METRIC = "gpu__time_duration.sum"
AGREEMENT = 0.05  # |harness / ncu - 1| within this passes
DEFAULT_CALLS = 20
WARMUP_CALLS = 10
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu")


class NcuError(RuntimeError):
    """ncu ran but its report cannot be used (one line)."""


# --- parsing ncu's CSV --------------------------------------------------------------------------


def parse_kernels(text: str) -> list[tuple[str, float]]:
    """ncu's --csv report -> [(kernel name, gpu__time_duration in ns)], in launch order.

    The report may follow other output (ncu's ==PROF== lines, the program's own); it starts at
    the header row whose first field is "ID". Values may carry thousands separators."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuError("no CSV report in ncu's output (did the profiled program launch a kernel?)")
    kernels = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != METRIC:
            continue
        unit = (row.get("Metric Unit") or "").strip()
        scale = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit)
        if scale is None:
            raise NcuError(f"unexpected unit {unit!r} for {METRIC}")
        value = float(row["Metric Value"].replace(",", "")) * scale
        kernels[int(row["ID"])] = (row["Kernel Name"], value)
    if not kernels:
        raise NcuError(f"ncu's report has no {METRIC} rows")
    return [kernels[i] for i in sorted(kernels)]


def per_call(kernels: list[tuple[str, float]], calls: int) -> tuple[list[float], list[str]]:
    """Group the profiled kernels into `calls` calls of equal length and sum each group.

    Returns (ns per call, the kernel names of one call). Every call must launch the same
    kernels in the same order (checked), so a kernel that belongs to no call is an error."""
    if calls < 1 or len(kernels) % calls:
        raise NcuError(f"{len(kernels)} kernels profiled is not a whole number of kernels per call for {calls} calls")
    k = len(kernels) // calls
    names = [name for name, _ in kernels[:k]]
    sums = []
    for c in range(calls):
        group = kernels[c * k:(c + 1) * k]
        if [name for name, _ in group] != names:
            raise NcuError(f"call {c} launched {[n for n, _ in group]}, call 0 launched {names}")
        sums.append(sum(ns for _, ns in group))
    return sums, names


# --- the GPU side -------------------------------------------------------------------------------


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_PLACES:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


@dataclass
class Check:
    """One implementation at one size: the harness's median against ncu's per-call median."""

    impl: str
    label: str
    M: int
    N: int
    K: int
    harness_ms: float | None = None
    harness_host_bound: bool | None = None
    ncu_ms: float | None = None
    ncu_min_ms: float | None = None
    ncu_max_ms: float | None = None
    kernels_per_call: int | None = None
    kernel_names: list | None = None
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return self.harness_ms / self.ncu_ms if self.harness_ms and self.ncu_ms else None

    @property
    def agrees(self) -> bool:
        return self.ratio is not None and abs(self.ratio - 1.0) <= AGREEMENT

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "agrees": self.agrees}


def implementations(steps) -> list[tuple[str, str]]:
    """(impl key, label): the requested steps, then cuBLAS fp32 and TF32."""
    impls = [(f"step{s.number}", f"step {s.number} ({s.name})") for s in steps]
    return impls + [(r.key, r.label) for r in (references.CUBLAS, references.CUBLAS_TF32)]


def harness_time(impl: str, size, runner, arch: str, gpu: str, repeat: int) -> harness.Measurement:
    if impl.startswith("step"):
        return runner.measure(int(impl[4:]), *size, arch)
    return references.measure(references.BY_KEY[impl], size, runner, arch, gpu, repeat)


def ncu_time(ncu: str, impl: str, size, arch: str, calls: int) -> tuple[list[float], list[str]]:
    """Run one implementation's calls under ncu in a child process; (ns per call, kernel names)."""
    with tempfile.TemporaryDirectory(prefix="crosscheck-") as tmp:
        report = Path(tmp) / "ncu.csv"
        cmd = [ncu, "--metrics", METRIC, "--csv", "--print-units", "base", "--clock-control", "none",
               "--cache-control", "none", "--profile-from-start", "off", "--log-file", str(report),
               sys.executable, "-m", "steps.crosscheck", "--_child", impl, "--arch", arch,
               "--calls", str(calls), "--shape", *map(str, size)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        text = report.read_text() if report.exists() else ""
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or text.strip() or proc.stdout.strip()).splitlines()
            raise NcuError(f"ncu exited {proc.returncode}: {tail[-1] if tail else '(no output)'}")
        return per_call(parse_kernels(text), calls)


def child(impl: str, size, arch: str, calls: int) -> int:
    """In the profiled process: warm up outside the profiled range, then `calls` calls in it."""
    from cuda.bindings import runtime as cudart

    M, N, K = size
    a, b = harness.random_operands(M, N, K, np.random.default_rng(0))
    if impl.startswith("step"):
        import tvm

        lib = schedules.build(int(impl[4:]), M, N, K, arch=arch)
        dev = tvm.cuda(0)
        args = [tvm.runtime.tensor(x, dev) for x in (a, b, np.zeros((M, N), np.float32))]
        func = lib["main"]

        def call():
            func(*args)
        sync = dev.sync
    else:
        import cupy as cp

        gemm = harness.CublasGemm(cp.asarray(a), cp.asarray(b), cp.zeros((M, N), cp.float32),
                                  tf32=references.BY_KEY[impl].tf32)
        call, sync = gemm, cp.cuda.Device().synchronize
    for _ in range(WARMUP_CALLS):
        call()
    sync()
    cudart.cudaProfilerStart()
    for _ in range(calls):
        call()
    sync()
    cudart.cudaProfilerStop()
    return 0


def run(steps, shapes, arch: str, calls: int, repeat: int, ncu: str, progress=print) -> list[Check]:
    env_gpu = harness.environment().get("gpu")
    checks = []
    runner = harness.KernelRunner(repeat=repeat)
    try:
        for impl, label in implementations(steps):
            for size in shapes:
                c = Check(impl, label, *size)
                m = harness_time(impl, size, runner, arch, env_gpu, repeat)
                if m.ok:
                    c.harness_ms, c.harness_host_bound = m.median_ms, m.host_bound
                else:
                    c.error = f"harness: {m.error}"
                if c.error is None:
                    try:
                        ns, names = ncu_time(ncu, impl, size, arch, calls)
                        c.ncu_ms, c.ncu_min_ms, c.ncu_max_ms = (statistics.median(ns) / 1e6, min(ns) / 1e6,
                                                                max(ns) / 1e6)
                        c.kernels_per_call, c.kernel_names = len(names), names
                    except (NcuError, OSError, subprocess.TimeoutExpired) as exc:
                        c.error = f"ncu: {harness._one_line(exc)}"
                checks.append(c)
                progress(format_check(c))
    finally:
        runner.close()
    return checks


def format_check(c: Check) -> str:
    head = f"{c.label:<34} {options._size((c.M, c.N, c.K)):>16}"
    if c.error:
        return f"{head}  FAILED: {c.error}"
    verdict = "ok" if c.agrees else f"DIFFERS by more than {100 * AGREEMENT:.0f}%"
    bound = f" {options.HOST_MARK}" if c.harness_host_bound else ""
    kernels = c.kernels_per_call if c.kernels_per_call is not None else "-"
    return (f"{head}  {c.harness_ms * 1e3:>10.2f}{bound:2}  {c.ncu_ms * 1e3:>10.2f}  {kernels:>7}  "
            f"{c.ratio:>6.3f}  {verdict}")


def header() -> str:
    return (f"{'implementation':<34} {'size':>16}  {'harness us':>10}    {'ncu us':>10}  {'kernels':>7}  "
            f"{'ratio':>6}  (harness / ncu per call, median)")


def document(checks: list[Check], env: dict, calls: int, ncu: str) -> dict:
    return {
        "kind": "crosscheck",
        "environment": env,
        "method": {
            "ncu": f"{Path(ncu).name} --metrics {METRIC} --csv --print-units base --clock-control none "
                   "--cache-control none --profile-from-start off",
            "calls": calls, "warmup_calls": WARMUP_CALLS,
            "per_call": "sum of the kernels of one call; median over calls",
            "harness": "median of CUDA-event samples over back-to-back launches (steps/measure/harness.py)",
            "agreement": AGREEMENT,
        },
        "checks": [c.as_dict() for c in checks],
    }


@quiet_broken_pipe
def main(argv=None) -> int:
    p = options.new_parser(PROG, __doc__.strip().splitlines()[0])
    options.add_problem_options(p)
    options.add_repeat_option(p)
    options.add_arch_option(p)
    p.add_argument("--save", action="store_true", help="write results/<gpu>/crosscheck.json")
    p.add_argument("--results-dir", type=Path, default=results.RESULTS_DIR, help=argparse.SUPPRESS)
    p.add_argument("--steps", default=None, metavar="RANGE",
                   help="which steps to check (default: the final step), as python -m steps --steps")
    p.add_argument("--calls", type=options._positive, default=DEFAULT_CALLS,
                   help=f"calls profiled under ncu per implementation and size (default {DEFAULT_CALLS})")
    p.add_argument("--_child", dest="child", default=None, help=argparse.SUPPRESS)
    try:
        args = p.parse_args(argv)
        shapes = options.requested_shapes(args)
        if args.child is not None:
            return child(args.child, shapes[0], args.arch or "sm_90", args.calls)
        from .ladder import parse_steps

        steps = parse_steps(args.steps) if args.steps else [schedules.STEPS[-1]]
        if not harness.gpu_present():
            raise options.UsageError("the cross-check profiles kernels on a CUDA GPU and none was found")
        if not harness.cublas_available():
            raise options.UsageError("CuPy is not installed: pip install -e \".[cublas]\"")
        ncu = find_ncu()
        if ncu is None:
            raise options.UsageError("Nsight Compute (ncu) not found on PATH or under /usr/local/cuda, /opt/nvidia")
        arch = options.pick_arch(PROG, args.arch, timing=True)
    except (options.UsageError, ConfigError, argparse.ArgumentTypeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE
    env = harness.environment()
    print(f"{env.get('gpu')} (SM clock {env.get('sm_clock_mhz')} MHz, driver {env.get('driver')}); "
          f"{os.path.basename(ncu)}: {args.calls} calls per implementation and size")
    print(header())
    checks = run(steps, shapes, arch, args.calls, args.repeat, ncu, progress=lambda line: print(line, flush=True))
    bad = [c for c in checks if c.error or not c.agrees]
    print(f"{len(checks) - len(bad)} of {len(checks)} within {100 * AGREEMENT:.0f}% of ncu")
    if args.save:
        env = harness.environment()
        path = Path(args.results_dir) / results.gpu_slug(env["gpu"]) / JSON_NAME
        results.write_json_atomic(path, document(checks, env, args.calls, ncu))
        print(f"saved {path}")
    return options.EXIT_FAILED if bad else 0
