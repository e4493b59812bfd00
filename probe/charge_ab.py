"""Probe (issue 50): the model with each launch charged in the pick (relax_dispatch.launch_charge)
against the same model without the charge, and dlight, in alternating rounds in one process.

    python probe/charge_ab.py  (prints; one line per variant and a medians line per case)
"""
import statistics, sys, time
import numpy as np
import tvm
from tvm import relax
from steps.measure import model as block, dtypes, harness
from schedules.integration import relax_dispatch

GPU = "NVIDIA H200"
dev = tvm.cuda(0)
charged = relax_dispatch.launch_charge
CASES = [("bf16", 1, False), ("bf16", 16, False), ("bf16", 16, True), ("bf16", 512, False),
         ("fp16", 1, False), ("fp16", 16, False),
         ("fp32", 1024, False), ("fp32", 4096, False)]


def build(mod, variant, dtype, graph):
    relax_dispatch.launch_charge = charged if variant == "charged" else (lambda *a, **k: None)
    try:
        return block.compile_block(mod, "dlight" if variant == "dlight" else "ladder", "sm_90a", graph, dtype, GPU)
    finally:
        relax_dispatch.launch_charge = charged


def main():
    only = sys.argv[1:]
    for dtype, tokens, graph in CASES:
        if only and f"{dtype}:{tokens}" not in only:
            continue
        t0 = time.time()
        rng = np.random.default_rng(tokens)
        w = block.weights(1024, 1, dtype)
        x = dtypes.from_float32(rng.uniform(-1, 1, (1, tokens, 1024)).astype(np.float32), dtype)
        mod, entry, params = block.relax_block(1024, tokens, w, dtype)
        ref = block.reference(x, w, dtype)
        fns, picks = {}, {}
        for v in ("before", "charged", "dlight"):
            ex, chosen = build(mod, v, dtype, graph)
            vm = relax.VirtualMachine(ex, dev)
            lifted = vm[f"{entry}_transform_params"]([dtypes.to_device(tvm, p, dtype, dev) for p in params])
            xt = dtypes.to_device(tvm, x, dtype, dev)
            for _ in range(2):
                out = vm[entry](xt, *lifted)
                err = harness.relative_error(dtypes.to_float64(dtypes.from_device(out, dtype), dtype).reshape(ref.shape), ref)
            fns[v] = (vm, xt, lifted)
            picks[v] = sorted(set(s for _, s in chosen))
            print(f"{dtype} {tokens} graph={int(graph)} {v:7s} err {err:.2e} steps {sorted((tuple(m), s) for m, s in chosen)}", flush=True)
        samples = {v: [] for v in fns}
        for r in range(9):
            for v in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                vm, xt, lifted = fns[v]
                res = vm.time_evaluator(entry, dev, number=1, repeat=10)(xt, *lifted)
                samples[v].append(statistics.median(res.results) * 1e6)
        med = {v: statistics.median(s) for v, s in samples.items()}
        per = [samples["before"][i] / samples["charged"][i] for i in range(9)]
        print(f"{dtype} {tokens} graph={int(graph)} medians us: " + "  ".join(f"{v}={m:.1f}" for v, m in med.items()) +
              f"  x dlight: before {med['dlight']/med['before']:.2f} charged {med['dlight']/med['charged']:.2f}"
              f"  before/charged per round {' '.join(f'{p:.2f}' for p in per)} ({time.time()-t0:.0f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
