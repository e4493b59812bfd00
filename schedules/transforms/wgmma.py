"""The Hopper rungs' shared pieces (steps 15-22): wgmma fed by TMA, written as TensorIR sblocks.

Steps 12-14 schedule the base matmul and tensorize 16 x 16 x 8 tiles onto ``mma.sync``, a warp
instruction Hopper keeps for compatibility. Hopper's own path is three things no schedule
primitive of TVM 0.27 produces:

- ``wgmma.mma_async`` (sm_90a): four warps (a warpgroup) multiply a 64 x n x k tile (k = 8 for
  TF32, 16 for fp16 and bf16), n up to 256, reading both operands from shared memory through
  64-bit descriptors (or A from registers) and accumulating in registers spread over all 128
  threads. No TensorIR scope holds a 128-thread fragment ("warp" scope is one warp:
  LowerWarpMemory rejects more), so the accumulator cannot be a tensorized buffer; it is a
  "local" array of n / 2 floats per thread whose layout is the instruction's.
- TMA (``cp.async.bulk.tensor``): one thread hands the copy engine a tensor map (built on the
  host, ``cuTensorMapEncodeTiled``) and a box coordinate, and the engine writes the tile into
  shared memory already in the 128-byte swizzle wgmma reads, filling out-of-bounds rows and
  columns with zeros (ragged edges need no predicates).
- mbarriers: the copy engine signals a transaction-counting barrier per stage; consumers wait
  on its phase and arrive on an "empty" barrier when done. Phases, roles (a producer warpgroup
  and consumer warpgroups, ``setmaxnreg``) and async groups are control flow over time, not
  loops over data, which is what schedule primitives transform.

So the kernels are written directly as sblocks with ``T.ptx`` calls, as TVMScript macros that
each rung's file assembles, its prior's pieces plus its own:

- here, what every rung uses: the ``Plan`` (tile sizes, shared-memory layout, tensor maps of one
  problem), a stage's TMA loads (``load_stage``), its wgmma from two shared tiles
  (``multiply_stage``), the store of the accumulator (``store``), the mbarriers' setup, the
  copy kernels (B transposed, rows padded) and the PrimFunc around them (``prim_func``);
- schedules/step15_wgmma.py: one shared buffer, everyone loads then multiplies (``one_buffer``);
- schedules/step16_warp_specialized.py: the ring, a producer and consumers (``warp_specialized``,
  ``produce``, ``consume``);
- schedules/step17_wide_tile.py: step 16's kernel with 128 x 256 tiles (a config);
- schedules/step18_register_a.py: C^T = B^T A^T, no copy of B (``load_b_boxes``,
  ``multiply_register_a`` for TF32, ``multiply_transposed`` for 16-bit, ``store_transposed``);
- schedules/step19_3xtf32_wgmma.py: 3xTF32 (``split_a_tile``, ``consume_split``, ``store_split``).

TF32 wgmma has no transpose: both shared operands must be K-major (k contiguous), and
``B[K, N]`` row-major is N-major. Steps 15-17 make a transposed copy ``Bt[N, K]`` with a copy
kernel before the GEMM (its time is in theirs: 13 us at 2048^3, about 15% of the total).
fp16 and bf16 wgmma may read an operand MN-major (``trans_a`` / ``trans_b``); the 16-bit forms
of steps 15-17 keep the copy so that step 18 measures what dropping it is worth.

TMA needs 16-byte row strides: where K (A, and Bt) or N (step 18's B) is not a multiple of 16
bytes (4 floats, 8 halves), a copy kernel pads that operand with zeros first. Any M, N, K
builds. The copies (the transpose and the pads) are plain TensorIR blocks, scheduled by
``schedule_copies``; only the GEMM is written with its threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm.script import tirx as T

from ..config import DTYPES, WGMMA_K, WgmmaConfig
from .epilogue import Epilogue

# wgmma's instruction shape: 64 rows per warpgroup, 8 k per instruction (TF32; 16 for 16-bit).
WG_M, WG_K = 64, 8
WARPGROUP = 128
SWIZZLE_128B = 3  # CUtensorMapSwizzle: a K-major row of 32 floats is one 128-byte swizzle row
L2_PROMOTION_128B = 2
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
# Descriptor strides for a 128B-swizzled K-major tile, in 16-byte units: the leading offset is
# unused in this mode (1 by convention), the stride offset is one 8-row swizzle atom, 1024 B.
DESC_LBO, DESC_SBO = 1, 64
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # setmaxnreg: 40*128 + 232*256 = 64,512 of 65,536
# Three consumers (a 192-row consumer side) share what the producer gives up in thirds: 40*128 +
# 152*384 = 63,488. Their accumulators are at most 64 x 128 (64 registers a thread; the configs'
# validate); at 64 x 96 ptxas reports 128 registers at 512 threads and no spill, in every dtype.
CONSUMER_REGS_OF_THREE = 152
SPLITTERS = 96  # split: the producer's warps 1-3 write A's small half (warp 0 loads)


def _fix_noop_barrier_codegen() -> None:
    """TVM 0.27.0.post1's codegen of ``T.cuda.wgmma.noop_barrier`` reads ``reg.dtype``, which its
    TensorLoad nodes lack (they carry ``.ty``): registered again here, reading ``.ty``.

    Its helper also takes the register by value (``ptx_wgmma_fence_float(float reg)``), so the
    empty asm fences a copy and orders nothing that reads the register later. ``fence_operand``
    (below) calls the same op with a second argument, which this codegen turns into a helper
    taking the register by reference, as CUTLASS's ``warpgroup_fence_operand`` does."""
    from tvm.backend.cuda.codegen.registry import CODEGEN_REGISTRY, register_codegen
    from tvm.backend.cuda.codegen.schema import device_intrinsic

    device_intrinsic("cuda_wgmma_fence_operand_float32", helper_name="ptx_wgmma_fence_operand",
                     c_signature="(float& reg)", body='    asm volatile("" : "+f"(reg) :: "memory");')
    ops = {"uint32": "tirx.cuda_wgmma_noop_barrier_uint32", "float32": "tirx.cuda_wgmma_noop_barrier_float32"}

    @register_codegen("cuda_wgmma_noop_barrier")
    def _noop_barrier(reg, *by_reference):
        op = "tirx.cuda_wgmma_fence_operand_float32" if by_reference else ops[str(reg.ty.dtype)]
        res = CODEGEN_REGISTRY[op]([reg])
        return res[0] if isinstance(res, tuple) else res


