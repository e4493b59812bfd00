"""The step CLIs without a GPU: help, clean one-line errors (exit 2), build-only, explain."""

import subprocess
import sys

import pytest

from steps import cli, harness

from .checks import one_line_error

NO_GPU = not harness.gpu_present()


def run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300)


def test_help():
    proc = run("steps.step4", "--help")
    assert proc.returncode == 0
    for flag in ("--sizes", "--repeat", "--arch", "--save", "--build-only", "--explain"):
        assert flag in proc.stdout


@pytest.mark.parametrize("args, words", [
    (["--sizes", "0"], ["--sizes", ">= 1"]),
    (["--sizes", "-3"], ["--sizes"]),
    (["--sizes", "abc"], ["not an integer"]),
    (["--shape", "0", "64", "64"], ["--shape", ">= 1"]),
    (["--shape", "64", "64"], ["--shape", "3 arguments"]),
    (["--arch", "sm_75"], ["unknown arch", "sm_75"]),
    (["--repeat", "0"], ["--repeat"]),
    (["--bogus"], ["unrecognized"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    proc = run("steps.step4", *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    one_line_error(proc.stderr, "steps.step4", *words)
    assert "Traceback" not in proc.stderr


def test_build_only_summary():
    proc = run("steps.step4", "--build-only", "--sizes", "512", "1024")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "step 4: cooperative fetch" in out
    assert "512x512x512" in out and "1024x1024x1024" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("512x512x512"))
    threads, smem = row.split()[1:3]
    assert int(threads) == 128 and int(smem) == 6144


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_falls_back_to_build_only():
    proc = run("steps.step1", "--sizes", "256")
    assert proc.returncode == 0
    assert "no CUDA GPU found" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "256x256x256" in proc.stdout


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_gpu_save_is_an_error(tmp_path):
    proc = run("steps.step6", "--save", "--sizes", "256")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "python -m steps.step6: error: --save needs a CUDA GPU and none was found"


def test_explain_shows_the_diff_and_the_kernel():
    proc = run("steps.step4", "--explain", "--sizes", "256")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "--- step 3 (shared memory)" in out and "+++ step 4 (cooperative fetch)" in out
    assert any(line.startswith("+") and "threadIdx" in line for line in out.splitlines())
    assert 'extern "C" __global__' in out
    assert "#include" not in out  # TVM's preamble is dropped


def test_explain_step1_diffs_against_the_unscheduled_matmul():
    proc = run("steps.step1", "--explain", "--sizes", "64")
    assert proc.returncode == 0, proc.stderr
    assert "--- unscheduled matmul" in proc.stdout
    assert "blockIdx" in proc.stdout


def test_table_renders_rows_and_failures():
    ok = harness.Measurement(512, 512, 512, 0.02, 0.019, 0.03, 13421.8, 4e-7)
    bad = harness.Measurement(1024, 1024, 1024, error="RuntimeError: misaligned address")
    rows = [cli.Row((512, 512, 512), ok, None, "step 3", prior_gflops=6710.9, cublas_gflops=26843.5),
            cli.Row((1024, 1024, 1024), bad, None, "step 3")]
    text = cli.format_table(rows)
    assert "2.00x" in text and "50%" in text and "4.0e-07" in text
    assert "FAILED: RuntimeError: misaligned address" in text
    assert "against step 3" in text
