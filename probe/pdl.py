"""Probe (issue 49): programmatic dependent launch on the Hopper rungs.

Nsight Compute (this session's call 2) timed cuBLAS's kernel alone at 10.6 us at 8192x32x2048 bf16
(warm L2), yet back to back in the harness's graph it takes 7.4: its launches overlap their
neighbours' (docs/method.md saw the same at 512^3 fp32, 'not isolated further'). Ours: 12.4 alone,
11.0 back to back. TVM 0.27 launches a kernel with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
where the PrimFunc's tirx.kernel_launch_params carries tirx.use_programtic_dependent_launch; the
kernel must then wait (griddepcontrol.wait) before it touches global memory, and may let the next
grid launch early (griddepcontrol.launch_dependents). Here both at the top of the kernel.

    python probe/pdl.py OUT.jsonl          (on the GPU)
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import tvm
from tvm import tirx
from tvm.script import tirx as T

import schedules
from schedules.lowering import pipelines

PDL = "tirx.use_programtic_dependent_launch"


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="pdl_top")
def pdl_top(func, mod, ctx):
    """griddepcontrol.wait and .launch_dependents as the kernel's first statements."""
    return func.with_body(tirx.SeqStmt([tirx.Evaluate(T.ptx.griddepcontrol.wait()),
                                         tirx.Evaluate(T.ptx.griddepcontrol.launch_dependents()), func.body]))


def build_pdl(step, M, N, K, arch, config=None, dtype="fp32"):
    s = schedules.get_step(step)
    tgt = schedules.target(s.build_arch(arch))
    cfg = s.default_config(M, N, K, dtype) if config is None else config
    sch = s.schedule(M, N, K, cfg, None, True, dtype)
    mod = tvm.IRModule({gv: (f.with_attr("tirx.kernel_launch_params", [PDL]) if isinstance(f, tirx.PrimFunc) else f)
                        for gv, f in sch.mod.functions.items()})
    pipeline = pipelines.with_device_passes(*schedules.device_passes(s, cfg, K), pdl_top)
    with tvm.transform.PassContext(opt_level=3, config=s.pass_config):
        return tvm.compile(mod, target=tgt, tir_pipeline=pipeline)


def _builder(step, pdl):
    def build(M, N, K, arch, config, dtype="fp32"):
        if pdl:
            return build_pdl(step, M, N, K, arch, config, dtype)
        return schedules.build(step, M, N, K, arch=arch, config=config, dtype=dtype)
    return build


for _s in (18, 20, 22, 23, 26, 27):
    globals()[f"s{_s}_pdl"] = _builder(_s, True)
    globals()[f"s{_s}_plain"] = _builder(_s, False)

SHAPES = [(8192, 32, 2048), (4096, 128, 4096), (64, 1024, 8192), (4096, 16, 4096), (1536, 1536, 1536),
          (8192, 1024, 256), (512, 512, 512), (1024, 1024, 1024), (4096, 4096, 4096)]

out = None


def row(**kw):
    line = json.dumps(kw, default=str)
    out.write(line + "\n"); out.flush(); print(line, flush=True)


def chain(step, M, N, dt, n=101):
    """X <- X @ P, n times back to back with no synchronisation, ping-ponging two buffers: each
    kernel reads what the previous one wrote and overwrites what it read. P is a permutation, so
    the answer is exact: X0 with its columns permuted n times. A kernel that read or wrote before
    its predecessor finished gives the wrong columns. Returns the count of wrong elements."""
    from steps.measure import dtypes
    lib = build_pdl(step, M, N, N, "sm_90", None, dt)
    dev = tvm.cuda(0)
    rng = np.random.default_rng(7)
    perm = rng.permutation(N)
    P = np.zeros((N, N), np.float32)
    P[perm, np.arange(N)] = 1.0  # (X @ P)[:, j] = X[:, perm[j]]
    x0 = rng.uniform(-1, 1, (M, N)).astype(np.float32)
    x0h, Ph = dtypes.from_float32(x0, dt), dtypes.from_float32(P, dt)
    bufs = [dtypes.to_device(tvm, x0h, dt, dev), dtypes.to_device(tvm, dtypes.nan_filled((M, N), dt), dt, dev)]
    Pd = dtypes.to_device(tvm, Ph, dt, dev)
    for i in range(n):
        lib["main"](bufs[i % 2], Pd, bufs[(i + 1) % 2])
    dev.sync()
    got = dtypes.to_float64(dtypes.from_device(bufs[n % 2], dt), dt)
    idx = np.arange(N)
    for _ in range(n):
        idx = idx[perm]
    want = dtypes.to_float64(x0h, dt)[:, idx]
    return int(np.sum(got != want))


def main():
    global out
    from steps.measure import harness
    out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    t00 = time.time()
    for step, M, N in ((20, 1024, 1024), (22, 1024, 1024), (23, 4096, 128), (26, 256, 256), (27, 1024, 1024)):
        for dt in ("bf16", "fp32"):
            try:
                row(chain=step, M=M, N=N, dt=dt, wrong=chain(step, M, N, dt))
            except Exception as ex:  # noqa: BLE001
                row(chain=step, M=M, N=N, dt=dt, error=f"{type(ex).__name__}: {ex}"[:300])
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)
    row(arch=arch, chain_s=round(time.time() - t00, 1))
    for rnd in (1, 2):
        for sh in SHAPES:
            if time.time() - t00 > 300:
                row(note="budget out", at=sh, round=rnd); return
            for dt in ("bf16",) if rnd == 2 or sh[0] * sh[1] * sh[2] > 2**32 else ("bf16", "fp32"):
                t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt, tf32=dt == "fp32")
                row(round=rnd, shape=sh, dt=dt, label="cuBLAS", us=round(t.median_ms * 1e3, 2), err=e)
                pick = schedules.fastest(*sh, precision="tf32" if dt == "fp32" else dt, gpu="nvidia-h200")
                if pick.step.number not in (18, 20, 22, 23, 26, 27):
                    row(shape=sh, dt=dt, note=f"pick is step {pick.step.number}"); continue
                for pdl in ((False, True) if rnd == 1 else (True, False)):
                    t0 = time.time()
                    name = f"probe.pdl:s{pick.step.number}_{'pdl' if pdl else 'plain'}"
                    m = runner.measure(name, *sh, arch, config=pick.config, dtype=dt, seed=1)
                    row(round=rnd, shape=sh, dt=dt, label=f"step {pick.step.number} {'PDL' if pdl else 'plain'}",
                        cfg=str(pick.config), us=None if m.median_ms is None else round(m.median_ms * 1e3, 2),
                        err=m.rel_err, error=m.error, hb=m.host_bound, host_us=m.host_us, s=round(time.time() - t0, 1))


if __name__ == "__main__":
    main()
