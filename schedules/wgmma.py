"""The Hopper rungs' kernel (steps 15-18): TF32 wgmma fed by TMA, written as TensorIR sblocks.

Steps 12-14 schedule the base matmul and tensorize 16 x 16 x 8 tiles onto ``mma.sync``, a warp
instruction Hopper keeps for compatibility. Hopper's own path is three things no schedule
primitive of TVM 0.27 produces:

- ``wgmma.mma_async`` (sm_90a): four warps (a warpgroup) multiply a 64 x n x 8 tile, n up to
  256, reading both operands from shared memory through 64-bit descriptors (or A from
  registers) and accumulating in registers spread over all 128 threads. No TensorIR scope holds
  a 128-thread fragment ("warp" scope is one warp: LowerWarpMemory rejects more), so the
  accumulator cannot be a tensorized buffer; it is a "local" array of n / 2 floats per thread
  whose layout is the instruction's.
- TMA (``cp.async.bulk.tensor``): one thread hands the copy engine a tensor map (built on the
  host, ``cuTensorMapEncodeTiled``) and a box coordinate, and the engine writes the tile into
  shared memory already in the 128-byte swizzle wgmma reads, filling out-of-bounds rows and
  columns with zeros (ragged edges need no predicates).
- mbarriers: the copy engine signals a transaction-counting barrier per stage; consumers wait
  on its phase and arrive on an "empty" barrier when done. Phases, roles (a producer warpgroup
  and consumer warpgroups, ``setmaxnreg``) and async groups are control flow over time, not
  loops over data, which is what schedule primitives transform.

So the kernel is written directly as sblocks with ``T.ptx`` calls, and each rung's idea is one
switch here (``WgmmaConfig`` and subclasses in schedules/config.py):

- step 15: wgmma, one shared buffer: TMA load, wait, 4 wgmma, wait, barrier, repeat;
- step 16: ``stages`` buffers in a ring and a producer warpgroup: warp specialization;
- step 17: 128 x 256 tiles (n = 256 wgmma): a config, half the shared traffic per FLOP;
- step 18: register A: C^T = B^T A^T, so B needs no transposed copy (below).

TF32 wgmma has no transpose: both shared operands must be K-major (k contiguous), and
``B[K, N]`` row-major is N-major. Steps 15-17 make a transposed copy ``Bt[N, K]`` with a copy
kernel before the GEMM (its time is in theirs: 13 us at 2048^3, about 15% of the total). Step
18 computes C^T = B^T A^T instead: wgmma's register operand is B^T, which each thread loads
from B's N-major tile with ordinary shared loads (the register layout is free), and its shared
operand is A[M, K], K-major as stored. The accumulator holds C^T; the epilogue writes it to C.

TMA needs 16-byte row strides: where K (A, and Bt) or N (step 18's B) is not a multiple of 4,
a copy kernel pads that operand with zeros first. Any M, N, K builds.
"""

from __future__ import annotations

import tvm
from tvm.script import tirx as T

from .config import WGMMA_K, WgmmaConfig

# wgmma's instruction shape: 64 rows per warpgroup, 8 k per instruction (TF32).
WG_M, WG_K = 64, 8
WARPGROUP = 128
SWIZZLE_128B = 3  # CUtensorMapSwizzle: a K-major row of 32 floats is one 128-byte swizzle row
L2_PROMOTION_128B = 2
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
# Descriptor strides for a 128B-swizzled K-major tile, in 16-byte units: the leading offset is
# unused in this mode (1 by convention), the stride offset is one 8-row swizzle atom, 1024 B.
DESC_LBO, DESC_SBO = 1, 64
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # setmaxnreg: 40*128 + 232*256 = 64,512 of 65,536


def _fix_noop_barrier_codegen() -> None:
    """TVM 0.27.0.post1's codegen of ``T.cuda.wgmma.noop_barrier`` reads ``reg.dtype``, which its
    TensorLoad nodes lack (they carry ``.ty``): registered again here, reading ``.ty``."""
    from tvm.backend.cuda.codegen.registry import CODEGEN_REGISTRY, register_codegen

    ops = {"uint32": "tirx.cuda_wgmma_noop_barrier_uint32", "float32": "tirx.cuda_wgmma_noop_barrier_float32"}

    @register_codegen("cuda_wgmma_noop_barrier")
    def _noop_barrier(reg):
        res = CODEGEN_REGISTRY[ops[str(reg.ty.dtype)]]([reg])
        return res[0] if isinstance(res, tuple) else res


