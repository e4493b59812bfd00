"""The shape benchmark without a GPU: the committed shape set, its loader, the CLI's errors,
the report (per shape, geometric mean and worst shape per class), the saved files, the plot
and the README block, from fake measurements. On a GPU: tests/test_gpu_bench.py."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import schedules
from steps.commands import bench, cli, options, sweep
from steps.measure import dtypes, harness, references
from steps.report import plot, table
from steps.results import shapes, shapeset

from .checks import one_line_error

NO_GPU = not harness.gpu_present()
CLASSES = {"square", "tall-skinny", "short-wide", "k-heavy", "k-light", "odd", "degenerate"}


@pytest.fixture(scope="module")
def shape_set():
    return shapeset.load()


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "steps.bench", *args], capture_output=True, text=True,
                          timeout=timeout)


# --- the committed set ---------------------------------------------------------------------------


def test_the_set_has_every_class_dozens_of_shapes_and_a_rationale_each(shape_set):
    assert set(shape_set.names) == CLASSES
    assert 36 <= len(shape_set.shapes()) <= 48
    for c in shape_set.classes:
        assert len(c.rationale) > 80, c.name
        assert len(c.shapes) >= 5, c.name


def test_every_shape_is_within_the_limits(shape_set):
    for _, (M, N, K) in shape_set.shapes():
        for rows, cols in ((M, K), (K, N), (M, N)):
            assert rows * cols < 2**31
        assert 4 * (M * K + K * N + M * N) <= 2**30


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def test_each_class_holds_what_its_name_says(shape_set):
    by = {c.name: c.shapes for c in shape_set.classes}
    squares = {M for M, N, K in by["square"] if M == N == K}
    assert squares == {M for M, _, _ in by["square"]}
    assert {256, 512, 768, 1024, 1536, 2048, 3072, 4096} <= squares
    for M, N, K in by["tall-skinny"]:
        assert 16 <= N <= 128 and 1024 <= M <= 8192 and 1024 <= K <= 8192
    for M, N, K in by["short-wide"]:
        assert 16 <= M <= 128 and 1024 <= N <= 8192 and 1024 <= K <= 8192
    assert (256, 256, 16384) in by["k-heavy"]
    for M, N, K in by["k-heavy"]:
        assert K >= 8192 and M * N <= 512 * 512
    assert (4096, 4096, 64) in by["k-light"]
    for M, N, K in by["k-light"]:
        assert K <= 256 and M * N >= 2048 * 2048
    assert any(all(_is_prime(n) for n in s) for s in by["odd"])
    assert all(any(n % 2 for n in s) or any(n % 64 for n in s) for s in by["odd"])
    degenerate = by["degenerate"]
    assert any(M == 1 for M, _, _ in degenerate) and any(N == 1 for _, N, _ in degenerate)


def test_every_step_has_a_valid_config_for_every_shape(shape_set):
    """The set is runnable: no shape is rejected by a step's config before anything builds."""
    for step in schedules.STEPS:
        for _, shape in shape_set.shapes():
            cli._checked_config(step, *shape)


# --- the loader ----------------------------------------------------------------------------------

GOOD = 'version = 1\n[[class]]\nname = "a"\nrationale = "why"\nshapes = [[1, 2, 3], [4, 5, 6]]\n'


def test_the_loader_reads_a_good_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(GOOD)
    s = shapeset.load(path)
    assert s.names == ["a"] and s.classes[0].shapes == ((1, 2, 3), (4, 5, 6))
    assert s.class_of((4, 5, 6)) == "a" and s.class_of((9, 9, 9)) is None
    assert len(s.sha256) == 64


@pytest.mark.parametrize("text, words", [
    ("version = 1\n[[class]\n", ["not TOML"]),
    ("[[class]]\nname='a'\nrationale='r'\nshapes=[[1,2,3]]\n", ["version"]),
    ("version = 2\n", ["version must be 1"]),
    ("version = 1\n", ["no [[class]]"]),
    ("version = 1\nextra = 3\n", ["unknown top-level key 'extra'"]),
    (GOOD.replace('name = "a"', 'name = "A b"'), ["name must be"]),
    (GOOD.replace('rationale = "why"', 'rationale = " "'), ["rationale"]),
    (GOOD.replace('rationale = "why"\n', ''), ["rationale"]),
    (GOOD + 'colour = "red"\n', ["unknown key 'colour'"]),
    (GOOD.replace("[[1, 2, 3], [4, 5, 6]]", "[]"), ["non-empty list"]),
    (GOOD.replace("[1, 2, 3]", "[1, 2]"), ["shape 1", "[M, N, K]"]),
    (GOOD.replace("[1, 2, 3]", "[0, 2, 3]"), ["shape 1", "M must be a positive integer"]),
    (GOOD.replace("[1, 2, 3]", "[1, 2.5, 3]"), ["N must be a positive integer"]),
    (GOOD.replace("[1, 2, 3]", "[1, true, 3]"), ["N must be a positive integer"]),
    (GOOD.replace("[1, 2, 3]", "[65536, 65536, 1]"), ["C has 4294967296 elements", "2^31"]),
    (GOOD.replace("[1, 2, 3]", "[16384, 16384, 2048]"), ["GiB"]),
    (GOOD.replace("[4, 5, 6]", "[1, 2, 3]"), ["1x2x3 is already in class 'a'"]),
    (GOOD + GOOD.replace("version = 1\n", "").replace("[1, 2, 3], ", ""), ["a second class"]),
])
def test_the_loader_rejects_a_bad_file_with_one_line(text, words):
    with pytest.raises(shapeset.ShapeSetError) as info:
        shapeset.parse(text, Path("bad.toml"))
    message = str(info.value)
    assert "\n" not in message and message.startswith("bad.toml:")
    for word in words:
        assert word in message, message


def test_an_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(shapeset.ShapeSetError, match="cannot read"):
        shapeset.load(tmp_path / "missing.toml")


def test_ad_hoc_shapes():
    assert shapeset.parse_shapes("1000x1500x700, 64×2048×2048,1000x1500x700") == [(1000, 1500, 700), (64, 2048, 2048)]
    for bad in ("12x3", "axbxc", "1x2x3x4", "0x1x1", ""):
        with pytest.raises(shapeset.ShapeSetError):
            shapeset.parse_shapes(bad)


# --- which steps ---------------------------------------------------------------------------------


def _fake_step(number, precision="fp32", tensor_cores=False):
    """What final_fp32_step reads of a step: the registry's precision and tensor_cores."""
    return SimpleNamespace(number=number, precision=precision, tensor_cores=tensor_cores)


def test_the_default_run_is_the_dispatch_rules_fp32_candidates():
    assert [s.number for s in bench.default_steps("sm_90")] == [11, 14, 19, 24, 25, 28]
    assert [s.number for s in bench.default_steps("sm_80")] == [11, 14, 24]
    assert all(s.precision == "fp32" for s in bench.default_steps())


def test_a_run_of_tf32_steps_measures_tf32():
    """Its baseline is cuBLAS TF32 and its "fastest" row the TF32 pick: the peer of a TF32 step
    (the TF32 rows of 2026-11-27 were measured against strict fp32 before this)."""
    get = schedules.get_step
    assert bench.run_precision([get(13), get(18), get(23)], "fp32") == "tf32"
    assert bench.run_precision([get(11), get(18)], "fp32") == "fp32"  # any fp32 step: fp32's
    assert bench.run_precision(bench.default_steps("sm_90"), "fp32") == "fp32"
    assert bench.run_precision([get(18)], "bf16") == "bf16" and bench.run_precision([], "fp32") == "fp32"


