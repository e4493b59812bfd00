"""Issue 48's fp32-accurate bar on a GPU, before a rung: three fp16 products on operands scaled per
row of A and per column of B (docs/fp32-contract.md, "Next"), with cuBLAS as the GEMM engine.

The pipeline (CuPy elementwise ops for the scale, split and unscale; not a kernel of ours):
  s_i = 15 - frexp-exponent(max finite |A[i, :]|) (the row's largest in [2^14, 2^15)), t_j for B's columns;
  A' = [ah | al | ah] (M x 3K fp16), B' = [bl ; bh ; bh] (3K x N fp16): the small products first;
  C_s = cublasGemmEx(A', B') with fp16 inputs, CUBLAS_COMPUTE_32F and an fp32 C (one fp32 sum);
  C = ldexp(C_s, -(s_i + t_j)); an output that is NaN is recomputed as a plain fp32 dot product.
Reported: the special-values classes at 1024 against cuBLAS SGEMM on the same operands (the
contract: within 2x SGEMM's error, or at most 1e-6, and the NaN / inf pattern of float64); then
at 4096^3 and 8192^3 kernel time of the fp16 GEMM alone (K' = 3K), of the whole pipeline, of
cuBLAS SGEMM and TF32, and of step 25, in alternating rounds, as fp32-accurate TFLOP/s (2MNK).

    python probe/fp16_split_gpu.py [rounds]
"""
import statistics
import sys
import time

import numpy as np


def shifts(xp, x, axis):
    m = xp.max(xp.where(xp.isfinite(x), xp.abs(x), 0), axis=axis, keepdims=True)
    _, e = xp.frexp(m)  # m = f 2^e, f in [0.5, 1): floor(log2 m) = e - 1; m = 0 gives e = 0
    return xp.where(m > 0, 15 - e, 0).astype(xp.int32)


def split(xp, x, s):
    xs = xp.ldexp(x, s)  # exact: a power of two, the scaled values within fp32's range
    hi = xs.astype(xp.float16)
    lo = (xs - hi.astype(xp.float32)).astype(xp.float16)
    return hi, lo


def operands16(xp, a, b):
    sa, sb = shifts(xp, a, 1), shifts(xp, b, 0)
    ah, al = split(xp, a, sa)
    bh, bl = split(xp, b, sb)
    return xp.concatenate([ah, al, ah], 1), xp.concatenate([bl, bh, bh], 0), sa, sb


def finish(xp, cs, a, b, sa, sb):
    c = xp.ldexp(cs, -(sa + sb))
    nan = xp.isnan(c)
    if bool(nan.any()):  # rare: inf or NaN among the operands; fp32 as SGEMM would (the fallback)
        rows, cols = (xp.asnumpy(v) if hasattr(xp, "asnumpy") else v for v in xp.nonzero(nan))
        for i, j in zip(rows, cols):
            c[i, j] = (a[i, :] * b[:, j]).astype(xp.float32).sum(dtype=xp.float32)
    return c


def gemm16_fp32_out(a16, b16, c32):
    """cublasGemmEx with fp16 A and B, fp32 C, fp32 compute (the harness's call, C's type changed)."""
    from steps.measure import harness
    g = harness.CublasGemm(a16, b16, c32, dtype="fp16")
    args = list(g._args)
    assert args[15] == harness.CUDA_DATA_TYPE["fp16"]
    args[15] = harness.CUDA_DATA_TYPE["fp32"]
    g._args = tuple(args)
    return g


def events(call, stream, n):
    import cupy as cp
    out = []
    for _ in range(n):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(stream); call(); e1.record(stream); e1.synchronize()
        out.append(cp.cuda.get_elapsed_time(e0, e1))
    return out


