"""Probe (issue 49): tall-skinny 16-bit products (N <= 64 << M) on mma.sync, A streamed from
global memory straight into the fragments' registers (no shared memory for A), B staged per round
in shared memory with its k rows permuted so a plain ldmatrix.trans gives the fragment that
matches A's 16-byte loads.

A warp owns 16 rows of A and one part of K (64 k a round); a block is `rows` x `parts` warps,
the warps of one part sharing the round's B slab; the parts are added through shared memory.

    python probe/tall_mma.py OUT.jsonl      (on the GPU)
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

import tvm
from tvm.script import tirx as T

from schedules.config import DTYPES as TVM_DTYPES

WARP = 32


@dataclass(frozen=True)
class TallConfig:
    rows: int = 4  # warps along M (16 rows each)
    parts: int = 4  # warps along K
    early: bool = True  # the next round's loads issued before this round's barrier
    vecs: int = 2  # 16-byte loads of each of a thread's two rows a round
    depth: int = 1  # rounds of loads in flight ahead of the one multiplied
    mode: str = ""  # where the time goes: 'no_b' (B never loaded: wrong sums), 'no_mma' (A's values summed on CUDA cores)

    def as_dict(self):
        return {"rows": self.rows, "parts": self.parts, "early": self.early, "vecs": self.vecs, "mode": self.mode, "depth": self.depth}

    def validate(self, M, N, K):
        pass


def kernel(M, N, K, cfg: TallConfig, dtype="bf16"):
    dt = TVM_DTYPES[dtype]
    R, S, V, early = cfg.rows, cfg.parts, cfg.vecs, cfg.early
    depth = cfg.depth
    load_b, use_mma = cfg.mode != "no_b", cfg.mode != "no_mma"
    chunk = 32 * V  # k a warp takes a round: 4 lanes x V 16-byte vectors of 8
    run = 8 * V  # a thread's consecutive k of a row, a round
    Q = chunk // 16  # k16 mmas a round
    threads = WARP * R * S
    NP = -(-N // 16) * 16  # columns in shared memory: whole pairs of n8 tiles (ldmatrix.x4)
    NT = NP // 8
    stride = NP + 8  # 16 bytes of padding a row: ldmatrix's 8 rows fall in distinct banks
    slab = chunk * S
    rounds = -(-K // slab)
    groups = NP // 8  # 16-byte pieces of a row of B
    assert slab * groups % threads == 0, (slab, groups, threads)
    pieces = slab * groups // threads
    blocks = -(-M // (16 * R))
    pstride = NP + 8
    AR = 2 * run  # a thread's A registers a round: two rows
    assert K % 8 == 0 and N % 8 == 0

    def a_row(bx, tid, h):
        return bx * 16 * R + tid // WARP % R * 16 + tid % WARP // 4 + 8 * h

    def a_k(r, tid, w):
        return r * slab + tid // WARP // R * chunk + tid % 4 * run + 8 * w

    def b_k(i, tid):  # the k (within a slab) of a thread's piece i of B
        return (i * threads + tid) // groups

    def b_col(i, tid):
        return (i * threads + tid) % groups * 8

    def s_row(p):  # shared row of slab row p: chunk p // chunk, then mma q's 16 rows in logical order
        c, q, e = p % chunk // run, p % run // 4, p % 4
        return p // chunk * chunk + 16 * q + 8 * (e // 2) + 2 * c + e % 2

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), dt), B: T.Buffer((K, N), dt), C: T.Buffer((M, N), dt)):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tid in T.thread_binding(threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A[0:M, 0:K], B[0:K, 0:N])
                    T.writes(C[0:M, 0:N])
                    acc = T.sblock_alloc_buffer((NT * 4,), "float32", scope="local")
                    a_cur = T.sblock_alloc_buffer((AR,), dt, scope="local")
                    a_nxt = T.sblock_alloc_buffer((AR,), dt, scope="local")
                    b_cur = T.sblock_alloc_buffer((pieces * 8,), dt, scope="local")
                    b_nxt = T.sblock_alloc_buffer((pieces * 8,), dt, scope="local")
                    a3 = T.sblock_alloc_buffer((3 * AR if depth == 2 else 1,), dt, scope="local")
                    b3 = T.sblock_alloc_buffer((3 * pieces * 8 if depth == 2 else 1,), dt, scope="local")
                    fa = T.sblock_alloc_buffer((8,), dt, scope="local")
                    fb = T.sblock_alloc_buffer((8,), dt, scope="local")
                    Bs = T.sblock_alloc_buffer((2 * slab * stride,), dt, scope="shared.dyn", align=16)
                    part = T.sblock_alloc_buffer((R * S * 16 * pstride,), "float32", scope="shared.dyn", align=16)
                    for i in T.unroll(NT * 4):
                        acc[i] = T.float32(0)
                    if depth == 1:
                        for h in T.unroll(2):
                            for w in T.unroll(V):
                                if a_row(bx, tid, h) < M and a_k(0, tid, w) < K:
                                    for v in T.vectorized(8):
                                        a_cur[h * run + w * 8 + v] = A[a_row(bx, tid, h), a_k(0, tid, w) + v]
                                else:
                                    for v in T.vectorized(8):
                                        a_cur[h * run + w * 8 + v] = T.Cast(dt, T.float32(0))
                        for i in T.unroll(pieces):
                            if load_b and b_k(i, tid) < K and b_col(i, tid) < N:
                                for v in T.vectorized(8):
                                    b_cur[i * 8 + v] = B[b_k(i, tid), b_col(i, tid) + v]
                            else:
                                for v in T.vectorized(8):
                                    b_cur[i * 8 + v] = T.Cast(dt, T.float32(0))
                        for r in T.serial(rounds):
                            if early and r + 1 < rounds:
                                for h in T.unroll(2):
                                    for w in T.unroll(V):
                                        if a_row(bx, tid, h) < M and a_k(r + 1, tid, w) < K:
                                            for v in T.vectorized(8):
                                                a_nxt[h * run + w * 8 + v] = A[a_row(bx, tid, h), a_k(r + 1, tid, w) + v]
                                        else:
                                            for v in T.vectorized(8):
                                                a_nxt[h * run + w * 8 + v] = T.Cast(dt, T.float32(0))
                                for i in T.unroll(pieces):
                                    if load_b and (r + 1) * slab + b_k(i, tid) < K and b_col(i, tid) < N:
                                        for v in T.vectorized(8):
                                            b_nxt[i * 8 + v] = B[(r + 1) * slab + b_k(i, tid), b_col(i, tid) + v]
                                    else:
                                        for v in T.vectorized(8):
                                            b_nxt[i * 8 + v] = T.Cast(dt, T.float32(0))
                            for i in T.unroll(pieces):
                                for v in T.vectorized(8):
                                    Bs[(r % 2) * slab * stride + s_row(b_k(i, tid)) * stride + b_col(i, tid) + v] = b_cur[i * 8 + v]
                            T.tvm_storage_sync("shared.dyn")
                            if not early and r + 1 < rounds:
                                for h in T.unroll(2):
                                    for w in T.unroll(V):
                                        if a_row(bx, tid, h) < M and a_k(r + 1, tid, w) < K:
                                            for v in T.vectorized(8):
                                                a_nxt[h * run + w * 8 + v] = A[a_row(bx, tid, h), a_k(r + 1, tid, w) + v]
                                        else:
                                            for v in T.vectorized(8):
                                                a_nxt[h * run + w * 8 + v] = T.Cast(dt, T.float32(0))
                                for i in T.unroll(pieces):
                                    if load_b and (r + 1) * slab + b_k(i, tid) < K and b_col(i, tid) < N:
                                        for v in T.vectorized(8):
                                            b_nxt[i * 8 + v] = B[(r + 1) * slab + b_k(i, tid), b_col(i, tid) + v]
                                    else:
                                        for v in T.vectorized(8):
                                            b_nxt[i * 8 + v] = T.Cast(dt, T.float32(0))
                            if not use_mma:
                                for i in T.unroll(AR):
                                    acc[i % (NT * 4)] = acc[i % (NT * 4)] + T.Cast("float32", a_cur[i])
                            for q in T.unroll(Q if use_mma else 0):
                                # mma q's A fragment: row g's k 4q, 4q+1 | row g+8's | row g's 4q+2, 4q+3 | row g+8's
                                for e in T.unroll(8):
                                    fa[e] = a_cur[e // 2 % 2 * run + 4 * q + e // 4 * 2 + e % 2]
                                for t2 in T.unroll(NT // 2):
                                    T.evaluate(T.ptx_legacy.ldmatrix(
                                        True, 4, ".b16", fb.data, 0, Bs.access_ptr("r"),
                                        (r % 2) * slab * stride + (tid // WARP // R * chunk + 16 * q + tid % 16) * stride
                                        + 16 * t2 + 8 * (tid % WARP // 16), dtype=dt))
                                    for half in T.unroll(2):
                                        T.evaluate(T.ptx_legacy.mma(
                                            "m16n8k16", "row", "col", dtype, dtype, "fp32",
                                            fa.data, 0, fb.data, 4 * half, acc.data, (2 * t2 + half) * 4,
                                            False, dtype="float32"))
                            if r + 1 < rounds:
                                for i in T.unroll(AR):
                                    a_cur[i] = a_nxt[i]
                                for i in T.unroll(pieces * 8):
                                    b_cur[i] = b_nxt[i]
                    else:
                        # depth 2: three register sets; round r's loads were issued at round r - 2
                        for u0 in T.unroll(2):
                            for h in T.unroll(2):
                                for w in T.unroll(V):
                                    if u0 < rounds and a_row(bx, tid, h) < M and a_k(u0, tid, w) < K:
                                        for v in T.vectorized(8):
                                            a3[u0 * AR + h * run + w * 8 + v] = A[a_row(bx, tid, h), a_k(u0, tid, w) + v]
                                    else:
                                        for v in T.vectorized(8):
                                            a3[u0 * AR + h * run + w * 8 + v] = T.Cast(dt, T.float32(0))
                            for i in T.unroll(pieces):
                                if load_b and u0 * slab + b_k(i, tid) < K and b_col(i, tid) < N:
                                    for v in T.vectorized(8):
                                        b3[(u0 * pieces + i) * 8 + v] = B[u0 * slab + b_k(i, tid), b_col(i, tid) + v]
                                else:
                                    for v in T.vectorized(8):
                                        b3[(u0 * pieces + i) * 8 + v] = T.Cast(dt, T.float32(0))
                        for p3 in T.serial(-(-rounds // 3)):
                            for u in T.unroll(3):
                                if p3 * 3 + u < rounds:
                                    if p3 * 3 + u + 2 < rounds:
                                        for h in T.unroll(2):
                                            for w in T.unroll(V):
                                                if a_row(bx, tid, h) < M and a_k(p3 * 3 + u + 2, tid, w) < K:
                                                    for v in T.vectorized(8):
                                                        a3[(u + 2) % 3 * AR + h * run + w * 8 + v] = A[a_row(bx, tid, h), a_k(p3 * 3 + u + 2, tid, w) + v]
                                                else:
                                                    for v in T.vectorized(8):
                                                        a3[(u + 2) % 3 * AR + h * run + w * 8 + v] = T.Cast(dt, T.float32(0))
                                        for i in T.unroll(pieces):
                                            if load_b and (p3 * 3 + u + 2) * slab + b_k(i, tid) < K and b_col(i, tid) < N:
                                                for v in T.vectorized(8):
                                                    b3[((u + 2) % 3 * pieces + i) * 8 + v] = B[(p3 * 3 + u + 2) * slab + b_k(i, tid), b_col(i, tid) + v]
                                            else:
                                                for v in T.vectorized(8):
                                                    b3[((u + 2) % 3 * pieces + i) * 8 + v] = T.Cast(dt, T.float32(0))
                                    for i in T.unroll(pieces):
                                        for v in T.vectorized(8):
                                            Bs[(p3 * 3 + u) % 2 * slab * stride + s_row(b_k(i, tid)) * stride + b_col(i, tid) + v] = b3[(u * pieces + i) * 8 + v]
                                    T.tvm_storage_sync("shared.dyn")
                                    for q in T.unroll(Q):
                                        for e in T.unroll(8):
                                            fa[e] = a3[u * AR + e // 2 % 2 * run + 4 * q + e // 4 * 2 + e % 2]
                                        for t2 in T.unroll(NT // 2):
                                            T.evaluate(T.ptx_legacy.ldmatrix(
                                                True, 4, ".b16", fb.data, 0, Bs.access_ptr("r"),
                                                (p3 * 3 + u) % 2 * slab * stride + (tid // WARP // R * chunk + 16 * q + tid % 16) * stride
                                                + 16 * t2 + 8 * (tid % WARP // 16), dtype=dt))
                                            for half in T.unroll(2):
                                                T.evaluate(T.ptx_legacy.mma(
                                                    "m16n8k16", "row", "col", dtype, dtype, "fp32",
                                                    fa.data, 0, fb.data, 4 * half, acc.data, (2 * t2 + half) * 4,
                                                    False, dtype="float32"))
                    # the parts' sums through shared memory, added in part order
                    for t in T.unroll(NT):
                        for e in T.unroll(4):
                            part[((tid // WARP % R * S + tid // WARP // R) * 16 + tid % WARP // 4 + 8 * (e // 2)) * pstride
                                 + 8 * t + tid % 4 * 2 + e % 2] = acc[t * 4 + e]
                    T.tvm_storage_sync("shared.dyn")
                    for o in T.serial(-(-(R * 16 * N) // threads)):
                        if o * threads + tid < R * 16 * N and bx * 16 * R + (o * threads + tid) // N < M:
                            C[bx * 16 * R + (o * threads + tid) // N, (o * threads + tid) % N] = T.Cast(dt, _sum_parts(
                                part, S, pstride, (o * threads + tid) // N // 16, (o * threads + tid) // N % 16,
                                (o * threads + tid) % N))

    return main


def _sum_parts(part, S, pstride, rg, row, col):
    total = part[((rg * S) * 16 + row) * pstride + col]
    for s in range(1, S):
        total = total + part[((rg * S + s) * 16 + row) * pstride + col]
    return total


def build(M, N, K, arch, config, dtype="bf16"):
    cfg = config or TallConfig()
    mod = tvm.IRModule({"main": kernel(M, N, K, cfg, dtype)})
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(mod, target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))


out = None


def row(**kw):
    line = json.dumps(kw, default=str)
    out.write(line + "\n"); out.flush(); print(line, flush=True)


def main():
    global out
    from steps.measure import harness
    import schedules
    out = open(sys.argv[1], "a")
    arch = harness.gpu_arch()
    t00 = time.time()
    runner = harness.KernelRunner(repeat=50, seed=1, timeout_s=60)

    def meas(sh, dt, cfg, label):
        t0 = time.time()
        try:
            if isinstance(cfg, TallConfig):
                m = runner.measure("probe.tall_mma:build", *sh, arch, config=cfg, dtype=dt, seed=1)
            else:
                m = runner.measure(cfg[0], *sh, arch, config=cfg[1], dtype=dt, seed=1)
        except Exception as e:  # noqa: BLE001
            row(shape=sh, dt=dt, label=label, error=f"raise {type(e).__name__}: {e}"); return
        row(shape=sh, dt=dt, label=label, cfg=cfg.as_dict() if isinstance(cfg, TallConfig) else str(cfg[1]),
            us=None if m.median_ms is None else m.median_ms * 1e3, err=m.rel_err, error=m.error,
            hb=m.host_bound, s=round(time.time() - t0, 1))

    TC = TallConfig
    plan = {
        (8192, 32, 2048): [TC(4, 2), TC(4, 2, depth=2), TC(4, 4, depth=2), TC(2, 4, depth=2), TC(4, 2, depth=2, mode="no_mma"), TC(4, 2)],
        (16384, 32, 4096): [TC(4, 4), TC(4, 4, depth=2), TC(4, 2, depth=2)],
        (4096, 16, 4096): [TC(2, 8), TC(2, 8, depth=2), TC(2, 4, depth=2)],
        (4096, 32, 4096): [TC(2, 8), TC(2, 8, depth=2), TC(2, 4, depth=2)],
        (2048, 64, 2048): [TC(1, 8), TC(1, 8, depth=2), TC(1, 4, depth=2)],
    }
    for sh in [(1000, 40, 1032), (77, 8, 4104), (300, 64, 200)]:
        meas(sh, "bf16", TallConfig(2, 4, depth=2), "check")
        meas(sh, "fp16", TallConfig(4, 2, depth=2), "check")
    from steps.measure import roofline
    row(copy=roofline.measure_bandwidth(arch))
    for dt in ("bf16",):
        for sh, cfgs in plan.items():
            if time.time() - t00 > 420:
                row(note="budget out", at=sh); break
            t, e = harness.time_cublas(*sh, repeat=50, seed=1, dtype=dt)
            row(shape=sh, dt=dt, label="cublas", us=t.median_ms * 1e3, err=e)
            pick = schedules.fastest(*sh, precision=dt)
            meas(sh, dt, (pick.step.number, pick.config), f"pick step {pick.step.number}")
            for cfg in cfgs:
                meas(sh, dt, cfg, "tall")
    row(copy=roofline.measure_bandwidth(arch))
    runner.close()
    row(note="done", s=round(time.time() - t00, 1))


if __name__ == "__main__":
    main()
