"""Step 24 (issue 49) without a GPU: the matrix-vector rung. Its config and one-line errors, what
its CUDA holds (16-byte loads of B, the rows in flight, the shuffles, one rounding of C), the
guards for shapes no vector divides, M above 16 in chunks, no spills; its mirror for N <= 2 < M
(rows of A streamed along K) the same, and neither reading an operand past K. Correctness on the GPU is
tests/test_gpu_shapes.py's and tests/test_gpu_sixteen_bit_shapes.py's (every step, odd shapes)."""

from __future__ import annotations

import re

import pytest

import schedules
from schedules.config import ConfigError, MatvecConfig
from schedules.step24_matvec import MIRROR_N, mirror_config, shared_bytes, streams_a, vector_of
from steps.commands import bench, cli
from steps.measure import nvcc

from .checks import config_error

STEP24 = schedules.get_step(24)


def source(M, N, K, dtype="fp32", cfg=None) -> str:
    return schedules.cuda_source(schedules.build(STEP24, M, N, K, arch="sm_90", config=cfg, dtype=dtype))


def kernel_body(src: str) -> str:
    return src[src.rindex("__launch_bounds__("):]


def test_what_the_step_is():
    assert STEP24.precision == "fp32" and not STEP24.tensor_cores and STEP24.arch is None
    assert STEP24.dtypes == ("fp32", "fp16", "bf16") and cli.prior_step(STEP24).number == 11
    # A candidate of the fp32 dispatch rows beside steps 11, 14 and 19, and of every 16-bit one.
    assert STEP24 in bench.default_steps("sm_90") and STEP24 in bench.sixteen_bit_steps("bf16", "sm_80")
    assert bench.final_fp32_step().number == 11


@pytest.mark.parametrize("cfg, message", [
    (MatvecConfig(lanes_n=3), "lanes_n must be 1, 2, 4, 8, 16 or 32 threads"),
    (MatvecConfig(lanes_n=4, lanes_k=9), "lanes_n x lanes_k must be whole warps"),
    (MatvecConfig(lanes_n=32, lanes_k=64), "lanes_n x lanes_k must be whole warps, 32 to 1024 threads"),
    (MatvecConfig(unroll=3), "unroll must be 1, 2, 4, 8 or 16 rows"),
    (MatvecConfig(unroll=0), "unroll must be a positive integer"),
])
def test_bad_configs_are_one_line(cfg, message):
    msg = config_error(lambda: cfg.validate(1, 4096, 4096))
    assert msg.startswith(message) and "\n" not in msg


def test_partial_sums_that_overflow_shared_memory_are_refused_before_building():
    cfg = MatvecConfig(lanes_n=16, lanes_k=64)  # 32 warps x 16 rows x 128 bf16 columns x 4 bytes
    assert shared_bytes(16, 4096, cfg, "bf16") == 32 * 16 * 128 * 4
    msg = config_error(lambda: schedules.build(STEP24, 16, 4096, 4096, config=cfg, dtype="bf16"))
    assert "step 24's partial sums need 262144 bytes of shared memory" in msg and "\n" not in msg


@pytest.mark.parametrize("M, dtype, cfg", [(1, "fp32", (8, 128, 4)), (4, "fp32", (8, 128, 4)), (1, "bf16", (4, 256, 4)),
                                           (4, "fp16", (4, 256, 4)), (5, "fp32", (8, 32, 4)), (16, "bf16", (8, 32, 4)),
                                           (512, "fp32", (8, 32, 4))])
def test_default_config_is_32_columns_of_1024_threads_up_to_m_4(M, dtype, cfg):
    got = STEP24.default_config(M, 4096, 4096, dtype)
    assert (got.lanes_n, got.lanes_k, got.unroll) == cfg and got.threads == (1024 if M <= 4 else 256)
    if M <= 4:
        assert got.lanes_n * vector_of(4096, dtype) == 32  # 32 columns a block: 128 blocks at N = 4096


@pytest.mark.parametrize("N, dtype, lanes", [(2048, "fp32", 4), (1024, "fp32", 2), (512, "fp32", 2), (2048, "bf16", 2),
                                              (1024, "bf16", 2), (8192, "bf16", 4), (4097, "fp32", 8)])