def main():
    import cupy as cp
    import tvm

    import schedules
    from steps.measure import dtypes, harness, special
    from steps.results import special as contract

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    print(f"{'class':<20} {'SGEMM':>9} {'3xFP16':>9}  ratio  pattern  meets", flush=True)
    for dc in special.CLASSES:
        a, b = special.operands(dc, 1024, 28)
        ref = special.reference(a, b)
        sg = special.score(special.run_cublas(a, b), ref)
        da, db = cp.asarray(a), cp.asarray(b)
        a3, b3, sa, sb = operands16(cp, da, db)
        cs = cp.full((a.shape[0], b.shape[1]), cp.nan, dtype=cp.float32)
        g = gemm16_fp32_out(a3, b3, cs)
        cp.cuda.Device().synchronize()  # the operands were made on CuPy's stream, g runs on its own
        g(); g.stream.synchronize()
        out = cp.asnumpy(finish(cp, cs, da, db, sa, sb))
        g.close()
        mine = special.score(out, ref)
        ok = (mine["rel_err"] <= max(contract.ERROR_FACTOR * sg["rel_err"], contract.ERROR_FLOOR)
              and (mine["pattern_equal"] or not sg["pattern_equal"]))
        print(f"{dc.name:<20} {sg['rel_err']:>9.2e} {mine['rel_err']:>9.2e}  {mine['rel_err'] / max(sg['rel_err'], 1e-30):5.2f}"
              f"  {mine['pattern_equal']!s:>7}  {ok}{'' if dc.held_to_bar else ' (a limit, not held)'}", flush=True)
    dev = tvm.cuda(0)
    for n in (4096, 8192):
        fl = 2.0 * n ** 3
        a, b = harness.random_operands(n, n, n, np.random.default_rng(1), "fp32")
        ref = a.astype(np.float64) @ b.astype(np.float64)
        da, db = cp.asarray(a), cp.asarray(b)
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            a3, b3, sa, sb = operands16(cp, da, db)
            cs = cp.empty((n, n), dtype=cp.float32)
        stream.synchronize()
        g16 = gemm16_fp32_out(a3, b3, cs)
        g16.stream = stream
        harness._cublas_check(g16.lib.cublasSetStream_v2(g16.handle, __import__("ctypes").c_void_p(stream.ptr)), "setStream")

        def pipeline():
            with stream:
                a3[...], b3[...] = operands16(cp, da, db)[:2]
                g16()
                return finish(cp, cs, da, db, sa, sb)
        c = pipeline(); stream.synchronize()
        err16 = harness.relative_error(cp.asnumpy(c), ref)
        c32, ct = cp.empty((n, n), cp.float32), cp.empty((n, n), cp.float32)
        sg = harness.CublasGemm(da, db, c32, stream=stream)
        tf = harness.CublasGemm(da, db, ct, tf32=True, stream=stream)
        sg(); tf(); stream.synchronize()
        errs = {"sgemm": harness.relative_error(cp.asnumpy(c32), ref), "tf32": harness.relative_error(cp.asnumpy(ct), ref)}
        t0 = time.time()
        lib = schedules.build(25, n, n, n, arch="sm_90")
        A, B = dtypes.to_device(tvm, a, "fp32", dev), dtypes.to_device(tvm, b, "fp32", dev)
        C = dtypes.to_device(tvm, dtypes.nan_filled((n, n), "fp32"), "fp32", dev)
        lib["main"](A, B, C); dev.sync()
        errs["step25"] = harness.relative_error(C.numpy(), ref)
        errs["3xfp16"] = err16
        timer = lib.mod.time_evaluator("main", dev, number=1, repeat=3)
        print(f"{n}^3 errors: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) + f" (step 25 built in {time.time() - t0:.0f} s)", flush=True)
        ways = {"sgemm": lambda: events(sg, stream, 3), "tf32": lambda: events(tf, stream, 3),
                "fp16 gemm 3K": lambda: events(g16, stream, 3), "3xfp16 pipeline": lambda: events(pipeline, stream, 3),
                "step25": lambda: [x * 1e3 for x in timer(A, B, C).results]}
        for w in ways.values():
            w()  # warm-up
        per = {k: [] for k in ways}
        for r in range(rounds):
            for k in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                per[k].append(statistics.median(ways[k]()))
            print(f"{n}^3 round {r}: " + "  ".join(f"{k}={fl / per[k][-1] / 1e9:.1f}" for k in ways), flush=True)
        print(f"{n}^3 medians TFLOP/s (fp32-accurate work, 2n^3): "
              + "  ".join(f"{k}={fl / statistics.median(v) / 1e9:.1f}" for k, v in per.items()), flush=True)
        for k in ("fp16 gemm 3K", "3xfp16 pipeline"):
            print(f"{n}^3 {k} / step 25 per round: "
                  + " ".join(f"{per['step25'][r] / per[k][r]:.2f}" for r in range(rounds)), flush=True)
        for x in (g16, sg, tf):
            x.close()


if __name__ == "__main__":
    main()
