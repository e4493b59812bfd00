"""On a CUDA GPU: python -m steps.bench on a few small shapes (timed against cuBLAS, checked
only, saved), and a faulting kernel in its worker pool costing that kernel only."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import schedules
from steps.commands import bench
from steps.results import shapes
from steps.measure import harness

pytestmark = pytest.mark.gpu

SMALL = "33x65x129,1x512x384,512x1x384"  # one past a tile everywhere, 1xNxK, Mx1xK


def run(*args):
    return subprocess.run([sys.executable, "-m", "steps.bench", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def arch():
    return harness.gpu_arch()


def test_the_final_step_is_timed_against_cublas_on_small_shapes():
    if not harness.cublas_available():
        pytest.skip("CuPy or libcublas missing: pip install -e \".[cublas]\"")
    proc = run("--shapes", SMALL, "--repeat", "3", "--seed", "1", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for shape in SMALL.split(","):
        assert shape in out
    final = bench.final_fp32_step().number
    assert f"step {final}: every shape passed" in out and "x cuBLAS" in out
    assert f"step {final} ({bench.final_fp32_step().name}) against cuBLAS fp32" in out
    assert "FAILED" not in out + proc.stderr


def test_every_step_is_correct_on_degenerate_shapes_check_only():
    proc = run("--steps", "all", "--check-only", "--shapes", "1x300x200,300x1x200,7x9x1", "--seed", "2",
               "--workers", "4")
    assert proc.returncode == 0, proc.stderr
    for step in schedules.STEPS:
        assert f"step {step.number}: every shape passed" in proc.stdout


def test_save_writes_the_results_of_a_whole_set(tmp_path):
    if not harness.cublas_available():
        pytest.skip("CuPy or libcublas missing: pip install -e \".[cublas]\"")
    shape_file = tmp_path / "shapes.toml"
    shape_file.write_text('version = 1\n[[class]]\nname = "tiny"\nrationale = "a test"\n'
                      'shapes = [[64, 64, 64], [1, 256, 128]]\n')
    results_dir = tmp_path / "results"
    proc = run("--shape-set", str(shape_file), "--save", "--results-dir", str(results_dir), "--repeat", "3",
               "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    (gpu_dir,) = results_dir.iterdir()
    doc = shapes.load(gpu_dir)
    # the default rows: the dispatch rule's candidates, its pick ("fastest") and cuBLAS, two shapes each
    keys = [i["key"] for i in doc["implementations"]]
    assert keys == [f"step{s.number}" for s in bench.default_steps(harness.gpu_arch())] + ["fastest", "cublas",
                                                                                          "cublas_again"]
    # the pick's ratio is to cuBLAS timed in turns with it, in the same job
    assert shapes.baseline_row(doc, "fastest", (64, 64, 64))["impl"] == "cublas_again"
    assert shapes.baseline_row(doc, "step11", (64, 64, 64))["impl"] == "cublas"
    # (a rung of one kind of shape, step 24 for M <= 16, has no row at the others)
    skipped = sum(not schedules.get_step(int(k[4:])).applies_to(*shape) for k in keys if k.startswith("step")
                  for shape in ((64, 64, 64), (1, 256, 128)))
    assert doc["shape_set"]["complete"] and len(doc["results"]) == 2 * len(keys) - skipped
    # a shape set of its own is not the published one: the dispatch table is left alone
    assert "dispatch table not written" in proc.stderr
    assert all(r["error"] is None and r["rel_err"] <= 1e-5 and r["gflops"] > 0 for r in doc["results"])
    assert (gpu_dir / "shapes.csv").exists() and (gpu_dir / "shapes.png").exists()


def test_a_faulting_kernel_costs_that_kernel_only(arch):
    size = (256, 256, 256)
    cfg = schedules.get_step(6).default_config(*size)
    jobs = [("tvm", "tests.test_gpu_shapes:misaligned_kernel", size, None, arch, 3, 0, 1e-5, True)]
    jobs += [("step", 6, size, cfg, arch, 3, seed, 1e-5, True) for seed in range(1, 6)]
    done = {}
    bench.run_jobs(jobs, 2, lambda job, res: done.setdefault(jobs.index(job), res))
    assert done[0]["error"] and "\n" not in done[0]["error"]
    print("fault reported as:", done[0]["error"])
    for i in range(1, 6):
        assert done[i]["error"] is None, done[i]["error"]
        assert done[i]["rel_err"] <= 1e-5 and done[i]["gflops"] > 0


@pytest.mark.parametrize("graph", [False, True], ids=["evaluator", "graph"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_kernel_and_cublas_are_timed_in_turns(arch, dtype, graph):
    # harness.time_beside_cublas: both warmed up, then rounds of each in turns; each Timing over
    # its rounds (median of the rounds' medians), its own host-bound guard, cuBLAS checked first.
    # graph=True: the kernel's calls captured in a CUDA graph (proved to do what a plain call
    # does), replayed as cuBLAS is; at 256^3 the host is then out of the way: submitting a replay
    # costs a fraction of a microsecond a call.
    if not harness.cublas_available():
        pytest.skip("CuPy or libcublas missing: pip install -e \".[cublas]\"")
    step, size = (10 if dtype == "fp32" else 13), (256 if graph else 512)
    lib = harness._build(step, size, size, size, arch, None, dtype)
    runner = harness.KernelRunner(repeat=5, seed=1, isolate=False)
    mine, theirs, err = harness.time_beside_cublas(lib, runner.dev, size, size, size, 5, 3, seed=1, dtype=dtype,
                                                   graph=graph)
    assert len(mine.rounds_ms) == len(theirs.rounds_ms) == 3 and mine.samples == theirs.samples == 15
    for t in (mine, theirs):
        assert t.min_ms <= t.median_ms <= t.max_ms and t.median_ms > 0 and t.host_us > 0
        assert t.median_ms == pytest.approx(sorted(t.rounds_ms)[1])
    if graph:
        assert mine.launches_per_sample > 1
        assert mine.host_us < 0.5 * mine.median_ms * 1e3 and not mine.host_bound
    assert err <= (1e-5 if dtype == "fp32" else 1e-2)


def test_a_run_with_graph_times_every_kernel_from_a_graph(tmp_path):
    # steps.bench --graph: a step, the pick and cuBLAS, every one from a CUDA graph; at 256^3 and
    # 33x65x129 (a few microseconds) none is host-bound, and every kernel passes its check.
    if not harness.cublas_available():
        pytest.skip("CuPy or libcublas missing: pip install -e \".[cublas]\"")
    proc = run("--steps", "10", "--fastest", "--graph", "--shapes", "256x256x256,33x65x129", "--repeat", "5",
               "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "--graph: every TVM kernel replayed from a CUDA graph" in proc.stdout
    assert "FAILED" not in proc.stdout + proc.stderr and "†" not in proc.stdout.split("[square]")[1].split("---")[0]


def test_a_graph_that_launches_nothing_is_caught(arch):
    # replay_matches: a "replay" that runs nothing leaves C as NaN, and reads inf.
    if not harness.cublas_available():
        pytest.skip("CuPy missing: pip install -e \".[cublas]\"")
    import cupy as cp

    lib = harness._build(10, 64, 64, 64, arch, None)
    runner = harness.KernelRunner(repeat=3, seed=1, isolate=False)
    a, b = harness.random_operands(64, 64, 64, runner.rng)
    args = [runner._tensor(x) for x in (a, b, np.zeros((64, 64), np.float32))]
    stream = cp.cuda.Stream(non_blocking=True)
    assert harness.replay_matches(lib["main"], args, lambda: None, stream, runner.dev) == math.inf
    replay, _, number = harness.tvm_graph_sampler(lib["main"], args, runner.dev, stream)
    assert number >= 1 and harness.replay_matches(lib["main"], args, replay, stream, runner.dev) <= harness.REPLAY_TOLERANCE


def test_in_turns_gives_each_step_its_own_cublas_row():
    if not harness.cublas_available():
        pytest.skip("CuPy or libcublas missing: pip install -e \".[cublas]\"")
    proc = run("--steps", "10", "--shapes", "256x256x256", "--in-turns", "--repeat", "3", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "cuBLAS (step10)" in proc.stdout and "in turns with step 10" in proc.stdout
    assert "FAILED" not in proc.stdout + proc.stderr
