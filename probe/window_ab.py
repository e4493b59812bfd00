"""Probe (issue 50): the d 1024 block's picks with the host window of rows of kernel time at 1.25
(as before 2026-11-30) and at 1.5 (dispatch.HOST_BOUND_WINDOW_GRAPH now), timed in alternating
rounds in one process, plain and from CUDA graphs, beside dlight. Where the two windows pick the
same kernels the row says so and is not timed. Predicted (docs/models.md): 1 token ~0.031 ms
plain at 1.5 against ~0.036 at 1.25 (two launches fewer); 16 tokens one launch fewer; 128 tokens
the same picks.

    python probe/window_ab.py --dtype bf16 --tokens 1 16 128 [--cuda-graph]
"""
import argparse
import statistics
import sys

import numpy as np

from schedules import dispatch
from steps.commands import model as command
from steps.measure import harness
from steps.measure import model as block
from steps.measure import dtypes

p = argparse.ArgumentParser()
p.add_argument("--dtype", default="bf16")
p.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 128])
p.add_argument("--cuda-graph", action="store_true")
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--repeat", type=int, default=10)
args = p.parse_args()

import tvm  # noqa: E402

dev, d = tvm.cuda(0), 1024
print(f"{args.dtype}, d {d}, {'from a CUDA graph' if args.cuda_graph else 'plain'}; "
      f"{args.rounds} alternating rounds of time_evaluator(number=1, repeat={args.repeat}), medians in us", flush=True)
for tokens in args.tokens:
    rng = np.random.default_rng(tokens)
    w = block.weights(d, int(rng.integers(2**31)), args.dtype)
    x = dtypes.from_float32(rng.uniform(-1, 1, (1, tokens, d)).astype(np.float32), args.dtype)
    mod, entry, params = block.relax_block(d, tokens, w, args.dtype)
    ref = block.reference(x, w, args.dtype)
    ways, picks = {}, {}
    for name, window in (("w1.25", 1.25), ("w1.5", 1.5)):
        dispatch.HOST_BOUND_WINDOW_GRAPH = window
        outs, sample, chosen, _ = command._tvm_way(mod, entry, params, "ladder", "sm_90a", x, dev,
                                                   args.cuda_graph, args.dtype, "NVIDIA H200")
        picks[name] = sorted((("x".join(map(str, m))), s) for m, s in chosen)
        err = max(harness.relative_error(o.reshape(ref.shape), ref) for o in outs)
        ways[name] = (sample, err)
    if picks["w1.25"] == picks["w1.5"]:
        print(f"{tokens:>5} tokens: the same picks {picks['w1.5']}; not timed", flush=True)
        continue
    outs, sample, _, _ = command._tvm_way(mod, entry, params, "dlight", "sm_90a", x, dev, args.cuda_graph, args.dtype)
    ways["dlight"] = (sample, max(harness.relative_error(o.reshape(ref.shape), ref) for o in outs))
    times = {k: [] for k in ways}
    for _ in range(args.rounds):
        for k, (sample, _) in ways.items():
            times[k].append(sample(args.repeat) * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{tokens:>5} tokens: " + ", ".join(f"{k} {med[k]:.1f} (err {ways[k][1]:.1e})" for k in ways)
          + f"; w1.25/w1.5 {med['w1.25'] / med['w1.5']:.3f}; rounds w1.25/w1.5 "
          + " ".join(f"{a / b:.3f}" for a, b in zip(times["w1.25"], times["w1.5"])), flush=True)
    for k in ("w1.25", "w1.5"):
        print(f"       {k}: {picks[k]}", flush=True)
sys.exit(0)