def test_the_final_fp32_cuda_core_step():
    final = bench.final_fp32_step()
    assert final is max((s for s in schedules.STEPS if bench.cuda_core_fp32(s) and s.schedules_a_block),
                        key=lambda s: s.number)
    assert final.number >= 10 and final.precision == "fp32" and not final.tensor_cores
    # The steps after it are tensor-core steps (12-23), never the default, fp32-accurate or not,
    # or kernels of one shape (step 24, the matrix-vector rung).
    assert all(s.tensor_cores or not s.schedules_a_block for s in schedules.STEPS if s.number > final.number)
    assert not schedules.get_step(24).schedules_a_block and bench.cuda_core_fp32(schedules.get_step(24))
    assert not bench.cuda_core_fp32(schedules.get_step(14)) and schedules.get_step(14).precision == "fp32"
    fake = [_fake_step(10), _fake_step(11), _fake_step(12, "tf32", True),
            _fake_step(14, "fp32", True), _fake_step(13, "tf32")]
    assert bench.final_fp32_step(fake).number == 11
    with pytest.raises(schedules.ConfigError):
        bench.final_fp32_step([_fake_step(12, "fp32", True)])
    # The bound each step is checked against: TF32's own for 12, 13, 15-18, 20-23, 26, 27 and 29-31, fp32's for the rest.
    for step in schedules.STEPS:
        expected = harness.TF32_TOLERANCE if step.number in (12, 13, 15, 16, 17, 18, 20, 21, 22, 23, 26, 27, 29, 30, 31) else harness.TOLERANCE
        assert bench.step_tolerance(step) == expected, step.number


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--class", "nope"], ["unknown class 'nope'", "square"]),
    (["--class", ","], ["--class needs a class name"]),
    (["--shapes", "12x3"], ["cannot read shape"]),
    (["--shapes", "0x2x3"], ["0x2x3", "positive"]),
    (["--shapes", "70000x70000x1"], ["2^31"]),
    (["--steps", "99"], ["unknown step 99"]),
    (["--repeat", "0"], ["--repeat"]),
    (["--seed", "-1"], ["--seed"]),
    (["--workers", "0"], ["--workers"]),
    (["--arch", "sm_75"], ["unknown arch"]),
    (["--references", "nope"], ["unknown reference"]),
    (["--dtype", "fp16", "--steps", "19", "--build-only"], ["step 19 has no fp16 form", "12, 13, 15"]),
    (["--dtype", "fp8"], ["--dtype"]),
    (["--save", "--class", "odd"], ["--save publishes the whole shape set"]),
    (["--save", "--shapes", "64x64x64"], ["--save publishes the whole shape set"]),
    (["--check-only", "--build-only"], ["give one of them"]),
    (["--save", "--check-only"], ["give one of them"]),
    (["--check-only", "--references", "cublas"], ["--references are timed"]),
    (["--list", "--steps", "10"], ["--list prints the shapes only"]),
    (["--fastest", "--check-only"], ["--fastest is a timed row"]),
    (["--bogus"], ["unrecognized arguments"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    assert bench.main(args) == 2
    one_line_error(capsys.readouterr().err, "steps.bench", *words)


def test_a_broken_shapes_file_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "shapes.toml"
    path.write_text(GOOD.replace("[1, 2, 3]", "[1, 2, 0]"))
    assert bench.main(["--shape-set", str(path), "--list"]) == 2
    one_line_error(capsys.readouterr().err, "steps.bench", "shapes.toml", "class 'a'", "K must be")


@pytest.mark.skipif(not NO_GPU, reason="a CUDA GPU is present: the no-GPU error cannot happen here")
@pytest.mark.parametrize("args", [[], ["--check-only", "--steps", "all"], ["--save"]])
def test_without_a_gpu_a_run_is_one_line_and_exit_2(args):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    one_line_error(proc.stderr, "steps.bench", "no CUDA GPU found", "--build-only")


def test_list_prints_the_classes_and_their_shapes(capsys, shape_set):
    assert bench.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert f"{len(shape_set.shapes())} shapes in {len(shape_set.classes)} classes" in out
    for c in shape_set.classes:
        assert f"{c.name} ({len(c.shapes)}): " in out
    assert "1x4096x4096" in out and "4096x1x4096" in out
    assert bench.main(["--list", "--class", "odd", "--shapes", "7x7x7"]) == 0
    out = capsys.readouterr().out
    assert "odd (8)" in out and "square" not in out and "ad hoc (1): 7x7x7" in out


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    out = capsys.readouterr().out
    for flag in ("--steps", "--references", "--class", "--shapes", "--repeat", "--seed", "--arch", "--workers",
                 "--save", "--check-only", "--build-only", "--list"):
        assert flag in out
    assert "--results-dir" not in out and "--shape-set" not in out


def test_chosen_items(shape_set):
    def items(*argv):
        return bench.chosen_items(bench.parser().parse_args(list(argv)), shape_set)

    assert [i.shape for i in items()] == [s for _, s in shape_set.shapes()]
    odd = items("--class", "odd")
    assert {i.class_name for i in odd} == {"odd"} and len(odd) == 8
    both = items("--class", "k-light,odd", "--shapes", "7x7x7,2047x2047x2047")
    assert [i.class_name for i in both[-1:]] == ["ad hoc"] and len(both) == 5 + 8 + 1
    only = items("--shapes", "1x4096x4096,7x7x7")
    assert [(i.class_name, i.shape) for i in only] == [("degenerate", (1, 4096, 4096)), ("ad hoc", (7, 7, 7))]


def test_build_only_builds_in_parallel_workers():
    proc = run("--build-only", "--steps", "1,10", "--shapes", "33x65x129,1x256x256", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "built 4 kernels" in proc.stdout and "with 2 workers" in proc.stdout
    assert "10. unroll + tuning" in proc.stdout and "1x256x256" in proc.stdout
    assert "FAILED" not in proc.stdout


# --- the pool: a worker that dies holding the GPU lock ------------------------------------------


def die_holding_the_lock(number: int, marker: str) -> dict:
    """A pool job: number 0 exits the first time while it holds the GPU lock, as a worker does
    after a CUDA fault; its retry, and every other job, then need the lock too."""
    with sweep._gpu_lock:
        if number == 0 and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(3)
    return {"number": number}


def test_a_worker_that_dies_holding_the_lock_does_not_stall_the_pool(tmp_path):
    import threading

    done = {}
    pool = sweep.Pool(2, evaluate=die_holding_the_lock, died=lambda job, why: {"number": job[0], "error": why})
    jobs = [(n, str(tmp_path / "died")) for n in range(4)]
    runner = threading.Thread(target=pool.run, args=(jobs, lambda job, res: done.setdefault(job[0], res)),
                              daemon=True)
    runner.start()
    runner.join(120)
    stalled = runner.is_alive()
    if not stalled:
        pool.close()
    assert not stalled, "the retried jobs waited forever on the lock the dead worker held"
    assert (tmp_path / "died").exists()
    assert [done[n] for n in range(4)] == [{"number": n} for n in range(4)]


def workers_environment(_: int) -> dict:
    """A pool job: what a worker's environment says about its temporary files and NVRTC."""
    import tempfile

    return {"tmpdir": os.environ.get("TMPDIR"), "gettempdir": tempfile.gettempdir(),
            "nvrtc": os.environ.get(schedules.lowering.nvrtc.EXTRA_OPTS, "")}


def test_pool_workers_precompile_headers_in_a_folder_the_pool_removes():
    """NVRTC's precompiled header (~210 MB a worker) goes in the pool's own folder, removed by
    close even when NVRTC could not remove it (a terminated worker); SIGTERM is the pool's
    meanwhile (it ends the process through the finally that closes the pool), then as before."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    pool = sweep.Pool(2, evaluate=workers_environment)
    assert signal.getsignal(signal.SIGTERM) is not before
    seen = []
    try:
        pool.start().run([(n,) for n in range(4)], lambda job, res: seen.append(res))
        scratch = pool.scratch
        assert os.path.isdir(scratch)
    finally:
        pool.close()
    assert len(seen) == 4
    for res in seen:
        assert res["tmpdir"] == res["gettempdir"] == scratch
        assert res["nvrtc"].split()[-4:] == [f"--pre-include={h}" for h in schedules.lowering.nvrtc.PRECOMPILED] + ["--pch"]
    assert not os.path.exists(scratch)
    assert signal.getsignal(signal.SIGTERM) is before


SIGTERMED = r"""
import os, signal, sys, threading, time
from steps.commands import sweep

pool = sweep.Pool(1, evaluate=time.sleep)
print(pool.scratch, flush=True)
threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    pool.run([(60,)], lambda job, res: None)
finally:
    pool.close()
"""


def test_a_sweep_stopped_by_sigterm_closes_its_pool_and_removes_its_files():
    proc = subprocess.run([sys.executable, "-c", SIGTERMED], capture_output=True, text=True, timeout=120)
    scratch = proc.stdout.split()[0]
    assert proc.returncode == 128 + 15, proc.stderr[-2000:]
    assert not os.path.exists(scratch), "the workers' folder was left behind"


# --- a run with fake measurements: the report, the files, the README ------------------------------

FAKE_ENV = {"gpu": "Fake GPU 80GB", "date": "2026-11-23T10:00:00+00:00", "tvm_version": "0.27", "sm_count": 132,
            "driver": "580"}


def _fake_gflops(kind, shape):
    """cuBLAS 40 TFLOPS (50 timed again beside the fastest row); step 9 half of it; step 10 0.8x,
    1.25x at squares; 33x65x129 host-bound."""
    M, N, K = shape
    if kind == bench.AGAIN:
        return 50000.0
    if kind == "cublas":
        return 40000.0
    if kind == 9:
        return 20000.0
    return 50000.0 if M == N == K else 32000.0


def fake_jobs(failing=()):
    def result(kind, key, shape):
        M, N, K = shape
        gflops = _fake_gflops(kind if kind in ("cublas", bench.AGAIN) else key, shape)
        ms = 2 * M * N * K / gflops / 1e6
        bound = shape == (33, 65, 129)
        if (key, shape) in failing:
            return dict(M=M, N=N, K=K, rel_err=math.inf, error="wrong result: relative error inf > 1e-05")
        return dict(M=M, N=N, K=K, median_ms=ms, min_ms=ms, max_ms=ms, gflops=gflops,
                    rel_err=2e-7 if kind == "step" else 1e-7, host_us=ms * 1e3 if bound else 0.1, host_bound=bound)

    def run_jobs(jobs, workers, on_result):
        for job in jobs:
            kind, key, shape = job[:3]
            if len(job) > 10 and job[10]:  # the pick with cuBLAS in turns (bench._pair)
                on_result(job, {"pick": result(kind, key, shape), bench.AGAIN: result(bench.AGAIN, job[10], shape)})
            else:
                on_result(job, result(kind, key, shape))
    return run_jobs


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(harness, "environment", lambda: dict(FAKE_ENV))
    monkeypatch.setattr(references, "available", lambda ref, size, gpu: None)

    def use(failing=()):
        monkeypatch.setattr(bench, "run_jobs", fake_jobs(failing))
    return use


def fake_run(tmp_path, argv, steps=(9, 10), refs=(references.CUBLAS,), with_fastest=False):
    args = bench.parser().parse_args(argv + ["--results-dir", str(tmp_path),
                                             "--dispatch-table", str(tmp_path / "dispatch.json")])
    shape_set = shapeset.load(args.shape_set)
    items = bench.chosen_items(args, shape_set)
    chosen = [schedules.get_step(n) for n in steps]
    configs = {(s.number, i.shape): s.default_config(*i.shape) for s in chosen for i in items}
    return bench.run(chosen, list(refs), items, configs, "sm_90", args, shape_set, with_fastest)


def test_a_run_saves_json_csv_and_plot(tmp_path, fake_gpu, capsys, shape_set):
    fake_gpu()
    assert fake_run(tmp_path, ["--save"]) == 0
    out = capsys.readouterr().out
    gpu_dir = tmp_path / "fake-gpu-80gb"
    doc = shapes.load(gpu_dir)
    assert doc["shape_set"]["complete"] and doc["shape_set"]["sha256"] == shape_set.sha256
    assert [i["key"] for i in doc["implementations"]] == ["step9", "step10", "cublas"]
    assert len(doc["results"]) == 3 * len(shape_set.shapes())
    assert doc["environment"]["gpu"] == "Fake GPU 80GB" and doc["method"]["tolerance"] == 1e-5
    row = next(r for r in doc["results"] if r["impl"] == "step10" and (r["M"], r["N"], r["K"]) == (2048, 2048, 2048))
    assert row["config"] == schedules.get_step(10).default_config(2048, 2048, 2048).as_dict()
    lines = (gpu_dir / "shapes.csv").read_text().splitlines()
    assert lines[0].split(",") == list(shapes.CSV_FIELDS) and len(lines) == 1 + len(doc["results"])
    assert "square,2048,2048,2048,step10,step 10 (unroll + tuning),50000," in "\n".join(lines)
    assert (gpu_dir / "shapes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"saved {gpu_dir / 'shapes.json'}" in out


def test_the_fastest_row_times_the_pick_of_the_table_the_run_saves(tmp_path, fake_gpu, capsys, shape_set):
    # Fakes: step 9 at 20 TFLOPS everywhere, step 10 at 50 on squares and 32 elsewhere: the
    # table this run writes makes step 10 the pick on every shape, and the fastest row times it.
    fake_gpu()
    assert fake_run(tmp_path, ["--save"], with_fastest=True) == 0
    out = capsys.readouterr().out
    table = json.loads((tmp_path / "dispatch.json").read_text())
    entry = next(e for e in table["gpus"] if e["gpu"] == "Fake GPU 80GB")
    assert entry["arch"] == "sm_90" and entry["precisions"]["fp32"]["steps"] == [9, 10]
    assert len(entry["precisions"]["fp32"]["shapes"]) == len(shape_set.shapes())
    m, n, k, times = next(r for r in entry["precisions"]["fp32"]["shapes"] if r[:3] == [2048, 2048, 2048])
    assert times == [pytest.approx(2 * 2048**3 / 20000 / 1e6, rel=1e-5), pytest.approx(2 * 2048**3 / 50000 / 1e6, rel=1e-5)]
    doc = shapes.load(tmp_path / "fake-gpu-80gb")
    assert [i["key"] for i in doc["implementations"]] == ["step9", "step10", "fastest", "cublas", "cublas_again"]
    picks = [r for r in doc["results"] if r["impl"] == "fastest"]
    assert len(picks) == len(shape_set.shapes()) and {r["config"]["step"] for r in picks} == {10}
    assert "fastest (dispatch rule) against" in out and "Fastest below" not in out
    # cuBLAS timed again beside the pick (50 TFLOPS in the fakes, 40 beside the steps): the
    # fastest row's ratio is to that one, step 10's to the first, though both time the same kernel.
    again = next(i for i in doc["implementations"] if i["key"] == "cublas_again")
    assert again["beside"] == "fastest" and again["reference"] and "again beside the fastest row" in again["label"]
    assert len([r for r in doc["results"] if r["impl"] == "cublas_again"]) == len(shape_set.shapes())
    assert shapes.ratio(doc, "fastest", (2048, 2048, 2048)) == (pytest.approx(1.0), None)
    assert shapes.ratio(doc, "step10", (2048, 2048, 2048)) == (pytest.approx(1.25), None)
    csv_rows = {(r["impl"], r["M"], r["N"], r["K"]): r for r in csv.DictReader(io.StringIO(shapes.shapes_csv(doc)))}
    assert csv_rows[("fastest", "2048", "2048", "2048")]["cublas_gflops"] == "50000"
    assert csv_rows[("step10", "2048", "2048", "2048")]["cublas_gflops"] == "40000"
    assert "cuBLAS again" in out
    assert schedules.fastest(2048, 2048, 2048, doc=table, gpu="Fake GPU 80GB").step.number == 10


def test_the_second_phase_times_the_pick_with_the_baseline_in_one_job(fake_gpu, monkeypatch):
    # Per shape one job: the pick, with cuBLAS's key to time in turns with it; no baseline among
    # the references (or none at a shape): the pick alone.
    args = bench.parser().parse_args(["--shapes", "512x512x512,1024x1024x1024,2048x2048x2048"])
    items = bench.chosen_items(args, shapeset.load(args.shape_set))
    choices = {i.shape: schedules.fastest(*i.shape, arch="sm_90") for i in items}
    jobs = bench.fastest_jobs(items, choices, "sm_90", args, references.CUBLAS, "Fake GPU 80GB")
    assert [(j[0], j[2][0], j[10]) for j in jobs] == [("fastest", 512, "cublas"), ("fastest", 1024, "cublas"),
                                                    ("fastest", 2048, "cublas")]
    assert [j[10] for j in bench.fastest_jobs(items, choices, "sm_90", args)] == [None] * 3
    monkeypatch.setattr(references, "available", lambda ref, size, gpu: "no row" if size[0] == 1024 else None)
    assert [j[10] for j in bench.fastest_jobs(items, choices, "sm_90", args, references.CUBLAS, "Fake GPU 80GB")] \
        == ["cublas", None, "cublas"]
    impls = bench.implementations([schedules.get_step(10)], [references.CUBLAS], None, True, baseline="cublas")
    assert [i.key for i in impls] == ["step10", "fastest", "cublas", "cublas_again"]
    assert [i.key for i in bench.implementations([schedules.get_step(10)], [references.CUBLAS], None, False,
                                                 baseline="cublas")] == ["step10", "cublas"]


def test_in_turns_times_every_step_beside_its_own_cublas(tmp_path, fake_gpu, capsys, monkeypatch):
    # --in-turns: each step's job times it in turns with cuBLAS (50 TFLOPS in the fakes, 40 in
    # the first phase's own row), a row per step, and each step's ratio is to its own.
    fake_gpu()
    printed = []
    report = bench.format_report
    monkeypatch.setattr(bench, "format_report", lambda doc: printed.append(doc) or report(doc))
    assert fake_run(tmp_path, ["--class", "square", "--in-turns"]) == 0
    doc = printed[0]
    assert [i["key"] for i in doc["implementations"]] == ["step9", "step10", "cublas", "cublas_again_step9",
                                                          "cublas_again_step10"]
    assert {i["beside"] for i in doc["implementations"] if i.get("beside")} == {"step9", "step10"}
    assert shapes.ratio(doc, "step10", (2048, 2048, 2048)) == (pytest.approx(1.0), None)
    assert shapes.ratio(doc, "step9", (2048, 2048, 2048)) == (pytest.approx(0.4), None)
    out = capsys.readouterr().out
    assert "cuBLAS (step10)" in out and "step 10 (unroll + tuning) against cuBLAS fp32" in out
    summary = out.split("step 10 (unroll + tuning) against cuBLAS fp32 (TF32 off)")[1]
    assert summary.splitlines()[2].split()[:3] == ["square", "8", "1.00x"]
    assert bench.main(["--in-turns", "--check-only"]) == options.EXIT_USAGE
    assert bench.main(["--in-turns", "--references", "dlight", "--steps", "11"]) == options.EXIT_USAGE
    assert "give it among --references" in capsys.readouterr().err


def test_graph_times_every_tvm_kernel_from_a_cuda_graph(tmp_path, fake_gpu, capsys, monkeypatch):
    # --graph: every TVM job carries the flag (the steps', the pick's, a TVM reference's), the
    # paired ones too; cuBLAS's jobs need none (always from a graph). The report and the method say
    # so, and with --save each precision's rows of the dispatch table say "cuda graph".
    args = bench.parser().parse_args(["--shapes", "512x512x512,1024x1024x1024", "--graph"])
    items = bench.chosen_items(args, shapeset.load(args.shape_set))
    choices = {i.shape: schedules.fastest(*i.shape, arch="sm_90") for i in items}
    assert [j[10:] for j in bench.fastest_jobs(items, choices, "sm_90", args, references.CUBLAS)] == [("cublas", True)] * 2
    assert [j[10:] for j in bench.fastest_jobs(items, choices, "sm_90", args)] == [(None, True)] * 2
    plain = bench.parser().parse_args(["--shapes", "512x512x512"])
    assert bench.fastest_jobs(items[:1], choices, "sm_90", plain, references.CUBLAS)[0][10:] == ("cublas", False)
    impls = bench.implementations([schedules.get_step(10)], [references.CUBLAS, references.DLIGHT], None)
    jobs, _ = bench.jobs_for(impls, items, {(10, i.shape): None for i in items}, "sm_90", args, None)
    assert {(j[0], j[11]) for j in jobs if j[0] != "cublas"} == {("step", True), ("tvm", True)}
    assert all(len(j) < 12 for j in jobs if j[0] == "cublas")
    fake_gpu()
    printed = []
    report = bench.format_report
    monkeypatch.setattr(bench, "format_report", lambda doc: printed.append(doc) or report(doc))
    seen = []
    run_jobs = bench.run_jobs
    monkeypatch.setattr(bench, "run_jobs", lambda js, w, on: seen.extend(js) or run_jobs(js, w, on))
    assert fake_run(tmp_path, ["--save", "--graph"], with_fastest=True) == 0
    assert {j[11] for j in seen if j[0] in ("step", bench.FASTEST)} == {True}
    assert "(--graph)" in printed[0]["method"]["timer"]
    assert "--graph: every TVM kernel replayed from a CUDA graph" in capsys.readouterr().out
    entry = next(e for e in json.loads((tmp_path / "dispatch.json").read_text())["gpus"] if e["gpu"] == "Fake GPU 80GB")
    assert entry["precisions"]["fp32"]["timer"] == bench.GRAPH_TIMER == "cuda graph"
    assert "(--graph)" in shapes.load(tmp_path / "fake-gpu-80gb")["method"]["timer"]
    assert "timer" not in bench.dispatch_table([schedules.get_step(10)], items, {}, dict(FAKE_ENV, date="d"), "sm_90",
                                               shapeset.load(args.shape_set), {"schema": "dispatch-1", "gpus": []}
                                               )["gpus"][0]["precisions"]["fp32"]
    for bad in (["--graph", "--check-only"], ["--graph", "--build-only"], ["--graph", "--list"]):
        assert bench.main(bad) == options.EXIT_USAGE
    assert "--graph is a way of timing" in capsys.readouterr().err


@pytest.mark.parametrize("same_set", [True, False], ids=["same-shape-set", "another-shape-set"])
def test_a_run_keeps_the_table_of_a_precision_it_did_not_time(tmp_path, fake_gpu, shape_set, same_set):
    # This GPU's TF32 rows, measured before on the same set, survive an fp32 run's --save; on
    # another shape set they are dropped with the rest of the old entry.
    from schedules import dispatch
    fake_gpu()
    tf32 = {"steps": [13, 18], "shapes": [[512, 512, 512, [0.01, 0.005]]]}
    before = {"schema": dispatch.SCHEMA, "generated_by": "test", "gpus": [{
        "gpu": "Fake GPU 80GB", "slug": "fake-gpu-80gb", "arch": "sm_90", "date": "2026-11-01T00:00:00+00:00",
        "shape_set_sha256": shape_set.sha256 if same_set else "0" * 64,
        "precisions": {"tf32": tf32, "fp32": {"steps": [9], "shapes": [[512, 512, 512, [0.5]]]}}}]}
    (tmp_path / "dispatch.json").write_text(json.dumps(before))
    dispatch._load.cache_clear()
    assert fake_run(tmp_path, ["--save"], with_fastest=True) == 0
    dispatch._load.cache_clear()
    entry = json.loads((tmp_path / "dispatch.json").read_text())["gpus"][0]
    assert entry["precisions"]["fp32"]["steps"] == [9, 10]  # this run's, replacing the old fp32 rows
    if same_set:
        assert entry["precisions"]["tf32"] == {"date": "2026-11-01T00:00:00+00:00", **tf32}
        why = schedules.fastest(512, 512, 512, precision="tf32", doc={"schema": dispatch.SCHEMA, "gpus": [entry]}).why
        assert "2026-11-01" in why  # the TF32 table's own date, not this run's
    else:
        assert "tf32" not in entry["precisions"]


def test_a_gpu_measured_again_keeps_its_place_in_the_table(tmp_path, fake_gpu, shape_set):
    # The first entry of an arch's family is what a caller naming no GPU reads: a GPU measured
    # again stays where it was, and a new one goes last.
    from schedules import dispatch
    fake_gpu()

    def entry(name):
        return {"gpu": name, "slug": name.lower().replace(" ", "-"), "arch": "sm_90", "date": "2026-11-01T00:00:00+00:00",
                "shape_set_sha256": shape_set.sha256, "precisions": {"fp32": {"steps": [9], "shapes": [[512, 512, 512, [0.5]]]}}}
    for names in (["Fake GPU 80GB", "Other GPU"], ["Other GPU"]):
        (tmp_path / "dispatch.json").write_text(json.dumps({"schema": dispatch.SCHEMA, "generated_by": "test",
                                                           "gpus": [entry(n) for n in names]}))
        dispatch._load.cache_clear()
        assert fake_run(tmp_path, ["--save"], with_fastest=True) == 0
        dispatch._load.cache_clear()
        gpus = json.loads((tmp_path / "dispatch.json").read_text())["gpus"]
        assert [e["gpu"] for e in gpus] == (names if "Fake GPU 80GB" in names else names + ["Fake GPU 80GB"])
        assert next(e for e in gpus if e["gpu"] == "Fake GPU 80GB")["precisions"]["fp32"]["steps"] == [9, 10]


def test_save_dispatch_writes_the_table_alone_and_keeps_the_other_precision(tmp_path, fake_gpu, shape_set):
    from schedules import dispatch
    fake_gpu()
    assert fake_run(tmp_path, ["--save"], with_fastest=True) == 0  # fp32: steps 9, 10
    dispatch._load.cache_clear()
    shapes_json = (tmp_path / "fake-gpu-80gb" / "shapes.json").read_text()
    assert fake_run(tmp_path, ["--save-dispatch"], steps=(12, 13)) == 0  # TF32 steps, fake times
    dispatch._load.cache_clear()
    entry = json.loads((tmp_path / "dispatch.json").read_text())["gpus"][0]
    assert entry["precisions"]["fp32"]["steps"] == [9, 10] and entry["precisions"]["tf32"]["steps"] == [12, 13]
    assert len(entry["precisions"]["tf32"]["shapes"]) == len(shape_set.shapes())
    assert (tmp_path / "fake-gpu-80gb" / "shapes.json").read_text() == shapes_json  # the benchmark untouched


def test_a_run_of_tf32_steps_is_reported_against_cublas_tf32(tmp_path, fake_gpu, capsys):
    fake_gpu()
    args = bench.parser().parse_args(["--shapes", "512x512x512,1000x1500x700", "--results-dir", str(tmp_path),
                                      "--dispatch-table", str(tmp_path / "dispatch.json")])
    args.precision = bench.run_precision([schedules.get_step(12), schedules.get_step(13)], "fp32")
    assert bench.baseline_key(args) == "cublas_tf32"
    shape_set = shapeset.load(args.shape_set)
    items = bench.chosen_items(args, shape_set)
    chosen = [schedules.get_step(n) for n in (12, 13)]
    configs = {(s.number, i.shape): s.default_config(*i.shape) for s in chosen for i in items}
    assert bench.run(chosen, [references.CUBLAS_TF32], items, configs, "sm_90", args, shape_set, False) == 0
    out = capsys.readouterr().out
    assert "step 13 (tensor-core pipeline) against cuBLAS TF32" in out and "x cuBLAS" in out
    args.precision = "fp32"
    assert bench.baseline_key(args) == "cublas"


def test_without_save_the_fastest_row_reads_the_committed_table(tmp_path, fake_gpu, capsys, monkeypatch):
    from schedules import dispatch
    fake_gpu()
    committed = {"schema": dispatch.SCHEMA, "gpus": [{
        "gpu": "Fake GPU 80GB", "slug": "fake-gpu-80gb", "arch": "sm_90", "date": "2026-11-01",
        "precisions": {"fp32": {"steps": [9, 10], "shapes": [[512, 512, 512, [0.01, 0.02]]]}}}]}
    monkeypatch.setattr(dispatch, "table", lambda path=None: committed)
    printed = []
    report = bench.format_report
    monkeypatch.setattr(bench, "format_report", lambda doc: printed.append(doc) or report(doc))
    assert fake_run(tmp_path, ["--class", "square"], with_fastest=True) == 0
    assert not (tmp_path / "dispatch.json").exists()
    # The committed table says step 9 (faster at 512^3, the only shape in it): the row times step 9
    # at every square, the nearest measured shape of each.
    picks = [r for r in printed[0]["results"] if r["impl"] == "fastest"]
    assert picks and all(r["config"]["step"] == 9 and r["gflops"] == 20000.0 for r in picks)


def test_a_failed_shape_is_reported_and_nothing_saved(tmp_path, fake_gpu, capsys):
    fake_gpu(failing={(10, (1, 4096, 4096))})
    assert fake_run(tmp_path, ["--save"]) == 1
    captured = capsys.readouterr()
    assert "FAILED step10 1x4096x4096: wrong result" in captured.err
    assert "not saved: 1 kernel(s) failed" in captured.err
    assert not (tmp_path / "fake-gpu-80gb").exists()
    assert "step 10: 1 of the shapes FAILED" in captured.out


def test_the_report_gives_ratios_geomeans_and_worst_shapes(tmp_path, fake_gpu, capsys):
    fake_gpu()
    assert fake_run(tmp_path, ["--class", "square,odd"]) == 0
    out = capsys.readouterr().out
    assert "2048x2048x2048" in out and "1.25x" in out  # step 10 at a square
    # odd: 8 shapes; 33x65x129 host-bound (left out), 2047^3 a square (1.25x), 0.8x on the other 6
    summary = out.split("step 10 (unroll + tuning) against cuBLAS fp32 (TF32 off)")[1]
    rows = {line.split()[0]: line.split() for line in summary.splitlines()[2:5]}
    assert rows["square"][1:5] == ["8", "1.25x", "256x256x256", "1.25x"]
    geomean_odd = math.exp((math.log(1.25) + 6 * math.log(0.8)) / 7)
    assert rows["odd"][1:5] == ["8", f"{geomean_odd:.2f}x", "1000x1500x700", "0.80x"]
    assert "(1 host-bound left out)" in " ".join(rows["odd"])
    geomean_all = math.exp((9 * math.log(1.25) + 6 * math.log(0.8)) / 15)
    assert rows["all"][1:6] == ["16", f"{geomean_all:.2f}x", "1000x1500x700", "0.80x", "(odd)"]
    assert "below 0.9x cuBLAS: 1000x1500x700 0.80x (odd), 997x1009x1013 0.80x (odd)," in summary
    judged, host_bound = summary.split("below 0.9x cuBLAS:")[1].split("below 0.9x with a host-bound timing, not judged:")
    assert "33x65x129" not in judged  # host-bound: not a kernel-time ratio, listed apart
    assert host_bound.strip().startswith("33x65x129 0.80x† (odd)")
    assert "\nbelow 0.9x cuBLAS: " + ", ".join(  # step 9: every shape, at 0.5x
        f"{s} 0.50x ({c})" for c, s in [("square", "256x256x256")]) in out
    assert "33x65x129" in out and "(†)" in out and options.HOST_LEGEND in out
    step9 = out.split("step 9 (warp tiling) against")[1].split("step 10 (unroll")[0]
    assert "0.50x" in step9


def test_summaries_from_a_saved_document(tmp_path, fake_gpu, capsys):
    fake_gpu(failing={(10, (997, 1009, 1013))})
    fake_run(tmp_path, ["--class", "odd,degenerate"])
    capsys.readouterr()
    # the document the run printed from, rebuilt from the same fakes
    args = bench.parser().parse_args(["--class", "odd,degenerate"])
    shape_set = shapeset.load()
    items = bench.chosen_items(args, shape_set)
    steps = [schedules.get_step(10)]
    configs = {(10, i.shape): steps[0].default_config(*i.shape) for i in items}
    impls = bench.implementations(steps, [references.CUBLAS], "Fake GPU 80GB")
    measured = {}
    jobs, _ = bench.jobs_for(impls, items, configs, "sm_90", args, "Fake GPU 80GB")
    fake_jobs({(10, (997, 1009, 1013))})(jobs, 1, lambda job, res: measured.setdefault(
        (bench._impl_of_job(job, impls).key, job[2]), harness.Measurement(**res)))
    doc = bench.document(impls, items, configs, measured, FAKE_ENV, args, shape_set)
    assert shapes.validate(doc) is doc and not doc["shape_set"]["complete"]
    stats = {s.name: s for s in shapes.summarize(doc, "step10")}
    assert stats["odd"].failed == [(997, 1009, 1013)] and stats["odd"].host_bound == [(33, 65, 129)]
    assert len(stats["odd"].ratios) == 6
    assert stats["odd"].geomean == pytest.approx(math.exp((math.log(1.25) + 5 * math.log(0.8)) / 6))
    assert stats["degenerate"].worst[1] == pytest.approx(0.8)
    assert stats[shapes.ALL].shapes == 13 and len(stats[shapes.ALL].ratios) == 11
    assert shapes.ratio(doc, "step10", (997, 1009, 1013)) == (None, "failed")
    assert shapes.ratio(doc, "step10", (33, 65, 129))[1] == "host-bound"
    block = table.shapes_summary(doc)
    assert f"| odd | 8 | {stats['odd'].geomean:.2f}× | 1000×1500×700 0.80× (1†, 1 failed left out) |" in block
    assert "part of the 13 shapes" in block


def test_the_readme_block_comes_from_shapes_json(tmp_path, fake_gpu, capsys):
    fake_gpu()
    results_dir = tmp_path / "results"
    assert fake_run(results_dir, ["--save"]) == 0
    # The README shows the GPU with the newest step files; give the fake GPU one.
    step_doc = json.loads((Path(__file__).parent.parent / "results" / "nvidia-h100-80gb-hbm3" / "step10.json").read_text())
    step_doc["environment"] = {**step_doc["environment"], "gpu": "Fake GPU 80GB", "date": "2030-01-01T00:00:00+00:00"}
    (results_dir / "fake-gpu-80gb" / "step10.json").write_text(json.dumps(step_doc))
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{table.BEGIN}\n{table.END}\n{table.SHAPES_BEGIN}\nold\n{table.SHAPES_END}\ny\n")
    assert table.update_readme(readme, results_dir)
    text = readme.read_text()
    block = text.split(table.SHAPES_BEGIN)[1].split(table.SHAPES_END)[0]
    assert "**Fake GPU 80GB**" in block and "the 43 shapes of" in block
    assert "| square | 8 | 0.50× | 256³ 0.50× | 1.25× | 256³ 1.25× |" in block
    assert "| **all** | 43 |" in block and "shapes.png" in block and "old" not in block
    assert "Step 10 below 0.9× cuBLAS: 2048×64×2048 0.80×," in block and "Step 9 below 0.9× cuBLAS: 256³ 0.50×" in block
    assert text.endswith("y\n")
    assert "_No shape benchmark committed yet" in table.render_shapes(tmp_path / "empty")


def test_the_plot_renders_from_fake_data_and_skips_a_check_only_run(tmp_path, fake_gpu, capsys):
    fake_gpu()
    assert fake_run(tmp_path, ["--save"], steps=(10,)) == 0
    gpu_dir = tmp_path / "fake-gpu-80gb"
    (gpu_dir / "shapes.png").unlink()
    assert plot.render_shapes(gpu_dir) == f"wrote {gpu_dir / 'shapes.png'}"
    assert (gpu_dir / "shapes.png").stat().st_size > 20_000
    assert plot.render_gpu_dir(gpu_dir)[-1] == f"wrote {gpu_dir / 'shapes.png'}"
    doc = shapes.load(gpu_dir)
    doc["method"]["timed"] = False
    assert plot.plot_shapes(doc, tmp_path / "x.png").startswith("skipped x.png")
    assert plot.render_shapes(tmp_path).startswith("skipped shapes.png")
    # the title names the benchmark's precision, not fp32 whatever was run
    assert plot.shapes_title(doc).startswith("Fake GPU 80GB: fp32 matmul over the benchmark shape set (")
    assert ": bf16 matmul" in plot.shapes_title({**doc, "dtype": "bf16"})
    assert ": TF32 matmul" in plot.shapes_title({**doc, "baseline": "cublas_tf32"})


def test_check_only_reports_ok_without_timing(tmp_path, fake_gpu, capsys):
    fake_gpu()
    assert fake_run(tmp_path, ["--check-only", "--class", "degenerate"], steps=(1, 10), refs=()) == 0
    out = capsys.readouterr().out
    assert "check" in out and "every shape passed" in out and "geomean" not in out
    assert "1x4096x4096" in out


def test_validate_rejects_a_bad_document():
    with pytest.raises(shapes.ShapesError):
        shapes.validate({"schema": "other"})
    with pytest.raises(shapes.ShapesError, match="lacks"):
        shapes.validate({"schema": shapes.SCHEMA})


# --- the worker's job function, with the GPU faked -------------------------------------------------


class _FakeRunner:
    """KernelRunner's check and time, without a GPU: a fixed error, 1 ms, or a fault."""

    rel_err, fault = 3e-7, None

    def __init__(self, repeat, seed, isolate):
        assert isolate is False

    dtypes: list = []  # the dtype of each check and timing, in order

    def check(self, func, M, N, K, dtype="fp32"):
        self.dtypes.append(dtype)
        if self.fault:
            raise RuntimeError(f"CUDA: {self.fault}\nsecond line")
        return self.rel_err

    graphs: list = []  # each timing's graph flag, in order

    def time(self, lib, M, N, K, dtype="fp32", graph=False):
        self.dtypes.append(dtype)
        self.graphs.append(graph)
        return harness.Timing(1.0, 0.9, 1.1, 3, 1, host_us=5.0)


@pytest.fixture
def fake_worker(monkeypatch):
    import threading

    monkeypatch.setattr(sweep, "_gpu_lock", threading.Lock(), raising=False)
    monkeypatch.setattr(harness, "KernelRunner", _FakeRunner)
    monkeypatch.setattr(harness, "_build", lambda spec, M, N, K, arch, config, dtype="fp32": {"main": object()})
    monkeypatch.setattr(_FakeRunner, "dtypes", [])
    monkeypatch.setattr(_FakeRunner, "graphs", [])
    monkeypatch.setattr(bench, "_poisoned", False)
    monkeypatch.setattr(_FakeRunner, "rel_err", 3e-7)  # each test's changes are undone after it
    monkeypatch.setattr(_FakeRunner, "fault", None)
    return _FakeRunner


def test_the_job_checks_and_times_under_the_lock(fake_worker):
    res = bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, True)
    assert res["error"] is None and res["rel_err"] == 3e-7 and res["median_ms"] == 1.0
    assert res["gflops"] == pytest.approx(2 * 64 * 32 * 16 / 1e-3 / 1e9) and res["host_bound"] is False
    checked = bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, False)
    assert checked["error"] is None and checked["median_ms"] is None and checked["gflops"] is None
    fake_worker.rel_err = 2e-5
    wrong = bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, True)
    assert wrong["error"].startswith("wrong result: relative error 2e-05 > 1e-05")
    assert bench._job("step", 12, (64, 32, 16), None, "sm_90", 3, 1, 5e-3, True)["error"] is None  # its own bound
    fake_worker.rel_err = 3e-7
    assert bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, True, "fp32", None, True)["error"] is None
    assert fake_worker.graphs == [False, False, False, True]  # --graph reaches the timing
    assert not bench._poisoned
    # A 16-bit job checks and times its kernel on inputs of its dtype.
    fake_worker.dtypes.clear()
    assert bench._job("step", 22, (64, 32, 16), None, "sm_90", 3, 1, 5e-3, True, "bf16")["error"] is None
    assert fake_worker.dtypes == ["bf16", "bf16"]


