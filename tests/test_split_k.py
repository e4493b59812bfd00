"""Step 11 (split-K with rfactor) and the shape rule behind its configs.

CPU: the schedule builds; with split_k > 1 the CUDA has the partial buffer [split, M, N] over
blockIdx.z and a second kernel that sums exactly split_k partials; split_k 1 is step 10's IR;
ptxas reports no spills or stack frame; the rule gives valid, deterministic configs within the
shared-memory and thread limits for any shape; the sweep's shape options. GPU (marked): split-K
is correct on odd shapes against float64.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import tvm

import schedules
from schedules.transforms import padding
from schedules import shape_rule, step10_tuned, step11_split_k
from schedules.config import MAX_SHARED_BYTES, MAX_THREADS_PER_BLOCK, SplitKConfig
from steps.commands import options, sweep
from steps.measure import harness, nvcc

from .checks import config_error, one_line_error
from .test_shapes import serial_cpu_build

STEP10, STEP11 = schedules.get_step(10), schedules.get_step(11)
BASE = SplitKConfig(block_m=64, block_n=64, thread_m=8, thread_n=4, block_k=32, stages=2, pad_a=0,
                    warp_m=2, raster=1, unroll_k=1)


def split(k: int, **changes) -> SplitKConfig:
    return dataclasses.replace(BASE, split_k=k, **changes)


def cuda(shape, cfg) -> str:
    return schedules.cuda_source(schedules.build(11, *shape, config=cfg))


def kernels(src: str) -> dict[str, str]:
    """{kernel name: body} of each __global__ definition in the CUDA."""
    out = {}
    for match in re.finditer(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\([^)]*\) \{', src):
        out[match.group(1)] = src[match.end():]
    names = list(out)
    for name, nxt in zip(names, names[1:]):  # cut each body where the next kernel starts
        out[name] = out[name][: out[name].find('extern "C" __global__')]
    return out


# --- the schedule ------------------------------------------------------------------------


def test_step_11_follows_step_10():
    numbers = [s.number for s in schedules.STEPS]
    assert numbers[numbers.index(10) + 1] == 11
    # The last schedule on CUDA cores: the tensor-core rungs (12-23) come after it, and the
    # matrix-vector kernel (24), a kernel of one shape, written out.
    assert not STEP11.tensor_cores
    assert all(s.tensor_cores or not s.schedules_a_block for s in schedules.STEPS if s.number > 11)
    assert STEP11.Config is SplitKConfig and issubclass(SplitKConfig, STEP10.Config)


@pytest.mark.parametrize("shape", [(512, 512, 512), (100, 70, 300), (1, 2048, 2048)])
def test_split_1_is_step_10s_ir(shape):
    cfg10 = STEP10.default_config(*shape)
    cfg11 = SplitKConfig(**cfg10.as_dict(), split_k=1)
    tvm.ir.assert_structural_equal(STEP11.schedule(*shape, cfg11).mod, STEP10.schedule(*shape, cfg10).mod)


@pytest.mark.parametrize("shape,k", [((200, 136, 1000), 4), ((64, 64, 4096), 8), ((1, 70, 300), 2)])
def test_split_k_cuda_has_partials_and_their_reduction(shape, k):
    M, N, K = shape
    src = cuda(shape, split(k))
    bodies = kernels(src)
    assert len(bodies) == 2, list(bodies)
    partials, total = bodies.values()
    # The first kernel: chunks over blockIdx.z, stores into the partial buffer (C_rf, or
    # C_pad_rf where M or N is padded), not into C.
    assert "blockIdx.z" in partials and not re.search(r"\bC_ptr", partials)
    rf = re.search(r"\b(C(?:_pad)?_rf)_ptr", partials).group(1)
    # The second: reads k partials per element (the loop over them unrolled) and writes C.
    assert len(re.findall(rf + r"_ptr\[", total)) == k
    assert re.search(r"\bC_ptr\[", total)
    # The partial buffer is [split, M, N] (M, N padded to the tile): chunk s starts at s*M*N.
    m_pad, n_pad, _ = padding.padded_shape(split(k), M, N, K)
    assert f"blockIdx.z) * {m_pad * n_pad})" in partials


def test_k_pads_to_whole_chunks():
    cfg = split(3)
    assert cfg.chunk_k(1000) == 352  # 1000 / 3 = 333.3 -> 11 slices of 32
    assert padding.padded_shape(cfg, 200, 136, 1000) == (256, 192, 1056)
    assert padding.padded_shape(split(1), 200, 136, 1000) == (256, 192, 1024)  # step 10's


def test_split_k_config_errors_are_one_line():
    config_error(lambda: split(0).validate(256, 256, 4096), "split_k", "positive")
    config_error(lambda: split(65).validate(256, 256, 8192), "split_k", "1-64")
    # 33 slices of 32 in 32 chunks: chunks of 64, the last 15 all padding.
    config_error(lambda: split(32).validate(64, 64, 33 * 32), "split_k 32", "padding")
    config_error(lambda: STEP11.schedule(64, 64, 64, step10_tuned.default_config(64, 64, 64)),
                 "step 11 takes a SplitKConfig")


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
@pytest.mark.parametrize("shape", [(2048, 64, 2048), (127, 131, 1009)])
def test_rule_builds_have_no_spills_or_stack(shape):
    cfg = shape_rule.rule_config(*shape)
    assert cfg.split_k > 1
    report = nvcc.compile_report(cuda(shape, cfg))
    assert report.ok, report.log[-500:]
    assert report.spills == 0 and report.stack_bytes == 0, report.log[-800:]


# --- the shape rule ----------------------------------------------------------------------

GRID = sorted({
    (1, 2048, 2048), (2048, 1, 2048), (1, 1, 1), (1, 1, 4096), (3, 5, 7), (17, 1, 1),
    (97, 89, 4099), (1009, 2, 1013), (256, 256, 16384), (4096, 4096, 64), (2048, 64, 2048),
    (64, 2048, 2048), (512, 512, 512), (768, 768, 768), (1536, 1536, 1536), (2047, 2047, 2047),
    (4096, 4096, 4096), (8192, 16, 1024), (16, 8192, 1024), (1000, 1500, 700), (128, 128, 65536),
    (46340, 46340, 1), (1, 8192, 131072),
})
ARCHS = tuple(MAX_SHARED_BYTES)


@pytest.mark.parametrize("arch", ARCHS)
def test_rule_configs_are_valid_within_limits(arch):
    for shape in GRID:
        cfg = shape_rule.rule_config(*shape, arch=arch)
        assert type(cfg) is SplitKConfig
        cfg.validate(*shape)
        assert cfg.shared_bytes <= MAX_SHARED_BYTES[arch], (shape, cfg)
        assert cfg.threads <= MAX_THREADS_PER_BLOCK and cfg.threads % 32 == 0, (shape, cfg)


def test_rule_is_deterministic():
    first = [shape_rule.rule_config(*s) for s in GRID]
    assert [shape_rule.rule_config(*s) for s in reversed(GRID)] == first[::-1]
    assert shape_rule.neighbourhood(256, 256, 16384) == shape_rule.neighbourhood(256, 256, 16384)


@pytest.mark.parametrize("shape", [(256, 256, 16384), (2048, 64, 2048), (64, 2048, 2048), (128, 128, 65536),
                                   (1, 2048, 2048)])
def test_rule_splits_k_heavy_small_outputs(shape):
    cfg = shape_rule.rule_config(*shape)
    if cfg.is_vector_matrix:  # M = 1: K split over each block's threads instead of over blocks
        assert cfg.k_threads > 1 and shape[1] // cfg.block_n >= shape_rule.SM_COUNT // 2, cfg
        return
    tiles = -(-shape[0] // cfg.block_m) * -(-shape[1] // cfg.block_n)
    assert tiles < shape_rule.SM_COUNT and cfg.split_k > 1, cfg
    assert tiles * cfg.split_k >= shape_rule.SM_COUNT // 2


@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (3072, 3072, 3072), (4096, 4096, 4096), (4096, 4096, 64),
                                   (1536, 1536, 1536)])
def test_rule_does_not_split_big_outputs(shape):
    assert shape_rule.rule_config(*shape).split_k == 1


def test_rule_uses_the_sm_count():
    # Fewer SMs fill with fewer blocks: a smaller split (or none).
    many = shape_rule.rule_config(256, 256, 16384, sm_count=132)
    few = shape_rule.rule_config(256, 256, 16384, sm_count=16)
    assert few.split_k < many.split_k
    config_error(lambda: shape_rule.rule_config(64, 64, 64, sm_count=0), "sm_count")


def test_rule_accounts_for_padding_waste():
    # N = 68: a 64-wide tile pads N to 128, nearly half of it waste; the model charges the padded
    # work. M is one full round of resident blocks at N = 64 (132 SMs x 5 blocks of 64 rows), so
    # N = 68 is exactly two rounds at the same occupancy: twice the time. (An N that breaks
    # float4 alignment, such as 65, costs the narrowed vector on top: the staged-padding tests.)
    cfg = split(1)
    M = shape_rule.SM_COUNT * shape_rule.resident_blocks(cfg) * cfg.block_m
    padded = shape_rule.compute_seconds(cfg, M, 128, 4096)
    assert shape_rule.compute_seconds(cfg, M, 68, 4096) == padded
    assert padded > 1.9 * shape_rule.compute_seconds(cfg, M, 64, 4096)


def test_step_11_default_prefers_an_exact_tuned_entry(tmp_path, monkeypatch):
    tuned = split(2, stages=3)
    path = tmp_path / "step11.json"
    path.write_text(json.dumps({"configs": [{"M": 300, "N": 300, "K": 3000, "config": tuned.as_dict()}]}))
    monkeypatch.setattr(step11_split_k, "TUNED_PATH", path)
    assert step11_split_k.default_config(300, 300, 3000) == tuned
    # Any other shape: the rule's own config, never the nearest tuned one.
    assert step11_split_k.default_config(300, 300, 3001) == shape_rule.rule_config(300, 300, 3001)


def test_sweep_candidates_include_step_10_and_stay_small():
    for shape in [(256, 256, 16384), (2048, 64, 2048), (1, 2048, 2048), (4096, 4096, 4096)]:
        cfgs = step11_split_k.sweep_candidates(*shape, "sm_90", 132, sweep.NEIGHBOURHOOD)
        assert 1 < len(cfgs) <= sweep.NEIGHBOURHOOD <= sweep.MAX_NEIGHBOURHOOD
        assert cfgs[0] == SplitKConfig(**step10_tuned.default_config(*shape).as_dict(), split_k=1)
        assert shape_rule.rule_config(*shape) in cfgs
        assert len(set(cfgs)) == len(cfgs)


# --- the sweep's shape options -------------------------------------------------------------


def test_raster_variants_are_the_distinct_launch_orders():
    # 4096 x 128 in 64-wide tiles: 2 column blocks, so raster 2, 4 and 8 are one order (2).
    assert [c.raster for c in shape_rule.raster_variants(split(4), 4096, 128, 4096)] == [2]
    assert [c.raster for c in shape_rule.raster_variants(split(8), 512, 512, 8192)] == [2, 4, 8]
    # The committed raster is not repeated; a one-block-wide grid has no other order.
    assert [c.raster for c in shape_rule.raster_variants(split(8, raster=4), 512, 512, 8192)] == [2, 8]
    assert shape_rule.raster_variants(split(4), 4096, 64, 4096) == []
    assert shape_rule.raster_variants(SplitKConfig.matrix_vector(2, 128, 4), 4096, 1, 4096) == []
    # Each variant builds, and its grid is one launch order (blockIdx.x walks the groups).
    for cfg in shape_rule.raster_variants(split(4), 4096, 128, 4096):
        partials = next(iter(kernels(cuda((4096, 128, 4096), cfg)).values()))
        assert "blockIdx.y" not in partials and "blockIdx.z" in partials


def test_sweep_measures_the_committed_entrys_rasters_and_the_rule_pick_at_any_size():
    shape = (512, 512, 8192)
    committed = step11_split_k.tuned_configs()[shape]
    for size in (1, sweep.NEIGHBOURHOOD):
        cfgs = step11_split_k.sweep_candidates(*shape, "sm_90", 132, size)
        assert committed in cfgs and shape_rule.rule_config(*shape) in cfgs
        assert all(c in cfgs for c in shape_rule.raster_variants(committed, *shape))
        assert len(set(cfgs)) == len(cfgs)
    assert len(step11_split_k.sweep_candidates(*shape, "sm_90", 132, 1)) < sweep.NEIGHBOURHOOD


def test_parse_shape_list():
    assert sweep.parse_shape_list("256x256x16384, 2048X64x2048") == [(256, 256, 16384), (2048, 64, 2048)]
    for bad in ("256x256", "0x1x1", "axbxc"):
        with pytest.raises(Exception, match="MxNxK"):
            sweep.parse_shape_list(bad)


def test_read_shape_file_formats(tmp_path):
    path = tmp_path / "shapes.toml"
    path.write_text('[[shape]]\nM = 1\nN = 2048\nK = 2048\n\n[squares]\nshapes = ["512x512x512", [768, 768, 768]]\n'
                    '[other]\nlist = [{M = 3, N = 5, K = 7}]\n')
    assert sweep.read_shape_file(path) == [(1, 2048, 2048), (512, 512, 512), (768, 768, 768), (3, 5, 7)]
    path.write_text("title = 'none'\n")
    with pytest.raises(options.UsageError, match="no shapes"):
        sweep.read_shape_file(path)


def test_sweep_dry_run_by_shape(capsys):
    assert sweep.main(["--step", "11", "--shapes", "256x256x16384", "--shape", "7", "9", "11",
                       "--candidates", "6", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "7x9x11:" in out and "256x256x16384: 6 candidates" in out and "split_k=16" in out


@pytest.mark.parametrize("argv,words", [
    (["--step", "10", "--shapes", "64x64x64", "--dry-run"], ("--shapes", "step 10")),
    (["--step", "10", "--candidates", "5", "--dry-run"], ("--candidates", "step 10")),
    (["--step", "11", "--top", "2", "--dry-run"], ("--top", "step 11")),
    (["--step", "11", "--shapes", "64x64", "--dry-run"], ("MxNxK",)),
    (["--step", "11", "--shapes", "64x64x64", "--candidates", "65", "--dry-run"], ("--candidates", "64")),
])
def test_sweep_shape_errors_are_one_line(argv, words, capsys):
    assert sweep.main(argv) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", *words)


def test_write_tuned_shapes_merges(tmp_path):
    path = tmp_path / "step11.json"
    old = {"M": 64, "N": 64, "K": 4096, "config": split(1).as_dict(), "gflops": 1.0}
    kept = {"M": 99, "N": 9, "K": 9, "config": split(1).as_dict(), "gflops": 2.0}
    path.write_text(json.dumps({"configs": [old, kept]}))
    new = {"config": split(2).as_dict(), "gflops": 5.0}
    sweep.write_tuned_shapes(STEP11, {(64, 64, 4096): {"best": new, "rule": {"gflops": 4.0}}}, {}, path)
    doc = json.loads(path.read_text())
    assert doc["configs"] == [
        {"M": 64, "N": 64, "K": 4096, "config": new["config"], "gflops": 5.0, "rule_gflops": 4.0}, kept]
    assert step11_split_k.tuned_configs(path)[(64, 64, 4096)] == split(2)


# --- GPU ---------------------------------------------------------------------------------

GPU_CASES = [((2048, 64, 2048), 4), ((256, 256, 16384), 8), ((127, 131, 1009), 16), ((33, 65, 4099), 3),
             ((1, 257, 3001), 8), ((250, 1, 999), 5)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,k", GPU_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_split_k_is_correct_on_odd_shapes(shape, k):
    if not harness.gpu_present():
        pytest.skip("no CUDA GPU")
    M, N, K = shape
    # Small M or N: the rule's best tiled config (at N = 1 its pick is the k_threads mode).
    cfg = split(k) if (M >= 64 and N >= 64) else dataclasses.replace(shape_rule.tiled_config(*shape), split_k=k)
    lib = schedules.build(11, *shape, arch=harness.gpu_arch(), config=cfg)
    dev = tvm.cuda(0)
    rng = np.random.default_rng([20261123, M, N, K])
    a, b = harness.random_operands(M, N, K, rng)
    c = tvm.runtime.tensor(np.full((M, N), np.nan, dtype=np.float32), dev)
    lib["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    dev.sync()
    err = harness.relative_error(c.numpy(), a.astype(np.float64) @ b.astype(np.float64))
    assert err <= harness.TOLERANCE, f"split_k {k} at {shape}: relative error {err}"


def test_table_from_a_sweep_log(tmp_path, monkeypatch, capsys):
    """A sweep cut off by its time limit: the table is rebuilt from the log's lines."""
    log = tmp_path / "sweep11.jsonl"
    rows = [
        {"step": 11, "stage": "shape", "M": 64, "N": 64, "K": 4096, "config": split(1).as_dict(), "gflops": 3.0,
         "rule_pick": False},
        {"step": 11, "stage": "shape", "M": 64, "N": 64, "K": 4096, "config": split(4).as_dict(), "gflops": 9.0,
         "rule_pick": True},
        {"step": 11, "stage": "shape", "M": 64, "N": 64, "K": 4096, "config": split(8).as_dict(), "error": "x"},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(sweep, "TUNED_DIR", tmp_path)
    assert sweep.main(["--step", "11", "--from-log", str(log), "--write"]) == 0
    assert "best at 64x64x4096: 0.0 TFLOPS" in capsys.readouterr().out
    entry = json.loads((tmp_path / "step11.json").read_text())["configs"][0]
    assert entry["config"] == split(4).as_dict() and entry["rule_gflops"] == 9.0
    log.write_text("not json\n")
    assert sweep.main(["--step", "11", "--from-log", str(log)]) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", "not a sweep log line")


# --- matrix-vector mode: K split over a block's threads (k_threads > 1) -----------------------

def matrix_vector(rows=2, k_threads=128, vector=4, **fields):
    return dataclasses.replace(SplitKConfig.matrix_vector(rows, k_threads, vector), **fields)


@pytest.mark.parametrize("shape, cfg", [
    ((4096, 1, 4096), matrix_vector()),
    ((8192, 1, 1024), matrix_vector(8, 32)),
    ((6, 1, 96), matrix_vector(2, 32, 1)),      # scalar loads, 1 pass over K
    ((10, 1, 192), matrix_vector(2, 32, 2)),    # float2 loads, 3 passes
    ((12345, 1, 777), matrix_vector(1, 64, 1)),  # K pads to 13 passes: predicated loads
    ((5000, 1, 3000), matrix_vector(4, 64, 4)),  # K pads to 12 passes of float4s
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else "")
def test_matrix_vector_mode_is_one_kernel_with_a_warp_reduction(shape, cfg):
    cfg.validate(*shape)
    src = cuda(shape, cfg)
    K = shape[2]
    # K pads to whole passes (pad_einsum's A_pad / B_pad) only as a bound on the register
    # loads that read them: no padded buffer in global memory, no extra kernel.
    padded = bool(K % cfg.block_k)
    assert ("A_pad_local" in src and "B_pad_local" in src) == padded, K
    assert "A_pad_ptr" not in src and "B_pad_ptr" not in src
    assert src.count("__global__") == 2  # one kernel: its declaration and its definition
    assert "__shfl_down_sync" in src  # the cross-thread reduction over a row's threads
    assert "reduce_partials" not in src and "C_rf_local" in src  # partials in registers, not global
    if cfg.vector == 4:
        assert "float4" in src
    if cfg.k_threads > 32:
        assert "red_buf0" in src and "__shared__" in src  # across warps through shared memory


@pytest.mark.parametrize("fields, shape, message", [
    (dict(), (4096, 2, 4096), "N = 1"),
    (dict(block_k=256), (4096, 1, 4096), "block_k = k_threads x vector"),
    (dict(split_k=2), (4096, 1, 4096), "split_k 1"),
    (dict(warp_m=2), (4096, 1, 4096), "warp_m 1"),
    (dict(stages=3), (4096, 1, 4096), "stages 2"),
    (dict(k_threads=48, block_k=192), (4096, 1, 4096), "power of two"),
    (dict(), (4095, 1, 4096), "block_m | M"),
    (dict(), (4096, 1, 4002), "vector | K"),
    (dict(rows=16, k_threads=128), (4096, 1, 4096), "1024"),
])
def test_matrix_vector_mode_rejects_what_it_cannot_build(fields, shape, message):
    fields = dict(fields)
    cfg = matrix_vector(fields.pop("rows", 2), fields.pop("k_threads", 128), **fields)
    config_error(lambda: cfg.validate(*shape), message)


def test_rule_takes_matrix_vector_mode_at_every_n_1_shape():
    # The probes' winners where the block divides the shape; where it does not, rows that
    # divide M (1 always does) and K padded to whole passes at the widest vector dividing K.
    # With fewer blocks than SMs the floor is scaled, so more blocks win (130 x 1 x 2048: 1 row).
    for shape, (rows, k_threads, vector) in [
            ((4096, 1, 4096), (2, 128, 4)), ((8192, 1, 1024), (8, 32, 4)), ((130, 1, 2048), (1, 64, 4)),
            ((12345, 1, 777), (1, 64, 1)), ((5000, 1, 3000), (4, 64, 4)), ((4096, 1, 4095), (2, 128, 1)),
            ((4095, 1, 4096), (1, 128, 4)), ((9, 1, 20), (1, 32, 4))]:
        cfg = shape_rule.rule_config(*shape)
        assert (cfg.block_m, cfg.k_threads, cfg.vector) == (rows, k_threads, vector), (shape, cfg)
        assert "one kernel" in shape_rule.describe(cfg, *shape)
    # Not where N > 1 (at 1 x 4096 x 4096 the pick is the vector-matrix mode, below).
    for shape in [(1, 4096, 4096), (4096, 2, 4096)]:
        cfg = shape_rule.rule_config(*shape)
        assert cfg.k_threads == 1 or cfg.is_vector_matrix, shape


@pytest.mark.parametrize("shape, cfg", [
    ((9, 1, 20), "rule"),                       # K 20 -> 128: one pass of float4s, mostly bound
    ((6, 1, 777), matrix_vector(1, 64, 1)),     # 13 passes, the last group of 8 cut short
    ((6, 1, 777), matrix_vector(2, 32, 1)),
    ((8, 1, 3000), matrix_vector(4, 64, 4)),    # float4 passes, 3000 -> 3072
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v)[:4])
def test_padded_matrix_vector_ir_computes_the_product(shape, cfg):
    # On the CPU, threads as serial loops (tests/test_shapes.py): the K padding's bounds and the
    # unrolled passes' predicate compute the product (the GPU test below runs the CUDA).
    cfg = shape_rule.rule_config(*shape) if cfg == "rule" else cfg
    assert cfg.k_threads > 1 and shape[2] % cfg.block_k
    lib = serial_cpu_build(STEP11, *shape, cfg)
    rng = np.random.default_rng([20261123, *shape])
    a, b = harness.random_operands(*shape, rng)
    c = tvm.runtime.tensor(np.full((shape[0], 1), np.nan, np.float32))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    err = harness.relative_error(c.numpy(), a.astype(np.float64) @ b.astype(np.float64))
    assert err <= harness.TOLERANCE, f"relative error {err}"


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
def test_matrix_vector_mode_has_no_spills_or_stack():
    assert_rule_builds_have_no_spills_or_stack([(4096, 1, 4096), (8192, 1, 1024), (12345, 1, 777)])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 1, 4096), (8192, 1, 1024), (130, 1, 2048), (3, 1, 256),
                                   (12345, 1, 777), (5000, 1, 3000), (4096, 1, 4095), (9, 1, 20)])