def test_default_config_narrows_the_block_where_n_gives_few_blocks(N, dtype, lanes):
    got = STEP24.default_config(1, N, 4096, dtype)
    assert (got.lanes_n, got.threads) == (lanes, 1024)
    blocks = -(-N // (got.lanes_n * vector_of(N, dtype)))
    assert blocks >= 128 or got.lanes_n == 2  # never below a 32-byte sector a row


@pytest.mark.parametrize("N, K, dtype, cfg", [(16384, 512, "bf16", (8, 128, 4)), (16384, 512, "fp16", (8, 128, 4)),
                                              (16384, 512, "fp32", (8, 128, 4)), (8192, 1024, "bf16", (4, 256, 4)),
                                              (2048, 2048, "bf16", (2, 512, 4)), (16384, 100, "bf16", (8, 128, 4))])
def test_16_bit_default_gives_a_thread_a_whole_turn_of_k(N, K, dtype, cfg):
    """At 1 x 16384 x 512 bf16 the 4 x 256 default left a thread 2 of its 4 rows (H100: 6.68 us, 8 x 128
    5.08); 8 lanes at most, as fp32's default; a K that fills the turn keeps the rule before."""
    got = STEP24.default_config(1, N, K, dtype)
    assert (got.lanes_n, got.lanes_k, got.unroll) == cfg and got.threads == 1024
    assert dtype == "fp32" or got.lanes_k * got.unroll <= K or got.lanes_n == 8


@pytest.mark.parametrize("dtype, load, width", [("fp32", "float4", 4), ("bf16", "uint4", 8), ("fp16", "uint4", 8)])
def test_b_streams_in_16_byte_loads_eight_rows_at_a_time(dtype, load, width):
    src = kernel_body(source(1, 4096, 4096, dtype, MatvecConfig(lanes_n=4, lanes_k=64, unroll=8)))
    assert vector_of(4096, dtype) == width
    loads = re.findall(rf"\*\({load}\*\)\(b_ptr \+ \d+\) = \*\({load}\*\)\(B_ptr", src)
    assert len(loads) == 8  # unroll 8: all issued before the FMAs that use them
    assert src.index(loads[-1]) < src.index("acc_ptr[0] = (acc_ptr[0] +")
    # 64 k lanes of 4 column lanes: a warp is 8 k lanes, added by 3 xor shuffles (4, 8, 16).
    assert src.count("__shfl_xor_sync") == 3 * width
    assert "mma" not in src and "wmma" not in src  # CUDA cores: fp32 products, fp32 sums
    # C rounded once, in the dtype, from the warps' sums.
    assert ("(nv_bfloat16)" in src) == (dtype == "bf16") and ("(half)" in src) == (dtype == "fp16")


def test_shapes_no_vector_divides_use_guarded_scalar_loads():
    assert vector_of(1001, "fp32") == 1 and vector_of(1004, "fp32") == 4 and vector_of(1004, "bf16") == 1
    src = kernel_body(source(3, 1001, 777, cfg=MatvecConfig(lanes_n=4, lanes_k=64, unroll=8)))
    assert "float4" not in src and "uint4" not in src
    assert "< 777)" in src and "< 1001)" in src  # k and n guarded: no read past B, no write past C


def test_m_above_16_runs_in_chunks_of_16_rows():
    src = kernel_body(source(40, 512, 512))
    # Three chunks of 16 rows (blockIdx.y); the last one's rows of A clamped to row 39 (M - 1).
    assert "blockIdx.y" in src and re.search(r"min\(\(+\(\(int\)blockIdx\.y\) \* 16\) \+ \d+\)+, 39\)", src)
    assert "blockIdx.y" not in kernel_body(source(16, 512, 512))


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("M, N, K, dtype", [(1, 4096, 4096, "fp32"), (16, 4096, 4096, "fp32"), (16, 4096, 4096, "bf16"),
                                            (3, 1001, 777, "fp16"), (512, 512, 512, "fp32")])
def test_ptxas_no_spills(M, N, K, dtype):
    report = nvcc.compile_report(source(M, N, K, dtype), "sm_90")
    assert report.ok, report.log[-2000:]
    assert report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]