def test_a_fault_fails_the_job_and_poisons_its_worker(fake_worker, monkeypatch):
    fake_worker.fault = "an illegal memory access was encountered"
    res = bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, True)
    assert res["error"] == "RuntimeError: second line"  # harness._one_line: TVM's reason comes last
    assert bench._poisoned
    exits = []
    monkeypatch.setattr(bench.os, "_exit", lambda code: exits.append(code) or (_ for _ in ()).throw(SystemExit(code)))
    with pytest.raises(SystemExit):
        bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, True)
    assert exits == [3]


def test_the_pick_and_cublas_in_turns_give_both_rows(fake_worker, monkeypatch):
    # bench._pair: the pick checked, then both timed by harness.time_beside_cublas in one lock;
    # each row its own timing, error and bound; a fault fails both and poisons the worker.
    monkeypatch.setattr(fake_worker, "dev", "dev", raising=False)
    calls = []

    def beside(lib, dev, M, N, K, repeat, rounds, seed, tf32=False, dtype="fp32", graph=False):
        calls.append((dev, (M, N, K), repeat, rounds, tf32, dtype) + ((True,) if graph else ()))
        return (harness.Timing(2.0, 1.9, 2.2, 90, 1, host_us=5.0, rounds_ms=[2.0, 2.1, 1.9]),
                harness.Timing(1.0, 0.9, 1.1, 90, 1, host_us=5.0), 4e-3)

    monkeypatch.setattr(harness, "time_beside_cublas", beside)
    res = bench._job("fastest", 23, (64, 32, 16), None, "sm_90", 30, 1, 5e-3, True, "bf16", "cublas_bf16")
    assert calls == [("dev", (64, 32, 16), 30, bench.PAIR_ROUNDS, False, "bf16")]
    assert res["pick"]["median_ms"] == 2.0 and res["pick"]["rel_err"] == 3e-7 and res["pick"]["error"] is None
    assert res[bench.AGAIN]["median_ms"] == 1.0 and res[bench.AGAIN]["rel_err"] == 4e-3
    assert res[bench.AGAIN]["error"] is None  # cuBLAS bf16's own bound, not the pick's
    bench._job("fastest", 18, (64, 32, 16), None, "sm_90", 30, 1, 5e-3, True, "fp32", "cublas_tf32")
    assert calls[-1][4] is True  # TF32's baseline timed as TF32
    bench._job("fastest", 23, (64, 32, 16), None, "sm_90", 30, 1, 5e-3, True, "bf16", "cublas_bf16", True)
    assert calls[-1] == ("dev", (64, 32, 16), 30, bench.PAIR_ROUNDS, False, "bf16", True)  # --graph: replayed
    fake_worker.fault = "an illegal memory access was encountered"
    res = bench._job("fastest", 23, (64, 32, 16), None, "sm_90", 30, 1, 5e-3, True, "bf16", "cublas_bf16")
    assert res["pick"]["error"] == res[bench.AGAIN]["error"] == "RuntimeError: second line" and bench._poisoned


