"""The roofline's two axes: bytes each step moves through global memory, and the GPU's roofs.

Arithmetic intensity is 2·M·N·K FLOP over the global-memory bytes a step's schedule asks
for, counted from its tiles (4 bytes a float), not measured:

- steps with shared-memory tiles (the config has ``block_k``): every block reads its
  block_m rows of A and block_n columns of B once, so A is read ceil(N / block_n) times and B
  ceil(M / block_m) times; C is written once;
- register tiles without shared memory (step 2): every thread reads its thread_m rows of A
  and thread_n columns of B over all of K;
- step 1 (one element per thread): one row of A and one column of B per element of C.

L1 and L2 serve part of these reads, so a step can land above the bandwidth roof: the model
counts what the schedule requests, which is what the next step's idea is meant to cut. A
step module may define ``global_bytes(M, N, K, config)`` where this model does not fit it.

The roofs are measured, not taken from a datasheet: the bandwidth by timing a large
device-to-device copy (a TVM-built float4 copy kernel, CUDA events, median), the FP32 peak
as SMs × FP32 lanes per SM × 2 (an FMA is two FLOP) × the SM clock read under load.
"""

from __future__ import annotations

import math

from . import harness

FLOAT_BYTES = 4
# FP32 lanes (FMA units) per SM by compute capability: GA100 has 64, GA10x, AD10x and GH100 128.
FP32_LANES_PER_SM = {"8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128}
DEFAULT_FP32_LANES = 128
COPY_MIB = 256  # each of source and destination: far beyond any L2 (50-60 MB on H100/H200)
COPY_THREADS = 256
COPY_VECTOR = 4


def global_bytes(M: int, N: int, K: int, config: dict, module=None) -> int:
    """Bytes the schedule moves through global memory for one M x N x K matmul (see above)."""
    if module is not None and hasattr(module, "global_bytes"):
        return int(module.global_bytes(M, N, K, config))
    c_bytes = M * N * FLOAT_BYTES
    if config.get("block_k"):
        a_reads = math.ceil(N / config["block_n"])
        b_reads = math.ceil(M / config["block_m"])
        return (M * K * a_reads + K * N * b_reads) * FLOAT_BYTES + c_bytes
    tm, tn = config.get("thread_m", 1), config.get("thread_n", 1)
    threads = math.ceil(M / tm) * math.ceil(N / tn)
    return threads * (tm + tn) * K * FLOAT_BYTES + c_bytes


def intensity(M: int, N: int, K: int, config: dict, module=None) -> float:
    """FLOP per global byte: 2·M·N·K over global_bytes."""
    return harness.flops(M, N, K) / global_bytes(M, N, K, config, module)


def fp32_lanes_per_sm(compute_capability: str | None) -> int:
    return FP32_LANES_PER_SM.get(str(compute_capability), DEFAULT_FP32_LANES)


def fp32_peak_gflops(sm_count: int, sm_clock_mhz: float, compute_capability: str | None) -> float:
    """SMs × FP32 lanes × 2 FLOP per FMA × clock: the most FP32 the chip can issue per second."""
    return sm_count * fp32_lanes_per_sm(compute_capability) * 2 * sm_clock_mhz * 1e6 / 1e9


# --- measured on the GPU -------------------------------------------------------------------


def copy_schedule(n_floats: int):
    """B = A over n_floats, COPY_THREADS threads per block, COPY_VECTOR floats per load."""
    from tvm import s_tir
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((n_floats,), "float32"), B: T.Buffer((n_floats,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(n_floats):
            with T.sblock("copy"):
                vi = T.axis.remap("S", [i])
                B[vi] = A[vi]

    sch = s_tir.Schedule(main)
    (i,) = sch.get_loops(sch.get_sblock("copy"))
    bx, tx, vec = sch.split(i, [None, COPY_THREADS, COPY_VECTOR])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)
    return sch


def build_copy(n_floats: int, arch: str = "sm_90"):
    import tvm

    import schedules

    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(copy_schedule(n_floats).mod, target=schedules.target(arch))


def measure_bandwidth(arch: str, mib: int = COPY_MIB, repeat: int = 30) -> dict:
    """Global-memory bandwidth of device 0: a mib-MiB copy, (read + write bytes) / median time."""
    import numpy as np
    import tvm

    unit = COPY_THREADS * COPY_VECTOR
    n = (mib * 2**20 // FLOAT_BYTES) // unit * unit
    lib = build_copy(n, arch)
    dev = tvm.cuda(0)
    src_host = np.arange(n, dtype=np.float32)
    src = tvm.runtime.tensor(src_host, dev)
    dst = tvm.runtime.tensor(np.zeros(n, np.float32), dev)
    lib["main"](src, dst)
    dev.sync()
    if not np.array_equal(dst.numpy(), src_host):
        raise RuntimeError("the bandwidth copy kernel did not copy its input")
    probe = lib.mod.time_evaluator("main", dev, number=3, repeat=1)(src, dst)
    number = harness.launches_per_sample(probe.mean * 1e3)
    result = lib.mod.time_evaluator("main", dev, number=number, repeat=repeat)(src, dst)
    timing = harness.summarize([r * 1e3 for r in result.results], number)
    moved = 2 * n * FLOAT_BYTES
    return {
        "bandwidth_gbs": moved / (timing.median_ms * 1e-3) / 1e9,
        "bytes_per_launch": moved,
        "median_ms": timing.median_ms,
        "min_ms": timing.min_ms,
        "max_ms": timing.max_ms,
        "method": (f"TVM-built float4 copy kernel, {n * FLOAT_BYTES // 2**20} MiB -> {n * FLOAT_BYTES // 2**20} MiB "
                   f"device to device; bytes = read + write; CUDA events (time_evaluator), median of "
                   f"{repeat} samples of {number} launches"),
    }


def machine_doc(env: dict, bandwidth: dict) -> dict:
    """results/<gpu>/machine.json: the measured roofs and how each was obtained."""
    sm_count = env.get("sm_count")
    cc = env.get("compute_capability")
    clock, clock_how = _sm_clock(env)
    lanes = fp32_lanes_per_sm(cc)
    peak = fp32_peak_gflops(sm_count, clock, cc) if sm_count and clock else None
    return {
        "gpu": env.get("gpu"),
        "date": env.get("date"),
        "compute_capability": cc,
        "sm_count": sm_count,
        "bandwidth_gbs": bandwidth["bandwidth_gbs"],
        "bandwidth_method": bandwidth["method"],
        "bandwidth_timing_ms": {k: bandwidth[k] for k in ("median_ms", "min_ms", "max_ms")},
        "fp32_peak_gflops": peak,
        "fp32_peak_method": (f"{sm_count} SMs x {lanes} FP32 lanes per SM (compute capability {cc}) x 2 FLOP "
                             f"per FMA x {clock} MHz SM clock ({clock_how})"),
        "sm_clock_mhz": clock,
    }


def _sm_clock(env: dict) -> tuple[float | None, str]:
    """The SM clock for the peak: read by nvidia-smi right after timing, else the max clock."""
    for key, how in (("sm_clock_mhz", "nvidia-smi clocks.sm, read under load after timing"),
                     ("max_sm_clock_mhz", "nvidia-smi clocks.max.sm: no under-load reading")):
        try:
            value = float(env[key])
        except (KeyError, TypeError, ValueError):
            continue
        if value > 0:
            return value, how
    return None, "no SM clock reading"
