"""The base computation every step schedules: fp32 ``C[M, N] = A[M, K] @ B[K, N]``.

Written once in TensorIR (TVMScript). Each step receives this unscheduled function, with
the sizes baked in as constants, and rewrites its loop nest; the arithmetic never changes.
"""

from tvm.script import tirx as T


def matmul(M: int, N: int, K: int):
    """The unscheduled matmul for one problem size; the compute block is named ``C``."""

    @T.prim_func(s_tir=True)
    def main(
        A: T.Buffer((M, K), "float32"),
        B: T.Buffer((K, N), "float32"),
        C: T.Buffer((M, N), "float32"),
    ):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i, j, k in T.grid(M, N, K):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    return main
