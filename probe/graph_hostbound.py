"""Probe (issue 49): the host-bound (†) shapes on kernel time. Is the dispatch rule's pick as fast
as cuBLAS there when both are replayed from a CUDA graph?

The H200's rows flag 27 of the 43 shapes host-bound in bf16 and fp16 and 13 in TF32: the guard
times Python calls of the function (FFI call and launch) and finds them taking 70% or more of the
kernel's time, so time_evaluator's reading there may time the host, and the shape is left out of
the rule's bar. cuBLAS is timed from a CUDA graph. Here the pick's own call is captured in a CUDA
graph too (on a CuPy stream made the FFI's current stream: TVM 0.27 launches there) and replayed
as cuBLAS is (``harness.time_graph``). The graph is proved to hold the kernels: C poisoned with
NaN, one replay, checked against float64.

Prediction: the guard is an upper bound on time_evaluator's own host time (a C++ loop), so most
readings were kernel time already; the graph reads within a few percent of time_evaluator where
the kernels are 8 us or more, and faster at the 5-6 us ones.

    python probe/graph_hostbound.py OUT.txt PRECISION [M,N,K ...]     (on the GPU)
"""
from __future__ import annotations

import csv
import statistics
import sys

import numpy as np

CONTROLS = [(2048, 2048, 2048), (4096, 4096, 4096)]  # not host-bound: the graph should read as time_evaluator


def hostbound_shapes(precision: str) -> list[tuple[int, int, int]]:
    rows = csv.DictReader(open(f"results/nvidia-h200/{precision}/shapes.csv"))
    return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in rows
            if r["impl"] == "fastest" and r["host_bound"] in ("1", "True", "true")]


def main() -> int:
    import tvm
    import tvm_ffi
    import cupy as cp

    import schedules
    from steps.measure import dtypes, harness

    out = open(sys.argv[1], "a")
    precision = sys.argv[2]
    dtype = "fp32" if precision in ("fp32", "tf32") else precision
    shapes = ([tuple(int(x) for x in s.split(",")) for s in sys.argv[3:]]
              or hostbound_shapes(precision) + CONTROLS)

    def say(line):
        print(line, flush=True)
        print(line, file=out, flush=True)

    dev = tvm.cuda(0)
    fdev = tvm_ffi.device(f"cuda:{dev.index}")
    runner = harness.KernelRunner(repeat=20, seed=0, isolate=False)
    rng = np.random.default_rng(1)
    say(f"== {precision}: the pick (schedules.fastest, the H200's rows), 4 rounds of 20 samples each way; "
        "us per call, median of the rounds' medians")
    for M, N, K in shapes:
        choice = schedules.fastest(M, N, K, precision, arch="sm_90", gpu="NVIDIA H200")
        try:
            lib = schedules.build(choice.step.number, M, N, K, arch="sm_90a", config=choice.config, dtype=dtype)
        except Exception as e:
            say(f"{M}x{N}x{K}: build failed: {harness._one_line(e)}")
            continue
        func = lib["main"]
        a, b = harness.random_operands(M, N, K, rng, dtype)
        ref = dtypes.reference(a, b, dtype)
        ta, tb = (dtypes.to_device(tvm, x, dtype, dev) for x in (a, b))
        tc = dtypes.to_device(tvm, dtypes.nan_filled((M, N), dtype), dtype, dev)
        err = harness.verify_on(dev, func, ta, tb, ref, dtype=dtype)
        stream = cp.cuda.Stream(non_blocking=True)
        func(ta, tb, tc)  # warm TVM's workspace pool outside the capture
        dev.sync()
        tc.copyfrom(dtypes.to_device(tvm, dtypes.nan_filled((M, N), dtype), dtype, dev))
        dev.sync()
        try:
            with tvm_ffi.use_raw_stream(fdev, stream.ptr):
                stream.begin_capture()
                try:
                    func(ta, tb, tc)
                finally:
                    graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
            graph_err = harness.relative_error(dtypes.from_device(tc, dtype), ref, dtype)
        except Exception as e:
            graph_err = float("nan")
            say(f"{M}x{N}x{K}: capture failed: {harness._one_line(e)}")
        tol = harness.tolerance(choice.step.number, dtype)
        if not (err <= tol and graph_err <= tol):
            say(f"{M}x{N}x{K} step {choice.step.number}: err {err:.2e}, after a replay {graph_err:.2e}: FAILED")
            continue

        def evaluator():
            return runner.time(lib, M, N, K, dtype)

        def from_graph():
            with tvm_ffi.use_raw_stream(fdev, stream.ptr):
                return harness.time_graph(lambda: func(ta, tb, tc), stream, 20)

        def cublas():
            return harness.time_cublas(M, N, K, repeat=20, seed=2, tf32=precision == "tf32", dtype=dtype)[0]

        ways = {"evaluator": evaluator, "graph": from_graph, "cublas": cublas}
        got = {w: [] for w in ways}
        for r in range(4):
            for w in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                t = ways[w]()
                got[w].append((t.median_ms * 1e3, t.host_us))
        med = {w: statistics.median(x[0] for x in v) for w, v in got.items()}
        host = {w: statistics.median(x[1] for x in v) for w, v in got.items()}
        say(f"{M}x{N}x{K} step {choice.step.number}: err {err:.1e} (replay {graph_err:.1e}); "
            + "; ".join(f"{w} {med[w]:.2f} (host {host[w]:.1f}{', host-bound' if harness.is_host_bound(host[w], med[w] / 1e3) else ''})"
                        for w in ways)
            + f"; x cuBLAS: evaluator {med['cublas'] / med['evaluator']:.3f}, graph {med['cublas'] / med['graph']:.3f}; "
            + "rounds " + " | ".join(f"{w} " + " ".join(f"{x[0]:.2f}" for x in v) for w, v in got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
