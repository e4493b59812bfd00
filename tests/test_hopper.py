"""The Hopper rungs (steps 15-22, schedules/transforms/wgmma.py) without a GPU: what they are, that they
build for sm_90a with the instructions their ideas name, ptxas's report, their configs' one-line
errors, odd shapes, and the one line a GPU of another kind gets. Step 19 (3xTF32 on wgmma) has
its own section: the split, the three products, the promotion, the fp32 fallback; steps 20-22
(persistent grid, clusters, TMA store) have tests/test_hopper_persistent.py.

Their correctness and speed on a GPU are tests/test_gpu.py's and tests/test_gpu_shapes.py's
(every step, these included; skipped with the reason on a GPU that is not Hopper)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

import schedules
from schedules import ConfigError
from schedules.config import (Wgmma3xFP16Config, Wgmma3xTF32Config, Wgmma3xTF32PersistentConfig, WgmmaClusterConfig,
                              WgmmaClusterSplitConfig, WgmmaConfig, WgmmaDependentClusterSplitConfig,
                              WgmmaDependentLaunchConfig, WgmmaDependentStreamKConfig, WgmmaPersistentConfig,
                              WgmmaPipelineConfig, WgmmaRegisterAConfig, WgmmaSplitKConfig, WgmmaStreamKConfig,
                              WgmmaTmaStoreConfig)
from steps.commands import ladder
from steps.measure import harness, nvcc

from .checks import config_error

HOPPER = [s for s in schedules.STEPS if s.arch is not None]
HOPPER_TF32 = [s for s in HOPPER if s.precision == "tf32"]
# The rungs whose wgmma read the fp32 operands as TF32 (steps 15-27); step 28 multiplies fp16 halves
# its copy kernels write, and has its own file (tests/test_3xfp16.py).
ON_FP32 = [s for s in HOPPER if s.number != 28]
SPLIT_STEP = schedules.get_step(19)
ODD = [(1000, 777, 1001), (1, 1, 1), (7, 4096, 13), (2047, 2047, 2047)]


def _id(v) -> str:
    return f"step{v.number}" if hasattr(v, "number") else "x".join(map(str, v))


def source(step, M, N, K, cfg=None) -> str:
    return schedules.cuda_source(schedules.build(step, M, N, K, arch="sm_90", config=cfg))


def kernels(src: str) -> list[tuple[str, str, str]]:
    """(launch bound, name, parameters) of each kernel defined in the source."""
    return re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{', src)


def test_the_hopper_rungs_are_15_to_23_and_25_to_31():
    assert [s.number for s in HOPPER] == [15, 16, 17, 18, 19, 20, 21, 22, 23, 25, 26, 27, 28, 29, 30, 31]
    assert all(s.arch == "sm_90a" and s.tensor_cores for s in HOPPER)
    assert [s.number for s in HOPPER_TF32] == [15, 16, 17, 18, 20, 21, 22, 23, 26, 27, 29, 30, 31] and SPLIT_STEP.precision == "fp32"
    assert all(s.arch is None for s in schedules.STEPS if s.number < 15)
    # Each rung's config is its prior's, or extends it; 15 starts a new kind (warpgroup tiles).
    assert [s.Config for s in HOPPER] == [WgmmaConfig, WgmmaPipelineConfig, WgmmaPipelineConfig, WgmmaRegisterAConfig,
                                          Wgmma3xTF32Config, WgmmaPersistentConfig, WgmmaClusterConfig,
                                          WgmmaTmaStoreConfig, WgmmaSplitKConfig, Wgmma3xTF32PersistentConfig,
                                          WgmmaClusterSplitConfig, WgmmaStreamKConfig, Wgmma3xFP16Config,
                                          WgmmaDependentLaunchConfig, WgmmaDependentClusterSplitConfig,
                                          WgmmaDependentStreamKConfig]
    # Steps 29-31: their priors' configs (23, 26, 27), each under its own name.
    assert issubclass(WgmmaDependentLaunchConfig, WgmmaSplitKConfig)
    assert issubclass(WgmmaDependentClusterSplitConfig, WgmmaClusterSplitConfig)
    assert issubclass(WgmmaDependentStreamKConfig, WgmmaStreamKConfig)
    assert issubclass(Wgmma3xFP16Config, Wgmma3xTF32PersistentConfig)  # step 25's fields: --explain builds it at 28's
    assert issubclass(Wgmma3xTF32Config, WgmmaRegisterAConfig)
    assert issubclass(WgmmaTmaStoreConfig, WgmmaClusterConfig) and issubclass(WgmmaClusterConfig, WgmmaPersistentConfig)
    assert issubclass(WgmmaPersistentConfig, WgmmaRegisterAConfig) and issubclass(WgmmaSplitKConfig, WgmmaPersistentConfig)
    assert issubclass(WgmmaClusterSplitConfig, WgmmaSplitKConfig) and issubclass(WgmmaStreamKConfig, WgmmaTmaStoreConfig)
    assert issubclass(WgmmaRegisterAConfig, WgmmaPipelineConfig) and issubclass(WgmmaPipelineConfig, WgmmaConfig)
    assert all(harness.tolerance(s) == harness.TF32_TOLERANCE for s in HOPPER_TF32)
    assert harness.tolerance(SPLIT_STEP) == harness.tolerance(schedules.get_step(14)) < harness.TF32_TOLERANCE
    assert harness.tolerance(schedules.get_step(25)) == harness.tolerance(SPLIT_STEP)


@pytest.mark.parametrize("step", HOPPER, ids=_id)
def test_arch(step):
    assert step.build_arch("sm_90") == step.build_arch("sm_90a") == "sm_90a"
    assert step.runs_on("sm_90") and step.runs_on("sm_90a")
    for arch in ("sm_80", "sm_86", "sm_89"):
        assert not step.runs_on(arch)
        msg = config_error(lambda: schedules.build(step, 256, 256, 256, arch=arch), "Hopper", arch)
        assert msg == (f"step {step.number} needs a Hopper GPU (sm_90a: wgmma, TMA); it cannot be built "
                       f"for {arch}")
    # The other steps build for sm_90a as for sm_90 (a superset).
    assert schedules.get_step(14).build_arch("sm_90a") == "sm_90a"


# --- what the CUDA holds, rung by rung ------------------------------------------------------


@pytest.mark.parametrize("n", (256, 2048))
@pytest.mark.parametrize("step", ON_FP32, ids=_id)
def test_the_cuda_holds_each_rungs_idea(step, n):
    cfg = step.default_config(n, n, n)
    src = source(step, n, n, n)
    wg_n = cfg.block_m if cfg.register_a else cfg.block_n
    # wgmma, TF32, the instruction shape the config names, 4 per 32-k slice (unrolled).
    form = "rs" if cfg.register_a else "ss"
    helper = f"tvm_builtin_ptx_wgmma_tf32_{form}_mma_async_sync_aligned_m64n{wg_n}k8_f32_tf32_tf32_1_1"
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{wg_n}k8\.f32\.tf32\.tf32", src)
    # 3xTF32 (step 19): three per 8 k, over the two slices of a trip.
    per_slice = 4 * (3 if cfg.split else 1)
    assert src.count(helper + "(") - src.count(f"void {helper}(") == per_slice * (2 if cfg.producer else 1)
    assert "wgmma.commit_group.sync.aligned" in src and "wgmma.wait_group.sync.aligned" in src
    # TMA: a tensor map per operand, passed by value; the copy engine completes an mbarrier.
    (threads, name, params), = [k for k in kernels(src) if "CUtensorMap" in k[2]]
    # A and B's; step 22 stores C through a third (and step 27, step 22's kernel at these sizes).
    assert params.count("const __grid_constant__ CUtensorMap") == (3 if step.number in (22, 27, 31) else 2)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "mbarrier.try_wait.parity" in src and "mbarrier.arrive.expect_tx" in src
    # The GEMM kernel: dynamic shared memory (the ring and its barriers), launch bounds = threads.
    assert int(threads) == cfg.threads
    assert "extern __shared__ __align__(1024) float smem_ptr[];" in src
    # Warp specialization from step 16: a producer warpgroup, registers moved with setmaxnreg.
    assert ("setmaxnreg.dec.sync.aligned.u32 40" in src) == cfg.producer == (step.number >= 16)
    assert ("setmaxnreg.inc.sync.aligned.u32 232" in src) == cfg.producer
    assert ("mbarrier.arrive.shared" in src.replace("expect_tx", "")) == cfg.producer
    # B's transposed copy: a kernel of steps 15-17, gone at 18 (register A, C^T = B^T A^T).
    assert ("Bt_ptr" in src) == (step.number < 18)
    # Step 23 at 256^3 splits K in two: the GEMM writes a workspace, a second kernel sums it
    # (step 26 splits in a cluster: one kernel, test_hopper_persistent.py).
    split = getattr(cfg, "split_k", 1) > 1 and step.number in (23, 29)
    assert len(kernels(src)) == (1 if step.number >= 18 else 2) + split
    assert ("W_ptr" in src) == split == (step.number in (23, 29) and n == 256)
    # Steps 29-31: every kernel waits for its predecessor first (launched before that one ends).
    assert src.count("{\n  tvm_builtin_ptx_griddepcontrol_wait();") == (len(kernels(src)) if step.number >= 29 else 0)


def test_each_rung_changes_the_kernel():
    n = 2048
    sources = [source(s, n, n, n) for s in HOPPER if s.number not in (23, 27)]
    assert len(set(sources)) == len(sources)
    # Step 27 (stream-K) is step 22's kernel where it does not stream: 64 pairs of tiles at 2048^3
    # (test_stream_k.py: where it does).
    assert source(schedules.get_step(27), n, n, n) == source(schedules.get_step(22), n, n, n)
    # Step 23 (split-K) is step 20's kernel, byte for byte, where the output fills the SMs, and
    # its own (two kernels, a workspace) where it does not.
    step20, step23 = schedules.get_step(20), schedules.get_step(23)
    assert source(step23, n, n, n) == source(step20, n, n, n)
    split = source(step23, 256, 256, 16384)
    assert split != source(step20, 256, 256, 16384)
    assert [bound for bound, _, _ in kernels(split)] == ["384", "256"]  # the GEMM, then the sum of the parts
    # Step 17 is step 16 at block_n 256: the wide tile, nothing else.
    assert HOPPER[2].default_config(n, n, n) == dataclasses.replace(HOPPER[1].default_config(n, n, n), block_n=256)


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("shape", [(256, 256, 256), (4096, 4096, 4096), (1000, 777, 1001)], ids=_id)
@pytest.mark.parametrize("step", HOPPER, ids=_id)
def test_ptxas_no_spills_no_stack_frame(step, shape):
    report = nvcc.compile_report(source(step, *shape), step.build_arch("sm_90"))
    assert report.ok, report.log[-2000:]
    assert report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]
    # 384 threads cap the kernel at 65536 / 384 = 170 registers on entry; setmaxnreg raises the
    # consumers to 232 from there.
    assert report.registers <= 170


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
def test_plain_sm_90_cannot_assemble_wgmma():
    """Why the report and the load use sm_90a: the same CUDA for plain sm_90 fails in ptxas."""
    report = nvcc.compile_report(source(HOPPER[0], 256, 256, 256), "sm_90")
    assert not report.ok
    assert nvcc.arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert nvcc.arch_flags("sm_80") == ["-arch=sm_80"]


# --- any shape: TMA's zero fill, and padded copies where rows are not 16-byte strided -----------


@pytest.mark.parametrize("shape", ODD, ids=_id)
@pytest.mark.parametrize("step", ON_FP32, ids=_id)
def test_odd_shapes_build(step, shape):
    M, N, K = shape
    cfg = step.default_config(M, N, K)
    src = source(step, M, N, K)
    assert "wgmma.mma_async" in src
    # A copy kernel pads A's rows to 16 bytes where K is not a multiple of 4, and step 18's B
    # where N is not (it maps B itself); the GEMM guards its stores of C.
    assert ("A_pad" in src) == (K % 4 != 0)
    assert ("B_pad" in src) == (cfg.register_a and N % 4 != 0)
    described = schedules.transforms.padding.describe(cfg, M, N, K)
    assert ("A" in described) == (K % 4 != 0)


# --- configs: one line for each broken constraint -------------------------------------------


@pytest.mark.parametrize("cfg, words", [
    (WgmmaConfig(block_m=96), ("block_m", "64 or 128 or 192")),
    (WgmmaConfig(block_m=256), ("block_m", "64 or 128 or 192")),
    (WgmmaConfig(block_m=192, block_n=256), ("block_n", "at most 128", "three consumer")),
    (WgmmaConfig(block_n=48), ("block_n", "multiple of 32")),
    (WgmmaConfig(block_n=512), ("block_n", "256")),
    (WgmmaConfig(raster=0), ("raster", "positive")),
    (WgmmaPipelineConfig(stages=1), ("stages", "2 to 16")),
    (WgmmaPipelineConfig(stages=17), ("stages", "2 to 16")),
    (WgmmaPipelineConfig(block_n=256, stages=5), ("shared memory", "227 KB")),
    (WgmmaRegisterAConfig(block_n=256), ("block_n", "64 or 128 or 192")),
    (WgmmaRegisterAConfig(block_m=160, block_n=192, stages=2), ("block_m", "at most 128", "three consumer")),
    (WgmmaRegisterAConfig(block_m=80), ("block_m", "multiple of 32")),
    (Wgmma3xTF32Config(block_m=256), ("block_m", "at most 128", "3xTF32")),
    (Wgmma3xTF32Config(block_m=96, block_n=192, stages=2), ("block_n", "64 or 128", "3xTF32")),
    (Wgmma3xTF32Config(promote=0), ("promote", "1 to 8")),
    (Wgmma3xTF32Config(promote=True), ("promote", "1 to 8")),
    (Wgmma3xTF32Config(stages=5), ("shared memory", "227 KB")),
], ids=str)
def test_bad_configs_are_one_line(cfg, words):
    config_error(lambda: cfg.validate(1024, 1024, 1024), *words)


def test_config_fields_and_derived_values():
    cfg = WgmmaRegisterAConfig()
    assert (cfg.block_m, cfg.block_n, cfg.stages, cfg.consumers, cfg.wgmma_n, cfg.threads) == (256, 128, 4, 2, 256, 384)
    assert cfg.shared_bytes == 4 * ((256 + 128) * 32 * 4 + 16)
    # Step 19: A's small half beside each stage's tiles, and a third barrier (ready) per stage.
    split = Wgmma3xTF32Config()
    assert (split.block_m, split.block_n, split.consumers, split.threads, split.barriers) == (128, 128, 2, 384, 3)
    assert split.shared_bytes == 4 * ((2 * 128 + 128) * 32 * 4 + 24) and not cfg.split and split.split
    assert WgmmaConfig().threads == 256 and not WgmmaConfig().producer and WgmmaConfig().stages == 1
    assert WgmmaConfig.from_dict(WgmmaConfig(block_n=64).as_dict()) == WgmmaConfig(block_n=64)
    with pytest.raises(ConfigError):
        WgmmaConfig.from_dict({"stages": 2})  # step 15 has one buffer: no such field


@pytest.mark.parametrize("step", HOPPER, ids=_id)
def test_own_config_class_is_honoured(step):
    cfg = dataclasses.replace(step.default_config(2048, 2048, 2048), block_m=64) if not step.Config().register_a \
        else dataclasses.replace(step.default_config(2048, 2048, 2048), block_n=64)
    assert cfg.threads == step.default_config(2048, 2048, 2048).threads - 128
    src = source(step, 2048, 2048, 2048, cfg)
    assert [int(t) for t, _, params in kernels(src) if "CUtensorMap" in params] == [cfg.threads]


# --- a GPU of another kind: one line, and the ladder goes on without these rungs ----------------


def test_the_ladder_skips_the_hopper_rungs_elsewhere(capsys):
    kept = ladder.runnable_steps(list(schedules.STEPS), "sm_80")
    assert [s.number for s in kept] == list(range(1, 15)) + [24]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m steps: skipping step(s) 15, 16, 17, 18, 19, 20, 21, 22, 23, 25, 26, 27, 28, 29, 30, 31: they need a Hopper GPU (sm_90a: wgmma, TMA); "
                   "this is sm_80"]
    assert ladder.runnable_steps(list(schedules.STEPS), "sm_90") == list(schedules.STEPS)
    with pytest.raises(Exception, match="need a Hopper GPU"):
        ladder.runnable_steps(HOPPER, "sm_86")


def test_step_command_on_another_arch_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "steps.step18", "--build-only", "--arch", "sm_80"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "python -m steps.step18: error: step 18 needs a Hopper GPU (sm_90a: wgmma, TMA); it cannot be built for sm_80"]


def test_build_only_and_explain_without_a_gpu():
    proc = subprocess.run([sys.executable, "-m", "steps.step18", "--build-only", "--sizes", "512", "--arch", "sm_90a"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "arch sm_90a" in proc.stdout and "block_m=256 block_n=128" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "steps.step18", "--explain", "--sizes", "256"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "# step 18: register A" in proc.stdout and "--- step 17" in proc.stdout


# --- the sweep's space for these rungs ------------------------------------------------------


def test_sweep_searches_the_hopper_space():
    from steps.commands import sweep

    step = schedules.get_step(18)
    assert sweep.stages_of(step) is sweep.HOPPER_STAGES and sweep.stages_of(schedules.get_step(10)) is sweep.STAGES
    base = step.default_config(4096, 4096, 4096)
    tiles = sweep.candidates(step, 4096, 4096, 4096, "sm_90", sweep.HOPPER_STAGES[0][1], base)
    # block_n is the consumer side for register A (64, 128 or 192), block_m wgmma's n (64..256;
    # at most 128 for three consumers, whose threads have 152 registers).
    assert {(c.block_m, c.block_n) for c in tiles} == ({(m, n) for m in (64, 128, 192, 256) for n in (64, 128)}
                                                       | {(64, 192), (128, 192)})
    assert {c.threads for c in tiles} == {256, 384, 512}
    depths = sweep.candidates(step, 4096, 4096, 4096, "sm_90", sweep.HOPPER_STAGES[1][1], base)
    assert sorted(c.stages for c in depths) == [2, 3, 4]  # 5 stages of 48 KB are over 227 KB
    proc = subprocess.run([sys.executable, "-m", "steps.sweep", "--step", "18", "--dry-run", "--sizes", "2048",
                           "--arch", "sm_80"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "needs a Hopper GPU" in proc.stderr and proc.stdout == ""


# --- step 19: 3xTF32 on wgmma ----------------------------------------------------------------

TF32_MASK = str(0xFFFFE000)  # as the CUDA spells the mask: (uint)4294959104


@pytest.mark.parametrize("promote", (1, 2, 4))
def test_step19_splits_once_per_tile_and_promotes(promote):
    n = 2048
    cfg = Wgmma3xTF32Config(promote=promote)
    src = source(SPLIT_STEP, n, n, n, cfg)
    # The producer's warps 1-3 write A's small half beside each tile (PTX float4 stores), then make it
    # visible to wgmma's async proxy and arrive on the stage's "ready" barrier (96 arrivals).
    assert "st.shared.v4.f32" in src and "fence.proxy.async.shared::cta" in src
    inits = re.findall(r"mbarrier_init_init_shared_b64\([^;]*\(uint\)(\d+)\);", src)
    assert sorted(set(int(c) for c in inits)) == [1, 96, 256] and len(inits) == 3 * cfg.stages
    # The consumers split B^T's fragments in registers: big = the mask (registers 0-15), small
    # = x - big (16-31), for each of the two slices of a trip. (TVM compacts the two slices'
    # registers into one set; ptxas keeps the first's alive while its wgmma read them.)
    bigs = re.findall(rf"frag_ptr\[(\d+)\] = \(\(\*\(uint \*\)\(&\(v__\d+\)\)\) & \(uint\){TF32_MASK}\);", src)
    assert sorted(int(r) for r in bigs) == sorted(list(range(16)) * 2)
    smalls = re.findall(r"frag_ptr\[(\d+)\] = \(\*\(uint \*\)\(&\(v__\d+\)\)\);", src)
    assert sorted(int(r) for r in smalls) == sorted(list(range(16, 32)) * 2)
    # Three products per 8 k: small x big, big x small, big x big; the first wgmma of a chunk
    # restarts the accumulator (scale-d false), once per `promote` slices.
    preds = re.findall(r"m64n128k8_f32_tf32_tf32_1_1\(acc_ptr\[0\][^;]*, ([^,;]*)\);", src)
    assert len(preds) == 24
    restarts = preds.count("(bool)0")  # a chunk's first wgmma where the slice is known
    decided_at_run_time = [p for p in preds if p not in ("(bool)0", "(bool)1", "(uint)1")]
    # Per trip of two slices: both restart (promote 1), the first (2), the first of every other
    # trip, decided by the slice (4).
    assert (restarts, len(decided_at_run_time)) == {1: (2, 0), 2: (1, 0), 4: (0, 1)}[promote]
    # The promotion: total += acc, each accumulator register, in fp32 (round to nearest).
    promotes = re.findall(r"total_ptr\[(\d+)\] = \(total_ptr\[\1\] \+ acc_ptr\[\1\]\);", src)
    assert sorted(set(int(i) for i in promotes)) == list(range(64))
    assert len(promotes) == 64 * (2 if promote == 1 else 1)
    assert "_promoted" not in src  # schedules/lowering/long_k.py's pass leaves step 19 alone


def test_step19_recomputes_nan_and_tiny_outputs_in_fp32():
    from schedules.lowering import fp32_fallback

    M, N, K = 1000, 1500, 700
    src = source(SPLIT_STEP, M, N, K)
    # After its stores of C, a thread that stored a NaN or tiny value computes those again:
    # K serial fmaf from A and B in global memory.
    assert re.search(rf"for \(int k = 0; k < {K}; \+\+k\) \{{\s*fallback_ptr\[0\] = fmaf\(A_ptr\[", src)
    assert "if (flag_ptr[0] != 0)" in src and "(uint)2139095040 <" in src
    tiny = int.from_bytes(__import__("struct").pack("<f", fp32_fallback.tiny_bound(K)), "little")
    assert str(tiny - 1) in src  # the bound for this K, as (|x| - 1) < bound - 1


@pytest.mark.parametrize("K, flushes", [(32768, False), (32769 + 32, True), (2**20, True)])
def test_step19_flushes_its_total_to_c_at_a_long_k(K, flushes):
    """No fp32 register sums more than 1024 chunk sums (2 * 512; at promote 1, K over 32768): past
    that, the total goes into C every 512. (The 128 x 128 tile: 64 registers of total a thread.)"""
    src = source(SPLIT_STEP, 128, 128, K, Wgmma3xTF32Config())
    # Every 512th chunk end: C = total (the first time: + 0, after: + C), then total = 0.
    flush = re.search(r"if \(\(\(\([^;{]*\) % 512\) == 0\) && ", src)
    assert (flush is not None) == flushes
    if flushes:
        after = src[flush.end():]
        assert re.search(r"condval = 0x0p\+0f", after) and re.search(r"total_ptr\[63\] = 0x0p\+0f", after)


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("cfg", [Wgmma3xTF32Config(), Wgmma3xTF32Config(promote=1), Wgmma3xTF32Config(promote=4),
                                 Wgmma3xTF32Config(block_m=64)], ids=str)
def test_step19_ptxas_keeps_wgmma_async(cfg):
    """ptxas serializes wgmma (warning C7518) where accumulator registers are touched on a path it
    thinks divergent, e.g. a promotion branch that depends on the warpgroup; none here."""
    report = nvcc.compile_report(source(SPLIT_STEP, 2048, 2048, 2048, cfg), "sm_90a")
    assert report.ok and report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]
    assert "C7518" not in report.log and "serialized" not in report.log


# --- the copy kernels, scheduled (schedules/transforms/wgmma.py: schedule_copies) ------------------------


def test_the_transposed_copy_of_b_is_a_tensorir_schedule():
    """Steps 15-17's Bt[n, k] = B[k, n] is a plain block, tiled by schedule_copies: a 32 x 32 tile
    of B in shared memory with rows padded to 33 floats, 8 x 32 threads, four rows each way."""
    from tvm import s_tir

    from schedules import step15_wgmma

    func = step15_wgmma.kernel(2048, 2048, 2048, WgmmaConfig())
    plain = s_tir.Schedule(func)  # as the rung writes it: two plain loops, no threads yet
    assert [plain.get(loop).thread_binding for loop in plain.get_loops(plain.get_sblock("B_transposed"))] == [None, None]
    src = source(HOPPER[0], 2048, 2048, 2048)
    copy = next(k for k in re.split(r'(?=extern "C" __global__)', src) if "Bt_ptr" in k and "{" in k and "CUtensorMap" not in k)
    assert "__launch_bounds__(256)" in copy and "float B_shared_ptr[1056];" in copy  # 32 rows of 33
    assert len(re.findall(r"B_shared_ptr\[[^]]*\] = B_ptr\[", copy)) == 4      # unrolled, coalesced along n
    assert len(re.findall(r"Bt_ptr\[[^]]*\] = B_shared_ptr\[", copy)) == 4     # unrolled, coalesced along k
    assert copy.count("__syncthreads();") == 1


def test_schedule_copies_refuses_a_block_it_does_not_know():
    from tvm import s_tir
    from tvm.script import tirx as T

    from schedules.transforms import wgmma

    @T.prim_func(s_tir=True)
    def stray(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.sblock("mystery"):
                vi = T.axis.remap("S", [i])
                B[vi] = A[vi]

    with pytest.raises(ValueError, match="no schedule for block 'mystery'"):
        wgmma.schedule_copies(s_tir.Schedule(stray))


# TVM's CompactBufferAllocation, as the default pipeline runs it: the passes up to it.
def _compacted(func):
    import tvm
    from tvm import s_tir

    passes = [s_tir.transform.CanonicalizeLoop(), s_tir.transform.LowerCrossThreadReduction(),
              s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.LiftThreadBinding(),
              s_tir.transform.ManifestSharedMemoryLocalStage(), s_tir.transform.CompactBufferAllocation()]
    with schedules.target("sm_90a"), tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(tvm.IRModule({"main": func}))["main"]


def _dynamic_shared(func) -> list[int]:
    return [int(n) for n in re.findall(r"= T\.sblock_alloc_buffer\(\((\d+),\)[^\n]*scope=\"shared\.dyn\"", func.script())]


@pytest.mark.parametrize("step", HOPPER, ids=_id)
def test_the_dynamic_shared_memory_keeps_its_declared_size(step):
    # An mbarrier or a float at the last 16-bit element ends past it: TVM would launch the
    # kernel 2-6 bytes short (wgmma.whole). Step 26 in bf16 at 16 x 1024 x 1024 was, under
    # compute-sanitizer.
    dtype = "bf16" if "bf16" in step.dtypes else "fp32"
    for M, N, K in [(16, 1024, 1024), (1000, 1500, 700)]:
        func = step.schedule(M, N, K, step.default_config(M, N, K, dtype), None, True, dtype).mod["main"]
        declared = _dynamic_shared(func)
        assert declared and _dynamic_shared(_compacted(func)) == declared
