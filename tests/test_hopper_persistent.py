"""Steps 20-22 and 25 (issue 48) without a GPU: a persistent grid, clusters of two with a multicast
TMA, the epilogue through shared memory and a TMA store, and step 19's 3xTF32 on the persistent grid. What each kernel's IR and CUDA hold, the
grid each launches, their configs' one-line errors, their priors. ptxas (no spills, no stack
frame) and odd shapes are tests/test_hopper.py's, which runs every Hopper rung; correctness on
the GPU is tests/test_gpu_shapes.py's and tests/test_gpu_sixteen_bit_shapes.py's."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import schedules
from schedules.config import (Wgmma3xTF32Config, Wgmma3xTF32PersistentConfig, WgmmaClusterConfig,
                              WgmmaPersistentConfig, WgmmaTmaStoreConfig)
from schedules.config import DTYPES
from schedules.step20_persistent import blocks_for
from schedules.step22_tma_store import StorePlan
from steps.commands import cli
from steps.measure import nvcc

from .checks import config_error

STEP19, STEP20, STEP21, STEP22, STEP25 = (schedules.get_step(n) for n in (19, 20, 21, 22, 25))


def source(step, M, N, K, dtype="fp32", cfg=None) -> str:
    return schedules.cuda_source(schedules.build(step, M, N, K, arch="sm_90a", config=cfg, dtype=dtype))


def launched_blocks(step, M, N, K, dtype="fp32", cfg=None) -> int:
    """The GEMM's grid: the extent bound to blockIdx.x in the scheduled IR (the copy kernels bind
    blockIdx.y too, so the GEMM is the block named C)."""
    text = step.schedule(M, N, K, cfg, dtype=dtype).mod.script()
    gemm = text[:text.index('T.sblock("C")')]
    return int(re.findall(r'T\.thread_binding\((\d+), thread="blockIdx\.x"\)', gemm)[-1])


def test_priors_and_configs():
    # Step 20 is a TF32 (and 16-bit) rung after step 19 (3xTF32): measured against step 18.
    for dtype in ("fp32", "bf16", "fp16"):
        assert [cli.prior_step(s, dtype).number for s in (STEP20, STEP21, STEP22)] == [18, 20, 21]
    assert cli.prior_label(STEP20) == "step 18"
    assert (STEP20.Config, STEP21.Config, STEP22.Config) == (WgmmaPersistentConfig, WgmmaClusterConfig,
                                                             WgmmaTmaStoreConfig)
    assert all(s.dtypes == ("fp32", "fp16", "bf16") and s.precision == "tf32" for s in (STEP20, STEP21, STEP22))
    # Step 22's chunk buffers: 2 x 16 KB beside the four 48 KB stages, under the 227 KB a block may have.
    cfg = WgmmaTmaStoreConfig()
    assert cfg.shared_bytes == WgmmaClusterConfig().shared_bytes + 2 * 16384 <= 232448


@pytest.mark.parametrize("work, per, blocks", [(512, 1, 128), (2048, 1, 128), (130, 1, 132), (129, 1, 132),
                                               (128, 1, 128), (256, 2, 128), (65, 2, 132), (1024, 2, 128)])
def test_blocks_for_takes_128_where_no_wave_is_added(work, per, blocks):
    assert blocks_for(work, per) == blocks


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_one_block_per_sm_walks_the_tiles(dtype):
    # 4096^3: 16 x 32 tiles of 256 x 128, on 128 blocks (4 each); a small problem: one block a tile.
    assert launched_blocks(STEP20, 4096, 4096, 4096, dtype) == 128
    assert launched_blocks(STEP20, 1000, 1500, 700, dtype) == 4 * 12
    assert launched_blocks(STEP20, 4096, 4096, 4096, dtype, WgmmaPersistentConfig(ctas=100)) == 100
    # Clusters: two blocks per pair of tiles; an odd number of column tiles leaves a half pair.
    assert launched_blocks(STEP21, 4096, 4096, 4096, dtype) == 128
    assert launched_blocks(STEP21, 1000, 1500, 700, dtype) == 4 * 6 * 2
    assert launched_blocks(STEP22, 33, 64, 129, dtype) == 2
    # Step 18 launches one block per tile.
    assert launched_blocks(schedules.get_step(18), 4096, 4096, 4096, dtype) == 512


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_the_cuda_holds_clusters_and_multicast(dtype):
    src = source(STEP21, 2048, 2048, 2048, dtype)
    ir = STEP21.schedule(2048, 2048, 2048, dtype=dtype).mod.script()
    assert 'thread="clusterCtaIdx.x"' in ir  # TVM launches it with a cluster dimension of 2
    assert "tvm_builtin_cluster_ctaid_x" in src
    assert "mbarrier::complete_tx::bytes.multicast::cluster" in src
    assert "mapa.shared::cluster.u32" in src and "mbarrier.arrive.shared::cluster.b64" in src
    assert ".release.cluster" not in src  # the cluster-scope release cost 40% (step 21's docstring)
    assert "barrier.cluster.arrive.aligned" in src and "barrier.cluster.arrive.release" in src
    assert "cp.async.bulk.tensor.2d.global.shared::cta" not in src  # no TMA store before step 22


@pytest.mark.parametrize("dtype", ("fp32", "bf16", "fp16"))
def test_the_cuda_holds_the_tma_store(dtype):
    src = source(STEP22, 2048, 2048, 2048, dtype)
    (params,) = re.findall(r'__global__ void __launch_bounds__\(384\) main_kernel\(([^)]*)\) \{', src)
    assert params.count("CUtensorMap") == 3  # A, B and C
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in src
    assert "cp.async.bulk.commit_group" in src and "cp.async.bulk.wait_group.read 0" in src
    assert "cp.async.bulk.wait_group 0" in src  # the block waits for its last stores
    assert "bar.sync %0, 128" in src  # a consumer's threads meet around each chunk
    store = {"fp32": "st.shared.f32", "bf16": "st.shared.b16", "fp16": "st.shared.b16"}[dtype]
    assert store in src
    # No store of C from registers to global memory is left: C is written by the copy engine.
    assert not re.search(r"C_ptr\[[^\]]*\] = ", src)
    assert re.search(r"C_ptr\[[^\]]*\] = ", source(STEP21, 2048, 2048, 2048, dtype))


@pytest.mark.parametrize("chunk", (8192, 16384, 32768, 65536))
@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
@pytest.mark.parametrize("block_m", range(32, 257, 32))
def test_the_chunks_cover_every_row_of_the_tile(block_m, dtype, chunk):
    """A consumer's chunks are whole groups of 8 rows that fit its buffer and add up to the tile:
    192-row tiles in 16 KB chunks of 16-bit C once stored 128 rows and left the rest unwritten."""
    cfg = WgmmaTmaStoreConfig(block_m=block_m, block_n=128, stages=2, chunk=chunk)
    plan = StorePlan(4096, 4096, 4096, cfg, DTYPES[dtype])
    assert plan.rows % 8 == 0 and plan.rows * 64 * plan.eb <= chunk
    assert plan.BM == block_m and block_m % plan.rows == 0


@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
def test_a_192_row_tile_stores_in_boxes_of_96_rows(dtype):
    cfg = WgmmaTmaStoreConfig(block_m=192, block_n=128, stages=4, ctas=96)
    text = STEP22.schedule(1536, 1536, 1536, cfg, dtype=dtype).mod.script()
    (c_map,) = [line for line in text.splitlines() if "cuTensorMapEncodeTiled\", C_map" in line]
    assert "C.data, 1536, 1536, 3072, 64, 96, 1, 1," in c_map  # 64 columns x 96 rows a box


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_three_consumers_share_the_producers_registers_in_thirds(dtype):
    """A 192-wide consumer side is three consumer warpgroups and the producer: 512 threads, and
    setmaxnreg gives each consumer thread 152 registers (40 x 128 + 152 x 384 of 65,536), not
    two consumers' 232, which three could not all get."""
    three = source(STEP22, 1536, 1536, 1536, dtype, WgmmaTmaStoreConfig(block_m=96, block_n=192, stages=4, ctas=128))
    two = source(STEP22, 1536, 1536, 1536, dtype, WgmmaTmaStoreConfig(block_m=192, block_n=128, stages=4, ctas=96))
    assert "__launch_bounds__(512) main_kernel(" in three and "__launch_bounds__(384) main_kernel(" in two
    assert "setmaxnreg_inc_sync_aligned_u32_152" in three and "setmaxnreg_inc_sync_aligned_u32_232" not in three
    assert "setmaxnreg_inc_sync_aligned_u32_232" in two


