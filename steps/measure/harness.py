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

import contextlib
import math
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

import schedules

from . import dtypes, worker

TOLERANCE = 1e-5
# TF32 rounds the inputs to 10-bit mantissas (unit roundoff 2^-11): cuBLAS TF32 measured 2.6e-4
# against float64 at 512-2048 on the H100. A labelled bound for reduced-precision rows only;
# never applied to an fp32 result.
TF32_TOLERANCE = 5e-3
TARGET_SAMPLE_MS = 1.0
# Before any samples, the implementation runs back to back for this long: an idle H100 sits at
# 345 MHz and needs tens of ms under load to reach its boost clock (measured: the first 30 ms of
# cuBLAS samples after idle read 16.2 us at 512^3, the next ones 12.7 us).
WARMUP_MS = 50.0
# A timing is host-bound when submitting one launch takes at least this fraction of the GPU
# time per launch (its fastest sample: Timing.host_bound): the GPU may then wait on the host
# between launches, and events around back-to-back launches time the host. 70% leaves margin
# for jitter in the host's submissions.
HOST_BOUND_FRACTION = 0.7
HOST_PROBE_ROUNDS = 5


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def is_host_bound(host_us: float | None, gpu_ms: float | None) -> bool | None:
    """Whether a launch's host submission time (µs) is at least HOST_BOUND_FRACTION of its GPU
    time (ms); None when either is unknown (e.g. results saved before the guard existed)."""
    if host_us is None or gpu_ms is None:
        return None
    return host_us >= HOST_BOUND_FRACTION * gpu_ms * 1e3


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    samples: int
    launches_per_sample: int
    host_us: float | None = None  # host time to submit one launch (host_submit_us)
    rounds_ms: list[float] | None = None  # alternating_timings: each round's median

    def gflops(self, M: int, N: int, K: int) -> float:
        return flops(M, N, K) / (self.median_ms * 1e-3) / 1e9

    @property
    def host_bound(self) -> bool | None:
        # Against the fastest sample, not the median: where the host cannot keep up, the GPU
        # waits between launches and the median grows with the host's time, hiding the verdict
        # (step 19 at 512^3 in a busy process, 2026-11-25: 20.9 us of host per launch, a 40 us
        # median, a 20.8 us fastest sample). The fastest sample is the nearest to the kernel's own.
        return is_host_bound(self.host_us, self.min_ms)


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
    host_us: float | None = None  # host time to submit one launch, µs
    host_bound: bool | None = None  # host_us >= HOST_BOUND_FRACTION x the GPU time per launch

    @property
    def ok(self) -> bool:
        return self.error is None

    def set_timing(self, timing: Timing) -> None:
        self.median_ms, self.min_ms, self.max_ms = timing.median_ms, timing.min_ms, timing.max_ms
        self.gflops = timing.gflops(self.M, self.N, self.K)
        self.host_us, self.host_bound = timing.host_us, timing.host_bound

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: list[float], number: int) -> Timing:
    return Timing(statistics.median(samples_ms), min(samples_ms), max(samples_ms), len(samples_ms), number)


def launches_per_sample(one_launch_ms: float) -> int:
    return max(1, math.ceil(TARGET_SAMPLE_MS / max(one_launch_ms, 1e-4)))


def host_submit_us(submit, sync, gpu_ms: float, rounds: int = HOST_PROBE_ROUNDS, clock=time.perf_counter) -> float:
    """Median host time, in µs, to submit one launch with ``submit()``.

    Each round waits for the GPU (``sync()``), then times a run of submissions without waiting:
    launches are asynchronous, so this is what the host spends per launch, whatever the GPU
    does meanwhile. The run is long enough to average the timer out (5-50 launches, about 5 ms
    of GPU work) and far below the depth of CUDA's launch queue, which would block it."""
    launches = min(50, max(5, math.ceil(5.0 / max(gpu_ms, 1e-4))))
    samples = []
    for _ in range(rounds):
        sync()
        start = clock()
        for _ in range(launches):
            submit()
        samples.append((clock() - start) / launches * 1e6)
    sync()
    return statistics.median(samples)