_fix_noop_barrier_codegen()


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil(a, b) * b



# The wgmma operand type of each input dtype, and its element size in bytes.
WGMMA_TYPE = {"float32": "tf32", "float16": "f16", "bfloat16": "bf16"}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SWIZZLE_BYTES = 128  # a shared tile's row: one 128-byte swizzle row of k


@dataclass(frozen=True)
class Plan:
    """One problem's numbers: tiles, the shared-memory layout (in elements of the input dtype),
    the tensor maps. Every macro factory below and in the rungs' files reads its sizes here."""

    M: int
    N: int
    K: int
    cfg: WgmmaConfig
    dtype: str = "float32"       # TVM's name of the input dtype
    frag_regs: int = 32          # B^T fragment registers (register A): two slices' worth
    stash_regs: int = 4          # the split's float4 loads in flight (step 19)
    epilogue: Epilogue | None = None  # D = act(alpha * acc + bias + beta * C_in) after the product
    fused: bool = True           # the epilogue in the consumers' store, or a kernel of its own

    # The geometry, in elements. A stage's row of k is one 128-byte swizzle row: 32 floats or
    # 64 halves; a k step of wgmma is 8 (TF32) or 16 (16-bit) k, 32 bytes either way.
    @property
    def sixteen_bit(self) -> bool:
        return self.dtype != "float32"

    @property
    def eb(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def BK(self) -> int:
        return WGMMA_K * 4 // self.eb

    @property
    def wg_k(self) -> int:
        return WG_K * 4 // self.eb

    @property
    def BM(self) -> int:
        return self.cfg.block_m

    @property
    def BN(self) -> int:
        return self.cfg.block_n

    @property
    def stages(self) -> int:
        return self.cfg.stages

    @property
    def consumers(self) -> int:
        return self.cfg.consumers

    @property
    def consumer_regs(self) -> int:
        """What setmaxnreg gives each consumer thread: the registers the producer gives up, shared
        by two consumer warpgroups (232) or three (152)."""
        return CONSUMER_REGS if self.consumers <= 2 else CONSUMER_REGS_OF_THREE

    @property
    def align(self) -> int:
        """Elements per 16 bytes: TMA's row strides must be multiples of it."""
        return 16 // self.eb

    @property
    def Kp(self) -> int:
        return _round_up(self.K, self.align)

    @property
    def Np(self) -> int:
        return _round_up(self.N, self.align)

    @property
    def pad_a(self) -> bool:
        """A's rows must be 16-byte strided for its tensor map."""
        return self.K != self.Kp

    @property
    def pad_b(self) -> bool:
        """Register A (step 18) maps B itself: its rows likewise."""
        return self.cfg.register_a and self.N != self.Np

    @property
    def Ka(self) -> int:
        return self.Kp if self.pad_a else self.K

    @property
    def wg_n(self) -> int:
        """The n of wgmma.m64nNk8: BN, or BM for register A."""
        return self.cfg.wgmma_n

    @property
    def acc_n(self) -> int:
        return self.wg_n // 2

    @property
    def KT(self) -> int:
        return _ceil(self.K, self.BK)

    @property
    def A_fl(self) -> int:
        return self.BM * self.BK  # elements per stage

    @property
    def B_fl(self) -> int:
        return self.BN * self.BK

    @property
    def As0(self) -> int:
        """split: A's small half, after the two tiles TMA writes."""
        return self.A_fl + self.B_fl

    @property
    def stage_fl(self) -> int:
        return self.A_fl + self.B_fl + (self.A_fl if self.cfg.split else 0)

    @property
    def bar0(self) -> int:
        """cfg.barriers * stages 8-byte mbarriers after the tiles."""
        return self.stages * self.stage_fl

    @property
    def bar_el(self) -> int:
        """Elements per 8-byte mbarrier."""
        return 8 // self.eb

    @property
    def smem_fl(self) -> int:
        return self.bar0 + self.bar_el * self.cfg.barriers * self.stages

    def full_bar(self, s):
        return self.bar0 + self.bar_el * s

    def empty_bar(self, s):
        return self.bar0 + self.bar_el * self.stages + self.bar_el * s

    def ready_bar(self, s):
        return self.bar0 + 2 * self.bar_el * self.stages + self.bar_el * s

    @property
    def threads(self) -> int:
        return self.cfg.threads

    @property
    def in_flight(self) -> int:
        """wgmma groups a consumer leaves running when it hands a stage back (wait_group's N). 1:
        the previous slice's group is done, so its stage goes back while this slice's wgmma run;
        the tile's last slice waits for all (``wait_for_slice``). TF32 always; 16-bit where a
        consumer's accumulator is at most 64 registers a thread (a wgmma n of 128 or less), else
        0, every group waited for.

        Measured (H200, 2026-11-28, bf16, one process, the 16-bit kernel with 1 against 0; rounds
        alternated where close; docs/hopper.md): 1 is faster on small tiles, whose slices' wgmma
        are short beside the wait: step 23 at 4096 x 128 x 4096 and 128 x 4096 x 4096 (64 x 64,
        8 stages) 1.15-1.18x, 8192 x 128 x 1024 (128 x 64) 1.14x, step 20's 64 x 64 deep rings
        1.07-1.13x, step 26's 128 x 128 over two consumers 1.02x. On larger tiles it gains
        nothing and can lose: 256 x 128 level at 4096^3 and 8192^3 (steps 21, 22, within +-3%),
        0.97x (step 18, 256 x 256 x 1024), 0.90x (step 23, 8192 x 1024 x 256: 4 slices a tile);
        192 x 128 0.99x (1536^3).

        Until 2026-11-28 16-bit waited for every group everywhere: with 1 its kernels were wrong
        on the H100 (results/nvidia-h100-80gb-hbm3/evidence/sixteen_bit_in_flight_probe.txt) and
        on an H200 at 9-12 stages. Not the ring: ptxas moved the store's conversions above the
        ``wait_group 0`` after the loop, so they read the last slice's sums while its group
        still ran (``wait_for_slice`` has the SASS)."""
        return 1 if not self.sixteen_bit or self.acc_n <= 64 else 0

    @property
    def first(self) -> int:
        """The first consumer thread."""
        return WARPGROUP if self.cfg.producer else 0

    @property
    def tm(self) -> int:
        return _ceil(self.M, self.BM)

    @property
    def tn(self) -> int:
        return _ceil(self.N, self.BN)

    @property
    def group(self) -> int:
        return min(self.cfg.raster, self.tm)

    @property
    def mma(self) -> str:
        t = WGMMA_TYPE[self.dtype]
        return f"wgmma.mma_async.sync.aligned.m64n{self.wg_n}k{self.wg_k}.f32.{t}.{t}"

    @property
    def tx_bytes(self) -> int:
        return self.eb * (self.A_fl + self.B_fl)

    # Tensor maps: (dims innermost first, byte strides of the outer dims, box, element strides,
    # interleave, swizzle, L2 promotion, out-of-bounds fill 0 = zeros).
    @property
    def A_tma(self) -> list:
        return [self.Ka, self.M, self.Ka * self.eb, self.BK, self.BM, 1, 1, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0]

    @property
    def box_n(self) -> int:
        """Register A: B's tile is loaded in boxes of BK k rows x box_n n (one swizzle row)."""
        return SWIZZLE_BYTES // self.eb

    @property
    def B_tma(self) -> list:
        if self.cfg.register_a:
            Nb = self.Np if self.pad_b else self.N
            return [Nb, self.K, Nb * self.eb, self.box_n, self.BK, 1, 1, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0]
        return [self.Kp, self.N, self.Kp * self.eb, self.BK, self.BN, 1, 1, 0, SWIZZLE_128B, L2_PROMOTION_128B, 0]

    @property
    def B_shape(self) -> tuple:
        if self.cfg.register_a:
            return (self.K, self.Np if self.pad_b else self.N)
        return (self.N, self.Kp)

    def tile_m0(self, bid):
        """Rasterization: `group` tile rows at a time sweep the tile columns, so the blocks
        running together share their A rows and B columns in L2."""
        tm, tn, group = self.tm, self.tn, self.group
        return ((bid // (group * tn)) * group + bid % (group * tn) % T.min(group, tm - bid // (group * tn) * group)) * self.BM

    def tile_n0(self, bid):
        tm, tn, group = self.tm, self.tn, self.group
        return (bid % (group * tn) // T.min(group, tm - bid // (group * tn) * group)) * self.BN


def plan(M: int, N: int, K: int, cfg: WgmmaConfig, dtype: str = "fp32", **regs) -> Plan:
    """The Plan of one problem; `dtype` by the ladder's name (fp32, fp16, bf16)."""
    return Plan(M, N, K, cfg, DTYPES[dtype], **regs)


def zero(p: Plan):
    """A zero of the input dtype (the copies' padding)."""
    return T.float32(0) if p.dtype == "float32" else T.Cast(p.dtype, T.float32(0))


def with_tensor_maps(p: Plan, kernel):
    """A macro gemm(A_op, B_op, C): the host encodes A's and B's tensor maps, then `kernel`
    (A_op, B_op, C, A_map, B_map) launches."""

    @T.macro
    def gemm(A_op, B_op, C):
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, p.dtype, 2, A_op.data, *p.A_tma)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, p.dtype, 2, B_op.data, *p.B_tma)
        kernel(A_op, B_op, C, A_map, B_map)

    return gemm


def load_stage(p: Plan):
    """A macro: one thread starts a stage's two TMA loads, A's tile and B^T's (both K-major),
    after telling the stage's "full" barrier how many bytes to expect."""
    BK, A_fl, stage_fl = p.BK, p.A_fl, p.stage_fl

    @T.macro
    def load(smem, A_map, B_map, kt, s, m0, n0):
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(smem[p.full_bar(s)]), T.uint32(p.tx_bytes))
        T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl]), T.address_of(A_map), kt * BK, m0,
                        T.address_of(smem[p.full_bar(s)]))
        T.ptx[TMA_LOAD](T.address_of(smem[s * stage_fl + A_fl]), T.address_of(B_map), kt * BK, n0,
                        T.address_of(smem[p.full_bar(s)]))

    return load


