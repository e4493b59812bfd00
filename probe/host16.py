"""Probe (issue 50): where a plain (not graphed) 16-bit block's time goes at 16 and 128 tokens.

Variants, timed in alternating rounds in one process (steps.model's way: time_evaluator, number=1):
  new     the ladder as committed now (LiftScratch drops scratch a kernel never names)
  old     LiftScratch lifting every top-level buffer (the unused pads a model allocs per call)
  no23    new, step 23 not allowed in the model (one-kernel picks where it was chosen)
  dlight  TVM's default
  graphN  new from a CUDA graph (the kernels without the host)
Per variant also: host us per call (200 calls issued back to back, one sync), and for new / no23
a CUPTI trace (torch.profiler): kernels per call, their sum, span.
Then standalone kernels: host us per launch (no sync) and GPU us (time_evaluator number=200).
"""
import statistics, sys, time, json
import numpy as np
import tvm
from tvm import relax
from steps.measure import model as block, dtypes
from schedules.integration import scratch, relax_dispatch
import schedules

GPU = "NVIDIA H200"
dev = tvm.cuda(0)
orig_lift = scratch.lift


def old_lift(func):
    bufs = [b for b in scratch.global_scratch(func) if scratch._static(b)]
    if not bufs:
        return func, []
    gone = lambda b: any(b.same_as(x) for x in bufs)
    root, stmts = scratch._top(func)
    stmts = [s for s in stmts if not (isinstance(s, tvm.tirx.AllocBuffer) and gone(s.buffer))]
    body = scratch._seq(stmts)
    if root is not None:
        from tvm.s_tir import SBlock, SBlockRealize
        block_ = SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                        [b for b in root.alloc_buffers if not gone(b)], root.match_buffers, root.annotations)
        body = SBlockRealize(func.body.iter_values, func.body.predicate, block_)
    return tvm.tirx.PrimFunc(list(func.params) + bufs, body, func.ret_type, func.attrs), bufs


orig_in_model = relax_dispatch.in_model


def build(mod, variant, dtype):
    scratch.lift = old_lift if variant == "old" else orig_lift
    relax_dispatch.in_model = ((lambda s, M, N, K, p="fp32": s.number != 23 and orig_in_model(s, M, N, K, p))
                               if variant == "no23" else orig_in_model)
    way = "dlight" if variant == "dlight" else "ladder"
    ex, chosen = block.compile_block(mod, way, "sm_90a", variant == "graph", dtype, GPU)
    scratch.lift, relax_dispatch.in_model = orig_lift, orig_in_model
    return ex, chosen


