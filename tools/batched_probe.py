"""Batched matmul on a GPU (schedules/integration/batched.py): the ladder's kernel against torch.bmm in fp32.

    python tools/batched_probe.py                     # the default attention-like shapes
    python tools/batched_probe.py --shape 32 128 128 64 nt --rounds 6

For each batches x M x N x K (B as K x N, or N x K with "nt": attention's q k^T), the dlight
rule's batched kernel (``ladder_rule.build``) is checked against float64 (output poisoned with
NaN, relative error <= 1e-5) and timed beside ``torch.bmm`` with TF32 off (cuBLAS's strict fp32
batched GEMM), in alternating rounds in one process: each round the median of 30 samples, each
sample CUDA events around back-to-back launches for about a millisecond. Prints one line per
shape and a JSON line with every round. A probe, not a gate: it writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

SHAPES = [(32, 128, 128, 64, True), (32, 128, 64, 128, False), (16, 512, 512, 64, True),
          (16, 512, 64, 512, False), (8, 1024, 1024, 1024, False), (64, 1, 2048, 128, True)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/batched_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", nargs=5, action="append", metavar=("BATCHES", "M", "N", "K", "NN|NT"))
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args(argv)
    try:
        shapes = [(int(b), int(m), int(n), int(k), lay.lower() == "nt") for b, m, n, k, lay in args.shape] \
            if args.shape else SHAPES
    except ValueError:
        print("batched_probe: error: --shape takes four integers and NN or NT", file=sys.stderr)
        return 2
    import tvm

    from schedules.integration import batched, ladder_rule
    from steps.measure import harness

    if not harness.gpu_present():
        print("batched_probe: error: no CUDA GPU found", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("batched_probe: error: needs PyTorch (torch.bmm is the fp32 peer)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = tvm.cuda(0)
    failed = 0
    for nb, M, N, K, nt in shapes:
        lib = ladder_rule.build(batched.batched_matmul(nb, M, N, K, nt))
        rng = np.random.default_rng(0)
        a = rng.uniform(-1, 1, (nb, M, K)).astype(np.float32)
        b = rng.uniform(-1, 1, (nb, N, K) if nt else (nb, K, N)).astype(np.float32)
        ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
        tc = tvm.runtime.tensor(np.full((nb, M, N), np.nan, np.float32), dev)
        lib["main"](ta, tb, tc)
        dev.sync()
        b64 = b.astype(np.float64)
        ref = a.astype(np.float64) @ (b64.swapaxes(-1, -2) if nt else b64)
        err = harness.relative_error(tc.numpy(), ref)
        ga, gb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        gbt = gb.transpose(-1, -2) if nt else gb
        terr = harness.relative_error(torch.bmm(ga, gbt).cpu().numpy(), ref)
        evaluator = lib.mod.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=1)

        def ladder_ms() -> float:
            return statistics.median(evaluator(ta, tb, tc).mean * 1e3 for _ in range(30))

        def torch_ms() -> float:
            out = []
            for _ in range(30):
                reps = 20
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(reps):
                    torch.bmm(ga, gbt)
                e.record()
                e.synchronize()
                out.append(s.elapsed_time(e) / reps)
            return statistics.median(out)

        ladder_ms(), torch_ms()  # warm
        rounds = [(ladder_ms(), torch_ms()) for _ in range(args.rounds)]
        lm = statistics.median(r[0] for r in rounds)
        tm = statistics.median(r[1] for r in rounds)
        flops = 2 * nb * M * N * K
        ok = err <= harness.TOLERANCE
        failed += not ok
        print(f"{nb}x{M}x{N}x{K} {'NT' if nt else 'NN'}: ladder {lm * 1e3:8.2f} us {flops / lm / 1e9:7.2f} TFLOPS, "
              f"torch.bmm fp32 {tm * 1e3:8.2f} us, x torch {tm / lm:5.2f}; err {err:.1e} (torch {terr:.1e})"
              + ("" if ok else "  FAILED"), flush=True)
        print(json.dumps({"shape": [nb, M, N, K], "nt": nt, "rounds_ms": rounds, "rel_err": err}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
