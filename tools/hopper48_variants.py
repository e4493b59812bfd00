"""Probe variants of steps 20-21 (issue 48), built by patching their pieces: launch_only (step 20 in
clusters, no multicast), no_release (step 21 with the default arrive), release_now, no_store, in_flight1."""
import tvm
from tvm.script import tirx as T
import schedules
from schedules import step20_persistent as s20, step21_cluster as s21
from schedules.transforms import wgmma
from schedules.transforms.wgmma import CONSUMER_REGS, PRODUCER_REGS, WARPGROUP
from schedules.step18_register_a import load_b_boxes, multiply_transposed, multiply_register_a, store_transposed


def persistent_in_clusters(plan, producer, consumer):
    @T.macro
    def kernel(A_op, B_op, C, A_map, B_map):
        for bid in T.thread_binding(s20.grid(plan), thread="blockIdx.x"):
            for _r in T.thread_binding(2, thread="clusterCtaIdx.x"):
                for tid in T.thread_binding(plan.threads, thread="threadIdx.x"):
                    with T.sblock("C"):
                        T.reads(A_op[0:plan.M, 0:plan.Ka], B_op[0:plan.B_shape[0], 0:plan.B_shape[1]])
                        T.writes(C[0:plan.M, 0:plan.N])
                        smem = T.sblock_alloc_buffer((plan.smem_fl,), plan.dtype, scope="shared.dyn", align=1024)
                        acc = T.sblock_alloc_buffer((plan.acc_n,), "float32", scope="local")
                        frag = T.sblock_alloc_buffer((plan.frag_regs,), "uint32", scope="local")
                        descA = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                        descB = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                        wg = T.meta_var((tid - plan.first) // WARPGROUP)
                        warp = T.meta_var(tid % WARPGROUP // 32)
                        lane = T.meta_var(tid % 32)
                        wgmma.init_barriers(plan)(smem, tid)
                        if tid < WARPGROUP:
                            T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                            if tid == 0:
                                producer(smem, A_map, B_map, bid)
                        else:
                            T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
                            consumer(smem, acc, frag, descA, descB, C, bid, wg, warp, lane)
    return kernel


NO_RELEASE = s21.ARRIVE_CLUSTER.replace("mbarrier.arrive.release.cluster.shared::cluster.b64", "mbarrier.arrive.shared::cluster.b64")


def build(variant, M, N, K, dtype, cfg):
    from tvm.s_tir import Schedule
    p = wgmma.plan(M, N, K, cfg, dtype)
    mult = multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p)
    if variant == "launch_only":
        f = wgmma.prim_func(p, persistent_in_clusters(p, s20.produce_tiles(p, load_b_boxes(p)),
                                                       s20.consume_tiles(p, mult, store_transposed(p))))
    elif variant == "no_release":
        old = s21.ARRIVE_CLUSTER
        s21.ARRIVE_CLUSTER = NO_RELEASE
        try:
            f = s21.kernel(M, N, K, cfg, dtype)
        finally:
            s21.ARRIVE_CLUSTER = old
    else:
        raise ValueError(variant)
    sch = Schedule(f)
    wgmma.schedule_copies(sch)
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(sch.mod, target=schedules.target("sm_90a"))["main"]


def consume_now(plan, multiply, store):
    """step 20's consumer, 16-bit: after wait_group 0 the slice's own stage goes back at once."""
    from schedules.transforms.wgmma import _ceil
    stages, KT, acc_n = plan.stages, plan.KT, plan.acc_n

    @T.macro
    def consumer(smem, acc, frag, descA, descB, C, bid, wg, warp, lane):
        count, tile = T.meta_var(s20.tile_loop(plan, bid))
        for t in T.serial(count):
            for i in T.unroll(acc_n):
                acc[i] = T.float32(0)
                T.cuda.wgmma.noop_barrier(acc[i])
            for kt2 in T.serial(_ceil(KT, 2)):
                for p in T.unroll(2):
                    if kt2 * 2 + p < KT:
                        T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((t * KT + kt2 * 2 + p) % stages)]),
                                             ((t * KT + kt2 * 2 + p) // stages) & 1)
                        multiply(smem, acc, frag, descA, descB, (t * KT + kt2 * 2 + p) % stages, p, wg, warp, lane)
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[plan.empty_bar((t * KT + kt2 * 2 + p) % stages)]), T.uint32(1))
            for i in T.unroll(acc_n):
                T.cuda.wgmma.noop_barrier(acc[i])
            store(C, acc, plan.tile_m0(tile(t)), plan.tile_n0(tile(t)), wg, warp, lane)
    return consumer


_build = build


def build(variant, M, N, K, dtype, cfg):
    if variant != "release_now":
        return _build(variant, M, N, K, dtype, cfg)
    from tvm.s_tir import Schedule
    p = wgmma.plan(M, N, K, cfg, dtype)
    f = wgmma.prim_func(p, s20.persistent(p, s20.produce_tiles(p, load_b_boxes(p)),
                                          consume_now(p, multiply_transposed(p), store_transposed(p))))
    sch = Schedule(f)
    wgmma.schedule_copies(sch)
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(sch.mod, target=schedules.target("sm_90a"))["main"]


def no_store(plan):
    @T.macro
    def write(C, acc, m0, n0, wg, warp, lane):
        T.evaluate(0)
    return write


class InFlight1(wgmma.Plan):
    @property
    def in_flight(self):
        return 1


_build2 = build


def build(variant, M, N, K, dtype, cfg):
    from tvm.s_tir import Schedule
    from schedules.config import DTYPES
    if variant == "no_store":
        p = wgmma.plan(M, N, K, cfg, dtype)
        f = wgmma.prim_func(p, s20.persistent(p, s20.produce_tiles(p, load_b_boxes(p)),
                                              s20.consume_tiles(p, multiply_transposed(p) if p.sixteen_bit else multiply_register_a(p), no_store(p))))
    elif variant == "in_flight1":
        p = InFlight1(M, N, K, cfg, DTYPES[dtype])
        f = wgmma.prim_func(p, s20.persistent(p, s20.produce_tiles(p, load_b_boxes(p)),
                                              s20.consume_tiles(p, multiply_transposed(p), store_transposed(p))))
    else:
        return _build2(variant, M, N, K, dtype, cfg)
    sch = Schedule(f)
    wgmma.schedule_copies(sch)
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(sch.mod, target=schedules.target("sm_90a"))["main"]
