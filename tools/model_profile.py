"""Where a small forward pass's time goes: the model (steps/measure/model.py) at a few token
counts, both TVM ways, plain and CUDA graph, on the GPU's own clock.

    python tools/model_profile.py [--tokens 1 16] [--calls 50]

For each way it reports, per forward call:
- ``host``: wall time per call of `calls` calls issued back to back (one sync at the end): what
  the host needs to issue a call, or the GPU's time where that is longer;
- ``evaluator``: TVM's time_evaluator as steps.model times it (number=1) and with number=`calls`;
- ``kernels``: from a CUPTI trace (torch.profiler, which sees every kernel in the process,
  TVM's included) of `calls` calls with a sync after each: the number of kernels per call, the
  sum of their durations, and the span from the first kernel's start to the last one's end,
  medians over the calls; and the kernels by total time.
A probe, not a gate: it writes nothing but its output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/model_profile.py")
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 16])
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--trace", default=None, help="a folder for each run's Chrome trace")
    args = p.parse_args(argv)
    import torch
    import tvm
    from torch.profiler import ProfilerActivity, profile

    from steps.commands.model import _tvm_way
    from steps.measure import model as block

    dev = tvm.cuda(0)
    for tokens in args.tokens:
        rng = np.random.default_rng(0)
        w = block.weights(args.d, 1)
        x = rng.uniform(-1, 1, (1, tokens, args.d)).astype(np.float32)
        mod, entry, params = block.torch_relax_block(args.d, tokens, w)
        for graph in (False, True):
            for way in ("ladder", "dlight"):
                import tvm.relax as relax

                ex, chosen = block.compile_block(mod, way, "sm_90a", graph)
                vm = relax.VirtualMachine(ex, dev)
                lifted = vm[f"{entry}_transform_params"]([tvm.runtime.tensor(q, dev) for q in params])
                xt = tvm.runtime.tensor(x, dev)
                f = vm[entry]
                for _ in range(20):
                    f(xt, *lifted)
                dev.sync()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    f(xt, *lifted)
                dev.sync()
                host_us = (time.perf_counter() - t0) / args.calls * 1e6
                ev1 = statistics.median(vm.time_evaluator(entry, dev, number=1, repeat=30)(xt, *lifted).results) * 1e6
                evn = statistics.median(vm.time_evaluator(entry, dev, number=args.calls, repeat=5)(xt, *lifted).results) * 1e6
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.calls):
                        f(xt, *lifted)
                        dev.sync()
                if args.trace:
                    prof.export_chrome_trace(f"{args.trace}/model-{tokens}-{way}-graph{int(graph)}.json")
                kern = [e for e in prof.events() if e.device_type.name == "CUDA" and "memcpy" not in e.name.lower()
                        and "memset" not in e.name.lower()]
                kern.sort(key=lambda e: e.time_range.start)
                # split into calls: a gap of more than 20 us between kernels starts a new call
                calls, cur = [], []
                for e in kern:
                    if cur and e.time_range.start - max(c.time_range.end for c in cur) > 20:
                        calls.append(cur)
                        cur = []
                    cur.append(e)
                if cur:
                    calls.append(cur)
                n = statistics.median(len(c) for c in calls)
                ksum = statistics.median(sum(e.time_range.elapsed_us() for e in c) for c in calls)
                span = statistics.median(max(e.time_range.end for e in c) - min(e.time_range.start for e in c)
                                         for c in calls)
                by = {}
                for c in calls:
                    for e in c:
                        by.setdefault(e.name[:60], []).append(e.time_range.elapsed_us())
                top = sorted(((sum(v) / len(calls), statistics.median(v), len(v) / len(calls), k) for k, v in by.items()),
                             reverse=True)[:12]
                print(f"tokens {tokens} {way:6s} graph {int(graph)}: host {host_us:7.1f} us/call, evaluator n=1 "
                      f"{ev1:7.1f}, n={args.calls} {evn:7.1f}; kernels/call {n}, kernel sum {ksum:6.1f} us, "
                      f"span {span:6.1f} us ({len(calls)} calls seen)", flush=True)
                for tot, med, cnt, name in top:
                    print(f"    {tot:6.1f} us/call  median {med:6.1f} us x{cnt:.1f}  {name}")
                print(json.dumps({"tokens": tokens, "way": way, "graph": graph, "host_us": host_us, "ev1_us": ev1,
                                  "evn_us": evn, "kernels": n, "kernel_sum_us": ksum, "span_us": span,
                                  "chosen": [list(map(str, c)) for c in chosen]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
