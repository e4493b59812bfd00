"""The host-bound (†) shapes on kernel time: the dispatch rule's pick replayed from a CUDA graph,
as cuBLAS is timed (issue 31: 513x257x1025, 2048x2048x1 and 1x8192x1024 are excluded from the
rule's bar because time_evaluator's calls there may time the host).

    python tools/graph_probe.py                        # the three † shapes and 1x4096x4096
    python tools/graph_probe.py --shape 33 65 129 --rounds 6

For each M x N x K: ``schedules.fastest``'s fp32 pick is built and checked (fresh inputs, C
poisoned with NaN, against float64), then timed three ways in alternating rounds in one process:
- ``evaluator``: the harness's own timing (time_evaluator; ``host_us``, the guard's submission time);
- ``graph``: the same function's launches captured in a CUDA graph on a CuPy stream, made TVM's
  current stream through tvm-ffi (``tvm_ffi.use_raw_stream``: TVM 0.27 launches on the FFI
  environment's stream), replayed by ``harness.time_graph`` exactly as cuBLAS is;
- ``cuBLAS``: ``harness.time_cublas`` (strict fp32, from a graph).
The graph is proved to hold the kernels: C poisoned again, one replay, checked against float64
(NaN, a failed check, if TVM launched elsewhere). A probe for the next GPU session: it writes
nothing but its output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

SHAPES = [(513, 257, 1025), (2048, 2048, 1), (1, 8192, 1024), (1, 4096, 4096)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/graph_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs=3, type=int, action="append", metavar=("M", "N", "K"))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    import tvm
    import tvm_ffi

    import schedules
    from steps.measure import harness

    if not harness.gpu_present():
        print("graph_probe: error: no CUDA GPU found", file=sys.stderr)
        return 2
    try:
        import cupy as cp
    except ImportError:
        print("graph_probe: error: needs CuPy (streams and graphs, as the harness's cuBLAS timing)", file=sys.stderr)
        return 2
    arch = harness.gpu_arch()
    dev = tvm.cuda(0)
    h = harness.KernelRunner(repeat=args.repeat, seed=0, isolate=False)
    failed = 0
    for M, N, K in [tuple(s) for s in args.shape] if args.shape else SHAPES:
        choice = schedules.fastest(M, N, K, "fp32", arch=arch)
        lib = schedules.build(choice.step.number, M, N, K, arch=arch, config=choice.config)
        func = lib["main"]
        a, b = harness.random_operands(M, N, K, np.random.default_rng(1))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
        tc = tvm.runtime.tensor(np.full((M, N), np.nan, np.float32), dev)
        err = harness.verify_on(dev, func, ta, tb, ref)
        stream = cp.cuda.Stream(non_blocking=True)
        # the graph holds the kernels: poison C, capture one call, replay it once, check
        tc.copyfrom(np.full((M, N), np.nan, np.float32))
        dev.sync()
        try:
            with tvm_ffi.use_raw_stream(tvm_ffi.device(f"cuda:{dev.index}"), stream.ptr):
                stream.begin_capture()
                try:
                    func(ta, tb, tc)
                finally:
                    graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
            graph_err = harness.relative_error(tc.numpy(), ref)
        except Exception as exc:  # TVM launched off the capturing stream: capture is invalidated
            graph_err, why = float("nan"), harness._one_line(exc)
            print(f"{M}x{N}x{K}: capture failed: {why}", flush=True)
        ok = err <= harness.TOLERANCE and graph_err <= harness.TOLERANCE
        failed += not ok

        def evaluator():
            return h.time(lib, M, N, K)

        def from_graph():
            with tvm_ffi.use_raw_stream(tvm_ffi.device(f"cuda:{dev.index}"), stream.ptr):
                return harness.time_graph(lambda: func(ta, tb, tc), stream, args.repeat)

        def cublas():
            return harness.time_cublas(M, N, K, repeat=args.repeat, seed=2)[0]

        ways = {"evaluator": evaluator, "graph": from_graph, "cublas": cublas} if ok else {}
        rounds = {w: [] for w in ways}
        for _ in range(args.rounds if ok else 0):
            for w, f in ways.items():
                t = f()
                rounds[w].append((t.median_ms, t.host_us))
        med = {w: statistics.median(r[0] for r in rs) for w, rs in rounds.items()}
        host = {w: statistics.median(r[1] for r in rs) for w, rs in rounds.items()}
        line = (f"{M}x{N}x{K} step {choice.step.number}: err {err:.1e}, after a graph replay {graph_err:.1e}"
                + ("  FAILED" if not ok else ""))
        if ok:
            tf = lambda ms: 2 * M * N * K / ms / 1e9  # noqa: E731
            line += "".join(f"; {w} {med[w] * 1e3:7.2f} us ({tf(med[w]):5.2f} TFLOPS, host {host[w]:5.1f} us"
                            f"{', host-bound' if harness.is_host_bound(host[w], med[w]) else ''})" for w in ways)
            line += (f"; x cuBLAS: evaluator {med['cublas'] / med['evaluator']:.2f}, "
                     f"graph {med['cublas'] / med['graph']:.2f}")
        print(line, flush=True)
        print(json.dumps({"shape": [M, N, K], "step": choice.step.number, "config": str(choice.config),
                          "rel_err": err, "graph_rel_err": graph_err, "rounds": rounds}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
