"""Build, verify and time one step at one size: the GPU side of every CLI.

Method (the same for TVM kernels and cuBLAS):
- correctness: fresh random inputs in [-1, 1) for every check, C poisoned with NaN before the
  kernel runs, ‖C − C_ref‖ / ‖C_ref‖ against a float64 reference; NaN never passes;
- timing: CUDA events (TVM's ``time_evaluator`` on CUDA, ``cupy.cuda.Event`` for cuBLAS), a
  warm-up first, then ``repeat`` samples, each the mean of ``number`` back-to-back launches
  with ``number`` chosen so a sample lasts about 1 ms; we report the median and min-max of
  the samples. Inputs stay resident (at 2048 the three matrices, 48 MB, fit the H100's 50 MB
  L2), as in the usual SGEMM benchmarks, for TVM and cuBLAS alike.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

import schedules

TOLERANCE = 1e-5
TARGET_SAMPLE_MS = 1.0


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    samples: int
    launches_per_sample: int

    def gflops(self, M: int, N: int, K: int) -> float:
        return flops(M, N, K) / (self.median_ms * 1e-3) / 1e9


@dataclass
class Measurement:
    """One step at one size: what the table prints and the JSON stores."""

    M: int
    N: int
    K: int
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    gflops: float | None = None
    rel_err: float | None = None
    error: str | None = None  # set when the kernel failed to build, load, run or verify

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: list[float], number: int) -> Timing:
    return Timing(statistics.median(samples_ms), min(samples_ms), max(samples_ms), len(samples_ms), number)


def launches_per_sample(one_launch_ms: float) -> int:
    return max(1, math.ceil(TARGET_SAMPLE_MS / max(one_launch_ms, 1e-4)))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN or inf anywhere gives inf, so it never passes."""
    out64 = out.astype(np.float64)
    if not np.all(np.isfinite(out64)):
        return math.inf
    return float(np.linalg.norm(out64 - ref) / np.linalg.norm(ref))


def random_operands(M: int, N: int, K: int, rng: np.random.Generator):
    a = rng.uniform(-1.0, 1.0, size=(M, K)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=(K, N)).astype(np.float32)
    return a, b


# --- GPU ------------------------------------------------------------------------------


def gpu_present() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # no CUDA runtime at all
        return False


def gpu_arch() -> str | None:
    """The attached GPU's sm_XY, or None without one."""
    if not gpu_present():
        return None
    import tvm

    return "sm_" + tvm.cuda(0).compute_version.replace(".", "")


class KernelRunner:
    """Verifies and times compiled steps on CUDA device 0.

    ``measure`` runs in a worker process (steps/worker.py) unless ``isolate=False``: a kernel
    that faults (e.g. a misaligned address) poisons its process's CUDA context, so it is
    reported for its step and size, the worker is replaced, and the next measurement runs in
    a clean context. ``check`` and ``time`` run here, in this process (tests, sweeps).
    """

    def __init__(self, repeat: int = 30, seed: int | None = None, isolate: bool = True,
                 timeout_s: float | None = None, worker_target=None):
        import tvm

        self.tvm = tvm
        self.dev = tvm.cuda(0)
        self.repeat = repeat
        self.rng = np.random.default_rng(seed)
        self.isolate = isolate
        self._worker = None
        self._worker_target = worker_target
        self._timeout_s = timeout_s

    @property
    def worker_starts(self) -> int:
        """Worker processes started so far: 1 for a run without failures, +1 after each."""
        return self._worker.starts if self._worker is not None else 0

    def close(self) -> None:
        """Stop the worker process, if one is running (it is a daemon: exit stops it too)."""
        if self._worker is not None:
            self._worker.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _tensor(self, array: np.ndarray):
        return self.tvm.runtime.tensor(array, self.dev)

    def check(self, func, M: int, N: int, K: int) -> float:
        """Relative error of one run on fresh random inputs, output pre-poisoned with NaN."""
        a, b = random_operands(M, N, K, self.rng)
        return self.verify(func, self._tensor(a), self._tensor(b), a.astype(np.float64) @ b.astype(np.float64))

    def verify(self, func, a, b, ref: np.ndarray) -> float:
        """Run func(a, b, C) on device inputs with C poisoned with NaN; relative error vs ref."""
        c = self._tensor(np.full(ref.shape, np.nan, dtype=np.float32))
        func(a, b, c)
        self.dev.sync()
        return relative_error(c.numpy(), ref)

    def time(self, lib, M: int, N: int, K: int) -> Timing:
        a, b = random_operands(M, N, K, self.rng)
        args = [self._tensor(a), self._tensor(b), self._tensor(np.zeros((M, N), np.float32))]
        probe = lib.mod.time_evaluator("main", self.dev, number=3, repeat=1)(*args)  # warm-up
        number = launches_per_sample(probe.mean * 1e3)
        result = lib.mod.time_evaluator("main", self.dev, number=number, repeat=self.repeat)(*args)
        return summarize([r * 1e3 for r in result.results], number)

    def measure(self, step, M: int, N: int, K: int, arch: str, config=None) -> Measurement:
        """Build, check and time one step at one size; failures become `error`, not exceptions.

        `step` is a step number or ``schedules.Step``, or a ``"module:function"`` builder
        returning a compiled module for (M, N, K, arch, config) (tests build faulty kernels so).
        A bad size, config or arch raises ConfigError, before any worker starts.
        """
        spec = _resolve(step, M, N, K, arch, config)
        if not self.isolate:
            return self._measure_here(spec, M, N, K, arch, config)
        from . import worker

        if self._worker is None:
            self._worker = worker.Worker(self._worker_target or worker.serve,
                                         timeout_s=self._timeout_s or worker.DEFAULT_TIMEOUT_S)
        seed = int(self.rng.integers(2**63 - 1))  # fresh inputs per measurement, reproducible
        request = ("measure", (spec, M, N, K, arch, config, self.repeat, seed))
        try:
            status, value = self._worker.call(request)
        except worker.WorkerError as exc:
            return Measurement(M, N, K, error=str(exc))
        if status == "config_error":
            raise schedules.ConfigError(value)
        m = Measurement(**value) if status == "ok" else Measurement(M, N, K, error=value)
        if not m.ok:
            self._worker.stop(kill=True)  # its CUDA context may be broken: the next one starts afresh
        return m

    def _measure_here(self, spec, M: int, N: int, K: int, arch: str, config=None) -> Measurement:
        m = Measurement(M, N, K)
        try:
            lib = _build(spec, M, N, K, arch, config)
            m.rel_err = self.check(lib["main"], M, N, K)
            timing = self.time(lib, M, N, K)
        except schedules.ConfigError:
            raise
        except Exception as exc:  # load/launch failures (e.g. misaligned address) from TVM/CUDA
            m.error = _one_line(exc)
            return m
        m.median_ms, m.min_ms, m.max_ms = timing.median_ms, timing.min_ms, timing.max_ms
        m.gflops = timing.gflops(M, N, K)
        if not m.rel_err <= TOLERANCE:
            m.error = f"wrong result: relative error {m.rel_err:.3g} > {TOLERANCE:g}"
        return m