def test_matrix_vector_mode_is_correct_on_the_gpu(shape):
    if not harness.gpu_present():
        pytest.skip("no CUDA GPU")
    cfg = shape_rule.rule_config(*shape)
    assert cfg.k_threads > 1
    assert_correct_on_the_gpu(shape, cfg)


def assert_rule_builds_have_no_spills_or_stack(shapes):
    for shape in shapes:
        report = nvcc.compile_report(cuda(shape, shape_rule.rule_config(*shape)))
        assert report.ok, report.log[-500:]
        assert report.spills == 0 and report.stack_bytes == 0, report.log[-800:]


def assert_correct_on_the_gpu(shape, cfg):
    with harness.KernelRunner(repeat=3, seed=20261123) as runner:
        m = runner.measure(11, *shape, harness.gpu_arch(), config=cfg)
    assert m.ok, m.error
    assert m.rel_err is not None and m.rel_err <= harness.TOLERANCE, f"relative error {m.rel_err}"


# --- vector-matrix mode: M = 1, K over threadIdx.y (k_threads > 1, block_n > 1) ---------------

def vector_matrix(column_threads=4, k_threads=64, vector=4, **fields):
    return dataclasses.replace(SplitKConfig.vector_matrix(column_threads, k_threads, vector), **fields)


