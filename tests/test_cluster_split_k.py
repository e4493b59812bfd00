"""Step 26 (issue 49) without a GPU: split-K in a cluster, the parts added through distributed
shared memory. What its IR and CUDA hold, the grid and cluster it launches, its config rule and
one-line errors, its fused epilogue. ptxas on it is tests/test_hopper.py's (every Hopper rung);
correctness on the GPU is tests/test_gpu.py's, test_gpu_sixteen_bit.py's and test_gpu_epilogue.py's."""

from __future__ import annotations

import re

import pytest

import schedules
from schedules import step26_cluster_split_k as step26
from schedules.config import WgmmaClusterSplitConfig, WgmmaSplitKConfig
from schedules.transforms.epilogue import Epilogue
from steps.commands import cli
from steps.measure import nvcc

from .checks import config_error

STEP23, STEP26 = schedules.get_step(23), schedules.get_step(26)


def source(M, N, K, dtype="bf16", cfg=None, **kw) -> str:
    return schedules.cuda_source(schedules.build(26, M, N, K, arch="sm_90a", config=cfg, dtype=dtype, **kw))


def kernels(src: str) -> set[str]:
    return set(re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\(", src))


def grid_and_cluster(M, N, K, dtype="bf16", cfg=None) -> tuple[int, int]:
    """The GEMM's blockIdx.x extent and its clusterCtaIdx.x extent in the scheduled IR."""
    text = STEP26.schedule(M, N, K, cfg, dtype=dtype).mod.script()
    gemm = text[:text.index('T.sblock("C")')]
    blocks = int(re.findall(r'T\.thread_binding\((\d+), thread="blockIdx\.x"\)', gemm)[-1])
    cluster = int(re.findall(r'T\.thread_binding\((\d+), thread="clusterCtaIdx\.x"\)', gemm)[-1])
    return blocks, cluster


def test_a_rung_after_step_23():
    assert cli.prior_step(STEP26, "bf16").number == 23 and STEP26.arch == "sm_90a" and STEP26.tensor_cores
    assert STEP26.precision == "tf32" and STEP26.dtypes == ("fp32", "fp16", "bf16")
    assert issubclass(WgmmaClusterSplitConfig, WgmmaSplitKConfig) and 26 in schedules.EPILOGUE_RUNGS


@pytest.mark.parametrize("dtype", ("fp32", "bf16", "fp16"))
def test_one_kernel_that_adds_its_parts_across_the_cluster(dtype):
    cfg = WgmmaClusterSplitConfig(block_m=128, block_n=128, stages=4, split_k=4)
    src = source(4096, 128, 4096, dtype, cfg)
    # One kernel and no workspace, where step 23 at the same split writes W and sums it in a second.
    assert len(kernels(src)) == 1 and "W_ptr" not in src
    step23 = schedules.cuda_source(schedules.build(23, 4096, 128, 4096, arch="sm_90a", dtype=dtype,
                                                   config=WgmmaSplitKConfig(block_m=128, block_n=128, stages=4, split_k=4)))
    assert len(kernels(step23)) == 2 and "W_ptr" in step23
    # A tile's 4 parts on the 4 blocks of a cluster: 32 tiles x 4 blocks.
    assert grid_and_cluster(4096, 128, 4096, dtype, cfg) == (32 * 4, 4)
    # The partial sums to shared memory in fp32, the cluster meets (release, acquire), each block
    # reads 16 bytes of every block's partial sums through mapa, and the cluster meets again.
    assert "st.shared.f32" in src and "mapa.shared::cluster.u32" in src and "ld.shared::cluster.v4.f32" in src
    assert "barrier.cluster.arrive.release" in src and "barrier.cluster.wait.acquire" in src
    body = src[src.index("main_kernel(const"):]
    assert body.count("cluster_sync_diverged()") == 2 and "cluster_sum_v4(" in body
    assert "setmaxnreg.dec.sync.aligned.u32 40" in src and "cp.async.bulk.tensor.2d" in src


def test_the_rule_measured_on_the_h200():
    """default_config: the tile covering a short M, block_n 128 (64 where 128 leaves fewer than 64
    blocks), and the most parts whose blocks fit one wave of clusters of that size, each part at
    least 256 deep."""
    def rule(M, N, K):
        c = STEP26.default_config(M, N, K, "bf16")
        return c.block_m, c.block_n, c.split_k

    assert rule(16, 1024, 4096) == (32, 128, 8)    # 8 tiles x 8 parts = 64 blocks
    assert rule(16, 3072, 1024) == (32, 128, 4)    # 24 x 8 > 64; 24 x 4 = 96
    assert rule(16, 4096, 1024) == (32, 128, 2)    # 32 x 4 = 128 > 96
    assert rule(16, 1024, 1024) == (32, 64, 4)     # 128 wide: 8 x 4 = 32 blocks; 64 wide: 64
    assert rule(128, 1024, 4096) == (128, 128, 8)
    assert rule(512, 512, 8192) == (128, 128, 4)
    assert rule(4096, 128, 4096) == (128, 128, 2)
    assert rule(8192, 32, 2048) == (128, 64, 2)
    assert rule(64, 64, 512) == (64, 64, 2)        # parts of at least 256: two
    for shape in ((16, 1024, 4096), (4096, 128, 4096), (1000, 777, 1001), (100, 100, 100)):
        cfg = STEP26.default_config(*shape, "bf16")
        cfg.validate(*shape)
        assert cfg.shared_bytes <= 227 * 1024 and cfg.split_k in step26.CLUSTER_WAVE


def test_no_part_without_a_slice_of_k():
    # K = 128 in bf16 is two 64-deep slices: asked for 8 parts, the cluster has 2.
    cfg = WgmmaClusterSplitConfig(block_m=64, block_n=64, stages=4, split_k=8)
    assert grid_and_cluster(256, 256, 128, "bf16", cfg) == (4 * 4 * 2, 2)
    # One slice (K = 64 in bf16, 32 in fp32): step 20's kernel at the tile, no cluster.
    src = source(256, 256, 64, "bf16", cfg)
    assert "cluster_sum_v4" not in src and "clusterCtaIdx" not in STEP26.schedule(256, 256, 64, cfg, dtype="bf16").mod.script()


def test_the_fused_epilogue_is_applied_as_the_parts_are_added():
    ep = Epilogue(bias=True, activation="gelu", beta=1.0)
    cfg = WgmmaClusterSplitConfig(block_m=64, block_n=128, stages=4, split_k=4)
    bare, fused = source(256, 256, 4096, "bf16", cfg), source(256, 256, 4096, "bf16", cfg, epilogue=ep)
    separate = source(256, 256, 4096, "bf16", cfg, epilogue=ep, fused=False)
    assert len(kernels(fused)) == 1 and len(kernels(separate)) == 2
    assert all(p in fused for p in ("bias_ptr", "C_in_ptr", "D_ptr")) and "C_ptr" not in fused
    # Once per added value: a block adds 64 / 4 rows x 128 columns, 4 columns a thread of its two
    # consumers' 256: 2 rounds of 4 values, unrolled.
    assert fused.count("erff(") == 2 * 4 and "erff(" not in bare


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("dtype, cfg", [
    ("bf16", WgmmaClusterSplitConfig(block_m=32, block_n=128, stages=8, split_k=8)),
    ("fp32", WgmmaClusterSplitConfig(block_m=128, block_n=64, stages=7, split_k=2)),
    ("fp16", WgmmaClusterSplitConfig(block_m=128, block_n=128, stages=4, split_k=4)),
], ids=str)
def test_ptxas_no_spills_at_other_tiles(dtype, cfg):
    report = nvcc.compile_report(source(1000, 777, 4099, dtype, cfg), "sm_90a")
    assert report.ok and report.spill_stores == report.spill_loads == report.stack_bytes == 0, report.log


@pytest.mark.parametrize("cfg, words", [
    (WgmmaClusterSplitConfig(split_k=3), ("split_k", "2, 4, 8", "cluster")),
    (WgmmaClusterSplitConfig(split_k=16), ("split_k", "2, 4, 8")),
    (WgmmaClusterSplitConfig(block_m=256, block_n=128, stages=4, split_k=2), ("shared memory", "227 KB")),
], ids=str)
def test_bad_configs_are_one_line(cfg, words):
    config_error(lambda: schedules.build(26, 1024, 1024, 1024, arch="sm_90a", config=cfg), *words)
