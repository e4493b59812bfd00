"""python -m steps without a GPU: --steps parsing, the build-only ladder, the combined table,
and the GPU path (measure, save, CSV, machine.json, plots) driven by fakes of the harness."""

import argparse
import csv
import dataclasses
import json
import subprocess
import sys

import pytest

import schedules
from steps import results
from steps.commands import cli, compare, ladder, options
from steps.measure import harness, nvcc, references, roofline

from .checks import PROGRESS, one_line_error

NUMBERS = [s.number for s in schedules.STEPS]
FIRST, LAST = NUMBERS[0], NUMBERS[-1]
NO_GPU = not harness.gpu_present()


def run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)


def numbers(steps):
    return [s.number for s in steps]


# --- --steps ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("all", NUMBERS),
    ("ALL", NUMBERS),
    ("3-6", [3, 4, 5, 6]),
    ("7", [7] if 7 in NUMBERS else None),
    ("1,4,7", [n for n in (1, 4, 7) if n in NUMBERS] if 7 in NUMBERS else None),
    ("5,1,3-4", [1, 3, 4, 5]),
    (" 2 - 3 ", [2, 3]),
    ("2,2,2-3", [2, 3]),
])
def test_steps_ranges(text, expected):
    if expected is None:
        pytest.skip("the registry has no step 7 yet")
    assert numbers(ladder.parse_steps(text)) == expected


@pytest.mark.parametrize("text, words", [
    (str(LAST + 1), [f"unknown step {LAST + 1}", f"steps are {FIRST}-{LAST}"]),
    ("0", ["unknown step 0"]),
    (f"2-{LAST + 5}", [f"unknown step {LAST + 5}"]),
    ("6-3", ["runs backwards"]),
    ("x", ["cannot read 'x'"]),
    ("3-", ["cannot read"]),
    ("", ["cannot read"]),
    ("1,,2", ["cannot read"]),
])
def test_bad_steps_are_rejected(text, words):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        ladder.parse_steps(text)
    for w in words:
        assert w in str(err.value)


