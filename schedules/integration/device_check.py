"""The float64 check, on the device that ran the kernel: for a sweep whose GPUs are remote.

The local path checks a candidate by copying C to the host and comparing it with numpy's
float64 product (``harness.verify_on``). Over TVM's RPC that copy crosses a socket, and TVM's
RPC moves tensors at only 30-50 MB/s (measured: ~35 MB/s uploads on the H100 machine, 50 MB/s
each way on a 2-core one; ~1.4 s per candidate more than the local path at 4096x4096x64 on the
H100, results/nvidia-h100-80gb-hbm3/evidence/rpc_tries.txt). At 4096² C is 64 MiB, so the check cost more than
the kernel's timing. Here the same check runs where C already is:

- ``uniform``: fresh random inputs made there, A and B in [-1, 1) as the local path's numpy
  draws them (24 bits of a hash of the element's index and a seed the client draws per size and
  session; nothing but the seed crosses the network: the inputs' upload was the next cost, ~35
  MB/s, 37 s of each server's 96 s for issue 33's sweep of 43 shapes, and every server paid it);
- ``poison``: C = NaN (a quiet NaN's bits), before each run: an element the kernel never
  writes stays NaN, and fails;
- ``reference``: R = float64(A) @ float64(B), every product and sum in float64, once per size
  on the server (numpy's product on the client, the local path's, is the same arithmetic in
  another order: the two errors agree to ~1e-12 relative, far below any tolerance);
- ``error_sums``: per column j, E[j] = sum_i (float64(C[i, j]) - R[i, j])² and
  Q[j] = sum_i R[i, j]²; the client downloads the 2·N doubles and takes
  sqrt(sum E) / sqrt(sum Q), ``harness.relative_error``'s ‖out − ref‖ / ‖ref‖.
  NaN or ±inf anywhere in C makes sum E NaN or inf, which the client reports as inf: it never
  passes, as the local check's ``isfinite`` makes sure.

The sums go per column, not per row: a thread walks down its column, so a warp reads 32
consecutive floats per row (coalesced) and no thread has to combine with another. Sizes are
symbolic: one library serves every size a sweep has, uploaded once per session; M·N, M·K and
K·N must be below 2^31 (int32 indices, as in the steps' kernels).

Pure IR like the steps: nothing here touches a device. ``build`` compiles for CUDA (scheduled:
threads bound) or for the CPU (llvm, unscheduled), which the tests of the RPC path use.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import s_tir
from tvm.script import tirx as T
from tvm.target import Target

THREADS = 256  # per block, every kernel: 8 rows x 32 columns for the reference, 256 columns for the sums
REFERENCE_ROWS = 8  # the reference's block is 8 x 32 outputs: a warp along j reads B coalesced


@T.prim_func(s_tir=True)
def reference(a: T.handle, b: T.handle, r: T.handle):
    T.func_attr({"global_symbol": "reference", "tirx.noalias": True})
    M, N, K = T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, (M, K), "float32")
    B = T.match_buffer(b, (K, N), "float32")
    R = T.match_buffer(r, (M, N), "float64")
    for i, j, k in T.grid(M, N, K):
        with T.sblock("R"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                R[vi, vj] = T.float64(0)
            R[vi, vj] = R[vi, vj] + T.Cast("float64", A[vi, vk]) * T.Cast("float64", B[vk, vj])


def _pcg_hash(x):
    """PCG's output permutation of a 32-bit value (a bijection: distinct elements get distinct
    values), in int64 masked to 32 bits: no product overflows, so no wrap-around is assumed
    (TVM's LLVM code treats an overflowing integer product as undefined)."""
    mask = T.int64(0xFFFFFFFF)
    state = (x * T.int64(747796405) + T.int64(2891336453)) & mask
    word = (((state >> ((state >> T.int64(28)) + T.int64(4))) ^ state) * T.int64(277803737)) & mask
    return (word >> T.int64(22)) ^ word


@T.prim_func(s_tir=True)
def uniform(x: T.handle, seed: T.int64):
    T.func_attr({"global_symbol": "uniform", "tirx.noalias": True})
    R, C = T.int32(), T.int32()
    X = T.match_buffer(x, (R, C), "float32")
    for i, j in T.grid(R, C):
        with T.sblock("U"):
            vi, vj = T.axis.remap("SS", [i, j])
            # the top 24 bits of a hash of (element, seed), as k / 2^23 - 1: [-1, 1), exact in float32
            X[vi, vj] = T.Cast("float32", _pcg_hash(T.Cast("int64", vi * C + vj) ^ _pcg_hash(seed & T.int64(0xFFFFFFFF)))
                               >> T.int64(8)) * T.float32(1.0 / (1 << 23)) - T.float32(1)


@T.prim_func(s_tir=True)
def poison(c: T.handle):
    T.func_attr({"global_symbol": "poison", "tirx.noalias": True})
    M, N = T.int32(), T.int32()
    C = T.match_buffer(c, (M, N), "float32")
    for i, j in T.grid(M, N):
        with T.sblock("P"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.reinterpret("float32", T.uint32(0x7FC00000))  # bits, whatever fast-math assumes


@T.prim_func(s_tir=True)
def error_sums(c: T.handle, r: T.handle, e: T.handle, q: T.handle):
    T.func_attr({"global_symbol": "error_sums", "tirx.noalias": True})
    M, N = T.int32(), T.int32()
    C = T.match_buffer(c, (M, N), "float32")
    R = T.match_buffer(r, (M, N), "float64")
    E = T.match_buffer(e, (N,), "float64")
    Q = T.match_buffer(q, (N,), "float64")
    for j, i in T.grid(N, M):
        with T.sblock("E"):
            vj, vi = T.axis.remap("SR", [j, i])
            with T.init():
                E[vj] = T.float64(0)
                Q[vj] = T.float64(0)
            E[vj] = E[vj] + (T.Cast("float64", C[vi, vj]) - R[vi, vj]) * (T.Cast("float64", C[vi, vj]) - R[vi, vj])
            Q[vj] = Q[vj] + R[vi, vj] * R[vi, vj]


def _schedule_cuda(mod: tvm.IRModule) -> tvm.IRModule:
    sch = s_tir.Schedule(mod)
    # uniform and poison: one element per thread
    for func, name in (("uniform", "U"), ("poison", "P")):
        sch.work_on(func)
        i, j = sch.get_loops(sch.get_sblock(name))
        bx, tx = sch.split(sch.fuse(i, j), [None, THREADS])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
    # reference: one output per thread, blocks of 8 x 32, k serial (step 1's grid, in float64)
    sch.work_on("reference")
    block = sch.get_sblock("R")
    accumulator = sch.cache_write(block, 0, "local")  # the sum in a register, stored once
    i, j, k = sch.get_loops(block)
    bi, ti = sch.split(i, [None, REFERENCE_ROWS])
    bj, tj = sch.split(j, [None, THREADS // REFERENCE_ROWS])
    sch.reorder(bi, bj, ti, tj, k)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    sch.reverse_compute_at(accumulator, tj)
    sch.decompose_reduction(block, k)
    # error_sums: one column per thread, its rows serial
    sch.work_on("error_sums")
    block = sch.get_sblock("E")
    sums = [sch.cache_write(block, index, "local") for index in (0, 1)]
    j, i = sch.get_loops(block)
    bj, tj = sch.split(j, [None, THREADS])
    sch.bind(bj, "blockIdx.x")
    sch.bind(tj, "threadIdx.x")
    for store in sums:
        sch.reverse_compute_at(store, tj)
    sch.decompose_reduction(block, i)
    return sch.mod


def module() -> tvm.IRModule:
    return tvm.IRModule({"uniform": uniform, "poison": poison, "reference": reference, "error_sums": error_sums})


def build(device: str = "cuda", arch: str = "sm_90"):
    """The checker's four functions compiled for `device` ("cuda" at `arch`, or "cpu")."""
    if device == "cuda":
        from .. import target  # the registry's arch check, and the project's NVRTC set-up

        return tvm.compile(_schedule_cuda(module()), target=target(arch))
    if device == "cpu":
        return tvm.compile(module(), target=Target({"kind": "llvm"}))
    raise ValueError(f"device_check.build: no device {device!r} (cuda or cpu)")


def relative_error(error_sums_: np.ndarray, ref_sums: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ from ``error_sums``'s E and Q; NaN or inf in C gives inf."""
    err = float(np.sum(error_sums_))
    if not math.isfinite(err):
        return math.inf
    return math.sqrt(err) / math.sqrt(float(np.sum(ref_sums)))
