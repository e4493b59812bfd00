"""Probe (issue 49): step 24's mirror with B's rows loaded as 16-byte runs (N > 1), on the GPU:
4096 x N x 4096 for N in 2, 4, 8, 16 (bf16, fp32), the default and other configs, against cuBLAS in
the dtype and the committed pick, one process.  python probe/matvec_n2.py OUT.jsonl"""
import sys, time

import schedules
from schedules.config import MatvecConfig as MC
from steps.measure import harness

sys.path.insert(0, "probe")
import matvec_n as base  # noqa: E402


def main():
    base.out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    t00 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    variants = [MC(lanes_n=32, lanes_k=32, unroll=4), MC(lanes_n=8, lanes_k=32, unroll=4), MC(lanes_n=8, lanes_k=32, unroll=2),
                MC(lanes_n=8, lanes_k=32, unroll=1), MC(lanes_n=16, lanes_k=32, unroll=2), MC(lanes_n=4, lanes_k=64, unroll=2)]
    for dt in ("bf16", "fp32"):
        for N in (2, 4, 8, 16):
            sh = (4096, N, 4096)
            if time.time() - t00 > 150:
                base.row(note="budget out", at=sh, dt=dt); break
            t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
            base.row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
            pick = schedules.fastest(*sh, precision=dt)
            base.meas(runner, arch, pick.step.number, sh, dt, pick.config, f"pick step {pick.step.number}")
            base.meas(runner, arch, 24, sh, dt, None, "s24 default")
            for cfg in variants:
                base.meas(runner, arch, 24, sh, dt, cfg, "s24 variant")
    runner.close()
    base.row(note="done", s=round(time.time() - t00, 1))


if __name__ == "__main__":
    main()
