"""Variants of step 16/17/18's consumer: how many wgmma groups a 16-bit consumer may leave in flight (issue 47; results/nvidia-h100-80gb-hbm3/evidence/sixteen_bit_in_flight_probe.txt)."""
from tvm.script import tirx as T
from tvm import s_tir
import schedules
from schedules import step16_warp_specialized as s16, step18_register_a as s18
from schedules.transforms import wgmma
from schedules.transforms.wgmma import _ceil
from schedules.config import WgmmaPipelineConfig, WgmmaRegisterAConfig


def consume_lag(plan, multiply, store, wait_n=1, lag=1):
    stages, KT, acc_n = plan.stages, plan.KT, plan.acc_n

    @T.macro
    def consumer(smem, acc, frag, total, flag, fallback, descA, descB, A_op, B_op, C, m0, n0, wg, warp, lane):
        for i in T.unroll(acc_n):
            acc[i] = T.float32(0)
            T.cuda.wgmma.noop_barrier(acc[i])
        for kt in T.serial(KT):
            T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar(kt % stages)]), (kt // stages) & 1)
            multiply(smem, acc, frag, descA, descB, kt % stages, 0, wg, warp, lane)
            T.ptx.wgmma.wait_group.sync.aligned(wait_n)
            if kt >= lag:
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(smem[plan.empty_bar((kt - lag) % stages)]), T.uint32(1))
        T.ptx.wgmma.wait_group.sync.aligned(0)
        store(C, acc, m0, n0, wg, warp, lane)

    return consumer


def kernel_lag(M, N, K, dtype, step=16, wait_n=1, lag=1):
    if step == 18:
        cfg = WgmmaRegisterAConfig()
        p = wgmma.plan(M, N, K, cfg, dtype)
        cons = consume_lag(p, s18.multiply_transposed(p), s18.store_transposed(p), wait_n, lag)
        return wgmma.prim_func(p, s16.warp_specialized(p, s16.produce(p, s18.load_b_boxes(p)), cons))
    cfg = WgmmaPipelineConfig(block_n=256) if step == 17 else WgmmaPipelineConfig()
    p = wgmma.plan(M, N, K, cfg, dtype)
    cons = consume_lag(p, wgmma.multiply_stage(p), wgmma.store(p), wait_n, lag)
    return wgmma.prim_func(p, s16.warp_specialized(p, s16.produce(p, wgmma.load_stage(p)), cons))


def consume_fenced(plan, multiply, store, wait_n=1):
    stages, KT, acc_n = plan.stages, plan.KT, plan.acc_n

    @T.macro
    def consumer(smem, acc, frag, total, flag, fallback, descA, descB, A_op, B_op, C, m0, n0, wg, warp, lane):
        for i in T.unroll(acc_n):
            acc[i] = T.float32(0)
            T.cuda.wgmma.noop_barrier(acc[i])
        for kt2 in T.serial(_ceil(KT, 2)):
            for p in T.unroll(2):
                if kt2 * 2 + p < KT:
                    T.cuda.mbarrier_wait(T.address_of(smem[plan.full_bar((kt2 * 2 + p) % stages)]),
                                         ((kt2 * 2 + p) // stages) & 1)
                    for i in T.unroll(acc_n):
                        T.cuda.wgmma.noop_barrier(acc[i])
                    multiply(smem, acc, frag, descA, descB, (kt2 * 2 + p) % stages, p, wg, warp, lane)
                    for i in T.unroll(acc_n):
                        T.cuda.wgmma.noop_barrier(acc[i])
                    T.ptx.wgmma.wait_group.sync.aligned(wait_n)
                    for i in T.unroll(acc_n):
                        T.cuda.wgmma.noop_barrier(acc[i])
                    if kt2 * 2 + p > 0:
                        T.ptx.mbarrier.arrive.shared.b64(
                            T.address_of(smem[plan.empty_bar((kt2 * 2 + p - 1) % stages)]), T.uint32(1))
        T.ptx.wgmma.wait_group.sync.aligned(0)
        for i in T.unroll(acc_n):
            T.cuda.wgmma.noop_barrier(acc[i])
        store(C, acc, m0, n0, wg, warp, lane)

    return consumer


def kernel16(M, N, K, dtype, fenced=True, wait_n=1, stages=4):
    cfg = WgmmaPipelineConfig(stages=stages)
    p = wgmma.plan(M, N, K, cfg, dtype)
    cons = consume_fenced(p, wgmma.multiply_stage(p), wgmma.store(p), wait_n) if fenced else s16.consume(p, wgmma.multiply_stage(p), wgmma.store(p))
    return wgmma.prim_func(p, s16.warp_specialized(p, s16.produce(p, wgmma.load_stage(p)), cons))


def build(func):
    import tvm
    sch = s_tir.Schedule(func)
    wgmma.schedule_copies(sch)
    from schedules.lowering import pipelines
    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(sch.mod, target=schedules.target("sm_90a"), tir_pipeline=pipelines.with_device_passes())