@pytest.mark.parametrize("dtype, N", [("fp32", 33), ("bf16", 65), ("fp16", 4)])
def test_unaligned_rows_of_c_fall_back_to_step_21(dtype, N):
    # TMA needs 16-byte row strides: N * 4 or N * 2 bytes not a multiple of 16 is step 21's kernel.
    src = source(STEP22, 300, N, 200, dtype)
    assert "global.shared::cta.tile.bulk_group" not in src
    assert src == source(STEP21, 300, N, 200, dtype, WgmmaClusterConfig(ctas=STEP22.default_config(300, N, 200, dtype).ctas))


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_a_ring_as_deep_as_cublas_s_builds(dtype):
    """13 stages of 64 x 64 tiles (cuBLAS's ring at 4096 x 128 x 4096 in bf16, step 26's
    docstring): each stage its "full" and "empty" barrier; ptxas spills nothing."""
    cfg = WgmmaPersistentConfig(block_m=64, block_n=64, stages=13, ctas=128)
    assert cfg.shared_bytes <= 227 * 1024
    src = source(STEP20, 4096, 128, 4096, dtype, cfg)
    init = "tvm_builtin_ptx_mbarrier_init_init_shared_b64("
    assert src.count(init) - src.count("void " + init) == 2 * 13
    if nvcc.available():
        report = nvcc.compile_report(src, "sm_90a")
        assert report.ok and report.spill_stores == report.stack_bytes == 0, report.log