@pytest.mark.parametrize("shape, cfg", [
    ((1, 4096, 4096), vector_matrix()),
    ((1, 8192, 1024), vector_matrix(4, 32)),
    ((1, 6, 16), vector_matrix(3, 4, 2)),     # float2 loads, 3 column threads, 4 rows each
    ((1, 5, 8), vector_matrix(5, 8, 1)),      # scalar loads, one row per thread
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else "")
def test_vector_matrix_mode_is_one_kernel_with_a_shared_memory_reduction(shape, cfg):
    cfg.validate(*shape)
    src = cuda(shape, cfg)
    assert src.count("__global__") == 2  # one kernel: its declaration and its definition
    assert "reduce_partials" not in src and "C_rf_local" in src  # partials in registers, not global
    assert "red_buf0" in src and "__shared__" in src and "threadIdx.y" in src  # the sum over y
    assert ("float4" in src) == (cfg.vector == 4)
    assert ("float2" in src) == (cfg.vector == 2)


@pytest.mark.parametrize("fields, shape, message", [
    (dict(), (2, 4096, 4096), "M = 1"),
    (dict(block_k=128), (1, 4096, 4096), "block_k 64"),
    (dict(thread_n=2), (1, 4096, 4096), "thread_n 4"),
    (dict(split_k=2), (1, 4096, 4096), "split_k 1"),
    (dict(block_m=2), (1, 4096, 4096), "block_m 1"),
    (dict(k_threads=48, block_k=48), (1, 4096, 4096), "power of two"),
    (dict(block_n=18), (1, 4096, 4096), "must divide block_n"),
    (dict(), (1, 4004, 4096), "no padding"),
    (dict(), (1, 4096, 4000), "no padding"),
    (dict(column_threads=16, k_threads=128, block_k=128), (1, 4096, 4096), "1024"),
])
def test_vector_matrix_mode_rejects_what_it_cannot_build(fields, shape, message):
    fields = dict(fields)
    cfg = vector_matrix(fields.pop("column_threads", 4), fields.pop("k_threads", 64), **fields)
    config_error(lambda: cfg.validate(*shape), message)


def test_rule_takes_vector_matrix_mode_where_it_fills_the_sms():
    # The probe's winners: about 2^16 threads in all (16 columns a block, K over 32 or 64).
    for shape, (block_n, k_threads) in [((1, 4096, 4096), (16, 64)), ((1, 8192, 1024), (16, 32))]:
        cfg = shape_rule.rule_config(*shape)
        assert cfg.is_vector_matrix and (cfg.block_n, cfg.k_threads) == (block_n, k_threads), (shape, cfg)
        assert "one kernel" in shape_rule.describe(cfg, *shape)
        assert shape_rule.raster_variants(cfg, *shape) == []
    # Not where a block would need padding, nor where its blocks are too few for the SMs (N = 64:
    # 4 blocks; split-K over blocks reads with every SM), nor where M > 1.
    for shape in [(1, 4096, 4095), (1, 4100, 4096), (1, 64, 4096), (2, 4096, 4096)]:
        assert not shape_rule.rule_config(*shape).is_vector_matrix, shape


@pytest.mark.skipif(not nvcc.available(), reason="nvcc not installed")
def test_vector_matrix_mode_has_no_spills_or_stack():
    assert_rule_builds_have_no_spills_or_stack([(1, 4096, 4096), (1, 8192, 1024)])


@pytest.mark.gpu
@pytest.mark.parametrize("shape, cfg", [
    ((1, 4096, 4096), "rule"), ((1, 8192, 1024), "rule"), ((1, 2048, 2048), "rule"),
    ((1, 6, 16), vector_matrix(3, 4, 2)), ((1, 5, 8), vector_matrix(5, 8, 1)),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v)[:4])
def test_vector_matrix_mode_is_correct_on_the_gpu(shape, cfg):
    if not harness.gpu_present():
        pytest.skip("no CUDA GPU")
    cfg = shape_rule.rule_config(*shape) if cfg == "rule" else cfg
    assert cfg.is_vector_matrix
    assert_correct_on_the_gpu(shape, cfg)