def multiply_stage(p: Plan):
    """A macro: a consumer warpgroup's wgmma over one stage, both operands K-major in shared
    memory (a descriptor each per k step), as one commit group."""
    BK, wg_k, stage_fl, A_fl, acc_n, mma = p.BK, p.wg_k, p.stage_fl, p.A_fl, p.acc_n, p.mma
    trans = (0, 0) if p.sixteen_bit else ()  # 16-bit wgmma takes trans_a, trans_b immediates

    @T.macro
    def multiply(smem, acc, frag, descA, descB, s, p_, wg, warp, lane):
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BK // wg_k):
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descA[0]),
                                                  T.address_of(smem[s * stage_fl + wg * WG_M * BK + kk * wg_k]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.cuda.wgmma.encode_matrix_descriptor(T.address_of(descB[0]), T.address_of(smem[s * stage_fl + A_fl + kk * wg_k]),
                                                  DESC_LBO, DESC_SBO, SWIZZLE_128B)
            T.ptx[mma](*[acc[i] for i in range(acc_n)], descA[0], descB[0], T.ptx.pred(True), 1, 1, *trans)
        T.ptx.wgmma.commit_group.sync.aligned()

    return multiply


def store(p: Plan):
    """A macro: the accumulator to C (rounded to C's dtype for 16-bit inputs), edges masked.
    Accumulator register 4i + 2h + c: row 16*warp + lane/4 + 8h, column 8i + 2*(lane%4) + c
    of the warpgroup's 64 x n tile."""
    M, N, acc_n = p.M, p.N, p.acc_n

    settle_ = settle(p)

    @T.macro
    def write(C, acc, m0, n0, wg, warp, lane):
        settle_(acc)
        for i in T.unroll(acc_n // 4):
            for h in T.unroll(2):
                for c in T.unroll(2):
                    if (m0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h < M
                            and n0 + i * 8 + (lane % 4) * 2 + c < N):
                        C[m0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h,
                          n0 + i * 8 + (lane % 4) * 2 + c] = rounded(p, acc[i * 4 + 2 * h + c])

    return write


def rounded(p: Plan, value):
    """An fp32 sum as C stores it: itself, or rounded to nearest in the 16-bit input dtype."""
    return value if p.dtype == "float32" else T.Cast(p.dtype, value)


# A buffer the GEMM reads only through a tensor map (A's and B's padded copies) looks dead to
# TVM's storage planner once the map is encoded, and a buffer allocated after it may get its
# memory while the GEMM still reads it (step 23's workspace did; C before an unfused epilogue
# would). A kernel after the GEMM that prefetches one line of each into L2 keeps them live.
PREFETCH_L2 = ("__forceinline__ __device__ void prefetch_l2(const void* p) {\n"
               "  asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(p));\n}\n")


def keep_live(addr):
    """A prefetch of `addr`'s line into L2: a use of its buffer the storage planner sees."""
    return T.cuda.func_call("prefetch_l2", addr, source_code=PREFETCH_L2)


# A macro for the first thread of a kernel after the GEMM (step 23's sum of the parts, the
# unfused epilogue): a use of the GEMM's operands after it, so TVM's storage planner does not
# give their memory (read by the GEMM only through tensor maps) to a buffer allocated after them
# (step 23's notes say what that cost).
@T.macro
def keep_operands_live(A_op, B_op):
    T.evaluate(keep_live(T.address_of(A_op[0, 0])))
    T.evaluate(keep_live(T.address_of(B_op[0, 0])))


EPILOGUE_THREADS = 256


def separate_epilogue(p: Plan):
    """A macro, the epilogue unfused (what fusing is measured against): a kernel after the GEMM,
    one element of D per thread from C in its dtype; its first thread keeps the GEMM's operands
    live (``keep_operands_live``): C is allocated after them."""
    M, N = p.M, p.N
    total = M * N

    @T.macro
    def apply(C, out, A_op, B_op):
        for bx in T.thread_binding(_ceil(total, EPILOGUE_THREADS), thread="blockIdx.x"):
            for tx in T.thread_binding(EPILOGUE_THREADS, thread="threadIdx.x"):
                with T.sblock("epilogue"):
                    T.reads(C[0:M, 0:N], A_op[0:1, 0:1], B_op[0:1, 0:1])
                    T.writes(out[0:M, 0:N])
                    if bx == 0 and tx == 0:
                        keep_operands_live(A_op, B_op)
                    if bx * EPILOGUE_THREADS + tx < total:
                        output(out)[(bx * EPILOGUE_THREADS + tx) // N, (bx * EPILOGUE_THREADS + tx) % N] = stored(
                            p, out, widened(p, C[(bx * EPILOGUE_THREADS + tx) // N, (bx * EPILOGUE_THREADS + tx) % N]),
                            (bx * EPILOGUE_THREADS + tx) // N, (bx * EPILOGUE_THREADS + tx) % N)

    return apply


def widened(p: Plan, value):
    """A value of C's dtype as fp32."""
    return value if p.dtype == "float32" else T.Cast("float32", value)


class FusedOutput:
    """What a GEMM kernel with a fused epilogue is handed where it would take C: D, the buffer
    it writes, and what the epilogue reads (bias, C_in, or None). It passes through the rungs'
    macros as C does (a macro argument may be any Python value): ``C[...]`` regions read as D's,
    and a store writes ``output(C)`` with ``stored``'s value."""

    def __init__(self, D, bias=None, c_in=None):
        self.D, self.bias, self.c_in = D, bias, c_in

    def __getitem__(self, index):
        return self.D[index]


def output(C):
    """The buffer a store writes: C, or a FusedOutput's D."""
    return C.D if isinstance(C, FusedOutput) else C


def stored(p: Plan, C, acc, row, col):
    """The value a store writes at (row, col) from fp32 sum `acc`: the sum in C's dtype, or, where
    C is a FusedOutput, the plan's epilogue applied to the sum in fp32, then rounded once."""
    if isinstance(C, FusedOutput):
        return rounded(p, p.epilogue.value(acc, row, col, C.bias, C.c_in))
    return rounded(p, acc)


def wait_for_slice(p: Plan):
    """A macro for a consumer's loop, after slice `kt` of the tile's `slices` has its wgmma issued
    (``wait(kt, slices)``): wait until at most ``Plan.in_flight`` groups still run, and on the
    last slice, until none do.

    Why the last slice waits for all, inside the loop: the loop's exit then leaves no group
    running, so nothing after it can read an accumulator register a wgmma is still writing.
    A ``wait_group 0`` after the loop is not enough: ptxas moves register-only reads of the
    accumulator above it (NVRTC 13.0.88's PTX, ptxas 13.0.88 and 13.5.37 alike, SASS read with
    cuobjdump: the 16-bit store's F2FP conversions above ``WARPGROUP.DEPBAR.LE gsb0, 0x0``,
    though the PTX has them after the wait and after ``fence_operand``). With a group in flight
    at the loop's end, those conversions read the last slice's sums half-written: 16-bit rings
    with ``in_flight`` 1 lost most of their last three k16 steps on all rows of the tile but the
    first 16 (relative error 0.15-0.17, different each run; H200, 2026-11-28,
    docs/hopper.md). The fp32 stores' first use of a register is a store to memory, which
    ptxas keeps below the wait: the TF32 kernels were right, but an epilogue's arithmetic is
    register-only too, so every consumer waits so."""
    in_flight = p.in_flight

    @T.macro
    def wait(kt, slices):
        if in_flight == 0:
            T.ptx.wgmma.wait_group.sync.aligned(0)
        else:
            if kt == slices - 1:
                T.ptx.wgmma.wait_group.sync.aligned(0)
            else:
                T.ptx.wgmma.wait_group.sync.aligned(in_flight)

    return wait


def fence_operand(reg):
    """An empty asm that takes accumulator register `reg` by reference ("+f"): code after it
    cannot read the register's value from before it."""
    return tvm.tirx.call_intrin("", "tirx.cuda.wgmma_noop_barrier", reg, 1)


def settle(p: Plan):
    """A macro for a store's first lines: after the last wgmma.wait_group, fence every
    accumulator register by reference (16-bit only). The 16-bit store first converts each
    value to the dtype, arithmetic on registers that the compiler is free to move above the
    wait's asm (its "memory" clobber orders memory, not registers), which would read a register
    wgmma has not finished writing. The fp32 store's first use of a register is a store to
    memory, which the clobber keeps below the wait: the TF32 kernels need no fence and stay as
    measured. The fence orders the CUDA compiler's PTX only: ptxas still moved the conversions
    above the wait (``wait_for_slice``, which is what keeps a group from running there)."""
    acc_n, sixteen = p.acc_n, p.sixteen_bit

    @T.macro
    def fence(acc):
        if sixteen:
            for i in T.unroll(acc_n):
                T.evaluate(fence_operand(acc[i]))

    return fence


@T.macro
def keep_whole(smem, tid):
    """The dynamic shared memory launched whole. TVM's CompactBufferAllocation shrinks a buffer
    to one past the last element an access names; an 8-byte mbarrier or a float (step 26's
    partial sums) addressed at the last 2- or 4-byte element ends past that, and the launch fell
    2-6 bytes short of what the kernel writes: compute-sanitizer stopped step 26 in a bf16 model
    (H200, 2026-11-29), and 366 of 675 Hopper builds checked were short (steps 15-17 in every
    dtype; 18, 20-23, 26 and 27 in 16-bit; 28). No test's result was wrong: the bytes past the
    end lay in the allocation's rounding. An opaque use of the buffer counts as all of it; here
    under a condition no thread meets, which StmtSimplify removes, so the CUDA is as it was
    (tests/test_hopper.py checks the size)."""
    if tid < 0:
        T.evaluate(smem.data)


def init_barriers(p: Plan):
    """A macro: thread 0 initializes each stage's barriers ("full": one arrival plus the TMA
    bytes; "empty": every consumer thread; "ready": the splitters, step 19); a fence makes
    them visible to the copy engine, and the block meets. (And the buffer is launched whole: keep_whole.)"""
    stages, consumers, split = p.stages, p.consumers, p.cfg.split

    @T.macro
    def init(smem, tid):
        keep_whole(smem, tid)
        if tid == 0:
            for s in T.unroll(stages):
                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[p.full_bar(s)]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[p.empty_bar(s)]),
                                              T.uint32(WARPGROUP * consumers))
                if split:
                    T.ptx.mbarrier.init.shared.b64(T.address_of(smem[p.ready_bar(s)]), T.uint32(SPLITTERS))
        T.ptx.fence.proxy.async_.shared__cta()
        T.tvm_storage_sync("shared")

    return init


def prim_func(p: Plan, kernel, partials: tuple | None = None) -> tvm.tirx.PrimFunc:
    """C[M, N] = A[M, K] @ B[K, N]: the copy kernels the operands need (B transposed where it is
    read K-major, rows padded for TMA), the tensor maps, then `kernel` (A_op, B_op, C, A_map,
    B_map), a rung's GEMM kernel. `partials` (split-K, step 23): (split, reduce) with split > 1:
    the GEMM kernel writes split fp32 partial sums of C, one M x N block of rows each, to a
    workspace W[split * M, N], and a kernel of its own, reduce(W, C, A_op, B_op), sums them into C
    (A_op and B_op: the operands the GEMM read, which it keeps live; step 23 says why).
    With the plan's epilogue the function is main(A, B, [bias], [C_in], D): fused, the kernel is
    handed a FusedOutput where it would take C; unfused, it writes C and ``separate_epilogue``
    makes D from it."""
    gemm = with_tensor_maps(p, kernel)
    split, reduce = partials if partials is not None else (1, None)
    M, N, K, Kp, Np, dtype = p.M, p.N, p.K, p.Kp, p.Np, p.dtype
    register_a, pad_a, pad_b = p.cfg.register_a, p.pad_a, p.pad_b

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
                    Bt[vn, K + vk] = zero(p)

    @T.macro
    def pad_copy(X, Xp, rows, cols, cols_p, name):
        # Xp[r, c] = X[r, c], zero in the padding columns.
        for r, c in T.grid(rows, cols_p):
            with T.sblock(name):
                vr, vc = T.axis.remap("SS", [r, c])
                Xp[vr, vc] = T.if_then_else(vc < cols, X[vr, T.min(vc, cols - 1)], zero(p))

    ep, apply_epilogue = p.epilogue, separate_epilogue(p)

    @T.macro
    def product(A, B, C, unfused):
        # Copies the operands need before the GEMM (an unused one is never allocated).
        A_pad = T.alloc_buffer((M, Kp), dtype)
        B_pad = T.alloc_buffer((K, Np), dtype)
        Bt = T.alloc_buffer((N, Kp), dtype)
        W = T.alloc_buffer((split * M, N), "float32")
        if pad_a:
            pad_copy(A, A_pad, M, K, Kp, "pad_A")
        if not register_a:
            transpose(B, Bt)
        elif pad_b:
            pad_copy(B, B_pad, K, N, Np, "pad_B")
        A_op = T.meta_var(A_pad if pad_a else A)  # what the GEMM reads
        B_op = T.meta_var(Bt if not register_a else B_pad if pad_b else B)
        if split > 1:
            gemm(A_op, B_op, W)
            reduce(W, C, A_op, B_op)
        else:
            gemm(A_op, B_op, C)
        if unfused is not None:  # the epilogue as a kernel of its own, from C to D
            apply_epilogue(C, unfused, A_op, B_op)

    return entry(M, N, K, dtype, ep, p.fused, product)


def entry(M: int, N: int, K: int, dtype: str, ep: Epilogue | None, fused: bool, product) -> tvm.tirx.PrimFunc:
    """The PrimFunc around a rung's `product(A, B, C, unfused)` (its copies and GEMM): main(A, B,
    C) in `dtype` (TVM's name), or with epilogue `ep` main(A, B, [bias], [C_in], D): fused, the
    product is handed a FusedOutput where it would take C; unfused, a C of its own and the
    FusedOutput as `unfused`, for the product to make D from C after its GEMM."""

    @T.macro
    def with_epilogue(A, B, bias, C_in, D):
        if fused:
            # The consumers' store applies it to the fp32 sums (``stored``): one kernel.
            product(A, B, FusedOutput(D, bias, C_in), None)
        else:
            # What fusing is measured against: C in its dtype, then a kernel reading it back.
            C = T.alloc_buffer((M, N), dtype)
            product(A, B, C, FusedOutput(D, bias, C_in))

    # The kernel's parameters: A, B, then what the epilogue reads, then its output (Epilogue.params).
    if ep is None:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), dtype), B: T.Buffer((K, N), dtype), C: T.Buffer((M, N), dtype)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            product(A, B, C, None)
    elif ep.bias and ep.reads_c:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), dtype), B: T.Buffer((K, N), dtype), bias: T.Buffer((N,), dtype),
                 C_in: T.Buffer((M, N), dtype), D: T.Buffer((M, N), dtype)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            with_epilogue(A, B, bias, C_in, D)
    elif ep.bias:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), dtype), B: T.Buffer((K, N), dtype), bias: T.Buffer((N,), dtype),
                 D: T.Buffer((M, N), dtype)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            with_epilogue(A, B, bias, None, D)
    elif ep.reads_c:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), dtype), B: T.Buffer((K, N), dtype), C_in: T.Buffer((M, N), dtype),
                 D: T.Buffer((M, N), dtype)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            with_epilogue(A, B, None, C_in, D)
    else:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((M, K), dtype), B: T.Buffer((K, N), dtype), D: T.Buffer((M, N), dtype)):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            with_epilogue(A, B, None, None, D)
    return main


TRANSPOSE_TILE = 32  # B's transposed copy: 32 x 32 tiles of 8 x 32 threads, 4 rows each
COPY_THREADS = 256


def schedule_copies(sch) -> None:
    """Schedule the copy kernels ``prim_func`` writes as plain blocks (the GEMM is written
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
        elif name not in ("C", "reduce_partials", "epilogue"):  # bound as written; anything else would run unscheduled
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