@pytest.mark.parametrize("dtype, K, stages", [
    ("fp32", 4096, 4), ("bf16", 4096, 8), ("bf16", 4160, 13), ("fp16", 4096, 13)])
def test_the_tiles_last_slice_waits_for_every_wgmma_group_inside_the_loop(dtype, K, stages):
    """wgmma.wait_for_slice: a consumer leaves one group running after each slice (Plan.in_flight)
    but waits for all on the tile's last slice, so no group runs when the loop ends (ptxas moved
    the 16-bit store's conversions above the wait after it). Counted in the CUDA of the loop
    (two slices a trip): the last trip's slice waits 0, every other 1, then the wait after the
    loop; an odd number of slices (4160 / 64 = 65) ends on the trip's first slice."""
    cfg = WgmmaPersistentConfig(block_m=64, block_n=64, stages=stages, ctas=128)
    src = source(STEP20, 4096, 128, K, dtype, cfg)
    loop = src[src.index("for (int kt2"):]
    waits = re.findall(r"wait_group_sync_aligned_(\d)\(\);", loop)
    assert sorted(waits[:-1]) == ["0", "1", "1"] and waits[-1] == "0", waits


def accumulator_reads_after_the_last_wgmma(sass: str) -> list[str]:
    """The SASS from the last HGMMA to the first conversion of the accumulator after it (F2FP)."""
    lines = [line.split(";")[0].split("*/")[-1].strip() for line in sass.splitlines() if "*/" in line]
    last = max(i for i, line in enumerate(lines) if "HGMMA" in line)
    first = next(i for i, line in enumerate(lines) if i > last and line.startswith("F2FP"))
    return lines[last:first + 1]