def test_a_build_failure_is_that_kernels_error(fake_worker, monkeypatch):
    def broken(*args):
        raise RuntimeError("NVRTC: error: something\nat line 3")

    monkeypatch.setattr(harness, "_build", broken)
    res = bench._job("step", 10, (64, 32, 16), None, "sm_90", 3, 1, 1e-5, True)
    assert res["error"] == "build failed: RuntimeError: at line 3" and not bench._poisoned
    assert bench._died(("step", 10, (5, 6, 7)), "worker died")["error"] == "worker died"
    assert bench._died(("build", 10, (5, 6, 7)), "worker died") == {"report": None, "error": "worker died"}


def always_dies(number: int, delay: float) -> dict:
    """A pool job: number 0 kills its worker every time, before it can report (as a kernel whose
    misaligned address aborts the process does); the others take a moment, so they are in
    flight beside it each time."""
    import time

    if number == 0:
        os._exit(3)
    time.sleep(delay)
    return {"number": number}


def test_a_job_that_always_kills_its_worker_fails_alone(tmp_path):
    """Measured on the H100 before the fix: a faulting kernel broke the pool in both shared rounds
    and its neighbours were reported as 'worker died twice' too."""
    done = {}
    pool = sweep.Pool(2, evaluate=always_dies, died=lambda job, why: {"number": job[0], "error": why})
    try:
        pool.run([(n, 0.5) for n in range(4)], lambda job, res: done.setdefault(job[0], res))
    finally:
        pool.close()
    assert done[0] == {"number": 0, "error": "worker died (CUDA fault?) twice"}
    assert [done[n] for n in (1, 2, 3)] == [{"number": n} for n in (1, 2, 3)]


