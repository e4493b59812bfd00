"""The Hopper rungs' kernel (steps 15-19): wgmma fed by TMA, written as TensorIR sblocks.

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
- step 18: register A: C^T = B^T A^T, so B needs no transposed copy (below);
- step 19: ``split``, 3xTF32: the producer writes A's small half beside each tile, consumers
  split B^T in registers and issue three wgmma per 8 k, promoting to an fp32 total
  (schedules/step19_3xtf32_wgmma.py says how and what it measured).

TF32 wgmma has no transpose: both shared operands must be K-major (k contiguous), and
``B[K, N]`` row-major is N-major. Steps 15-17 make a transposed copy ``Bt[N, K]`` with a copy
kernel before the GEMM (its time is in theirs: 13 us at 2048^3, about 15% of the total). Step
18 computes C^T = B^T A^T instead: wgmma's register operand is B^T, which each thread loads
from B's N-major tile with ordinary shared loads (the register layout is free), and its shared
operand is A[M, K], K-major as stored. The accumulator holds C^T; the epilogue writes it to C.

TMA needs 16-byte row strides: where K (A, and Bt) or N (step 18's B) is not a multiple of 4,
a copy kernel pads that operand with zeros first. Any M, N, K builds. The copies (the transpose
and the pads) are plain TensorIR blocks, scheduled by ``schedule_copies``; only the GEMM is
written with its threads.
"""

from __future__ import annotations

import tvm
from tvm.script import tirx as T

