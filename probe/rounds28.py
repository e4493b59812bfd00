"""Step 28 (3xFP16) in alternating rounds in one process: step 25, step 28 at promote 1 / 2 / 4,
cuBLAS SGEMM (strict fp32) and cuBLAS TF32. argv: SIZE[,SIZE] ROUNDS VARIANTS (e.g. 25,28,28p2)."""
import dataclasses, statistics, sys, time
import numpy as np
import tvm
import schedules
from steps.measure import harness


def build(name, M, N, K):
    if name == "25":
        return schedules.build(25, M, N, K, arch="sm_90")
    step = schedules.get_step(28)
    cfg = step.default_config(M, N, K)
    if "p" in name:
        cfg = dataclasses.replace(cfg, promote=int(name.split("p")[1]))
    if name == "28big":  # 128 x 128 tiles where the default takes 64 x 64
        cfg = dataclasses.replace(cfg, block_m=128, block_n=128, stages=3)
    return schedules.build(28, M, N, K, arch="sm_90", config=cfg)


def main():
    import cupy as cp
    sizes = [int(x) for x in sys.argv[1].split(",")]
    rounds, variants = int(sys.argv[2]), sys.argv[3].split(",")
    dev = tvm.cuda(0)
    for n in sizes:
        M = N = K = n
        fl = 2.0 * M * N * K
        a, b = harness.random_operands(M, N, K, np.random.default_rng(1))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        A, B = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
        mods, Cs = {}, {}
        for s in variants:
            t0 = time.time()
            lib = build(s, M, N, K)
            C = tvm.runtime.tensor(np.full((M, N), np.nan, np.float32), dev)
            lib["main"](A, B, C); dev.sync()
            print(f"{n} {s} rel err {harness.relative_error(C.numpy(), ref):.2e} ({time.time() - t0:.0f} s)", flush=True)
            mods[s], Cs[s] = lib, C
        ca, cb = cp.asarray(a), cp.asarray(b)
        gemms = {}
        for name, tf32 in (("sgemm", False), ("tf32", True)):
            cc = cp.full((M, N), cp.nan, cp.float32)
            g = harness.CublasGemm(ca, cb, cc, tf32=tf32)
            g(); g.stream.synchronize()
            print(f"{n} cuBLAS {name} rel err {harness.relative_error(cp.asnumpy(cc), ref):.2e}", flush=True)
            g.stream.begin_capture(); g(); graph = g.stream.end_capture()
            gemms[name] = (g, graph)

        def cublas_samples(name, k):
            g, graph = gemms[name]
            out = []
            for _ in range(k):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(g.stream); graph.launch(g.stream); e1.record(g.stream); e1.synchronize()
                out.append(cp.cuda.get_elapsed_time(e0, e1))
            return out
        timers = {s: mods[s].mod.time_evaluator("main", dev, number=1, repeat=10) for s in variants}
        t0 = time.time()
        while time.time() - t0 < 1.0:
            [cublas_samples(g, 3) for g in gemms]; [timers[s](A, B, Cs[s]) for s in variants]
        names = list(gemms) + variants
        per = {x: [] for x in names}
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for x in order:
                ms = cublas_samples(x, 10) if x in gemms else [v * 1e3 for v in timers[x](A, B, Cs[x]).results]
                per[x].append(statistics.median(ms))
            print(f"{n} round {r}: " + "  ".join(f"{x}={fl / per[x][-1] / 1e9:.1f}" for x in names), flush=True)
        med = {x: statistics.median(per[x]) for x in names}
        print(f"{n} medians TFLOP/s: " + "  ".join(f"{x}={fl / med[x] / 1e9:.1f}" for x in names))
        for s in variants:
            r25 = [per["25"][r] / per[s][r] for r in range(rounds)] if "25" in per else []
            rs = [per["sgemm"][r] / per[s][r] for r in range(rounds)]
            print(f"{n} {s}: x step 25 per round " + " ".join(f"{x:.3f}" for x in r25)
                  + f"; x SGEMM median {statistics.median(rs):.2f}")
        for s in variants:
            print(f"{n} {s} after timing rel err {harness.relative_error(Cs[s].numpy(), ref):.2e}", flush=True)
        for g, _ in gemms.values():
            g.close()


if __name__ == "__main__":
    main()