def relative_error(out: np.ndarray, ref: np.ndarray, dtype: str = "fp32") -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN or inf anywhere gives inf, so it never passes. `out`
    in the host storage of `dtype` (a bf16 output as its uint16 bit patterns: dtypes.py)."""
    out64 = dtypes.to_float64(out, dtype)
    if not np.all(np.isfinite(out64)):
        return math.inf
    return float(np.linalg.norm(out64 - ref) / np.linalg.norm(ref))


def random_operands(M: int, N: int, K: int, rng: np.random.Generator, dtype: str = "fp32"):
    """A [M, K], B [K, N] uniform in [-1, 1), in the host storage of `dtype` (dtypes.py)."""
    return dtypes.random_operands(M, N, K, rng, dtype)


def shared_seed(seed: int | None, size) -> int:
    """The inputs' seed of every row at one size of a 16-bit run (each step, its prior, cuBLAS and
    dlight in the dtype): drawn from `seed` and the size (--seed), or fresh; so their errors are
    on the same inputs, side by side."""
    rng = np.random.default_rng(None if seed is None else [seed, *size])
    return int(rng.integers(2**63 - 1))


def verify_on(dev, func, a, b, ref: np.ndarray, nan=None, dtype: str = "fp32") -> float:
    """Run func(a, b, C) on `dev` (local, or a server's over RPC) with C poisoned with NaN;
    the relative error of C against the float64 `ref`. `nan`: a NaN-filled tensor already on
    `dev` to copy C from there (over RPC, the poison then never crosses the network). `dtype`:
    C's (fp32, or fp16 / bf16 for a 16-bit kernel, whose C is in its inputs' dtype)."""
    import tvm

    if nan is None:
        c = dtypes.to_device(tvm, dtypes.nan_filled(ref.shape, dtype), dtype, dev)
    else:
        c = tvm.runtime.empty(ref.shape, dtypes.tvm_dtype(dtype), dev)
        nan.copyto(c)
    func(a, b, c)
    dev.sync()
    return relative_error(dtypes.from_device(c, dtype), ref, dtype)


def evaluator_timing(mod, dev, args, repeat: int) -> Timing:
    """time_evaluator's samples of ``mod``'s main on `dev` (local, or a server's over RPC, where
    the loop runs on the server): a warm-up of back-to-back launches for WARMUP_MS (clocks up,
    caches warm), a probe, then `repeat` samples of about TARGET_SAMPLE_MS each."""
    timer, number = warmed_timer(mod, dev, args, repeat)
    return summarize([r * 1e3 for r in timer(*args).results], number)


def warmed_timer(mod, dev, args, repeat: int):
    """``mod``'s main warmed up (back-to-back launches for WARMUP_MS) and probed (3 launches):
    (a time_evaluator of `repeat` samples of about TARGET_SAMPLE_MS each, its launches per sample)."""
    mod.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=int(WARMUP_MS))(*args)
    number = launches_per_sample(mod.time_evaluator("main", dev, number=3, repeat=1)(*args).mean * 1e3)
    return mod.time_evaluator("main", dev, number=number, repeat=repeat), number


def over_rounds(medians: list[float], samples: list[float], number: int) -> Timing:
    """A Timing over rounds: median_ms the median of the rounds' medians (a round read slow by a
    clock dip moves it little), rounds_ms those medians, min, max and count over all samples."""
    return Timing(statistics.median(medians), min(samples), max(samples), len(samples), number, rounds_ms=medians)


PLACEMENTS = 3  # allocations of a size's operands a confirmation's rounds take turns on


def alternating_timings(mods: list, dev, arg_sets: list, repeat: int, rounds: int) -> list[Timing]:
    """Each of ``mods`` timed again and again, in turns: a warm-up as evaluator_timing's, each
    one's launches per sample from a probe, then `rounds` rounds of `repeat` samples of each
    (A B C, then C B A, so that a drift of the clocks falls on all alike), round r on the
    arguments ``arg_sets[r % len(arg_sets)]``: the same inputs drawn again at other addresses.
    Each one's Timing is over its rounds: median_ms the median of its rounds' medians (a round
    read slow by a clock dip moves it little), rounds_ms those medians, min_ms, max_ms and
    `samples` over all its samples.

    Why a sweep has it: one pass of 10 samples per candidate read single candidates a few
    percent slow or fast in one run and not the next (issue 33: the heaviest 1% of two runs'
    differences were over 7%), enough to pick another winner among candidates within a few
    percent of each other. Timed in turns, in one place, the finalists see the same clocks; on
    several allocations, no one placement of the data in memory decides (on an H200, the same
    finalists of 1x4096x4096 ranked within 0.3% on three allocations and 1% apart on a fourth)."""
    if not mods:
        return []
    first = arg_sets[0]
    mods[0].time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=int(WARMUP_MS))(*first)
    numbers = [launches_per_sample(mod.time_evaluator("main", dev, number=3, repeat=1)(*first).mean * 1e3)
               for mod in mods]
    timers = [mod.time_evaluator("main", dev, number=n, repeat=repeat) for mod, n in zip(mods, numbers)]
    medians: list[list[float]] = [[] for _ in mods]
    samples: list[list[float]] = [[] for _ in mods]
    for r in range(rounds):
        args = arg_sets[r % len(arg_sets)]
        order = range(len(mods)) if r % 2 == 0 else range(len(mods) - 1, -1, -1)
        for i in order:
            ms = [s * 1e3 for s in timers[i](*args).results]
            medians[i].append(statistics.median(ms))
            samples[i] += ms
    return [over_rounds(m, s, n) for m, s, n in zip(medians, samples, numbers)]


def confirmed(result: dict, timing: Timing) -> dict:
    """A sweep's result row (M, N, K, config, gflops) timed again by alternating_timings: its
    config, the new median and GFLOPS, each round's median, and the first timing's GFLOPS."""
    M, N, K = result["M"], result["N"], result["K"]
    return {"M": M, "N": N, "K": K, "config": result["config"], "median_ms": timing.median_ms,
            "gflops": timing.gflops(M, N, K), "rounds_ms": [round(ms, 6) for ms in timing.rounds_ms or []],
            "first_gflops": result.get("gflops")}


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

    ``measure`` runs in a worker process (steps/measure/worker.py, serving ``serve`` below) unless ``isolate=False``: a kernel
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

    def _tensor(self, array: np.ndarray, dtype: str = "fp32"):
        """A host array (dtypes.py's storage of `dtype`: bf16 as uint16 bit patterns) on the GPU."""
        if dtype == "fp32":
            return self.tvm.runtime.tensor(array, self.dev)
        return dtypes.to_device(self.tvm, array, dtype, self.dev)

    def check(self, func, M: int, N: int, K: int, dtype: str = "fp32") -> float:
        """Relative error of one run on fresh random inputs, output pre-poisoned with NaN; the
        reference is the float64 product of the inputs as the kernel reads them (in `dtype`)."""
        a, b = random_operands(M, N, K, self.rng, dtype)
        return self.verify(func, self._tensor(a, dtype), self._tensor(b, dtype), dtypes.reference(a, b, dtype), dtype)

    def verify(self, func, a, b, ref: np.ndarray, dtype: str = "fp32") -> float:
        """Run func(a, b, C) on device inputs with C poisoned with NaN; relative error vs ref."""
        return verify_on(self.dev, func, a, b, ref, dtype=dtype)

    def time(self, lib, M: int, N: int, K: int, dtype: str = "fp32", graph: bool = False) -> Timing:
        """time_evaluator's CUDA-event samples, and the host-bound guard's submission time.

        time_evaluator launches from a C++ loop; the guard times Python calls of the same
        function (FFI call plus launch), which do more host work per launch than that loop:
        an upper bound on its host time, so a kernel it passes is certainly not host-bound.
        `graph`: the calls replayed from a CUDA graph instead, as cuBLAS is timed (``tvm_graph``),
        the guard's time one replay's submission over the calls in it."""
        a, b = random_operands(M, N, K, self.rng, dtype)
        args = [self._tensor(a, dtype), self._tensor(b, dtype), self._tensor(dtypes.zeros((M, N), dtype), dtype)]
        func = lib["main"]
        if graph:
            replay, sample, number, own = tvm_graph(func, args, self.dev, dtype)
            return replay_timing(replay, sample, number, own, self.repeat)
        timing = evaluator_timing(lib.mod, self.dev, args, self.repeat)
        timing.host_us = host_submit_us(lambda: func(*args), self.dev.sync, timing.median_ms)
        return timing

    def measure(self, step, M: int, N: int, K: int, arch: str, config=None, dtype: str = "fp32",
                seed: int | None = None) -> Measurement:
        """Build, check and time one step at one size; failures become `error`, not exceptions.

        `step` is a step number or ``schedules.Step``, or a ``"module:function"`` builder
        returning a compiled module for (M, N, K, arch, config) (tests build faulty kernels so).
        `dtype`: the inputs' (and, for 16-bit, C's); a builder is then called for that dtype.
        `seed`: the inputs' (default: drawn from this runner's generator); the check's operands are
        the first draw of ``random_operands`` from it, as ``time_cublas``'s with the same seed, so
        rows given one seed are checked on the same inputs.
        A bad size, config, arch or dtype raises ConfigError, before any worker starts.
        """
        spec = _resolve(step, M, N, K, arch, config, dtype)
        if not self.isolate:
            if seed is not None:
                self.rng = np.random.default_rng(seed)
            return self._measure_here(spec, M, N, K, arch, config, dtype)
        if self._worker is None:
            self._worker = worker.Worker(self._worker_target or serve,
                                         timeout_s=self._timeout_s or worker.DEFAULT_TIMEOUT_S)
        if seed is None:
            seed = int(self.rng.integers(2**63 - 1))  # fresh inputs per measurement, reproducible
        payload = (spec, M, N, K, arch, config, self.repeat, seed) + ((dtype,) if dtype != "fp32" else ())
        request = ("measure", payload)
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

    def _measure_here(self, spec, M: int, N: int, K: int, arch: str, config=None, dtype: str = "fp32") -> Measurement:
        m = Measurement(M, N, K)
        try:
            lib = _build(spec, M, N, K, arch, config, dtype)
            m.rel_err = self.check(lib["main"], M, N, K, dtype)
            timing = self.time(lib, M, N, K, dtype)
        except schedules.ConfigError:
            raise
        except Exception as exc:  # load/launch failures (e.g. misaligned address) from TVM/CUDA
            m.error = _one_line(exc)
            return m
        m.set_timing(timing)
        check_error(m, tolerance(spec, dtype) if not isinstance(spec, str) else
                    (TOLERANCE if dtype == "fp32" else dtypes.tolerance(dtype)))
        return m


def _resolve(step, M: int, N: int, K: int, arch: str, config, dtype: str = "fp32"):
    """What the worker is asked to build (a step number or a builder path), after the checks
    that need no GPU: unknown step or arch, bad sizes, an invalid config -> ConfigError."""
    if isinstance(step, str):
        if ":" not in step:
            raise schedules.ConfigError(f"a kernel builder is 'module:function', got {step!r}")
        schedules.config.check_dtype(dtype)
        return step
    s = schedules.get_step(step)
    schedules.target(arch)
    s.check_dtype(dtype)
    cfg = s.default_config(M, N, K, dtype) if config is None else config
    if type(cfg) is s.Config:  # another class: Step.schedule says so, from the worker
        cfg.validate(M, N, K)
    else:
        schedules.config.check_sizes(M, N, K)
    return s.number


def _build(spec, M: int, N: int, K: int, arch: str, config, dtype: str = "fp32"):
    if isinstance(spec, str):
        import importlib

        module, _, name = spec.partition(":")
        builder = getattr(importlib.import_module(module), name)
        # A builder for fp32 takes (M, N, K, arch, config); one for 16-bit inputs also `dtype`.
        return builder(M, N, K, arch, config) if dtype == "fp32" else builder(M, N, K, arch, config, dtype=dtype)
    return schedules.build(spec, M, N, K, arch=arch, config=config, dtype=dtype)


def tolerance(step, dtype: str = "fp32") -> float:
    """The bound a step's relative error is held to: fp32's, or TF32's for a reduced-precision
    step (labelled as such wherever it is shown); for 16-bit inputs the dtype's
    (dtypes.TOLERANCE: the store's rounding plus the fp32 sum's allowance)."""
    if dtype != "fp32":
        return dtypes.tolerance(schedules.get_step(step).check_dtype(dtype))
    return TF32_TOLERANCE if schedules.get_step(step).precision == "tf32" else TOLERANCE


def check_error(m: Measurement, tolerance: float) -> Measurement:
    """Mark a measurement wrong when its relative error is above `tolerance` (NaN included)."""
    if m.error is None and not (m.rel_err is not None and m.rel_err <= tolerance):
        m.error = f"wrong result: relative error {m.rel_err:.3g} > {tolerance:g}"
    return m


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
    """CuPy (device memory, streams, graphs, events) and a loadable cuBLAS, on a GPU."""
    try:
        import cupy  # noqa: F401

        _cublas_lib()
        return gpu_present()
    except Exception:
        return False


# cuBLAS enums (cublas_api.h, library_types.h): plain ints through ctypes.
CUBLAS_OP_N = 0
CUBLAS_DEFAULT_MATH = 0
CUDA_R_32F = 0
CUDA_R_16F = 2
CUDA_R_16BF = 14
# The cudaDataType_t of A, B and C for each input dtype: 16-bit inputs give C in the same dtype,
# with CUBLAS_COMPUTE_32F (products summed in fp32), as the ladder's 16-bit kernels do.
CUDA_DATA_TYPE = {"fp32": CUDA_R_32F, "fp16": CUDA_R_16F, "bf16": CUDA_R_16BF}
CUBLAS_COMPUTE_32F = 68  # strict fp32
CUBLAS_COMPUTE_32F_FAST_TF32 = 77  # inputs rounded to TF32, tensor cores
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_WORKSPACE_BYTES = 32 << 20  # NVIDIA's recommendation for Hopper; set once, so capture never allocates

_CUBLAS = None


def _cublas_lib():
    """libcublas through ctypes: the five entry points the baseline needs, nothing per call in
    Python but the foreign call itself. Found by cuda-pathfinder (the nvidia-cublas wheel or the
    CUDA toolkit), else by soname."""
    global _CUBLAS
    if _CUBLAS is not None:
        return _CUBLAS
    import ctypes

    path = None
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = load_nvidia_dynamic_lib("cublas").abs_path
    except Exception:
        pass
    lib = None
    for name in ([path] if path else []) + ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise RuntimeError("libcublas not found (pip install nvidia-cublas, or a CUDA toolkit)")
    p, i = ctypes.c_void_p, ctypes.c_int
    for fn, args in (("cublasCreate_v2", [ctypes.POINTER(p)]), ("cublasDestroy_v2", [p]),
                     ("cublasSetStream_v2", [p, p]), ("cublasSetWorkspace_v2", [p, p, ctypes.c_size_t]),
                     ("cublasSetMathMode", [p, i]),
                     ("cublasGemmEx", [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i])):
        getattr(lib, fn).argtypes = args
        getattr(lib, fn).restype = i
    _CUBLAS = lib
    return lib


def _cublas_check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: cublasStatus_t {status}")


class CublasGemm:
    """``C = A @ B`` on row-major CuPy arrays: one ``cublasGemmEx`` per call, on `stream`.

    `dtype` (dtypes.py): fp32 arrays, or fp16 ones, or bf16 carried as uint16 bit patterns (CuPy
    has no bfloat16; cuBLAS reads only the pointers), A, B and C alike (CUDA_R_16F / CUDA_R_16BF)
    with CUBLAS_COMPUTE_32F: fp32 sums, C rounded to the dtype once.

    A handle of our own (default math mode, a fixed 32 MiB workspace, bound to `stream` once),
    called through ctypes. Row-major C = A B is column-major C^T = B^T A^T, which is cuBLAS's
    (N, M, K) product of B and A as stored. ``tf32`` picks the compute type: strict fp32, or
    inputs rounded to TF32 on tensor cores. Each call costs the host several µs inside cuBLAS
    itself, as much as its kernels take at 512³, so ``time_cublas`` replays captured calls from a
    CUDA graph (one host submission for ~1 ms of GEMMs) rather than calling in a loop.
    """

    def __init__(self, a, b, c, tf32: bool = False, stream=None, dtype: str = "fp32"):
        import ctypes

        import cupy as cp

        (M, K), (_, N) = a.shape, b.shape
        self.lib = _cublas_lib()
        self.stream = stream if stream is not None else cp.cuda.Stream(non_blocking=True)
        handle = ctypes.c_void_p()
        _cublas_check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        self.handle = handle
        self._workspace = cp.empty(CUBLAS_WORKSPACE_BYTES, dtype=cp.uint8)
        _cublas_check(self.lib.cublasSetStream_v2(handle, ctypes.c_void_p(self.stream.ptr)), "cublasSetStream")
        _cublas_check(self.lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(self._workspace.data.ptr),
                                                     CUBLAS_WORKSPACE_BYTES), "cublasSetWorkspace")
        _cublas_check(self.lib.cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode")
        self._scalars = np.array([1.0, 0.0], dtype=np.float32)  # alpha, beta, on the host
        alpha = self._scalars.ctypes.data
        if tf32 and dtype != "fp32":
            raise ValueError("TF32 is a compute type for fp32 inputs")
        compute = CUBLAS_COMPUTE_32F_FAST_TF32 if tf32 else CUBLAS_COMPUTE_32F
        kind = CUDA_DATA_TYPE[dtypes.check(dtype)]
        self._args = (handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, alpha,
                      b.data.ptr, kind, N, a.data.ptr, kind, K,
                      alpha + 4, c.data.ptr, kind, N, compute, CUBLAS_GEMM_DEFAULT)
        self._keep = (a, b, c)

    def __call__(self) -> None:
        _cublas_check(self.lib.cublasGemmEx(*self._args), "cublasGemmEx")

    def close(self) -> None:
        if self.handle is not None:
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = None


def time_graph(call, stream, repeat: int) -> Timing:
    """Kernel time of ``call()`` (work enqueued on `stream`), with the host out of the way.

    ``number`` calls (~1 ms of GPU work, chosen from a probe of 3 plain calls) are captured in
    a CUDA graph once; after ``WARMUP_MS`` of replays, each sample is CUDA events around one
    replay, divided by ``number``. The host submits one graph per sample, so ``host_us`` (the guard's
    submission time) is one replay's submission divided by ``number``."""
    replay, sample, number = graph_sampler(call, stream)
    warm_graph(replay, stream)
    return replay_timing(replay, sample, number, stream, repeat)


def replay_timing(replay, sample, number: int, stream, repeat: int) -> Timing:
    """`repeat` samples of a warmed graph of `number` calls (``graph_sampler``'s), with the guard's
    host time per call."""
    timing = summarize([sample() for _ in range(repeat)], number)
    timing.host_us = replay_host_us(replay, stream, timing.median_ms, number)
    return timing


def replay_host_us(replay, stream, ms_per_call: float, number: int) -> float:
    """The guard's host time per call of a graph of `number` calls on `stream`: one replay's
    submission (``host_submit_us``) over the calls in it."""
    return host_submit_us(replay, stream.synchronize, ms_per_call * number) / number


def graph_sampler(call, stream):
    """``number`` calls of `call` (~1 ms of GPU work, from a probe of 3 plain calls) captured in a
    CUDA graph: (replay, sample, number), where sample() is CUDA events around one replay, in ms
    per call."""
    import cupy as cp

    def events_around(submit, number: int) -> float:
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        submit()
        stop.record(stream)
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / number

    def three_calls():
        for _ in range(3):
            call()

    number = launches_per_sample(events_around(three_calls, 3))
    stream.begin_capture()
    try:
        for _ in range(number):
            call()
    finally:
        graph = stream.end_capture()
    replay = lambda: graph.launch(stream)  # noqa: E731
    return replay, lambda: events_around(replay, number), number


def warm_graph(replay, stream) -> None:
    """The warm-up, as time_evaluator's: replays for WARMUP_MS (the first also uploads the graph)."""
    for _ in range(max(1, math.ceil(WARMUP_MS / TARGET_SAMPLE_MS))):
        replay()
    stream.synchronize()


class GraphCaptureError(RuntimeError):
    """A TVM function's CUDA graph did not do what a plain call does."""


def tvm_graph_sampler(func, args, dev, stream):
    """``graph_sampler`` for a TVM function called on `args`: its launches captured on `stream`
    (a CuPy stream), made the FFI's current stream for `dev` while it is probed and captured (TVM
    0.27 launches on that stream; a launch elsewhere invalidates the capture, which raises)."""
    import tvm_ffi

    with tvm_ffi.use_raw_stream(tvm_ffi.device(f"cuda:{dev.index}"), stream.ptr):
        return graph_sampler(lambda: func(*args), stream)


def replay_matches(func, args, replay, stream, dev, dtype: str = "fp32") -> float:
    """The proof that a graph holds the kernels: C poisoned with NaN and one plain call, then C
    poisoned again and one replay; the replay's relative difference from the call (inf where it
    left NaN: a graph that launched nothing)."""
    import tvm

    out = args[2]
    poison = dtypes.to_device(tvm, dtypes.nan_filled(tuple(out.shape), dtype), dtype, dev)
    out.copyfrom(poison)
    dev.sync()
    func(*args)
    dev.sync()
    first = dtypes.to_float64(dtypes.from_device(out, dtype), dtype)
    out.copyfrom(poison)
    dev.sync()
    replay()
    stream.synchronize()
    return relative_error(dtypes.from_device(out, dtype), first, dtype)


# A replay's output against a plain call's: the same kernels on the same inputs (a split's parts
# are added in a fixed order; step 11's atomics may round in another), so far below any tolerance.
REPLAY_TOLERANCE = 1e-5


def tvm_graph(func, args, dev, dtype: str = "fp32"):
    """A TVM function's calls on `args` in a CUDA graph of their own, ready to time: called once
    outside the capture (TVM's workspace pool allocates there, not in the graph), captured on a
    stream of its own (``tvm_graph_sampler``), proved by ``replay_matches`` (GraphCaptureError
    if a replay differs from a plain call) and warmed up. (replay, sample, launches per sample,
    the stream)."""
    import cupy as cp

    own = cp.cuda.Stream(non_blocking=True)
    func(*args)
    dev.sync()
    replay, sample, number = tvm_graph_sampler(func, args, dev, own)
    differs = replay_matches(func, args, replay, own, dev, dtype)
    if not differs <= REPLAY_TOLERANCE:
        raise GraphCaptureError(f"a replay of the kernel's CUDA graph differs from a plain call by {differs:.2g}")
    warm_graph(replay, own)
    return replay, sample, number, own


def time_beside_cublas(lib, dev, M: int, N: int, K: int, repeat: int, rounds: int, seed: int | None = None,
                       tf32: bool = False, dtype: str = "fp32", graph: bool = False) -> tuple[Timing, Timing, float]:
    """A TVM kernel and cuBLAS on one shape, timed in turns in one process: (the kernel's Timing,
    cuBLAS's, cuBLAS's relative error against float64).

    `graph`: the kernel is replayed from a CUDA graph too, as cuBLAS is (``tvm_graph_sampler``;
    proved to hold the kernels by ``replay_matches``, GraphCaptureError if not), so the host is
    out of the way on both sides: kernel time where time_evaluator's back-to-back calls are
    host-bound (H200, 2026-11-29: 512^3 bf16 6.4 us a call from time_evaluator, 2.8 from a graph;
    within 1-3% of each other from 8 us up; docs/method.md).

    cuBLAS is checked (``checked_cublas``), then both warm up (WARMUP_MS each) and run `rounds`
    rounds of `repeat` samples each, the kernel first in even rounds and cuBLAS first in odd ones.
    Each Timing is over its rounds as ``alternating_timings``'s (median_ms the median of the rounds'
    medians, rounds_ms those). Why: a kernel's speed follows the board's power and clocks, which
    follow what ran just before; on an H200 (2026-11-29) one timing of the same kernel read up to
    11% apart within a run at 2048-4096³, and cuBLAS as much, so a ratio is only worth what the two
    saw in common."""
    import tvm

    def on_device(x):
        return tvm.runtime.tensor(x, dev) if dtype == "fp32" else dtypes.to_device(tvm, x, dtype, dev)

    with checked_cublas(M, N, K, seed, tf32, dtype) as (gemm, a, b, err):
        replay, sample, number = graph_sampler(gemm, gemm.stream)
        args = [on_device(x) for x in (a, b, dtypes.zeros((M, N), dtype))]
        func = lib["main"]
        if graph:
            mine_replay, mine_sample, mine_number, own = tvm_graph(func, args, dev, dtype)
            mine_samples = lambda: [mine_sample() for _ in range(repeat)]  # noqa: E731
        else:
            timer, mine_number = warmed_timer(lib.mod, dev, args, repeat)
            mine_samples = lambda: [x * 1e3 for x in timer(*args).results]  # noqa: E731
        warm_graph(replay, gemm.stream)
        medians: tuple[list, list] = ([], [])
        samples: tuple[list, list] = ([], [])
        for r in range(rounds):
            for who in ((0, 1) if r % 2 == 0 else (1, 0)):
                ms = mine_samples() if who == 0 else [sample() for _ in range(repeat)]
                medians[who].append(statistics.median(ms))
                samples[who].extend(ms)
        mine, theirs = (over_rounds(m, x, n) for m, x, n in zip(medians, samples, (mine_number, number)))
        if graph:
            mine.host_us = replay_host_us(mine_replay, own, mine.median_ms, mine_number)
        else:
            mine.host_us = host_submit_us(lambda: func(*args), dev.sync, mine.median_ms)
        theirs.host_us = replay_host_us(replay, gemm.stream, theirs.median_ms, number)
    return mine, theirs, err


def time_cublas(M: int, N: int, K: int, repeat: int = 30, seed: int | None = None,
                tf32: bool = False, dtype: str = "fp32") -> tuple[Timing, float]:
    """cuBLAS GEMM, strict fp32 (or TF32 with ``tf32``; or 16-bit inputs and C with fp32 sums,
    `dtype` fp16 / bf16): (timing, relative error vs float64).

    Checked like the steps (``checked_cublas``), then timed by ``time_graph``.
    """
    with checked_cublas(M, N, K, seed, tf32, dtype) as (gemm, _, _, err):
        return time_graph(gemm, gemm.stream, repeat), err


@contextlib.contextmanager
def checked_cublas(M: int, N: int, K: int, seed: int | None, tf32: bool = False, dtype: str = "fp32"):
    """cuBLAS on fresh inputs (seeded), checked like the steps (C poisoned with NaN, one plain call;
    the reference the float64 product of the inputs as cuBLAS reads them): yields (the CublasGemm,
    A, B as host arrays, the relative error), and closes its handle after."""
    import cupy as cp

    a, b = random_operands(M, N, K, np.random.default_rng(seed), dtype)
    gemm = CublasGemm(cp.asarray(a), cp.asarray(b), cp.asarray(dtypes.nan_filled((M, N), dtype)), tf32=tf32,
                      dtype=dtype)
    # The copies and the NaN fill ran on CuPy's default stream; the GEMM's stream is non-blocking
    # and would not wait for them (at 4096^3 cuBLAS TF32 finished before the fill did, and the
    # check read NaN: "relative error inf"). Wait for them before the first call.
    cp.cuda.Device().synchronize()
    try:
        gemm()
        gemm.stream.synchronize()
        yield gemm, a, b, relative_error(cp.asnumpy(gemm._keep[2]), dtypes.reference(a, b, dtype), dtype)
    finally:
        gemm.stream.synchronize()
        gemm.close()


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


# --- the real server, in the child -------------------------------------------------------


def serve(conn) -> None:
    """Answer ("measure", (spec, M, N, K, arch, config, repeat, seed[, dtype])) requests.

    Replies ("ok", Measurement.as_dict()), ("config_error", message) or ("error", one line). Runs in
    the worker process; everything CUDA happens here, none of it in the parent.
    """
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            kind, payload = request
            if kind != "measure":
                raise ValueError(f"unknown request {kind!r}")
            spec, M, N, K, arch, config, repeat, seed, *rest = payload
            runner = KernelRunner(repeat=repeat, seed=seed, isolate=False)
            reply = ("ok", runner.measure(spec, M, N, K, arch, config, *rest).as_dict())
        except schedules.ConfigError as exc:
            reply = ("config_error", str(exc))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, never raised here
            reply = ("error", _one_line(exc))
        conn.send(reply)