def test_a_16_bit_run_checks_in_its_dtype_and_writes_its_rows_alone(tmp_path, fake_gpu, shape_set, monkeypatch):
    """--dtype bf16 --save-dispatch (issue 49): every job built and checked with bf16 inputs against
    bf16's tolerance, cuBLAS bf16 the baseline, the fastest row the rule's bf16 pick, and this
    GPU's bf16 rows written beside the fp32 ones, which are kept."""
    from schedules import dispatch
    fake_gpu()
    assert fake_run(tmp_path, ["--save"], with_fastest=True) == 0  # fp32: steps 9, 10
    dispatch._load.cache_clear()
    seen = []
    timed = fake_jobs()
    monkeypatch.setattr(bench, "run_jobs", lambda jobs, workers, on_result: (seen.extend(jobs), timed(jobs, workers, on_result)))
    args = bench.parser().parse_args(["--dtype", "bf16", "--save-dispatch", "--results-dir", str(tmp_path),
                                      "--dispatch-table", str(tmp_path / "dispatch.json")])
    items = bench.chosen_items(args, shape_set)
    chosen = [schedules.get_step(n) for n in (13, 22)]
    configs = {(s.number, i.shape): s.default_config(*i.shape, "bf16") for s in chosen for i in items}
    refs = references.for_dtype([references.CUBLAS], "bf16")
    assert [r.key for r in refs] == ["cublas_bf16"]
    assert bench.run(chosen, refs, items, configs, "sm_90", args, shape_set, True) == 0
    dispatch._load.cache_clear()
    assert {job[9] for job in seen} == {"bf16"}
    assert {job[10] for job in seen if job[0] == bench.FASTEST} == {"cublas_bf16"}  # its baseline in turns with it
    assert {job[7] for job in seen if job[0] in ("step", bench.FASTEST)} == {dtypes.tolerance("bf16")}
    entry = json.loads((tmp_path / "dispatch.json").read_text())["gpus"][0]
    assert entry["precisions"]["fp32"]["steps"] == [9, 10] and entry["precisions"]["bf16"]["steps"] == [13, 22]
    assert len(entry["precisions"]["bf16"]["shapes"]) == len(shape_set.shapes())
    pick = schedules.fastest(4096, 4096, 4096, precision="bf16", doc={"schema": dispatch.SCHEMA, "gpus": [entry]})
    assert pick.step.number in (13, 22) and "measured at this shape" in pick.why
    assert not (tmp_path / "fake-gpu-80gb" / "bf16").exists()  # no results document for 16-bit runs


