"""Probe (issue 49): two consumer warpgroups on one 64-column tile, taking alternate slices of K.

The tall-skinny 16-bit shapes stay at 0.62-0.77x cuBLAS bf16 on the H200 (4096 x 128 x 4096,
8192 x 32 x 2048, 6144 x 96 x 2048, 96 x 6144 x 2048). Nsight Compute read step 29's kernel and
cuBLAS's at the same L2 rate, our warps issuing with 1.24 warps a scheduler against cuBLAS's
2.26; cuBLAS's kernel (nvjet_sm90_tst_64x64_64x13_2x1, 384 threads) puts two consumer
warpgroups on a 64 x 64 tile (docs/any-shape.md, "What the skinny 16-bit gaps are made of").
A 64-column tile gives the ladder one consumer, whose chain of wgmma on one accumulator is
serial: each slice's group waits for the one before (TILE_RATE (64, 64) = 0.4 of 256 x 128's).

Here: step 23's unit walk (and step 29's launch), but two consumers per 64 columns, warpgroup w
multiplying slices w, w + 2, ... of the unit into its own accumulator: two independent chains.
At the unit's end warpgroup 1 puts its sums in shared memory (register i of thread t at
i * 128 + t), warpgroup 0 adds them to its own and stores (C, or the unit's partial sum).
Two named barriers order the exchange buffer: 1 (it is written), 2 (it has been read).

Prediction: where the units fit one wave and the tile's own chain is what bounds it (64 x 64 at
4096 x 128 x 4096: 12.8 us against cuBLAS's 9.3), up to ~1.3x the pick, ~0.95x cuBLAS.

    python probe/paired.py OUT.txt         (on the GPU)
"""
from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass, replace

from tvm.script import tirx as T

import schedules
import schedules.step20_persistent as s20
import schedules.step23_split_k_wgmma as s23
import schedules.step29_dependent_launch as s29
from schedules.config import WgmmaDependentLaunchConfig
from schedules.step18_register_a import load_b_boxes, multiply_transposed, store_transposed
from schedules.step20_persistent import release_here
from schedules.step23_split_k_wgmma import parts, produce_units, reduce_partials, store_partial, unit_loop
from schedules.transforms import wgmma
from schedules.transforms.wgmma import PRODUCER_REGS, WARPGROUP, Plan, _ceil


