"""Issue 48, step 27 (stream-K): the streamed range after the whole pairs (committed) or before them
(stream_first), and which side of the fix-up costs. Alternating rounds in one process of step 22,
step 27 streaming (132 blocks; share from argv) last ("27s") and first ("27f"), and, last, with its
fix-up left out ("27n"), without the owner's read ("27nr": it waits, reads nothing) and without the
partner's write ("27nw": it raises the flag, writes nothing), and cuBLAS. The n* variants' results
are wrong (their error is printed, not held); the time is what they are for."""
import dataclasses, statistics, sys, time
import numpy as np
import tvm
from tvm.script import tirx as T
import schedules
import schedules.step27_stream_k as sk
from steps.measure import dtypes, harness

def add_wait_only(plan):
    call = sk.workspace(plan)

    @T.macro
    def add(acc, slot, tid, wg):
        if tid % 128 == 0:
            T.evaluate(call("wait", slot))
        T.cuda.warpgroup_sync(1 + wg)
    return add


def write_raise_only(plan):
    call = sk.workspace(plan)

    @T.macro
    def write(acc, slot, tid, wg):
        T.cuda.warpgroup_sync(1 + wg)
        if tid % 128 == 0:
            T.evaluate(call("raise", slot))
    return write


def nothing_(plan):
    @T.macro
    def nothing(acc, slot, tid, wg):
        T.evaluate(0)
    return nothing


def build(s, M, N, K, dt, share):
    if s == '22':
        return schedules.build(22, M, N, K, arch="sm_90", dtype=dt)
    base = dataclasses.replace(schedules.get_step(27).default_config(M, N, K, dt), ctas=132, stream_share=share)
    cfg = dataclasses.replace(base, stream_first=(s == '27f'))
    patch = {'27n': (nothing_, nothing_), '27nr': (sk.write_partial, add_wait_only),
             '27nw': (write_raise_only, sk.add_partial)}.get(s)
    keep = sk.write_partial, sk.add_partial
    if patch:
        sk.write_partial, sk.add_partial = patch
    try:
        return schedules.build(27, M, N, K, arch="sm_90", dtype=dt, config=cfg)
    finally:
        sk.write_partial, sk.add_partial = keep


def main():
    import cupy as cp
    M, N, K = (int(x) for x in sys.argv[1].split('x')); dts = sys.argv[2].split(","); rounds = int(sys.argv[3])
    steps = sys.argv[4].split(","); share = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    dev = tvm.cuda(0)
    fl = 2.0 * M * N * K
    for dt in dts:
        a, b = harness.random_operands(M, N, K, np.random.default_rng(1), dt)
        ref = dtypes.reference(a, b, dt)
        A, B = dtypes.to_device(tvm, a, dt, dev), dtypes.to_device(tvm, b, dt, dev)
        mods, Cs = {}, {}
        for s in steps:
            t0 = time.time()
            lib = build(s, M, N, K, dt, share)
            C = dtypes.to_device(tvm, dtypes.nan_filled((M, N), dt), dt, dev)
            lib["main"](A, B, C); dev.sync()
            err = harness.relative_error(dtypes.from_device(C, dt), ref, dt)
            print(f"{dt} {sys.argv[1]} step {s} rel err {err:.2e} (built and run in {time.time() - t0:.0f} s)", flush=True)
            mods[s], Cs[s] = lib, C
        ca, cb = cp.asarray(a), cp.asarray(b)
        cc = cp.asarray(dtypes.nan_filled((M, N), dt))
        gemm = harness.CublasGemm(ca, cb, cc, tf32=True) if dt == 'fp32' else harness.CublasGemm(ca, cb, cc, dtype=dt)
        cp.cuda.Device().synchronize(); gemm(); gemm.stream.synchronize()
        print(f"{dt} cuBLAS rel err {harness.relative_error(cp.asnumpy(cc), ref, dt):.2e}", flush=True)
        number = 4 if M * N * K <= 4096 ** 3 else 1
        gemm.stream.begin_capture()
        for _ in range(number):
            gemm()
        graph = gemm.stream.end_capture()

        def cublas_samples(n):
            out = []
            for _ in range(n):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(gemm.stream); graph.launch(gemm.stream); e1.record(gemm.stream); e1.synchronize()
                out.append(cp.cuda.get_elapsed_time(e0, e1) / number)
            return out
        timers = {s: mods[s].mod.time_evaluator("main", dev, number=number, repeat=10) for s in steps}
        t0 = time.time()
        while time.time() - t0 < 1.0:
            cublas_samples(5); [timers[s](A, B, Cs[s]) for s in steps]
        names = ["cublas"] + steps
        per = {n: [] for n in names}
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                ms = cublas_samples(10) if n == "cublas" else [x * 1e3 for x in timers[n](A, B, Cs[n]).results]
                per[n].append(statistics.median(ms))
            print(f"{dt} {sys.argv[1]} round {r}: " + "  ".join(f"{n}={fl / per[n][-1] / 1e9:.1f}" for n in names), flush=True)
        med = {n: statistics.median(per[n]) for n in names}
        print(f"{dt} {sys.argv[1]} medians TFLOP/s: " + "  ".join(f"{n}={fl / med[n] / 1e9:.1f}" for n in names))
        for s in steps:
            ratios = [per['cublas'][r] / per[s][r] for r in range(rounds)]
            print(f"{dt} {sys.argv[1]} step {s} / cuBLAS per round: " + " ".join(f"{x:.3f}" for x in ratios)
                  + f"  median {statistics.median(ratios):.3f}")
        for s in steps:
            print(f"{dt} step {s} after timing rel err {harness.relative_error(dtypes.from_device(Cs[s], dt), ref, dt):.2e}",
                  flush=True)
        gemm.close()


if __name__ == "__main__":
    main()
