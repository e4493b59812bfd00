"""Issue 48, step 27 (stream-K): where the time goes at 4096^3 bf16. Alternating rounds in one process
of step 22, step 27 streaming (stream_share 1, 132 blocks: "27s") and step 27 streaming with its
fix-up left out ("27n": no partial sums written or added, results wrong, time right), the fix-up as first committed ("27old": plain st.cg stores, the flag raised right after them), and cuBLAS.
Each kernel checked against float64 first (27n's error is printed, not held)."""
import statistics, sys, time
import numpy as np
import tvm
import cupy as cp
import schedules
from steps.measure import dtypes, harness

M, N, K = (int(x) for x in sys.argv[1].split('x')); size = M; dts = sys.argv[2].split(","); rounds = int(sys.argv[3]); steps = ['22', '27old', '27s', '27n']
dev = tvm.cuda(0)
fl = 2.0 * M * N * K
for dt in dts:
    a, b = harness.random_operands(M, N, K, np.random.default_rng(1), dt)
    ref = dtypes.reference(a, b, dt)
    A, B = dtypes.to_device(tvm, a, dt, dev), dtypes.to_device(tvm, b, dt, dev)
    mods, Cs = {}, {}
    import dataclasses
    from tvm.script import tirx as T
    import schedules.step27_stream_k as sk
    streaming = dataclasses.replace(schedules.get_step(27).default_config(M, N, K, dt), ctas=132, stream_share=1)
    def build(s):
        if s == '22':
            return schedules.build(22, M, N, K, arch="sm_90", dtype=dt)
        if s == '27s':
            return schedules.build(27, M, N, K, arch="sm_90", dtype=dt, config=streaming)
        if s == '27old':  # the committed fix-up: plain st.cg stores, the flag raised right after them
            import importlib
            old = schedules._step(importlib.import_module("schedules._probe_step27_old"))
            return schedules.build(old, M, N, K, arch="sm_90", dtype=dt, config=streaming)
        keep = sk.write_partial, sk.add_partial, sk.raise_flag
        @T.macro
        def nothing(acc, slot, tid, wg):
            T.evaluate(0)
        @T.macro
        def nothing3(slot, tid, wg):
            T.evaluate(0)
        sk.write_partial = sk.add_partial = lambda plan: nothing
        sk.raise_flag = lambda plan: nothing3
        try:
            return schedules.build(27, M, N, K, arch="sm_90", dtype=dt, config=streaming)
        finally:
            sk.write_partial, sk.add_partial, sk.raise_flag = keep
    for s in steps:
        lib = build(s)
        C = dtypes.to_device(tvm, dtypes.nan_filled((M, N), dt), dt, dev)
        lib["main"](A, B, C); dev.sync()
        err = harness.relative_error(dtypes.from_device(C, dt), ref, dt)
        print(f"{dt} step {s} rel err {err:.2e}", flush=True)
        mods[s] = lib
        Cs[s] = C
    ca, cb = cp.asarray(a), cp.asarray(b)
    cc = cp.asarray(dtypes.nan_filled((M, N), dt))
    gemm = harness.CublasGemm(ca, cb, cc, tf32=True) if dt == 'fp32' else harness.CublasGemm(ca, cb, cc, dtype=dt)
    cp.cuda.Device().synchronize(); gemm(); gemm.stream.synchronize()
    print(f"{dt} cuBLAS rel err {harness.relative_error(cp.asnumpy(cc), ref, dt):.2e}", flush=True)
    # cuBLAS as a graph of `number` calls, replayed; TVM by time_evaluator
    number = 4 if M * N * K <= 4096 ** 3 else 1
    gemm.stream.begin_capture()
    for _ in range(number): gemm()
    graph = gemm.stream.end_capture()
    def cublas_samples(n):
        out = []
        for _ in range(n):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(gemm.stream); graph.launch(gemm.stream); e1.record(gemm.stream); e1.synchronize()
            out.append(cp.cuda.get_elapsed_time(e0, e1) / number)
        return out
    timers = {s: mods[s].mod.time_evaluator("main", dev, number=number, repeat=10) for s in steps}
    # warm-up ~1 s
    t0 = time.time()
    while time.time() - t0 < 1.0:
        cublas_samples(5); [timers[s](A, B, Cs[s]) for s in steps]
    names = ["cublas"] + steps
    per = {n: [] for n in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        line = []
        for n in order:
            ms = cublas_samples(10) if n == "cublas" else [x * 1e3 for x in timers[n](A, B, Cs[n]).results]
            per[n].append(statistics.median(ms))
        print(f"{dt} {sys.argv[1]} round {r}: " + "  ".join(f"{n}={fl / per[n][-1] / 1e9:.1f}" for n in names), flush=True)
    med = {n: statistics.median(per[n]) for n in names}
    print(f"{dt} {sys.argv[1]} medians TFLOP/s: " + "  ".join(f"{n}={fl / med[n] / 1e9:.1f}" for n in names))
    ratios = {s: [per['cublas'][r] / per[s][r] for r in range(rounds)] for s in steps}
    for s in steps:
        print(f"{dt} {sys.argv[1]} step {s} / cuBLAS per round: " + " ".join(f"{x:.3f}" for x in ratios[s])
              + f"  median {statistics.median(ratios[s]):.3f}")
    for s in steps:  # after hundreds of launches: a flag left raised would show here
        print(f"{dt} step {s} after timing rel err {harness.relative_error(dtypes.from_device(Cs[s], dt), ref, dt):.2e}", flush=True)
    gemm.close()