from ..lowering import fp32_fallback
from ..config import WGMMA_K, WgmmaConfig

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
TF32_MASK = 0xFFFFE000  # the bits of an fp32 that TF32 keeps (the tensor core drops the other 13)
# 3xTF32 at a long K: the promoted accumulator is itself added into C every FLUSH_CHUNKS chunks,
# so no fp32 register sums more than that many chunk sums (schedules/lowering/long_k.py's reason).
FLUSH_CHUNKS = 512
SPLITTERS = 96  # split: the producer's warps 1-3 write A's small half (warp 0 loads)
SPLIT_BATCH = 4  # float4 loads in flight per splitting thread


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
    split = cfg.split                    # 3xTF32 (step 19)
    promote = cfg.promote if split else 1
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
    As0 = A_fl + B_fl                    # split: A's small half, after the two tiles TMA writes
    stage_fl = A_fl + B_fl + (A_fl if split else 0)
    bar0 = stages * stage_fl             # cfg.barriers * stages uint64 barriers after the tiles
    smem_fl = bar0 + 2 * cfg.barriers * stages
    threads = cfg.threads
    first = WARPGROUP if producer else 0  # the first consumer thread
    tm, tn = _ceil(M, BM), _ceil(N, BN)
    group = min(cfg.raster, tm)
    mma = f"wgmma.mma_async.sync.aligned.m64n{wg_n}k8.f32.tf32.tf32"
    tx_bytes = 4 * (A_fl + B_fl)
    tiny_bits = fp32_fallback.tiny_bound_bits(K)
    # Each consumer's chunks of `promote` slices start `promote / consumers` slices apart, so one
    # drains its wgmma to promote while the other's keep the tensor core busy.
    flush = split and KT > 2 * promote * FLUSH_CHUNKS
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

    def ready_bar(s):
        return bar0 + 4 * stages + 2 * s

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

    def c_row(m0, i, c, lane):
        """Register A: the row of C (a column of C^T) that accumulator register 4i + 2h + c of
        this thread holds: column 8i + 2 (lane % 4) + c of the warpgroup's 64 x n tile."""
        return m0 + i * 8 + (lane % 4) * 2 + c

    def c_col(n0, h, wg, warp, lane):
        """Register A: the column of C (a row of C^T) of accumulator register 4i + 2h + c: row
        16 warp + lane / 4 + 8h of the warpgroup's 64 x n tile."""
        return n0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h

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
                        if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                            C[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = acc[i * 4 + 2 * h + c]
                    else:
                        if (m0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h < M
                                and n0 + i * 8 + (lane % 4) * 2 + c < N):
                            C[m0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h,
                              n0 + i * 8 + (lane % 4) * 2 + c] = acc[i * 4 + 2 * h + c]

    @T.macro
    def split_a_tile(smem, stash, s, tid):
        # The producer's warps 1-3, once per shared tile: A's small half, A - tf32(A), written
        # beside it in the same (swizzled) positions; wgmma reads A itself as its big half.
        # float4 at a time, SPLIT_BATCH loads before their stores: the stores are PTX (TVM's
        # thread-sync pass would put a __syncthreads after a plain store to shared memory, inside
        # the producer's branch; the mbarriers order it instead), and the compiler moves no load
        # past one, so a load-store loop would wait out each load's latency in turn.
        for i in T.serial(_ceil(A_fl // 4, SPLITTERS * SPLIT_BATCH)):
            for b in T.unroll(SPLIT_BATCH):
                if (i * SPLIT_BATCH + b) * SPLITTERS + tid < A_fl // 4:
                    stash[T.ramp(b * 4, 1, 4)] = smem[T.ramp(s * stage_fl + ((i * SPLIT_BATCH + b) * SPLITTERS + tid) * 4, 1, 4)]
            for b in T.unroll(SPLIT_BATCH):
                if (i * SPLIT_BATCH + b) * SPLITTERS + tid < A_fl // 4:
                    T.ptx["st.shared.v4.f32"](
                        T.address_of(smem[s * stage_fl + As0 + ((i * SPLIT_BATCH + b) * SPLITTERS + tid) * 4]),
                        *[stash[b * 4 + v] - T.reinterpret("float32", T.reinterpret("uint32", stash[b * 4 + v])
                                                              & T.uint32(TF32_MASK)) for v in range(4)])
        # Written through the generic proxy, read by wgmma through the async one.
        T.ptx.fence.proxy.async_.shared__cta()
        T.ptx.mbarrier.arrive.shared.b64(T.address_of(smem[ready_bar(s)]), T.uint32(1))

    @T.macro
    def multiply_split(smem, acc, frag, descA, descB, s, p, restart, wg, warp, lane):
        # B^T's fragments, split in registers: big (registers 0-15 of the slice), small (16-31).
        for kk in T.unroll(BK // WG_K):
            for r in T.unroll(4):
                frag[p * 32 + kk * 4 + r] = T.reinterpret("uint32", smem[frag_offset(s, kk, r, wg, warp, lane)]) & T.uint32(TF32_MASK)
                frag[p * 32 + 16 + kk * 4 + r] = T.reinterpret("uint32", smem[frag_offset(s, kk, r, wg, warp, lane)] - T.reinterpret(
                    "float32", T.reinterpret("uint32", smem[frag_offset(s, kk, r, wg, warp, lane)]) & T.uint32(TF32_MASK)))
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // WG_K):
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]), T.address_of(smem[s * stage_fl + kk * WG_K]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + As0 + kk * WG_K]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            # The small products first, big x big last (as step 14): the chunk's first wgmma
            # restarts the accumulator (scale-d false: D = A * B).
            T.ptx[mma](*[acc[i] for i in range(acc_n)], *[frag[p * 32 + 16 + kk * 4 + r] for r in range(4)],
                       descA[0], T.ptx.pred(T.Or(kk > 0, T.Not(restart))), 1, 1)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], *[frag[p * 32 + kk * 4 + r] for r in range(4)],
                       descB[0], T.ptx.pred(True), 1, 1)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], *[frag[p * 32 + kk * 4 + r] for r in range(4)],
                       descA[0], T.ptx.pred(True), 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    @T.macro
    def store_split(C, A_op, B_op, total, flag, fallback, m0, n0, wg, warp, lane):
        # As store() (register A), adding to C where a long K flushed partial sums there, then
        # testing each value: NaN, or tiny (schedules/lowering/fp32_fallback.py says why), recomputed below.
        flag[0] = 0
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                        if flush:
                            total[i * 4 + 2 * h + c] = total[i * 4 + 2 * h + c] + C[
                                c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)]
                        C[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = total[i * 4 + 2 * h + c]
                        flag[0] = flag[0] | T.Cast("int32", fp32_fallback._needs_fp32(total[i * 4 + 2 * h + c], tiny_bits))
        if flag[0] != 0:
            # Rare: one loop over this thread's outputs, re-read from C (registers cannot be
            # indexed by a loop variable without going to the stack).
            for j in T.serial(acc_n):
                if c_row(m0, j // 4, j % 2, lane) < M and c_col(n0, j // 2 % 2, wg, warp, lane) < N:
                    if fp32_fallback._needs_fp32(C[c_row(m0, j // 4, j % 2, lane),
                                                   c_col(n0, j // 2 % 2, wg, warp, lane)], tiny_bits):
                        fallback[0] = T.float32(0)
                        for k in T.serial(K):
                            fallback[0] = T.call_pure_extern(
                                "float32", "fmaf", A_op[c_row(m0, j // 4, j % 2, lane), k],
                                B_op[k, c_col(n0, j // 2 % 2, wg, warp, lane)], fallback[0])
                        C[c_row(m0, j // 4, j % 2, lane), c_col(n0, j // 2 % 2, wg, warp, lane)] = fallback[0]

    @T.macro
    def flush_partial(C, total, chunk, m0, n0, wg, warp, lane):
        # Every FLUSH_CHUNKS chunks at a long K: C (= 0 the first time) += the promoted sum.
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if c_row(m0, i, c, lane) < M and c_col(n0, h, wg, warp, lane) < N:
                        C[c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)] = total[
                            i * 4 + 2 * h + c] + T.if_then_else(chunk == FLUSH_CHUNKS, T.float32(0), C[
                                c_row(m0, i, c, lane), c_col(n0, h, wg, warp, lane)])
                    total[i * 4 + 2 * h + c] = T.float32(0)

    @T.macro
    def consume_split(smem, acc, total, frag, descA, descB, C, m0, n0, wg, warp, lane):
        # A consumer's slices: chunks of `promote` slices, each summed on the tensor core from
        # zero and added to the total in fp32. Both consumers promote at the same slices: a
        # branch on the warpgroup here (to stagger them), even as two copies of this loop, made
        # ptxas serialize every wgmma (warning C7518).
        for kt2 in T.serial(_ceil(KT, 2)):
            for p in T.unroll(2):
                if kt2 * 2 + p < KT:
                    T.cuda.mbarrier_wait(T.address_of(smem[full_bar((kt2 * 2 + p) % stages)]),
                                         ((kt2 * 2 + p) // stages) & 1)
                    T.cuda.mbarrier_wait(T.address_of(smem[ready_bar((kt2 * 2 + p) % stages)]),
                                         ((kt2 * 2 + p) // stages) & 1)
                    multiply_split(smem, acc, frag, descA, descB, (kt2 * 2 + p) % stages, p,
                                   (kt2 * 2 + p) % promote == 0,
                                   wg, warp, lane)
                    if ((kt2 * 2 + p + 1) % promote == 0
                            or kt2 * 2 + p == KT - 1):
                        # The chunk's last slice: wait for its wgmma, add the
                        # chunk's sum to the total in fp32 (round to nearest).
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        for i in T.unroll(acc_n):
                            T.cuda.wgmma.noop_barrier(acc[i])
                            total[i] = total[i] + acc[i]
                        if flush:
                            if ((kt2 * 2 + p) // promote + 1) % FLUSH_CHUNKS == 0 \
                                    and kt2 * 2 + p != KT - 1:
                                flush_partial(C, total, (kt2 * 2 + p) // promote + 1,
                                              m0, n0, wg, warp, lane)
                        if kt2 * 2 + p > 0 and (kt2 * 2 + p) % promote != 0:
                            T.ptx.mbarrier.arrive.shared.b64(
                                T.address_of(smem[empty_bar((kt2 * 2 + p - 1) % stages)]), T.uint32(1))
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[empty_bar((kt2 * 2 + p) % stages)]), T.uint32(1))
                    else:
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        if kt2 * 2 + p > 0 and (kt2 * 2 + p) % promote != 0:
                            T.ptx.mbarrier.arrive.shared.b64(
                                T.address_of(smem[empty_bar((kt2 * 2 + p - 1) % stages)]), T.uint32(1))

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
                    # Two slices' B^T fragments (register A); split, big and small of each.
                    frag = T.sblock_alloc_buffer((64 if split else 32,), "uint32", scope="local")
                    total = T.sblock_alloc_buffer((acc_n if split else 1,), "float32", scope="local")
                    flag = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    fallback = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    stash = T.sblock_alloc_buffer((4 * SPLIT_BATCH if split else 4,), "float32", scope="local")
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
                            if split:
                                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[ready_bar(s)]), T.uint32(SPLITTERS))
                    T.ptx.fence.proxy.async_.shared__cta()
                    T.tvm_storage_sync("shared")
                    if producer:
                        if tid < WARPGROUP:
                            # The producer warpgroup: thread 0 keeps the ring full. For 3xTF32
                            # (split) warps 1-3 also write each A tile's small half once it
                            # lands (were thread 0 to split too, the splits would wait while it
                            # waits for a free stage).
                            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                            if tid == 0:
                                for kt in T.serial(KT):
                                    if kt >= stages:
                                        T.cuda.mbarrier_wait(T.address_of(smem[empty_bar(kt % stages)]),
                                                             ((kt // stages) & 1) ^ 1)
                                    load_stage(smem, A_map, B_map, kt, kt % stages, m0, n0)
                            elif split and tid >= 32:
                                for kt in T.serial(KT):
                                    T.cuda.mbarrier_wait(T.address_of(smem[full_bar(kt % stages)]), (kt // stages) & 1)
                                    split_a_tile(smem, stash, kt % stages, tid - 32)
                        elif split:
                            T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
                            for i in T.unroll(acc_n):
                                acc[i] = T.float32(0)
                                total[i] = T.float32(0)
                                T.cuda.wgmma.noop_barrier(acc[i])
                            consume_split(smem, acc, total, frag, descA, descB, C, m0, n0, wg, warp, lane)
                            store_split(C, A_op, B_op, total, flag, fallback, m0, n0, wg, warp, lane)
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
        # Bt[n, k] = B[k, n], and zeros in Bt's padding columns k >= K: the computation only;
        # schedule_copies tiles it.
        for n, k in T.grid(N, K):
            with T.sblock("B_transposed"):
                vn, vk = T.axis.remap("SS", [n, k])
                Bt[vn, vk] = B[vk, vn]
        if Kp != K:
            for n, k in T.grid(N, Kp - K):
                with T.sblock("pad_Bt"):
                    vn, vk = T.axis.remap("SS", [n, k])
                    Bt[vn, K + vk] = T.float32(0)

    @T.macro
    def pad_copy(X, Xp, rows, cols, cols_p, name):
        # Xp[r, c] = X[r, c], zero in the padding columns.
        for r, c in T.grid(rows, cols_p):
            with T.sblock(name):
                vr, vc = T.axis.remap("SS", [r, c])
                Xp[vr, vc] = T.if_then_else(vc < cols, X[vr, T.min(vc, cols - 1)], T.float32(0))

    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((M, K), "float32"), B: T.Buffer((K, N), "float32"), C: T.Buffer((M, N), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        # Copies the operands need before the GEMM (an unused one is never allocated).
        A_pad = T.alloc_buffer((M, Kp), "float32")
        B_pad = T.alloc_buffer((K, Np), "float32")
        Bt = T.alloc_buffer((N, Kp), "float32")
        if pad_a:
            pad_copy(A, A_pad, M, K, Kp, "pad_A")
        if not register_a:
            transpose(B, Bt)
        elif pad_b:
            pad_copy(B, B_pad, K, N, Np, "pad_B")
        gemm(A_pad if pad_a else A, Bt if not register_a else B_pad if pad_b else B, C)
    return main


TRANSPOSE_TILE = 32  # B's transposed copy: 32 x 32 tiles of 8 x 32 threads, 4 rows each
COPY_THREADS = 256


def schedule_copies(sch) -> None:
    """Schedule the copy kernels ``computation`` writes as plain blocks (the GEMM is written
    with its threads already): B's transpose through a shared tile, the pads one element a thread."""
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        name = sch.get(block).name_hint
        # (TVMScript may suffix a block's name to keep it unique: "pad_B_1".)
        if name.startswith("B_transposed"):
            _schedule_transpose(sch, block)
        elif name.startswith("pad_"):
            fused = sch.fuse(*sch.get_loops(block))
            bx, tx = sch.split(fused, [None, COPY_THREADS])
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
        elif name != "C":  # the GEMM, bound as written; anything else would run unscheduled
            raise ValueError(f"schedule_copies: no schedule for block {name!r}")


def _schedule_transpose(sch, block) -> None:
    # Read B along n and write Bt along k, both coalesced: a 32 x 32 tile of B in shared memory,
    # its rows padded to 33 floats so that the column reads hit 32 banks.
    t = TRANSPOSE_TILE
    n, k = sch.get_loops(block)
    no, ni = sch.split(n, [None, t])
    ko, ki = sch.split(k, [None, t])
    sch.reorder(no, ko, ni, ki)
    sch.bind(no, "blockIdx.y")
    sch.bind(ko, "blockIdx.x")
    tile = sch.cache_read(block, 0, "shared")
    sch.compute_at(tile, ko)
    sch.storage_align(tile, 0, axis=0, factor=t, offset=1)
    # The tile's copy: its loops below ko (B's k rows, n columns; one where a side is 1) fused,
    # 32 consecutive n to a warp (threadIdx.x), 8 rows at a time (threadIdx.y).
    loops = sch.get_loops(tile)
    below = loops[[sch.get(x).same_as(sch.get(ko)) for x in loops].index(True) + 1:]
    copy = sch.fuse(*below) if below else sch.add_unit_loop(tile)  # (none for a 1 x 1 tile)
    rows, ty, tx = sch.split(copy, [None, 8, t])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(rows)
    nio, nii = sch.split(ni, [None, 8])
    sch.reorder(nio, nii, ki)
    sch.bind(nii, "threadIdx.y")
    sch.bind(ki, "threadIdx.x")
    sch.unroll(nio)
