"""Kernels for tests/test_rpc.py: sweep candidates built for the CPU, a few of them misbehaving.

``build`` is an ``rpc.build_job`` builder ("tests.rpc_kernels:build"): each candidate is its
CPU kernel (``rpc.build_cpu``), except where the config's ``raster`` asks for a kernel that
misbehaves on the server, through a libc call the kernel makes before it computes:

- SLOW sleeps SLOW_MS in every call (a candidate the test can kill its server under);
- HANG sleeps a minute in every call (a candidate past its timeout);
- CRASH aborts (a kernel that crashes its server's session, as a CUDA fault can);
- IDLE returns without writing C (the check must then read the poison, NaN, and fail it).
"""

from __future__ import annotations

IDLE, SLOW, HANG, CRASH = 96, 97, 98, 99
SLOW_MS = 400


def _misbehaving(M: int, N: int, K: int, call, computes: bool = True):
    from tvm.script import tirx as T

    @T.prim_func
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        T.evaluate(call())
        for i, j in T.grid(M if computes else 0, N):
            C[i, j] = T.float32(0)
            for k in range(K):
                C[i, j] = C[i, j] + A[i, k] * B[k, j]

    return main


def build(step_number: int, M: int, N: int, K: int, arch: str, config: dict):
    import tvm
    from tvm.script import tirx as T
    from tvm.target import Target

    from steps.measure import rpc

    calls = {
        SLOW: lambda: T.call_extern("int32", "usleep", SLOW_MS * 1000),
        HANG: lambda: T.call_extern("int32", "sleep", 60),
        CRASH: lambda: T.call_extern("int32", "abort"),
        IDLE: lambda: T.int32(0),
    }
    raster = config.get("raster")
    if raster not in calls:
        return rpc.build_cpu(step_number, M, N, K, arch, config)
    kernel = _misbehaving(M, N, K, calls[raster], computes=raster != IDLE)
    return tvm.compile(tvm.IRModule({"main": kernel}), target=Target({"kind": "llvm"}))