def main():
    from torch.profiler import ProfilerActivity, profile
    for dtype in ("bf16", "fp16"):
        for tokens in (16, 128):
            rng = np.random.default_rng(0)
            w = block.weights(1024, 1, dtype)
            x = dtypes.from_float32(rng.uniform(-1, 1, (1, tokens, 1024)).astype(np.float32), dtype)
            mod, entry, params = block.relax_block(1024, tokens, w, dtype)
            ref = block.reference(x, w, dtype)
            fns = {}
            for v in ("new", "old", "no23", "dlight", "graph"):
                ex, chosen = build(mod, v, dtype)
                vm = relax.VirtualMachine(ex, dev)
                lifted = vm[f"{entry}_transform_params"]([dtypes.to_device(tvm, p, dtype, dev) for p in params])
                xt = dtypes.to_device(tvm, x, dtype, dev)
                out = dtypes.to_float64(dtypes.from_device(vm[entry](xt, *lifted), dtype), dtype)
                err = np.linalg.norm(out.reshape(ref.shape) - ref) / np.linalg.norm(ref)
                f = vm[entry]
                for _ in range(20):
                    f(xt, *lifted)
                dev.sync()
                t0 = time.perf_counter()
                for _ in range(200):
                    f(xt, *lifted)
                dev.sync()
                host = (time.perf_counter() - t0) / 200 * 1e6
                fns[v] = (vm, xt, lifted)
                print(f"{dtype} {tokens} {v:6s} err {err:.2e} host-issue {host:6.1f} us/call  steps "
                      f"{sorted(set((str(m), s) for m, s in chosen))}", flush=True)
                if v in ("new", "no23", "graph", "dlight"):
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(30):
                            f(xt, *lifted)
                            dev.sync()
                    kern = sorted((e for e in prof.events() if e.device_type.name == "CUDA"
                                   and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()),
                                  key=lambda e: e.time_range.start)
                    calls, cur = [], []
                    for e in kern:
                        if cur and e.time_range.start - max(c.time_range.end for c in cur) > 20:
                            calls.append(cur); cur = []
                        cur.append(e)
                    if cur:
                        calls.append(cur)
                    n = statistics.median(len(c) for c in calls)
                    ksum = statistics.median(sum(e.time_range.elapsed_us() for e in c) for c in calls)
                    span = statistics.median(max(e.time_range.end for e in c) - min(e.time_range.start for e in c)
                                             for c in calls)
                    per = {}
                    for c in calls:
                        for i, e in enumerate(c):
                            per.setdefault((i, e.name[:40]), []).append(e.time_range.elapsed_us())
                    print(f"    kernels/call {n}, sum {ksum:.1f} us, span {span:.1f} us; " +
                          "; ".join(f"{k[1]} {statistics.median(v):.1f}" for k, v in sorted(per.items())[:14]), flush=True)
            samples = {v: [] for v in fns}
            for r in range(7):
                order = list(fns) if r % 2 == 0 else list(reversed(fns))
                for v in order:
                    vm, xt, lifted = fns[v]
                    res = vm.time_evaluator(entry, dev, number=1, repeat=10)(xt, *lifted)
                    samples[v].append(statistics.median(res.results) * 1e6)
            med = {v: statistics.median(s) for v, s in samples.items()}
            print(f"{dtype} {tokens} rounds medians us: " + "  ".join(f"{v}={m:.1f}" for v, m in med.items()) +
                  f"  x dlight: new {med['dlight']/med['new']:.2f} old {med['dlight']/med['old']:.2f} "
                  f"no23 {med['dlight']/med['no23']:.2f} graph {med['dlight']/med['graph']:.2f}", flush=True)
            print(json.dumps({"dtype": dtype, "tokens": tokens, "samples": samples}), flush=True)
    # standalone kernels: host per launch and GPU time
    for st, mnk in [(23, (16, 3072, 1024)), (26, (16, 3072, 1024)), (26, (16, 1024, 1024)), (23, (16, 4096, 1024)),
                    (26, (16, 4096, 1024)), (23, (16, 1024, 4096)), (26, (16, 1024, 4096)), (13, (16, 3072, 1024)),
                    (24, (16, 3072, 1024)), (22, (128, 3072, 1024)), (23, (128, 3072, 1024))]:
        try:
            lib = schedules.build(st, *mnk, arch="sm_90a", dtype="bf16")
        except Exception as e:
            print(f"step {st} {mnk}: {str(e).splitlines()[0][:100]}"); continue
        M, N, K = mnk
        a = tvm.runtime.empty((M, K), "bfloat16", dev); b = tvm.runtime.empty((K, N), "bfloat16", dev)
        c = tvm.runtime.empty((M, N), "bfloat16", dev)
        f = lib["main"]
        for _ in range(20):
            f(a, b, c)
        dev.sync()
        t0 = time.perf_counter()
        for _ in range(500):
            f(a, b, c)
        dev.sync()
        host = (time.perf_counter() - t0) / 500 * 1e6
        gpu = statistics.median(lib.time_evaluator("main", dev, number=200, repeat=5)(a, b, c).results) * 1e6
        one = statistics.median(lib.time_evaluator("main", dev, number=1, repeat=50)(a, b, c).results) * 1e6
        print(f"step {st} {mnk} bf16: issue {host:.1f} us/call (500 back to back), evaluator n=200 {gpu:.1f} us, n=1 {one:.1f} us", flush=True)


if __name__ == "__main__":
    sys.exit(main())