def test_a_16_bit_save_writes_its_benchmark_beside_fp32s_and_a_block_of_its_own(tmp_path, fake_gpu, shape_set):
    """--dtype bf16 --save (issue 49): the benchmark of another precision goes to
    results/<gpu>/bf16/, and docs/measured.md's shape block shows it after fp32's, against cuBLAS
    bf16; the fp32 document is untouched."""
    from schedules import dispatch
    from steps.report import table
    fake_gpu()
    assert fake_run(tmp_path, ["--save"], with_fastest=True) == 0  # fp32: steps 9, 10
    dispatch._load.cache_clear()
    fp32_doc = (tmp_path / "fake-gpu-80gb" / "shapes.json").read_text()
    args = bench.parser().parse_args(["--dtype", "bf16", "--save", "--results-dir", str(tmp_path),
                                      "--dispatch-table", str(tmp_path / "dispatch.json")])
    bench.check_options(args)  # no longer refused
    items = bench.chosen_items(args, shape_set)
    chosen = [schedules.get_step(n) for n in (13, 22)]
    configs = {(s.number, i.shape): s.default_config(*i.shape, "bf16") for s in chosen for i in items}
    assert bench.run(chosen, references.for_dtype([references.CUBLAS], "bf16"), items, configs, "sm_90", args,
                     shape_set, True) == 0
    dispatch._load.cache_clear()
    doc = shapes.load(tmp_path / "fake-gpu-80gb" / "bf16")
    assert shapes.precision_of(doc) == "bf16" and doc["baseline"] == "cublas_bf16"
    assert (tmp_path / "fake-gpu-80gb" / "bf16" / "shapes.csv").exists()
    assert (tmp_path / "fake-gpu-80gb" / "shapes.json").read_text() == fp32_doc
    block = table.shapes_blocks(json.loads(fp32_doc), tmp_path / "fake-gpu-80gb")
    fp32_at, bf16_at = block.index("against cuBLAS strict fp32"), block.index("against cuBLAS bf16 (fp32 compute)")
    assert fp32_at < bf16_at and "step 22" in block[bf16_at:] and "step 22" not in block[:bf16_at]
    entry = json.loads((tmp_path / "dispatch.json").read_text())["gpus"][0]
    assert sorted(entry["precisions"]) == ["bf16", "fp32"]


def test_16_bit_candidates_and_options():
    assert [s.number for s in bench.sixteen_bit_steps("bf16", "sm_90")] == [12, 13, 15, 16, 17, 18, 20, 21, 22, 23, 24, 26, 27, 29, 30, 31]
    assert [s.number for s in bench.sixteen_bit_steps("fp16", "sm_80")] == [12, 13, 24]
