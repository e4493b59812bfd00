"""Probe: alternating rounds, old (waiting) against new (one group in flight, last slice waits
for all) where call 2 read new slower or level: python probe/inflight3.py OUT.jsonl"""
import json, sys, time

from steps.measure import harness

CASES = [(23, (8192, 1024, 256)), (23, (1536,) * 3), (23, (4096, 128, 4096)), (22, (4096, 4096, 16)),
         (18, (256, 256, 1024))]


def main():
    arch = harness.gpu_arch()
    out = open(sys.argv[1], "a")
    runners = {v: harness.KernelRunner(repeat=50, seed=1) for v in ("old", "new")}
    for rnd in range(3):
        order = ("old", "new") if rnd % 2 == 0 else ("new", "old")
        for step, shape in CASES:
            for v in order:
                m = runners[v].measure(f"probe.inflight2:{v}", *shape, arch, config=(step, None), dtype="bf16", seed=5)
                r = dict(step=step, shape=shape, var=v, rnd=rnd, us=None if m.median_ms is None else m.median_ms * 1e3,
                         err=m.rel_err, error=m.error)
                out.write(json.dumps(r) + "\n"); out.flush(); print(json.dumps(r), flush=True)
    for r in runners.values():
        r.close()


if __name__ == "__main__":
    main()
