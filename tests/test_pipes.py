"""Every CLI piped into `head`: a reader that stops reading ends the program quietly, with no
BrokenPipeError traceback (steps/report/pipes.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steps import results
from steps.report.pipes import EXIT_BROKEN_PIPE

from .checks import without_progress

# Each writes to stdout without a GPU. (--help is no test: argparse swallows the error itself.)
COMMANDS = [
    ["steps.step10", "--explain"],
    ["steps.step1", "--build-only", "--sizes", "64"],
    ["steps", "--build-only", "--steps", "1", "--sizes", "64"],
    ["steps.sweep", "--step", "7", "--sizes", "1024", "--dry-run"],
    ["steps.table"],
    ["steps.bench", "--list"],
]

# steps.cublas prints only with a GPU and CuPy: run its main with the harness faked.
FAKE_CUBLAS = """
import sys
from steps.commands import cublas
from steps.measure import harness
harness.gpu_present = harness.cublas_available = lambda: True
harness.gpu_arch = lambda: "sm_90"
harness.environment = lambda: {"gpu": "NVIDIA Fake G100"}
harness.time_cublas = lambda M, N, K, repeat, seed, tf32=False: (harness.Timing(1.0, 1.0, 1.0, 1, 1, 0.5), 1e-7)
raise SystemExit(cublas.main(["--sizes", "64", "128", "--only", "cublas,cublas_tf32"]))
"""


def run_into_a_closed_pipe(args, cwd=None):
    """Run `python -m args` with stdout a pipe whose reader has already gone: what `| head`
    does once it has its lines, made deterministic (with a live reader, a short output could
    fit in the pipe's buffer before head exits, and nothing would break)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300, cwd=cwd)
    finally:
        os.close(write)


def quiet(proc) -> None:
    for word in ("Traceback", "BrokenPipeError", "Exception ignored"):
        assert word not in proc.stderr, proc.stderr
    assert without_progress(proc.stderr) == ""  # python -m steps's [n/total] lines are no complaint
    assert proc.returncode == EXIT_BROKEN_PIPE == 141


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_stdout_ends_quietly(args):
    quiet(run_into_a_closed_pipe(["-m", *args]))


def test_plot_into_a_closed_pipe(tmp_path):
    shutil.copytree(results.RESULTS_DIR / "nvidia-h200", tmp_path / "nvidia-h200")
    quiet(run_into_a_closed_pipe(["-m", "steps.plot", "--results-dir", str(tmp_path)]))


def test_cublas_into_a_closed_pipe():
    quiet(run_into_a_closed_pipe(["-c", FAKE_CUBLAS], cwd=Path(__file__).resolve().parent.parent))