@pytest.mark.gpu  # no GPU needed, but the GPU machines' NVRTC (13.0.88) is what moved the conversions
@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="no cuobjdump here (it comes with a CUDA toolkit)")
def test_no_conversion_of_the_accumulator_runs_while_a_wgmma_group_may_still_write_it(tmp_path):
    """wgmma.wait_for_slice, in the SASS NVRTC builds here: between a 16-bit consumer's last
    wgmma and its store's first conversion of the accumulator there is a wait for every group.
    Step 16's 128 x 128 tile keeps a group in flight (Plan.in_flight); with the wait only after
    the loop, NVRTC 13.0.88 (the GPU machines') put this kernel's conversions above it, which
    read sums the last group was still writing (checked 2026-11-28; NVRTC 13.5's build kept
    them below, so only an NVRTC like the GPU machines' can catch it)."""
    from tvm.support import nvcc as tvm_nvcc

    src = schedules.cuda_source(schedules.build(16, 256, 256, 1024, arch="sm_90a", dtype="bf16"))
    cubin = tmp_path / "ring.cubin"
    cubin.write_bytes(tvm_nvcc.compile_cuda(src, target_format="cubin", arch="sm_90a"))
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    between = accumulator_reads_after_the_last_wgmma(sass)
    assert any(line.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0") for line in between), between


@pytest.mark.parametrize("cfg, words", [
    (WgmmaPersistentConfig(ctas=0), ("ctas", "1 to 1024")),
    (WgmmaPersistentConfig(ctas=True), ("ctas", "1 to 1024")),
    (WgmmaClusterConfig(ctas=131), ("ctas", "even", "clusters of two")),
    (WgmmaTmaStoreConfig(chunk=1000), ("chunk", "16384")),
    (WgmmaTmaStoreConfig(chunk=32768), ("shared memory", "227 KB")),
], ids=str)
def test_bad_configs_are_one_line(cfg, words):
    config_error(lambda: cfg.validate(1024, 1024, 1024), *words)


# --- step 25: step 19's 3xTF32 on step 20's grid ---------------------------------------------


def test_step25_is_step19_on_step20s_grid():
    # An fp32-accurate rung after the TF32 ones: measured against step 19, held to fp32's contract.
    assert cli.prior_step(STEP25, "fp32").number == 19 and cli.prior_label(STEP25) == "step 19"
    assert STEP25.precision == "fp32" and STEP25.dtypes == ("fp32",) and STEP25.Config is Wgmma3xTF32PersistentConfig
    assert issubclass(Wgmma3xTF32PersistentConfig, Wgmma3xTF32Config)
    assert issubclass(Wgmma3xTF32PersistentConfig, WgmmaPersistentConfig)
    # 4096^3: step 19's 1024 tiles of 128 x 128 on 128 blocks, promoting every 2 slices.
    cfg = STEP25.default_config(4096, 4096, 4096)
    assert (cfg.block_m, cfg.block_n, cfg.promote, cfg.ctas) == (128, 128, 2, 128)
    assert launched_blocks(STEP25, 4096, 4096, 4096) == 128 and launched_blocks(STEP19, 4096, 4096, 4096) == 1024
    assert launched_blocks(STEP25, 4096, 4096, 4096, cfg=Wgmma3xTF32PersistentConfig(ctas=100)) == 100


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (128, 4096, 4096), (1, 300, 77)], ids=str)
def test_step25_is_step19_where_step19_takes_small_tiles(shape):
    """Below one wave of 128 x 128 tiles step 19 takes 64 x 64 ones, two blocks an SM: step 25
    then launches step 19's grid, and its kernel is step 19's, statement for statement (the
    tile walk's count is known when built, so its loops unroll away)."""
    c19, c25 = STEP19.default_config(*shape), STEP25.default_config(*shape)
    assert (c25.block_m, c25.block_n, c25.promote) == (c19.block_m, c19.block_n, c19.promote) == (64, 64, 1)
    assert launched_blocks(STEP25, *shape) == launched_blocks(STEP19, *shape)
    assert sorted(source(STEP25, *shape).splitlines()) == sorted(source(STEP19, *shape).splitlines())


def test_step25_cuda_walks_the_tiles_in_all_three_roles():
    src = source(STEP25, 4096, 4096, 4096)
    # Block b runs tiles b, b + 128, ...: (1024 - b + 127) / 128 of them. The producer loads each
    # tile's 128 slices; the helper warps split the block's slices counted across its tiles; the
    # consumers run each tile's chunks.
    count = "((1151 - ((int)blockIdx.x)) >> 7)"
    assert src.count(f"for (int t = 0; t < {count}; ++t)") == 1
    assert f"kt_1 < ({count} * 128); ++kt_1)" in src
    assert src.count(f"for (int t_1 = 0; t_1 < {count}; ++t_1)") == 1
    # Step 19's pieces: A's small half written by the helpers (float4 PTX stores, then the fence
    # and the "ready" barrier's 96 arrivals), and the fallback's serial fmaf over K.
    assert "st.shared.v4.f32" in src and "fence.proxy.async.shared::cta" in src
    inits = re.findall(r"mbarrier_init_init_shared_b64\([^;]*\(uint\)(\d+)\);", src)
    assert sorted(set(int(c) for c in inits)) == [1, 96, 256]
    assert re.search(r"for \(int k = 0; k < 4096; \+\+k\) \{\s*fallback_ptr\[0\] = fmaf\(A_ptr\[", src)
    # Promote 2: the fp32 total takes each chunk sum once per trip of two slices (step 19: twice).
    promotes = re.findall(r"total_ptr\[(\d+)\] = \(total_ptr\[\1\] \+ acc_ptr\[\1\]\);", src)
    assert len(promotes) == 64 and len(re.findall(r"total_ptr\[(\d+)\] = \(total_ptr\[\1\] \+ acc_ptr",
                                                   source(STEP19, 4096, 4096, 4096))) == 128


@pytest.mark.parametrize("cfg, words", [(Wgmma3xTF32PersistentConfig(ctas=0), "ctas must be 1 to 1024"),
                                        (Wgmma3xTF32PersistentConfig(promote=9), "promote must be 1 to 8"),
                                        (Wgmma3xTF32PersistentConfig(block_m=256), "block_m must be at most")])
def test_step25_bad_configs_are_one_line(cfg, words):
    config_error(lambda: schedules.build(STEP25, 1024, 1024, 1024, arch="sm_90a", config=cfg), words)