def test_config_error_is_the_public_one():
    assert issubclass(ConfigError, ValueError)


def test_a_rung_for_m_up_to_16_is_timed_and_picked_only_there(tmp_path, monkeypatch):
    from schedules import dispatch
    from steps.commands import bench as bench_cmd
    from steps.results import shapeset

    assert STEP24.applies_to(1, 4096, 4096) and STEP24.applies_to(16, 7, 3) and not STEP24.applies_to(17, 4096, 4096)
    assert all(s.applies_to(4096, 4096, 4096) for s in schedules.STEPS if s.number != 24)
    # The rule: a table where step 24 is fastest at 16 x 4096 x 4096 picks it there and at 8 rows,
    # but not at 32 rows, the same nearest row: the fastest of the others.
    doc = {"schema": dispatch.SCHEMA, "gpus": [{
        "gpu": "Fake GPU 80GB", "slug": "fake-gpu-80gb", "arch": "sm_90", "date": "2026-11-27",
        "precisions": {"fp32": {"steps": [11, 24], "shapes": [[16, 4096, 4096, [0.03, 0.02]]]}}}]}
    pick = lambda M: schedules.fastest(M, 4096, 4096, doc=doc).step.number
    assert (pick(16), pick(8), pick(32)) == (24, 24, 11)
    # The benchmark: no job for step 24 at M > 16, and a note saying why.
    args = bench_cmd.parser().parse_args(["--shapes", "1x4096x4096,64x64x65536"])
    items = bench_cmd.chosen_items(args, shapeset.load(args.shape_set))
    impls = bench_cmd.implementations([schedules.get_step(11), STEP24], [], None)
    configs = {(s.number, i.shape): s.default_config(*i.shape) for s in (schedules.get_step(11), STEP24) for i in items}
    jobs, notes = bench_cmd.jobs_for(impls, items, configs, "sm_90", args, None)
    assert sorted((j[1], j[2]) for j in jobs) == [(11, (1, 4096, 4096)), (11, (64, 64, 64 * 1024)), (24, (1, 4096, 4096))]
    assert notes == ["step 24 (matrix-vector (M <= 16 or N <= 2)): no row at 1 shape (64x64x65536): "
                     "not a shape it is for (its module's applies)"]


# --- the mirror: N <= 16 < M, rows of A streamed ------------------------------------------------


def test_the_mirror_applies_where_it_was_measured_fastest():
    assert MIRROR_N == 2
    assert STEP24.applies_to(4096, 1, 4096) and STEP24.applies_to(8192, 2, 1024) and STEP24.applies_to(1, 1, 1)
    assert not STEP24.applies_to(4096, 4, 4096) and not STEP24.applies_to(4096, 16, 4096)
    # Built wherever N <= 16 < M (any shape builds); the row kernel keeps M <= 16, N small included.
    assert streams_a(4096, 16) and streams_a(17, 1) and not streams_a(16, 1) and not streams_a(4096, 17)


@pytest.mark.parametrize("M, N, K, dtype, cfg", [
    (4096, 1, 4096, "bf16", (32, 32, 4)),    # 128 blocks of 32 rows, a warp a row
    (8192, 2, 1024, "fp32", (32, 32, 4)),    # 256 blocks
    (2048, 1, 2048, "bf16", (16, 32, 4)),    # rows halved: 128 blocks
    (64, 1, 65536, "fp32", (1, 1024, 4)),    # one row a block, its spare threads along K (16 vectors a lane)
    (12345, 1, 777, "fp16", (32, 32, 4)),    # no 16-byte vector divides 777: scalars
    (1000, 3, 40, "fp32", (4, 8, 4)),        # 10 vectors of K: 8 lanes a row, 4 rows (250 blocks)
    (1000, 3, 16, "fp32", (8, 4, 4)),        # 4 vectors: 4 lanes a row, 8 rows to make a whole warp
    (4096, 16, 4096, "bf16", (8, 32, 2)),    # past N = 4: 8 rows, 2 vectors in flight (B's values in registers)
])
def test_mirror_default_config(M, N, K, dtype, cfg):
    got = STEP24.default_config(M, N, K, dtype)
    assert (got.lanes_n, got.lanes_k, got.unroll) == cfg and got == mirror_config(M, N, K, dtype)
    assert got.threads % 32 == 0 and got.threads <= 1024