def _resolve(step, M: int, N: int, K: int, arch: str, config):
    """What the worker is asked to build (a step number or a builder path), after the checks
    that need no GPU: unknown step or arch, bad sizes, an invalid config -> ConfigError."""
    if isinstance(step, str):
        if ":" not in step:
            raise schedules.ConfigError(f"a kernel builder is 'module:function', got {step!r}")
        return step
    s = schedules.get_step(step)
    schedules.target(arch)
    cfg = s.default_config(M, N, K) if config is None else config
    if type(cfg) is s.Config:  # another class: Step.schedule says so, from the worker
        cfg.validate(M, N, K)
    else:
        schedules.config.check_sizes(M, N, K)
    return s.number


def _build(spec, M: int, N: int, K: int, arch: str, config):
    if isinstance(spec, str):
        import importlib

        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)(M, N, K, arch, config)
    return schedules.build(spec, M, N, K, arch=arch, config=config)


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # TVM puts the actual reason last, after the C++ traceback.
    text = lines[-1] if lines else type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


# --- references: numpy on the CPU (step 1's prior) and cuBLAS ------------------------------


def time_numpy(M: int, N: int, K: int, repeat: int = 5, seed: int | None = None) -> Timing:
    """fp32 matmul with numpy's BLAS on the host CPU, wall clock, median of `repeat`."""
    a, b = random_operands(M, N, K, np.random.default_rng(seed))
    a @ b  # warm-up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        samples.append((time.perf_counter() - t0) * 1e3)
    return summarize(samples, 1)


def cublas_available() -> bool:
    try:
        import cupy  # noqa: F401

        return gpu_present()
    except Exception:
        return False


def time_cublas(M: int, N: int, K: int, repeat: int = 30, seed: int | None = None,
                tf32: bool = False) -> tuple[Timing, float]:
    """cuBLAS SGEMM through CuPy with TF32 off (strict fp32): (timing, relative error).

    Timed like the TVM kernels: CUDA events around `number` back-to-back launches per sample.
    """
    import os

    if (os.environ.get("CUPY_TF32", "0") != "0") != tf32:
        raise RuntimeError("CUPY_TF32 is set: cuBLAS would use TF32, not strict fp32" if not tf32
                           else "a TF32 measurement needs CUPY_TF32=1 set before CuPy is imported")
    import cupy as cp

    a, b = random_operands(M, N, K, np.random.default_rng(seed))
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.full((M, N), cp.nan, dtype=cp.float32)
    cp.matmul(da, db, out=dc)
    cp.cuda.Device().synchronize()
    err = relative_error(cp.asnumpy(dc), a.astype(np.float64) @ b.astype(np.float64))

    def sample(number: int) -> float:
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(number):
            cp.matmul(da, db, out=dc)
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / number

    number = launches_per_sample(sample(3))
    samples = [sample(number) for _ in range(repeat)]
    return summarize(samples, number), err


# --- what the results are stamped with --------------------------------------------------


def environment() -> dict:
    """GPU, clocks, driver, CUDA and TVM versions, and the date: saved with every result."""
    import datetime
    import platform

    import tvm

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tvm_version": tvm.__version__,
        "host": platform.node(),
        "numpy_version": np.__version__,
    }
    if gpu_present():
        dev = tvm.cuda(0)
        env.update(
            gpu=dev.device_name,
            compute_capability=dev.compute_version,
            sm_count=dev.multi_processor_count,
            max_shared_memory_per_block=dev.max_shared_memory_per_block,
        )
    env.update(_nvidia_smi())
    env["cuda_runtime"] = _cuda_runtime_version()
    try:
        import cupy

        env["cupy_version"] = cupy.__version__
    except Exception:
        pass
    return env


def _nvidia_smi() -> dict:
    import subprocess

    fields = ["driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.limit", "temperature.gpu"]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    names = ["driver", "sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "max_mem_clock_mhz",
             "power_limit_w", "temperature_c"]
    return dict(zip(names, values))


def _cuda_runtime_version() -> str | None:
    try:
        from cuda.bindings import runtime

        err, version = runtime.cudaRuntimeGetVersion()
        return f"{version // 1000}.{(version % 1000) // 10}"
    except Exception:
        return None
