"""The base computation every step schedules: fp32 ``C[M, N] = A[M, K] @ B[K, N]``.

Written once in TensorIR (TVMScript). Each step receives this unscheduled function, with
the sizes baked in as constants, and rewrites its loop nest; the arithmetic never changes.
With an epilogue (schedules/transforms/epilogue.py) the product goes to an intermediate C and a block
``epilogue`` writes ``D = act(alpha * C + bias + beta * C_in)``; the step schedules the product
as before and ``epilogue.fuse`` folds that block into its store.
"""

from tvm.script import tirx as T


def matmul(M: int, N: int, K: int, dtype: str = "float32"):
    """The unscheduled matmul for one problem size; the compute block is named ``C``.

    `dtype` float16 or bfloat16: A and B in that dtype, the products summed in fp32 in block
    ``C`` (an intermediate ``C_acc``), and block ``C_store`` rounds the sum to the dtype."""
    if dtype != "float32":
        return _matmul_16bit(M, N, K, dtype)

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


def _matmul_16bit(M: int, N: int, K: int, dtype: str):
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), dtype), B: T.Buffer((K, N), dtype), C: T.Buffer((M, N), dtype)):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        C_acc = T.sblock_alloc_buffer((M, N), "float32")
        for i, j, k in T.grid(M, N, K):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C_acc[vi, vj] = T.float32(0)
                C_acc[vi, vj] = C_acc[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast("float32", B[vk, vj])
        for i, j in T.grid(M, N):
            with T.sblock("C_store"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = T.Cast(dtype, C_acc[vi, vj])

    return main


def matmul_epilogue(M: int, N: int, K: int, epilogue):
    """The matmul followed by `epilogue` (an epilogue.Epilogue): parameters A, B, then bias [N]
    where it adds one, C_in [M, N] where beta is nonzero, then D [M, N]."""
    value = epilogue.value

    @T.macro
    def body(A, B, bias, C_in, D):
        C = T.sblock_alloc_buffer((M, N), "float32")
        for i, j, k in T.grid(M, N, K):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        for i, j in T.grid(M, N):
            with T.sblock("epilogue"):
                vi, vj = T.axis.remap("SS", [i, j])
                D[vi, vj] = value(C[vi, vj], vi, vj, bias, C_in)

    # One signature per set of inputs (TVMScript's parameters are fixed at parse time).
    if epilogue.bias and epilogue.reads_c:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), bias: T.Buffer((N,), "float32"),
                 C_in: T.Buffer((M, N), "float32"), D: T.Buffer((M, N), "float32")):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, bias, C_in, D)
    elif epilogue.bias:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), bias: T.Buffer((N,), "float32"),
                 D: T.Buffer((M, N), "float32")):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, bias, None, D)
    elif epilogue.reads_c:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C_in: T.Buffer((M, N), "float32"),
                 D: T.Buffer((M, N), "float32")):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, None, C_in, D)
    else:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), D: T.Buffer((M, N), "float32")):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            body(A, B, None, None, D)

    return main