@dataclass(frozen=True)
class PairedConfig(WgmmaDependentLaunchConfig):
    """Step 29's config; two consumer warpgroups per 64 columns (block_n 64 only)."""

    @property
    def consumers(self) -> int:
        return 2

    @property
    def shared_bytes(self) -> int:
        return super().shared_bytes + 16 + WARPGROUP * (self.block_m // 2) * 4


@dataclass(frozen=True)
class PairPlan(Plan):
    @property
    def x0(self) -> int:
        """The exchange buffer's first element (in the plan's dtype), 16-byte aligned."""
        return _ceil(super().smem_fl, 16 // self.eb) * (16 // self.eb)

    @property
    def smem_fl(self) -> int:
        return self.x0 + WARPGROUP * self.acc_n * 4 // self.eb


PAIR = """
#ifndef PAIR_HELPERS
#define PAIR_HELPERS
__forceinline__ __device__ void pair_sync(int id) { asm volatile("bar.sync %0, 256;" :: "r"(id) : "memory"); }
__forceinline__ __device__ void pair_arrive(int id) { asm volatile("bar.arrive %0, 256;" :: "r"(id) : "memory"); }
__forceinline__ __device__ void pair_put(void* base, int i, float v) {
  asm volatile("st.shared.f32 [%0], %1;" :: "r"((unsigned int)__cvta_generic_to_shared(base) + 4 * i), "f"(v) : "memory");
}
__forceinline__ __device__ float pair_get(void* base, int i) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"((unsigned int)__cvta_generic_to_shared(base) + 4 * i) : "memory");
  return v;
}
#endif
"""


def call(name, *args, **kw):
    return T.cuda.func_call(f"pair_{name}", *args, source_code=PAIR, **kw)


ROTATE = {"on": False}  # set while building: each tile starts its K loop at its own slice


def rotation(plan: Plan, m0, n0, slices):
    """Where a tile's K loop starts: tile (i, j) at slice (i + j) % slices, so the blocks that run
    together read different rows of B (and of A) at any moment, not the same lines."""
    return (m0 // plan.BM + n0 // plan.BN) % slices if ROTATE["on"] else 0


def produce_units_rot(plan: Plan, load, split: int):
    """step 23's ``produce_units`` with each unit's slices rotated (``rotation``)."""
    stages = plan.stages
    per = parts(plan, split)[0]

    @T.macro
    def producer(smem, A_map, B_map, bid):
        count, unit = T.meta_var(unit_loop(plan, split, bid))
        for t in T.serial(count):
            m0, n0, part = T.meta_var(unit(t))
            for kt in T.serial(per):
                if t * per + kt >= stages:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar((t * per + kt) % stages)]),
                                         (((t * per + kt) // stages) & 1) ^ 1)
                load(smem, A_map, B_map, part * per + (kt + rotation(plan, m0, n0, per)) % per,
                     (t * per + kt) % stages, m0, n0)

    return producer


def produce_tiles_rot(plan: Plan, load, walk=s20.tile_loop):
    """step 20's ``produce_tiles`` with each tile's slices rotated (``rotation``)."""
    stages, KT = plan.stages, plan.KT

    @T.macro
    def producer(smem, A_map, B_map, bid):
        count, corner = T.meta_var(walk(plan, bid))
        for t in T.serial(count):
            m0, n0 = T.meta_var(corner(t))
            for kt in T.serial(KT):
                if t * KT + kt >= stages:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.empty_bar((t * KT + kt) % stages)]),
                                         (((t * KT + kt) // stages) & 1) ^ 1)
                load(smem, A_map, B_map, (kt + rotation(plan, m0, n0, KT)) % KT, (t * KT + kt) % stages, m0, n0)

    return producer


def init_barriers(p: Plan):
    @T.macro
    def init(smem, tid):
        wgmma.keep_whole(smem, tid)
        if tid == 0:
            for s in T.unroll(p.stages):
                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[p.full_bar(s)]), T.uint32(1))
                # one warpgroup consumes each slice
                T.ptx.mbarrier.init.shared.b64(T.address_of(smem[p.empty_bar(s)]), T.uint32(WARPGROUP))
        T.ptx.fence.proxy.async_.shared__cta()
        T.tvm_storage_sync("shared")

    return init


def consume_pairs(plan: PairPlan, multiply, split: int):
    per = parts(plan, split)[0]
    stages, acc_n = plan.stages, plan.acc_n
    wait, release, settle = wgmma.wait_for_slice(plan), release_here(plan), wgmma.settle(plan)
    store = store_partial(plan) if split > 1 else store_transposed(plan)

    @T.macro
    def consumer(smem, acc, frag, descA, descB, out, bid, tid, wg, warp, lane):
        count, unit = T.meta_var(unit_loop(plan, split, bid))
        mine = T.meta_var((per - wg + 1) // 2)
        for t in T.serial(count):
            m0, n0, part = T.meta_var(unit(t))
            for i in T.unroll(acc_n):
                acc[i] = T.float32(0)
                T.cuda.wgmma.noop_barrier(acc[i])
            for j in T.serial((per + 1) // 2):  # a bound known when compiled (ptxas: C7515 otherwise)
                if 2 * j + wg < per:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((t * per + 2 * j + wg) % stages)]),
                                         ((t * per + 2 * j + wg) // stages) & 1)
                    multiply(smem, acc, frag, descA, descB, (t * per + 2 * j + wg) % stages, 0, 0, warp, lane)
                    wait(j, mine)
                    if j > 0:
                        release(smem, t * per + 2 * j - 2 + wg, tid)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            if mine > 0:
                release(smem, t * per + 2 * mine - 2 + wg, tid)
            for i in T.unroll(acc_n):
                T.cuda.wgmma.noop_barrier(acc[i])
            settle(acc)
            if wg == 1:
                if t > 0:
                    T.evaluate(call("sync", 2))
                for i in T.unroll(acc_n):
                    T.evaluate(call("put", T.address_of(smem[plan.x0]), i * WARPGROUP + tid % WARPGROUP, acc[i]))
                T.evaluate(call("arrive", 1))
            else:
                T.evaluate(call("sync", 1))
                for i in T.unroll(acc_n):
                    acc[i] = acc[i] + call("get", T.address_of(smem[plan.x0]), i * WARPGROUP + tid % WARPGROUP,
                                           return_type="float32")
                if t < count - 1:
                    T.evaluate(call("arrive", 2))
                if split > 1:
                    store(out, acc, part, m0, n0, 0, warp, lane)
                else:
                    store(out, acc, m0, n0, 0, warp, lane)

    return consumer


def paired(plan: Plan, producer, consumer, blocks: int, out_rows: int):
    """step 20's ``persistent`` with this probe's barriers."""

    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map):
        for bid in T.thread_binding(blocks, thread="blockIdx.x"):
            for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                with T.sblock("C"):
                    T.reads(A_op[0:plan.M, 0:plan.Ka], B_op[0:plan.B_shape[0], 0:plan.B_shape[1]])
                    T.writes(C[0:out_rows, 0:plan.N])
                    smem = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                    acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                    frag = T.sblock_alloc_buffer((plan.frag_regs,), "uint32", scope="local")
                    descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    wg = T.meta_var((tid - plan.first) // WARPGROUP)
                    warp = T.meta_var(tid % WARPGROUP // 32)
                    lane = T.meta_var(tid % 32)
                    init_barriers(plan)(smem, tid)
                    if tid < WARPGROUP:
                        T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                        if tid == 0:
                            producer(smem, A_map, B_map, bid)
                    else:
                        T.ptx["setmaxnreg.inc.sync.aligned.u32"](plan.consumer_regs)
                        consumer(smem, acc, frag, descA, descB, C, bid, tid, wg, warp, lane)

    return kernel


def paired_kernel(M, N, K, cfg, dtype="fp32", epilogue=None, fused=True):
    p = PairPlan(M, N, K, cfg, wgmma.DTYPES[dtype], epilogue=epilogue, fused=fused)
    assert p.sixteen_bit and cfg.block_n == 64
    split = parts(p, cfg.split_k)[1]
    units = p.tm * p.tn * split
    body = paired(p, produce_units_rot(p, load_b_boxes(p), split), consume_pairs(p, multiply_transposed(p), split),
                  blocks=min(units, cfg.ctas), out_rows=split * M if split > 1 else M)
    return wgmma.prim_func(p, body, partials=(split, reduce_partials(p, split)) if split > 1 else None)


def paired_step():
    module = types.SimpleNamespace(**{k: getattr(s29, k) for k in dir(s29) if not k.startswith("__")})
    module.kernel = paired_kernel
    module.Config = PairedConfig
    return dataclasses.replace(schedules.get_step(29), Config=PairedConfig, module=module)


def build_paired(M, N, K, arch, config, dtype="bf16", rotate=False):
    ROTATE["on"] = rotate
    try:
        return schedules.build(paired_step(), M, N, K, arch=arch, config=config, dtype=dtype)
    finally:
        ROTATE["on"] = False


def build_rotated(M, N, K, arch, config, dtype="bf16"):
    """Step 29 (step 20's or step 23's kernel) with each tile's K loop rotated."""
    stock = (s20.produce_tiles, s23.produce_units)
    s20.produce_tiles, s23.produce_units, ROTATE["on"] = produce_tiles_rot, produce_units_rot, True
    try:
        return schedules.build(29, M, N, K, arch=arch, config=config, dtype=dtype)
    finally:
        (s20.produce_tiles, s23.produce_units), ROTATE["on"] = stock, False


def config(M, N, K, bm, split=1, stages=None):
    per_stage = (bm + 64) * 128
    budget = 227 * 1024 - 1024 - WARPGROUP * bm // 2 * 4
    st = stages or min(16, budget // per_stage)
    units = _ceil(M, bm) * _ceil(N, 64) * split
    return PairedConfig(block_m=bm, block_n=64, stages=st, split_k=split, ctas=min(132, units))


# shape: the variants, (label, builder, config or None for the pick's); the pick first
def variants(M, N, K, pick_cfg):
    s29cfg = schedules.get_step(29).default_config(M, N, K, "bf16")
    out = [("step 29 rotated", build_rotated, pick_cfg if isinstance(pick_cfg, type(s29cfg)) else s29cfg)]
    if (M, N, K) == (4096, 128, 4096):
        out += [("step 29 13 stages", None, replace(s29cfg, stages=13)),
                ("step 29 13 stages rotated", build_rotated, replace(s29cfg, stages=13))]
    if N <= 128 or M <= 128:
        bm = {(4096, 128, 4096): 64, (8192, 32, 2048): 128, (6144, 96, 2048): 96, (96, 6144, 2048): 96}[(M, N, K)]
        cfg = config(M, N, K, bm, 1, 8 if bm == 64 else None)
        out += [("paired", lambda *a, **k: build_paired(*a, **k), cfg),
                ("paired rotated", lambda *a, **k: build_paired(*a, rotate=True, **k), cfg)]
    return out


SHAPES = [(4096, 128, 4096), (8192, 32, 2048), (6144, 96, 2048), (96, 6144, 2048), (4096, 4096, 4096)]


def main():
    import numpy as np
    import tvm

    from steps.measure import harness
    out = open(sys.argv[1], "a") if len(sys.argv) > 1 else sys.stdout
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16"

    def say(*a):
        print(*a, flush=True)
        if out is not sys.stdout:
            print(*a, file=out, flush=True)

    dev = tvm.cuda(0)
    run = harness.KernelRunner(repeat=10, isolate=False)
    tol = harness.tolerance(29, dtype)
    for (M, N, K) in SHAPES:
        pick = schedules.fastest(M, N, K, precision=dtype, arch="sm_90", gpu="NVIDIA H200")
        names, libs = [], []
        cands = [(f"pick: step {pick.step.number} {pick.config}", lambda: schedules.build(
            pick.step.number, M, N, K, arch="sm_90a", config=pick.config, dtype=dtype))]
        for label, builder, cfg in variants(M, N, K, pick.config):
            if builder is None:
                make = (lambda cfg=cfg: schedules.build(29, M, N, K, arch="sm_90a", config=cfg, dtype=dtype))
            else:
                make = (lambda cfg=cfg, builder=builder: builder(M, N, K, "sm_90a", cfg, dtype))
            cands.append((f"{label} {cfg}", make))
        for name, make in cands:
            try:
                lib = make()
                err = run.check(lib["main"], M, N, K, dtype)
            except Exception as e:  # a probe: say it and go on
                say(f"{M}x{N}x{K} {name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            ok = err <= tol
            say(f"{M}x{N}x{K} {name}: rel err {err:.3g} ({'ok' if ok else 'WRONG'})")
            if ok:
                names.append(name), libs.append(lib)
        if len(libs) < 2:
            continue
        rng = np.random.default_rng(0)
        sets = []
        for _ in range(3):
            a, b = harness.random_operands(M, N, K, rng, dtype)
            sets.append([run._tensor(x, dtype) for x in (a, b, harness.dtypes.zeros((M, N), dtype))])
        timings = harness.alternating_timings([lib.mod for lib in libs], dev, sets, repeat=10, rounds=6)
        base = timings[0].median_ms
        for name, t in zip(names, timings):
            say(f"  {name}: {t.median_ms * 1e3:.2f} us  x pick {base / t.median_ms:.3f}  rounds "
                + " ".join(f"{r * 1e3:.1f}" for r in t.rounds_ms))
        best = min(range(len(timings)), key=lambda i: timings[i].median_ms)
        for i in sorted({0, best}):
            mine, theirs, _ = harness.time_beside_cublas(libs[i], dev, M, N, K, repeat=10, rounds=4, dtype=dtype)
            say(f"  in turns: {names[i]}: {mine.median_ms * 1e3:.2f} us, cuBLAS {theirs.median_ms * 1e3:.2f}: "
                f"{theirs.median_ms / mine.median_ms:.3f}x cuBLAS {dtype}")


if __name__ == "__main__":
    main()
