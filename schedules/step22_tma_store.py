"""Step 22 — the epilogue through shared memory and a TMA store.

Idea: steps 18-21 store the accumulator from registers: each consumer thread writes its 128
values of C one by one (2 or 4 bytes each; a warp's store touches 4 rows x 16 or 32 bytes), and
the tensor pipe waits for all of it, tile after tile: leaving the store out of step 20 (the
results wrong, the time right) ran it at 836 TFLOP/s bf16 against 645 at 4096^3, 766 against
680 at 8192^3 (H100, 2026-11-27, probe of issue 48). Write C through shared memory instead:
each consumer stages its 64 columns of the tile in chunks of 16 KB (128 rows of 16-bit C, 64 of
fp32), laid out as a TMA box with the 128-byte swizzle (the four rows a warp's store touches
land in different banks), and one thread of the consumer hands each chunk to the copy engine
(``cp.async.bulk.tensor ... global.shared::cta``), which writes whole lines of C while the
consumer goes on; before the consumer writes the chunk buffer again, that thread waits until
the engine has read it (``cp.async.bulk.wait_group.read 0``) and the warpgroup meets on a named
barrier. Edges: the engine clips the box to C. Where C's rows are not 16-byte strided (N * 2 or
N * 4 bytes not a multiple of 16), TMA cannot address C and the kernel is step 21's.

Prediction: most of the store's cost goes, as the no-store probe bounds it: towards 1.2x step 21
at 4096^3 in bf16 and 1.1x at 8192^3; TF32 (twice the bytes per value, half the FLOP rate) less.

Measured (H100 80GB HBM3, 2026-11-27, kernel time). The committed run (python -m steps --steps
18,20,21,22 --sizes 512 1024 2048 4096 8192 --save, the three dtypes): at 2048 / 4096 / 8192^3
- bf16 614.3 / 701.4 / 697.1 TFLOP/s, 1.02x / 1.00x / 0.95x step 21, 85% / 101% / 91% of cuBLAS bf16;
- fp16 606.5 / 658.0 / 701.1, 1.03x / 0.96x / 1.02x step 21, 86% / 97% / 101%;
- TF32 311.9 / 363.8 / 396.8, 0.98x / 0.97x / 1.03x step 21, 88% / 106% / 104% of cuBLAS TF32.
The probe's alternating rounds (git show 9770cce:results/nvidia-h100-80gb-hbm3/evidence/issue48_probes.txt):
bf16 at 4096^3 0.98-1.07x cuBLAS round by round, at 8192^3 0.91-1.05x; fp16 0.99-1.07x and
0.87-1.02x. Far below the prediction and the no-store bound (836 against 645): not explained.
Staging the whole tile in one chunk (3 stages, chunk 32 KB) ran at 515-578 against 650-780: the
16-bit ring of these tiles releases a stage only with no wgmma in flight (Plan.in_flight), so it
needs all four stages. Nsight Compute (4096^3, one launch, 1.60-1.65 GHz under the profiler, 2026-11-27;
results/nvidia-h100-80gb-hbm3/evidence/ncu_steps20-22.txt): bf16 182 us, the tensor pipe active
92.7% of cycles (step 21: 89.4%), stalls per issued instruction: barrier 10.7, wait 1.2, long
scoreboard 1.0 (1.3), sleeping 0.6; TF32 343 us, 94.8%, barrier 7.5. So the store's cost is
now mostly hidden (2-3 points of pipe activity over step 21), and what is left between these
rungs and the no-store bound is clock: every kernel runs the pipe above 89% at a power-capped
clock, where cuBLAS's kernels run the same pipe at the same limit.

A fused epilogue (D = act(alpha * AB + bias + beta * C_in), issue 50) is applied to each value as it
is staged (``staged_value``: the fp32 sum, then one rounding in ``store_shared``), so D still leaves
by TMA; a chunk's rows and columns past D's edge are staged too (TMA clips them), so the
epilogue's reads are clamped into bias and C_in. Prediction: the bias free (one read per column,
cached, against step 20's 7.6-9.4%, which came from its 128 scattered stores issued back to back
once every value was computed), GELU's erff (25 instructions a value while no wgmma runs) and
C_in's scattered 2-byte reads still on the consumers' path. Measured (H200, 2026-11-28, 4096^3,
python -m steps.epilogue --step 22 ...; docs/models.md): fused over bare 1.029 (bf16) and 1.012
(fp16) with a bias, 1.111 with bias and C_in, 1.132 / 1.117 with bias and GELU (step 20: 1.254 /
1.230); the product plus a separate epilogue kernel 1.17-1.28x the fused one. The Relax pass
gives a model's products with an epilogue to this rung where the pick stores from registers on
this tile (schedules/integration/relax_dispatch.py).

The rung's own pieces, below: ``StorePlan`` (the chunk buffers, C's tensor map), ``StagedOutput``
(what the store writes through: the map, and a fused epilogue's inputs), ``store_chunks`` (the
epilogue), ``drained`` (the last stores finish before the block exits) and ``with_c_map``.

Run: python -m steps.step22
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tvm.script import tirx as T

from . import config
from .config import WgmmaTmaStoreConfig
from .step18_register_a import multiply_register_a, multiply_transposed
from .step20_persistent import blocks_for
from .step21_cluster import CLUSTER, clustered, consume_pairs, load_multicast, produce_pairs
from .step21_cluster import kernel as step21_kernel
from .transforms import wgmma
from .transforms.wgmma import SWIZZLE_128B, SWIZZLE_BYTES, WARPGROUP, WG_M, Plan, _ceil

NUMBER = 22
TENSOR_CORES = True
NAME = "TMA store epilogue"
IDEA = "C staged in shared memory (16 KB swizzled chunks per consumer) and written by TMA stores while the consumers go on"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
Config = WgmmaTmaStoreConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # D = act(alpha * A @ B + bias + beta * C_in) applied as the chunks are staged (StagedOutput)
PIECES = ("StorePlan", "StagedOutput", "store_chunks", "drained", "with_c_map")

TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaTmaStoreConfig:
    cfg = WgmmaTmaStoreConfig()
    pairs = _ceil(M, cfg.block_m) * _ceil(_ceil(N, cfg.block_n), CLUSTER)
    return replace(cfg, ctas=blocks_for(pairs, CLUSTER))


@dataclass(frozen=True)
class StorePlan(Plan):
    """Step 21's plan with a chunk buffer per consumer after the ring's stages (1024-byte
    aligned, as the swizzle needs), the barriers after them, and C's tensor map."""

    @property
    def chunk_el(self) -> int:
        return self.cfg.chunk // self.eb

    @property
    def staging0(self) -> int:
        return self.stages * self.stage_fl

    @property
    def bar0(self) -> int:
        return self.staging0 + self.consumers * self.chunk_el

    @property
    def box_c(self) -> int:
        """Columns of C per TMA box: one 128-byte swizzle row (64 halves, 32 floats)."""
        return SWIZZLE_BYTES // self.eb

    @property
    def rows(self) -> int:
        """Rows of C per chunk: the most that fit a consumer's 64 columns in `chunk` bytes and
        divide the tile's rows in whole groups of 8 (the swizzle's period; a box then starts on a
        1024-byte line). Not simply what fits: 192-row tiles in 16 KB chunks of 16-bit C (128
        rows) stored one chunk and left a third of C unwritten (H200, 2026-11-29: relative error
        inf at 1536^3; git show cae1fd4:probe/cluster_tiles.py); they take 2 chunks of 96 rows."""
        fits = min(self.cfg.chunk // (WG_M * self.eb), self.BM)
        return max(r for r in range(8, fits + 1, 8) if self.BM % r == 0)

    @property
    def C_tma(self) -> list:
        return [self.N, self.M, self.N * self.eb, self.box_c, self.rows, 1, 1, 0, SWIZZLE_128B, 0, 0]

    def staged(self, wg, r, col):
        """Where row r, column col of consumer wg's chunk lives (in elements): box col // box_c,
        the 16-byte unit of a 128-byte row at unit ^ (r % 8)."""
        b, cc = col // self.box_c, col % self.box_c
        unit, within = cc * self.eb // 16, cc % (16 // self.eb)
        return (self.staging0 + wg * self.chunk_el + b * self.rows * self.box_c + r * self.box_c
                + ((unit ^ (r % 8)) * (16 // self.eb)) + within)


def tma_store_fits(M: int, N: int, dtype: str) -> bool:
    """TMA addresses C only where its rows are 16-byte strided."""
    return N * {"fp32": 4, "fp16": 2, "bf16": 2}[dtype] % 16 == 0


# A chunk's value goes to shared memory through an asm store: TVM's ThreadSync sees a buffer
# store after step 18's TF32 fragment loads from the same shared buffer and asks for a
# __syncthreads inside the consumers' branch, which it cannot place (and which is not needed:
# the named barriers order the chunk buffer, the ring's mbarriers the stages).
STORE_SHARED = {
    "float32": ("st_shared_f32", "float v", "v", "f32", "f"),
    "float16": ("st_shared_f16", "float v", "__half_as_ushort(__float2half_rn(v))", "b16", "h"),
    "bfloat16": ("st_shared_bf16", "float v", "__bfloat16_as_ushort(__float2bfloat16_rn(v))", "b16", "h"),
}


def store_shared(dtype: str, addr, value):
    """st.shared of an fp32 value at `addr`, rounded to nearest in `dtype` (TVM's name)."""
    name, arg, expr, ptx, constraint = STORE_SHARED[dtype]
    source = (f"__forceinline__ __device__ void {name}(void* p, {arg}) {{\n"
              f"  asm volatile(\"st.shared.{ptx} [%0], %1;\" :: \"r\"((unsigned int)__cvta_generic_to_shared(p)), "
              f"\"{constraint}\"({expr}) : \"memory\");\n}}\n")
    return T.cuda.func_call(name, addr, value, source_code=source)


class StagedOutput:
    """What the consumers' store writes through: the output's tensor map, and (a fused epilogue)
    the FusedOutput whose bias and C_in the staged values read. A Python value passed through the
    macros as step 20's C is (wgmma.FusedOutput says how)."""

    def __init__(self, c_map, fused=None):
        self.map, self.fused = c_map, fused


def staged_value(plan: StorePlan, out: StagedOutput, acc, row, col):
    """The fp32 value staged for C[row, col]: the sum, or the epilogue of it (wgmma.stored's,
    before the rounding that store_shared does). A chunk's rows and columns past C's edge are
    staged too (TMA clips the store), so the epilogue's reads of bias and C_in are clamped into them."""
    if out.fused is None:
        return acc
    return plan.epilogue.value(acc, T.min(row, plan.M - 1), T.min(col, plan.N - 1), out.fused.bias, out.fused.c_in)


def store_chunks(plan: StorePlan):
    """A macro: a consumer's epilogue. For each chunk of `rows` rows: wait until the copy engine
    has read the buffer (the storing thread) and meet; write the chunk's registers (or a fused
    epilogue of them), rounded, to their swizzled places; fence them to the async proxy and
    meet; one thread starts the TMA store of the chunk's boxes."""
    acc_n, rows, box_c = plan.acc_n, plan.rows, plan.box_c
    chunks, per_chunk, boxes = plan.BM // rows, rows // 8, WG_M // box_c
    settle = wgmma.settle(plan)

    @T.macro
    def store(smem, out, acc, m0, n0, tid, wg, warp, lane):
        settle(acc)
        for j in T.unroll(chunks):
            if tid % WARPGROUP == 0:
                T.ptx["cp.async.bulk.wait_group.read"](0)
            T.cuda.warpgroup_sync(1 + wg)
            for ii in T.unroll(per_chunk):
                for h in T.unroll(2):
                    for c in T.unroll(2):
                        T.evaluate(store_shared(
                            plan.dtype, T.address_of(smem[plan.staged(wg, ii * 8 + (lane % 4) * 2 + c, warp * 16 + lane // 4 + 8 * h)]),
                            staged_value(plan, out, acc[(j * per_chunk + ii) * 4 + 2 * h + c],
                                         m0 + j * rows + ii * 8 + (lane % 4) * 2 + c, n0 + wg * WG_M + warp * 16 + lane // 4 + 8 * h)))
            T.ptx.fence.proxy.async_.shared__cta()
            T.cuda.warpgroup_sync(1 + wg)
            if tid % WARPGROUP == 0:
                for b in T.unroll(boxes):
                    T.ptx[TMA_STORE](T.address_of(out.map), n0 + wg * WG_M + b * box_c, m0 + j * rows,
                                     T.address_of(smem[plan.staging0 + wg * plan.chunk_el + b * rows * box_c]))
                T.ptx["cp.async.bulk.commit_group"]()

    return store


def drained(consumer):
    """A macro: step 21's consumer, then its storing thread waits for its last TMA stores (the
    copy engine reads the chunk buffer until then) before the block may exit."""

    @T.macro
    def consumer_(smem, acc, frag, descA, descB, out, bid, tid, wg, warp, lane):
        consumer(smem, acc, frag, descA, descB, out, bid, tid, wg, warp, lane)
        if tid % WARPGROUP == 0:
            T.ptx["cp.async.bulk.wait_group"](0)

    return consumer_


def with_c_map(plan: StorePlan, block):
    """A macro: the host encodes the output's tensor map (C's, or a fused epilogue's D), then
    step 21's kernel runs with it as the consumers' output."""

    @T.macro
    def launch(A_op, B_op, C, A_map, B_map):
        C_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", C_map, plan.dtype, 2, wgmma.output(C).data, *plan.C_tma)
        block(A_op, B_op, C, A_map, B_map,
              StagedOutput(C_map, C if isinstance(C, wgmma.FusedOutput) else None))

    return launch


def kernel(M: int, N: int, K: int, cfg: WgmmaTmaStoreConfig, dtype: str = "fp32", epilogue=None, fused=True):
    if not tma_store_fits(M, N, dtype):
        return step21_kernel(M, N, K, cfg, dtype, epilogue, fused)
    p = StorePlan(M, N, K, cfg, config.DTYPES[dtype], epilogue=epilogue, fused=fused)
    multiply = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    block = clustered(p, produce_pairs(p, load_multicast(p)), drained(consume_pairs(p, multiply, store_chunks(p))))
    return wgmma.prim_func(p, with_c_map(p, block))