@pytest.mark.parametrize("dtype, load, width", [("fp32", "float4", 4), ("bf16", "uint4", 8)])
def test_mirror_streams_rows_of_a_in_16_byte_vectors_side_by_side(dtype, load, width):
    src = kernel_body(source(4096, 1, 4096, dtype))
    a_loads = re.findall(rf"\*\({load}\*\)\(a_ptr \+ (\d+)\) = \*\({load}\*\)\(A_ptr \+ (.*)\);", src)
    assert [int(i) for i, _ in a_loads] == [0, width, 2 * width, 3 * width]  # unroll 4, all before the FMAs
    # Lane l's vector at l x width along the row: a warp's 32 loads are one run of 512 bytes.
    assert all(f"(((int)threadIdx.x) & 31) * {width})" in addr for _, addr in a_loads)
    assert src.index(a_loads[-1][1]) < src.index("acc_ptr[0] = (acc_ptr[0] +")
    assert len(re.findall(rf"\*\({load}\*\)\(b_ptr \+ \d+\) = \*\({load}\*\)\(B_ptr", src)) == 4  # B: x's matching vectors
    # The row's 32 lanes added by 5 xor shuffles (1, 2, 4, 8, 16), written once by lane 0.
    assert [int(d) for d in re.findall(r"__shfl_xor_sync\(\(uint\)4294967295, acc_ptr\[0\], (\d+), 32\)", src)] == [1, 2, 4, 8, 16]
    assert "% 32) == 0)" in src and "blockIdx.y" not in src and "mma" not in src


def test_mirror_reads_b_as_runs_of_n_values_and_adds_warps_through_shared_memory():
    src = kernel_body(source(8192, 2, 1024, "bf16"))
    assert len(re.findall(r"\*\(uint4\*\)\(b_ptr \+ \d+\) = \*\(uint4\*\)\(B_ptr", src)) == 2 * 4  # N loads a vector
    long_k = kernel_body(source(64, 1, 65536))  # 1024 lanes a row: 32 warps' sums through shared memory
    assert "__syncthreads()" in long_k and "part_ptr[31]" in long_k


def test_neither_kernel_reads_an_operand_past_k():
    """Where a thread's range of K passes K, A's (or B's) value there is a zero, not a read: 0 x inf is NaN."""
    rows = kernel_body(source(3, 1001, 777))  # the row kernel: 4 x 256 threads, 4 rows each, K = 777
    assert re.search(r"if \(\(\(int\)threadIdx\.x\) < 780\) \{\s+condval\w* = A_ptr", rows)
    assert "condval" not in kernel_body(source(1, 4096, 4096))  # aligned: the guard is proved away
    mirror = kernel_body(source(1000, 3, 777, "fp16"))
    assert re.search(r"if \(\(\(t \* 128\) \+ \(\(\(int\)threadIdx\.x\) & 31\)\) < 777\) \{\s+a_ptr\[0\] = A_ptr", mirror)


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("M, N, K, dtype", [(4096, 1, 4096, "bf16"), (8192, 2, 1024, "fp32"), (4096, 16, 4096, "bf16"),
                                            (4096, 16, 4096, "fp32"), (64, 1, 65536, "fp32"), (17, 16, 3001, "fp16")])
def test_mirror_ptxas_no_spills(M, N, K, dtype):
    report = nvcc.compile_report(source(M, N, K, dtype), "sm_90")
    assert report.ok, report.log[-2000:]
    assert report.spills == 0 and report.stack_bytes == 0, report.log[-2000:]


def test_mirror_refuses_lanes_a_shuffle_cannot_add_in_one_line():
    msg = config_error(lambda: schedules.build(STEP24, 4096, 1, 4096, config=MatvecConfig(lanes_n=4, lanes_k=24), dtype="bf16"))
    assert msg.startswith("step 24's mirror (N <= 16 < M) needs lanes_k to be a power of two, got 24") and "\n" not in msg