_fix_noop_barrier_codegen()


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil(a, b) * b


def computation(M: int, N: int, K: int, cfg: WgmmaConfig) -> tvm.tirx.PrimFunc:
    """C[M, N] = A[M, K] @ B[K, N] in TF32 on wgmma: the copy kernels the operands need, then
    the GEMM kernel ``cfg`` describes."""
    register_a = cfg.register_a
    Kp = _round_up(K, 4)
    Np = _round_up(N, 4)
    pad_a = K != Kp                      # A's rows must be 16-byte strided for its tensor map
    pad_b = register_a and N != Np       # step 18 maps B itself: its rows likewise
    BK = WGMMA_K
    BM, BN = cfg.block_m, cfg.block_n
    consumers, stages, producer = cfg.consumers, cfg.stages, cfg.producer
    wg_n = cfg.wgmma_n                   # the n of m64nNk8: BN, or BM for register A
    acc_n = wg_n // 2
    KT = _ceil(K, BK)
    A_fl, B_fl = BM * BK, BN * BK        # floats per stage
    stage_fl = A_fl + B_fl
    bar0 = stages * stage_fl             # 2 * stages uint64 barriers after the tiles
    smem_fl = bar0 + 4 * stages
    threads = cfg.threads
    first = WARPGROUP if producer else 0  # the first consumer thread
    tm, tn = _ceil(M, BM), _ceil(N, BN)
    group = min(cfg.raster, tm)
    mma = f"wgmma.mma_async.sync.aligned.m64n{wg_n}k8.f32.tf32.tf32"
    tx_bytes = 4 * stage_fl
    Ka = Kp if pad_a else K
    # Tensor maps: (dims innermost first, byte strides of the outer dims, box, element strides,
    # interleave, swizzle, L2 promotion, out-of-bounds fill 0 = zeros).
    A_tma = [Ka, M, Ka * 4, BK, BM, 1, 1, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0]
    if register_a:
        Nb = Np if pad_b else N
        B_tma = [Nb, K, Nb * 4, 32, BK, 1, 1, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0]
        B_shape = (K, Nb)
    else:
        B_tma = [Kp, N, Kp * 4, BK, BN, 1, 1, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0]
        B_shape = (N, Kp)

    def full_bar(s):
        return bar0 + 2 * s

    def empty_bar(s):
        return bar0 + 2 * stages + 2 * s

    def frag_offset(s, kk, r, wg, warp, lane):
        """Where B^T's fragment register r of k-step kk lives in stage s (register A).
        wgmma's TF32 A fragment, per warp: rows 16*warp + lane/4 (+8 for r odd), columns
        lane%4 (+4 for r >= 2); here a row is an n of B and a column a k. The tile is
        block_n / 32 TMA boxes of 32 k rows x 32 n, each row 128 B, swizzled: the 16-byte unit
        u of row k sits at u ^ (k % 8)."""
        n = wg * WG_M + warp * 16 + lane // 4 + 8 * (r % 2)
        k = kk * WG_K + lane % 4 + 4 * (r // 2)
        nn = n % 32
        return s * stage_fl + A_fl + (n // 32) * (BK * 32) + k * 32 + (((nn // 4) ^ (k % 8)) * 4) + nn % 4

    @T.macro
    def load_stage(smem, A_map, B_map, kt, s, m0, n0):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(smem[full_bar(s)]), T.uint32(tx_bytes))
        T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl]), T.address_of(A_map), kt * BK, m0,
                        T.address_of(smem[full_bar(s)]))
        if register_a:
            for c in T.unroll(BN // 32):
                T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl + A_fl + c * BK * 32]), T.address_of(B_map),
                                n0 + c * 32, kt * BK, T.address_of(smem[full_bar(s)]))
        else:
            T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl + A_fl]), T.address_of(B_map), kt * BK, n0,
                            T.address_of(smem[full_bar(s)]))

    @T.macro
    def multiply_stage(smem, acc, frag, descA, descB, s, p, wg, warp, lane):
        if register_a:
            for kk in T.unroll(BK // WG_K):
                for r in T.unroll(4):
                    frag[p * 16 + kk * 4 + r] = T.reinterpret("uint32", smem[frag_offset(s, kk, r, wg, warp, lane)])
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // WG_K):
            if register_a:
                T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + kk * WG_K]),
                                                      DESC_LBO, DESC_SBO, SWIZZLE_128B)
                T.ptx[mma](*[acc[i] for i in range(acc_n)], frag[p * 16 + kk * 4], frag[p * 16 + kk * 4 + 1],
                           frag[p * 16 + kk * 4 + 2], frag[p * 16 + kk * 4 + 3], descB[0], T.ptx.pred(True), 1, 1)
            else:
                T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]),
                                                      T.address_of(smem[s * stage_fl + wg * WG_M * BK + kk * WG_K]),
                                                      DESC_LBO, DESC_SBO, SWIZZLE_128B)
                T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + A_fl + kk * WG_K]),
                                                      DESC_LBO, DESC_SBO, SWIZZLE_128B)
                T.ptx[mma](*[acc[i] for i in range(acc_n)], descA[0], descB[0], T.ptx.pred(True), 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    @T.macro
    def store(C, acc, m0, n0, wg, warp, lane):
        # Accumulator register 4i + 2h + c: row 16*warp + lane/4 + 8h, column 8i + 2*(lane%4) + c
        # of the warpgroup's 64 x n tile (of C, or of C^T with register A).
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if register_a:
                        if (m0 + i * 8 + (lane % 4) * 2 + c < M
                                and n0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h < N):
                            C[m0 + i * 8 + (lane % 4) * 2 + c,
                              n0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h] = acc[i * 4 + 2 * h + c]
                    else:
                        if (m0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h < M
                                and n0 + i * 8 + (lane % 4) * 2 + c < N):
                            C[m0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h,
                              n0 + i * 8 + (lane % 4) * 2 + c] = acc[i * 4 + 2 * h + c]

    @T.macro
    def gemm(A_op, B_op, C):
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, "float32", 2, A_op.data, *A_tma)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, "float32", 2, B_op.data, *B_tma)
        for bid in T.thread_binding(tm * tn, thread="blockIdx.x"):
            for tid in T.thread_binding(threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A_op[0:M, 0:Ka], B_op[0:B_shape[0], 0:B_shape[1]])
                    T.writes(C[0:M, 0:N])
                    smem = T.sblock_alloc_buffer((smem_fl,), "float32", scope="shared.dyn", align=1024)
                    acc = T.sblock_alloc_buffer((acc_n,), "float32", scope="local")
                    frag = T.sblock_alloc_buffer((32,), "uint32", scope="local")
                    descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    # Rasterization: `group` tile rows at a time sweep the tile columns, so the
                    # blocks running together share their A rows and B columns in L2.
                    m0 = T.meta_var(((bid // (group * tn)) * group + bid % (group * tn) % T.min(group, tm - bid // (group * tn) * group)) * BM)
                    n0 = T.meta_var((bid % (group * tn) // T.min(group, tm - bid // (group * tn) * group)) * BN)
                    wg = T.meta_var((tid - first) // WARPGROUP)
                    warp = T.meta_var(tid % WARPGROUP // 32)
                    lane = T.meta_var(tid % 32)
                    if tid == 0:
                        for s in T.unroll(stages):
                            T.ptx.mbarrier.init.shared.b64(T.address_of(smem[full_bar(s)]), T.uint32(1))
                            T.ptx.mbarrier.init.shared.b64(T.address_of(smem[empty_bar(s)]),
                                                          T.uint32(WARPGROUP * consumers))
                    T.ptx.fence.proxy.async_.shared__cta()
                    T.tvm_storage_sync("shared")
                    if producer:
                        if tid < WARPGROUP:
                            # The producer warpgroup: one thread keeps the ring full.
                            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                            if tid == 0:
                                for kt in T.serial(KT):
                                    if kt >= stages:
                                        T.cuda.mbarrier_wait(T.address_of(smem[empty_bar(kt % stages)]),
                                                             ((kt // stages) & 1) ^ 1)
                                    load_stage(smem, A_map, B_map, kt, kt % stages, m0, n0)
                        else:
                            T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
                            for i in T.unroll(acc_n):
                                acc[i] = T.float32(0)
                                T.cuda.wgmma.noop_barrier(acc[i])
                            # Two k slices per trip, so each slice's B^T fragments (register A)
                            # have their own registers while the previous slice's wgmma run.
                            for kt2 in T.serial(_ceil(KT, 2)):
                                for p in T.unroll(2):
                                    if kt2 * 2 + p < KT:
                                        T.cuda.mbarrier_wait(T.address_of(smem[full_bar((kt2 * 2 + p) % stages)]),
                                                             ((kt2 * 2 + p) // stages) & 1)
                                        multiply_stage(smem, acc, frag, descA, descB, (kt2 * 2 + p) % stages, p,
                                                       wg, warp, lane)
                                        # The previous slice's wgmma are done: its stage is free.
                                        T.ptx.wgmma.wait_group.sync.aligned(1)
                                        if kt2 * 2 + p > 0:
                                            T.ptx.mbarrier.arrive.shared.b64(
                                                T.address_of(smem[empty_bar((kt2 * 2 + p - 1) % stages)]), T.uint32(1))
                            T.ptx.wgmma.wait_group.sync.aligned(0)
                            for i in T.unroll(acc_n):
                                T.cuda.wgmma.noop_barrier(acc[i])
                            store(C, acc, m0, n0, wg, warp, lane)
                    else:
                        # Every warpgroup multiplies; thread 0 also loads, one slice at a time.
                        for i in T.unroll(acc_n):
                            acc[i] = T.float32(0)
                            T.cuda.wgmma.noop_barrier(acc[i])
                        for kt in T.serial(KT):
                            if tid == 0:
                                load_stage(smem, A_map, B_map, kt, 0, m0, n0)
                            T.cuda.mbarrier_wait(T.address_of(smem[full_bar(0)]), kt & 1)
                            multiply_stage(smem, acc, frag, descA, descB, 0, 0, wg, warp, lane)
                            T.ptx.wgmma.wait_group.sync.aligned(0)
                            # Nobody reads the buffer any more: thread 0 may load the next slice.
                            T.tvm_storage_sync("shared")
                        for i in T.unroll(acc_n):
                            T.cuda.wgmma.noop_barrier(acc[i])
                        store(C, acc, m0, n0, wg, warp, lane)

    @T.macro
    def transpose(B, Bt):
        # Bt[n, k] = B[k, n] (zero for k >= K): 32 x 32 tiles through shared memory, read along
        # n and written along k, both coalesced; rows padded to 33 floats against bank conflicts.
        for by in T.thread_binding(_ceil(N, 32), thread="blockIdx.y"):
            for bx in T.thread_binding(_ceil(Kp, 32), thread="blockIdx.x"):
                for ty in T.thread_binding(8, thread="threadIdx.y"):
                    for tx in T.thread_binding(32, thread="threadIdx.x"):
                        with T.sblock("B_transposed"):
                            T.reads(B[0:K, 0:N])
                            T.writes(Bt[0:N, 0:Kp])
                            tile = T.sblock_alloc_buffer((32 * 33,), "float32", scope="shared")
                            for r in T.unroll(4):
                                tile[(ty + 8 * r) * 33 + tx] = T.if_then_else(
                                    bx * 32 + ty + 8 * r < K and by * 32 + tx < N,
                                    B[T.min(bx * 32 + ty + 8 * r, K - 1), T.min(by * 32 + tx, N - 1)], T.float32(0))
                            T.tvm_storage_sync("shared")
                            for r in T.unroll(4):
                                if by * 32 + ty + 8 * r < N and bx * 32 + tx < Kp:
                                    Bt[by * 32 + ty + 8 * r, bx * 32 + tx] = tile[tx * 33 + ty + 8 * r]

    @T.macro
    def pad_copy(X, Xp, rows, cols, cols_p, name):
        # Xp[r, c] = X[r, c], zero in the padding columns: one thread per element.
        for b in T.thread_binding(_ceil(rows * cols_p, 256), thread="blockIdx.x"):
            for t in T.thread_binding(256, thread="threadIdx.x"):
                with T.sblock(name):
                    T.reads(X[0:rows, 0:cols])
                    T.writes(Xp[0:rows, 0:cols_p])
                    if b * 256 + t < rows * cols_p:
                        Xp[(b * 256 + t) // cols_p, (b * 256 + t) % cols_p] = T.if_then_else(
                            (b * 256 + t) % cols_p < cols,
                            X[(b * 256 + t) // cols_p, T.min((b * 256 + t) % cols_p, cols - 1)], T.float32(0))

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        # Copies the operands need before the GEMM (an unused one is never allocated).
        A_pad = T.alloc_buffer((M, Kp), "float32")
        B_pad = T.alloc_buffer((K, Np), "float32")
        Bt = T.alloc_buffer((N, Kp), "float32")
        if pad_a:
            pad_copy(A, A_pad, M, K, Kp, "A_pad")
        if not register_a:
            transpose(B, Bt)
        elif pad_b:
            pad_copy(B, B_pad, K, N, Np, "B_pad")
        gemm(A_pad if pad_a else A, Bt if not register_a else B_pad if pad_b else B, C)
    return main