@pytest.mark.parametrize("args, words", [
    (["--steps", str(LAST + 1)], ["argument --steps", f"unknown step {LAST + 1}"]),
    (["--steps", "5-2"], ["--steps", "backwards"]),
    (["--sizes", "0"], ["--sizes", ">= 1"]),
    (["--arch", "sm_75"], ["unknown arch"]),
    (["--explain"], ["--explain is per step"]),
    (["--save", "--compare", "results"], ["--compare does not save"]),
    (["--save", "--build-only"], ["--save", "--build-only"]),  # was ignored
    (["--compare", "results/nvidia-h200", "--build-only"], ["--compare", "--build-only"]),
    (["--sizes", "46341", "--build-only"], ["46341x46341x46341", "2^31"]),
    (["--seed", "-5"], ["--seed", ">= 0"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    assert ladder.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line_error(err, "steps", *words)


def test_bad_steps_through_python_m_steps():
    """The real entry point: one line, exit 2, no traceback."""
    proc = run("steps", "--steps", "1,x")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "python -m steps: error: argument --steps: cannot read 'x': use e.g. 3-6, 7, 1,4,7 or all\n"


def test_help_names_the_ladder_options(capsys):
    with pytest.raises(SystemExit) as done:
        ladder.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--steps", "--sizes", "--shape", "--save", "--build-only", "--compare", "--repeat"):
        assert flag in out


def test_repeated_steps_accumulate(capsys, monkeypatch):
    def chosen(*argv):
        return numbers(ladder.chosen_steps(ladder.parser().parse_args(argv).steps))

    assert chosen("--steps", "5-6", "--steps", "1,5") == [1, 5, 6]
    assert chosen() == NUMBERS
    monkeypatch.setattr(nvcc, "available", lambda: False)
    assert ladder.main(["--build-only", "--steps", "2", "--steps", "4", "--sizes", "64", "--sizes", "128"]) == 0
    out = capsys.readouterr().out
    assert "2. register tiling" in out and "4. cooperative fetch" in out and "3. shared" not in out
    assert len([line for line in out.splitlines() if "x64x64" in line or "x128x128" in line]) == 4


def test_sweep_rejects_sizes_over_the_int32_limit(capsys):
    from steps.commands import sweep

    assert sweep.main(["--step", "7", "--sizes", "1024", "46341", "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # not "0 valid candidates" after the sizes that were fine
    one_line_error(err, "steps.sweep", "46341x46341x46341", "2^31")


def test_with_priors_measures_the_step_before_each_step():
    steps = ladder.parse_steps("3-5")
    assert numbers(ladder.with_priors(steps)) == [2, 3, 4, 5]
    assert numbers(ladder.with_priors(ladder.parse_steps("all"))) == NUMBERS
    # A list: every step's prior too (a list of 11,13,... once failed with KeyError: (12, ...)).
    assert numbers(ladder.with_priors(ladder.parse_steps("1,4,7"))) == [1, 3, 4, 6, 7]
    assert numbers(ladder.with_priors(ladder.parse_steps("11,13,14,18,19"))) == [10, 11, 12, 13, 14, 17, 18, 19]
    assert ladder.prior_of(schedules.STEPS[0]) is None


# --- build only -----------------------------------------------------------------------------------


def test_build_only_lists_every_step(monkeypatch, capsys):
    """Every registered step, built in-process (nvcc off to keep it fast), one row per size."""
    monkeypatch.setattr(nvcc, "available", lambda: False)
    assert ladder.main(["--build-only", "--sizes", "256"]) == 0
    out = capsys.readouterr().out
    for step in schedules.STEPS:
        assert f"{step.number}. {step.name}" in out
    rows = [line for line in out.splitlines() if "256x256x256" in line]
    assert len(rows) == len(schedules.STEPS)
    assert "nvcc not found" in out
    assert f"built {len(schedules.STEPS)} kernels" in out


def test_build_only_with_nvcc_reports_registers(capsys):
    assert ladder.main(["--build-only", "--steps", "1,4", "--sizes", "256"]) == 0
    out = capsys.readouterr().out
    assert "1. tiled grid" in out and "4. cooperative fetch" in out and "2. register" not in out
    row = next(line for line in out.splitlines() if line.startswith("4. cooperative fetch"))
    fields = row.split()
    assert fields[3] == "256x256x256"
    threads = int(fields[4])
    cfg = schedules.get_step(4).default_config(256, 256, 256)
    assert threads == cfg.threads
    if nvcc.available():
        assert int(fields[6]) > 0 and int(fields[7]) == 0  # registers, no spills


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_builds_only_with_one_note():
    proc = run("steps", "--steps", "2", "--sizes", "256")  # the real entry point, exit code and streams
    assert proc.returncode == 0, proc.stderr
    note, *progress = proc.stderr.strip().splitlines()
    assert note == "python -m steps: no CUDA GPU found; building only (timing needs a GPU)"
    assert len(progress) == 1 and PROGRESS.match(progress[0]), proc.stderr
    assert "2. register tiling" in proc.stdout and "256x256x256" in proc.stdout


def test_build_only_shows_progress_on_stderr(monkeypatch, capsys):
    """One [n/total] line per kernel on stderr while the ladder builds (as steps.bench prints);
    stdout's table has none of them."""
    monkeypatch.setattr(nvcc, "available", lambda: False)
    assert ladder.main(["--build-only", "--steps", "2,4", "--sizes", "64", "--sizes", "128"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert [line.split("]")[0] + "]" for line in lines] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], err
    assert [line.split("  ")[-1] for line in lines] == [
        "step 2 64x64x64: built", "step 2 128x128x128: built", "step 4 64x64x64: built", "step 4 128x128x128: built"]
    assert not any(PROGRESS.match(line) for line in out.splitlines())
    assert out.startswith("ladder: 2 steps, arch sm_90, built only (no timing)\n")


def test_build_only_progress_counts_a_failed_build(monkeypatch, capsys):
    monkeypatch.setattr(nvcc, "available", lambda: False)

    def broken(step, *args, **kwargs):
        raise RuntimeError("no kernel today")

    monkeypatch.setattr(schedules, "build", broken)
    assert ladder.main(["--build-only", "--steps", "2", "--sizes", "64"]) == 1
    out, err = capsys.readouterr()
    assert PROGRESS.match(err) and err.rstrip().endswith("step 2 64x64x64: build failed: RuntimeError: no kernel today"), err
    assert "FAILED: build failed" in out


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
@pytest.mark.parametrize("flag", [["--save"], ["--compare", "results/nvidia-h200"]])
def test_no_gpu_save_or_compare_is_an_error(flag, capsys):
    assert ladder.main(["--steps", "2", "--sizes", "256", *flag]) == 2
    assert capsys.readouterr().err.strip() == f"python -m steps: error: {flag[0]} needs a CUDA GPU and none was found"


# --- the combined table ----------------------------------------------------------------------------


def _row(step, size, gflops, prior_gflops=None, cublas=None, error=None):
    m = harness.Measurement(*size, median_ms=1.0, min_ms=0.9, max_ms=1.1, gflops=gflops, rel_err=1e-7, error=error)
    prior = ladder.prior_of(step)
    row = cli.Row(size, m, step.default_config(*size), f"step {prior.number}" if prior else "numpy (CPU)")
    row.prior_gflops, row.cublas_gflops = prior_gflops, cublas
    return row


def test_ladder_table_from_fake_measurements():
    s1, s2, s3 = (schedules.get_step(n) for n in (1, 2, 3))
    sizes = [(256, 256, 256), (512, 512, 512)]
    rows = {
        (1, sizes[0]): _row(s1, sizes[0], 1000.0, prior_gflops=500.0, cublas=4000.0),
        (1, sizes[1]): _row(s1, sizes[1], 2000.0, prior_gflops=500.0, cublas=8000.0),
        (2, sizes[0]): _row(s2, sizes[0], 3000.0, prior_gflops=1000.0, cublas=4000.0),
        (2, sizes[1]): _row(s2, sizes[1], None, error="wrong result", cublas=8000.0),
        (3, sizes[0]): _row(s3, sizes[0], 300.0, prior_gflops=3000.0, cublas=4000.0),
        (3, sizes[1]): _row(s3, sizes[1], 400.0, prior_gflops=None, cublas=8000.0),
    }
    cublas = {(references.CUBLAS.key, size): _timed(size, g) for size, g in zip(sizes, (4000.0, 8000.0))}
    text = ladder.format_ladder_table([s1, s2, s3], sizes, rows, cublas)
    lines = text.splitlines()
    assert "256x256x256" in lines[0] and "512x512x512" in lines[0]
    assert lines[1].count("GFLOPS") == 2 and lines[1].count("x prior") == 2
    step1 = next(line for line in lines if line.startswith("1. tiled grid")).split()
    assert step1[3:9] == ["1000", "2.00x", "25%", "2000", "4.00x", "25%"]
    step2 = next(line for line in lines if line.startswith("2. register tiling")).split()
    assert step2[3:6] == ["3000", "3.00x", "75%"] and step2[-1] == "FAILED"
    step3 = next(line for line in lines if line.startswith("3. shared memory")).split()
    assert step3[3:9] == ["300", "0.10x", "8%", "400", "-", "5%"]  # no prior -> no ratio
    cublas = next(line for line in lines if line.startswith("cuBLAS fp32")).split()
    assert "4000" in cublas and "8000" in cublas and cublas.count("100%") == 2
    assert any("numpy (CPU)" in line for line in lines)
    assert options.HOST_MARK not in text  # nothing host-bound: no marker, no legend


def _timed(size, gflops, host_us=1.0, error=None):
    """A measured row of `gflops`, whose host submission took `host_us` per launch."""
    m = harness.Measurement(*size, rel_err=1e-7, error=error)
    median = harness.flops(*size) / (gflops * 1e9) * 1e3
    m.set_timing(harness.Timing(median, median, median, 10, 1, host_us=host_us))
    return m


def test_ladder_table_marks_host_bound_cells_and_lists_the_references():
    s1 = schedules.get_step(1)
    size = (512, 512, 512)
    bound = _timed(size, 1000.0, host_us=1e9)  # a host far slower than the kernel
    rows = {(1, size): cli.Row(size, bound, s1.default_config(*size), "numpy (CPU)", prior_gflops=100.0)}
    refs = {(references.CUBLAS.key, size): _timed(size, 4000.0),
            (references.DLIGHT.key, size): _timed(size, 2000.0),
            (references.CUBLAS_TF32.key, size): _timed(size, 16000.0)}
    lines = ladder.format_ladder_table([s1], [size], rows, refs).splitlines()
    step1 = next(line for line in lines if line.startswith("1. tiled grid")).split()
    assert step1[3] == f"1000{options.HOST_MARK}"
    assert next(line for line in lines if line.startswith("TVM dlight")).split()[-2:] == ["2000", "50%"]
    assert next(line for line in lines if line.startswith("cuBLAS TF32")).split()[-2:] == ["16000", "400%"]
    assert any("reduced precision" in line and "tolerance" in line for line in lines)
    assert lines[-1] == options.HOST_LEGEND


# --- the GPU path, with the harness faked -----------------------------------------------------------


class FakeRunner:
    """Stands in for harness.KernelRunner: GFLOPS = 1000 x step number, or a chosen failure."""

    calls: list = []
    configs: list = []  # (step number, M, config) of each step measured
    failures: dict = {}  # (step number, M) -> error text
    gflops: dict = {}  # step number -> GFLOPS override
    host_us: dict = {}  # step number -> host time per launch override (µs)

    def __init__(self, repeat=30, seed=None):
        self.repeat = repeat

    def measure(self, step, M, N, K, arch, config=None):
        if isinstance(step, str):  # a reference's builder (dlight, MetaSchedule)
            FakeRunner.calls.append((step, M))
            return _timed((M, N, K), 500.0)
        FakeRunner.calls.append((step.number, M))
        FakeRunner.configs.append((step.number, M, config))
        m = harness.Measurement(M, N, K)
        error = FakeRunner.failures.get((step.number, M))
        if error:
            m.error = error
            return m
        m.gflops = FakeRunner.gflops.get(step.number, 1000.0 * step.number)
        m.median_ms = harness.flops(M, N, K) / (m.gflops * 1e9) * 1e3
        m.min_ms, m.max_ms, m.rel_err = m.median_ms * 0.99, m.median_ms * 1.01, 3e-7
        m.host_us = FakeRunner.host_us.get(step.number, 0.0)
        m.host_bound = harness.is_host_bound(m.host_us, m.median_ms)
        return m


@pytest.fixture
def fake_gpu(monkeypatch):
    FakeRunner.calls, FakeRunner.configs, FakeRunner.failures, FakeRunner.gflops, FakeRunner.host_us = [], [], {}, {}, {}
    env = {"gpu": "NVIDIA Fake G100", "date": "2026-12-01T00:00:00+00:00", "tvm_version": "0.27",
           "sm_count": 100, "compute_capability": "9.0", "sm_clock_mhz": "1500", "driver": "1.0"}
    monkeypatch.setattr(harness, "gpu_present", lambda: True)
    monkeypatch.setattr(harness, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness, "cublas_available", lambda: True)
    monkeypatch.setattr(harness, "KernelRunner", FakeRunner)
    monkeypatch.setattr(harness, "environment", lambda: dict(env))
    monkeypatch.setattr(harness, "time_cublas",
                        lambda M, N, K, repeat=30, seed=None, tf32=False: (harness.Timing(1.0, 1.0, 1.0, 1, 1, 1.0), 1e-7))
    monkeypatch.setattr(harness, "time_numpy", lambda M, N, K, repeat=5, seed=None: harness.Timing(1.0, 1.0, 1.0, 1, 1))
    bandwidth = {"bandwidth_gbs": 3000.0, "bytes_per_launch": 2, "median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0,
                 "method": "fake copy"}
    monkeypatch.setattr(roofline, "measure_bandwidth", lambda arch, **kw: bandwidth)
    return env


def test_ladder_run_saves_what_passed(fake_gpu, tmp_path, capsys):
    FakeRunner.failures = {(2, 512): "wrong result: relative error 1 > 1e-05"}
    code = ladder.main(["--steps", "1-3", "--sizes", "256", "512", "--save", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1  # step 2 failed at 512
    # each step once per size, in this process; no extra prior for a range starting at step 1
    assert sorted(c for c in FakeRunner.calls if isinstance(c[0], int)) == [(n, m) for n in (1, 2, 3) for m in (256, 512)]
    # TVM's references go through the same runner; MetaSchedule has no database for this GPU
    assert sorted(c for c in FakeRunner.calls if isinstance(c[0], str)) == [
        (references.DLIGHT.builder, 256), (references.DLIGHT.builder, 512)]
    assert "TVM MetaSchedule (tuned): no row at 256x256x256: not tuned for nvidia-fake-g100" in err
    progress = [line for line in err.splitlines() if line.startswith("[")]
    total = 2 * (3 + 1 + 3)  # sizes x (steps + numpy + cuBLAS fp32, cuBLAS TF32, dlight)
    assert len(progress) == total and progress[-1].startswith(f"[{total}/{total}]")
    assert any("step 2 512x512x512: FAILED (wrong result" in line for line in progress)
    assert "FAILED step 2 512x512x512" in err and "step 2 not saved" in err

    gpu_dir = tmp_path / "nvidia-fake-g100"
    assert sorted(p.name for p in gpu_dir.iterdir()) == [
        "gflops.png", "ladder.csv", "machine.json", "pct_cublas.png", "references.json", "roofline.png",
        "speedup.png", "step1.json", "step3.json"]
    refs = references.load(gpu_dir)
    assert [e["key"] for e in refs["references"]] == ["cublas", "cublas_tf32", "dlight"]
    dlight = references.row(refs, "dlight", (256, 256, 256))
    assert dlight["gflops"] == pytest.approx(500.0) and dlight["host_bound"] is False
    step3 = results.load(gpu_dir / "step3.json")
    assert step3["expected_regression"] == results.expected_regressions(schedules.get_step(3).module)
    row = results.row_for(step3, 256, 256, 256)
    assert row["prior"] == {"name": "step 2", "gflops": 2000.0} and row["speedup_vs_prior"] == pytest.approx(1.5)
    assert results.row_for(step3, 512, 512, 512)["speedup_vs_prior"] is None  # its prior failed
    step1 = results.load(gpu_dir / "step1.json")
    assert results.row_for(step1, 256, 256, 256)["prior"]["name"] == "numpy (CPU)"
    assert results.row_for(step1, 256, 256, 256)["cublas_gflops"] == pytest.approx(harness.flops(256, 256, 256) / 1e6)

    with open(gpu_dir / "ladder.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["step"], r["M"]) for r in table] == [("1", "256"), ("1", "512"), ("3", "256"), ("3", "512")]
    assert float(table[2]["gflops"]) == 3000.0 and float(table[2]["intensity_flop_per_byte"]) > 0
    assert table[3]["expected_regression"] and not table[2]["expected_regression"]  # 512 marked, 256 not

    machine = json.loads((gpu_dir / "machine.json").read_text())
    assert machine["bandwidth_gbs"] == 3000.0
    assert machine["fp32_peak_gflops"] == pytest.approx(100 * 128 * 2 * 1500e6 / 1e9)
    assert "1500" in machine["fp32_peak_method"] and machine["bandwidth_method"] == "fake copy"
    assert "README.md" not in out  # a results folder other than results/ leaves the README alone

    table_lines = out.splitlines()
    assert any(line.startswith("2. register tiling") and "FAILED" in line for line in table_lines)
    assert not list(gpu_dir.glob(".*.tmp"))


def test_ladder_range_measures_the_first_prior_but_saves_only_the_range(fake_gpu, tmp_path):
    code = ladder.main(["--steps", "3-4", "--sizes", "256", "--save", "--results-dir", str(tmp_path),
                        "--references", "cublas"])
    assert code == 0
    assert FakeRunner.calls == [(2, 256), (3, 256), (4, 256)]
    gpu_dir = tmp_path / "nvidia-fake-g100"
    assert sorted(p.name for p in gpu_dir.glob("step*.json")) == ["step3.json", "step4.json"]
    step3 = results.load(gpu_dir / "step3.json")
    assert results.row_for(step3, 256, 256, 256)["speedup_vs_prior"] == pytest.approx(1.5)


def test_ladder_without_save_writes_nothing(fake_gpu, tmp_path, capsys):
    assert ladder.main(["--steps", "2", "--sizes", "256", "--results-dir", str(tmp_path)]) == 0
    assert list(tmp_path.iterdir()) == []
    out = capsys.readouterr().out
    assert "2. register tiling" in out and "2.00x" in out  # 2000 over step 1's 1000, same run


def test_ladder_compare_flags_a_drop(fake_gpu, tmp_path, capsys):
    assert ladder.main(["--steps", "4-5", "--sizes", "256", "--save", "--results-dir", str(tmp_path)]) == 0
    FakeRunner.gflops = {5: 4000.0}  # step 5 now 4000 against a saved 5000: -20%
    code = ladder.main(["--steps", "4-5", "--sizes", "256", "--compare", str(tmp_path / "nvidia-fake-g100")])
    out = capsys.readouterr().out
    assert code == 1
    step5 = out[out.index("step 5 (registers): before"):]
    assert "5000" in step5 and "4000" in step5 and "0.800x" in step5 and "DROP > 15%" in step5
    step4 = out[out.index("step 4 (cooperative fetch): before"):out.index("step 5 (registers): before")]
    assert "1.000x" in step4 and "DROP" not in step4


def test_compare_refuses_a_host_bound_measurement(fake_gpu, tmp_path, capsys):
    """The gate's other side: a drop measured while host-bound is not a kernel-time drop."""
    assert ladder.main(["--steps", "5", "--sizes", "256", "--save", "--results-dir", str(tmp_path)]) == 0
    FakeRunner.gflops = {5: 4000.0}  # -20%, but ...
    FakeRunner.host_us = {5: 1e6}  # ... the host took far longer than the kernel per launch
    code = ladder.main(["--steps", "5", "--sizes", "256", "--compare", str(tmp_path / "nvidia-fake-g100")])
    out = capsys.readouterr().out
    assert code == 0
    line = next(line for line in out.splitlines() if line.strip().startswith("256x256x256") and "not compared" in line)
    assert "host-bound now" in line and "DROP" not in line
    assert f"4000{options.HOST_MARK}" in out and options.HOST_LEGEND in out


def test_save_without_bandwidth_still_saves_steps_and_skips_roofline(fake_gpu, tmp_path, monkeypatch, capsys):
    def no_copy(arch, **kw):
        raise RuntimeError("cudaErrorLaunchFailure")

    monkeypatch.setattr(roofline, "measure_bandwidth", no_copy)
    assert ladder.main(["--steps", "1", "--sizes", "256", "--save", "--results-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    gpu_dir = tmp_path / "nvidia-fake-g100"
    assert (gpu_dir / "step1.json").exists() and not (gpu_dir / "machine.json").exists()
    assert "machine.json not saved" in err and "skipped roofline.png" in out


def test_csv_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ladder.csv"
    results.write_text_atomic(path, "old\n")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(results.os, "replace", fail)
    with pytest.raises(OSError):
        results.write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["ladder.csv"]


# --- --compare for one step ---------------------------------------------------------------------


def test_compare_step_against_a_file(fake_gpu, tmp_path, capsys):
    from .test_results import _doc

    doc = _doc(step=4, environment={"gpu": "NVIDIA Fake G100", "date": "2026-11-21T00:00:00+00:00"})
    doc["results"][0].update(gflops=4400.0, config=schedules.get_step(4).default_config(512, 512, 512).as_dict())
    results.write_atomic(tmp_path / "step4.json", doc)
    assert cli.main(4, ["--compare", str(tmp_path / "step4.json")]) == 0  # 4000 vs 4400: -9%, not flagged
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("512x512x512"))
    assert line.split()[1:4] == ["4400", "4000", "0.909x"] and "DROP" not in line
    assert FakeRunner.calls == [(4, 512)]  # the saved sizes, only the step itself
    FakeRunner.gflops = {4: 3000.0}
    assert cli.main(4, ["--compare", str(tmp_path)]) == 1  # a folder works too; -32% is flagged
    assert "DROP > 15%" in capsys.readouterr().out


def test_config_times_the_changed_config_and_the_prior_at_its_own(fake_gpu, tmp_path, capsys):
    tuned = {n: schedules.get_step(n).default_config(256, 256, 256) for n in (3, 4)}
    assert cli.main(4, ["--sizes", "256", "--config", "vector=2"]) == 0
    assert "config: step 4's tuned config with vector=2 (--config); step 3 at its own" in capsys.readouterr().out
    assert FakeRunner.configs == [(4, 256, dataclasses.replace(tuned[4], vector=2)), (3, 256, tuned[3])]
    # --compare times the changed config against the saved one
    from .test_results import _doc

    doc = _doc(step=4, environment={"gpu": "NVIDIA Fake G100", "date": "2026-11-21T00:00:00+00:00"})
    doc["results"][0].update(gflops=4400.0, config=schedules.get_step(4).default_config(512, 512, 512).as_dict())
    results.write_atomic(tmp_path / "step4.json", doc)
    FakeRunner.configs = []
    assert cli.main(4, ["--compare", str(tmp_path / "step4.json"), "--config", "vector=2"]) == 0
    assert FakeRunner.configs == [(4, 512, dataclasses.replace(schedules.get_step(4).default_config(512, 512, 512),
                                                               vector=2))]


@pytest.mark.parametrize("content, words", [
    (None, ["does not exist"]),
    ("{not json", ["not a results file"]),
    (json.dumps({"schema": 1}), ["not a results file", "lacks"]),
])
def test_compare_bad_file_is_one_line_exit_2(tmp_path, content, words, capsys):
    path = tmp_path / "step4.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(4, ["--compare", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m steps.step4: error: --compare:")
    for w in words:
        assert w in lines[0]


def test_compare_other_steps_file_is_rejected():
    path = results.RESULTS_DIR / "nvidia-h200" / "step5.json"
    with pytest.raises(options.UsageError, match="holds step 5's results, not step 4's"):
        compare.load_before(path, 4)


def test_comparison_ratio_and_flag():
    ok = compare.Comparison((512,) * 3, before=1000.0, after=900.0)
    bad = compare.Comparison((512,) * 3, before=1000.0, after=840.0)
    failed = compare.Comparison((512,) * 3, before=1000.0, after=None, error="boom")
    assert ok.ratio == pytest.approx(0.9) and not ok.bad
    assert bad.dropped and bad.bad
    assert failed.ratio is None and failed.bad


# --- expected regressions: from the step module into stepN.json, read by the gate ----------------


def test_document_carries_the_expected_regressions():
    step3, step4 = schedules.get_step(3), schedules.get_step(4)
    rows = [_row(step3, (2048,) * 3, 3000.0, prior_gflops=17000.0)]
    doc = cli.document(step3, rows, {"gpu": GPU_NAME, "date": "2026-12-01"}, 30)
    assert set(doc["expected_regression"]) >= {"2048"}
    assert "every thread" in doc["expected_regression"]["2048"]
    results.validate(doc)
    assert cli.document(step4, [_row(step4, (2048,) * 3, 1.0)], {"gpu": GPU_NAME, "date": "x"}, 30)[
        "expected_regression"] == {}


GPU_NAME = "NVIDIA Fake G100"


def test_expected_regression_lookup():
    from .test_results import _doc

    module = schedules.get_step(3).module
    old = _doc(step=3)  # written before the field existed: the module decides
    assert "expected_regression" not in old
    assert "compute_at" in results.expected_regression(old, 2048, 2048, 2048, module)
    assert results.expected_regression(old, 2048, 2048, 2048) is None
    marked = _doc(step=3, expected_regression={"2048": "why", "512x1024x256": "odd"})
    assert results.expected_regression(marked, 2048, 2048, 2048, module) == "why"
    assert results.expected_regression(marked, 512, 1024, 256) == "odd"
    assert results.expected_regression(_doc(step=3, expected_regression={}), 2048, 2048, 2048, module) is None
    with pytest.raises(results.ResultsError, match="expected_regression"):
        results.validate(_doc(expected_regression={"2048": ""}))
    with pytest.raises(results.ResultsError, match="expected_regression"):
        results.validate(_doc(expected_regression=["2048"]))


def test_the_committed_h200_gate_skips_steps_3_14_19_and_21_only():
    """What tests/test_gpu.py's step-over-step gate will decide at 2048 on an H200: step 3 (the
    unshared copy), steps 14 and 19 (three TF32 products) and step 21 (a cluster's blocks wait
    for each other at 2048 and below; committed for the H200 on 2026-11-28) are slower than their
    priors by design; step 12's mark covers 512 and 1024 only, steps 15's and 17's small sizes."""
    marked = []
    for step in schedules.STEPS[1:]:
        doc = results.committed("NVIDIA H200", step.number)
        if doc is not None and results.expected_regression(doc, 2048, 2048, 2048, step.module):
            marked.append(step.number)
    assert marked == [3, 14, 19, 21]
