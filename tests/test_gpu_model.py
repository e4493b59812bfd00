"""On a CUDA GPU: python -m steps.model runs the block three ways and checks each against float64
(the nn frontend always; torch's where PyTorch is installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from steps.commands import model as command

pytestmark = pytest.mark.gpu


def run(*args):
    return subprocess.run([sys.executable, "-m", "steps.model", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("frontend", ["nn", "torch"])
def test_the_model_runs_three_ways_and_passes_its_check(frontend):
    if frontend == "torch" and not command.torch_available():
        pytest.skip("PyTorch not installed: pip install torch")
    proc = run("--frontend", frontend, "--d", "256", "--tokens", "16", "512", "--rounds", "1", "--repeat", "3",
               "--seed", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "largest error" in proc.stdout and "FAILED" not in proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip().split()[:1] in (["16"], ["512"])]
    assert len(rows) == 2


def test_the_model_replayed_from_cuda_graphs_passes_its_check():
    # the first call captures the graph, the later ones replay it: the command checks both
    proc = run("--frontend", "nn", "--d", "256", "--tokens", "1", "16", "--rounds", "2", "--repeat", "3",
               "--seed", "5", "--cuda-graph")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "replayed from a CUDA graph" in proc.stdout and "FAILED" not in proc.stdout + proc.stderr


def test_several_token_counts_from_cuda_graphs_in_one_process():
    # at d 1024 the scratch of steps 11 and 25 (19 on the H100) is MiBs: before its buffers were the
    # model's tensors (schedules/integration/scratch.py), the second count faulted (illegal address)
    proc = run("--frontend", "nn", "--tokens", "1", "16", "128", "--rounds", "1", "--repeat", "3", "--seed", "1",
               "--cuda-graph")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FAILED" not in proc.stdout + proc.stderr and len(proc.stdout.splitlines()) >= 5


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_model_from_cuda_graphs_writes_only_its_own_memory(dtype):
    # compute-sanitizer's memcheck: before scratch.py, 8194 writes out of bounds at 16 tokens (fp32)
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer not on PATH")
    proc = subprocess.run(["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "3", sys.executable, "-m",
                           "steps.model", "--frontend", "nn", "--dtype", dtype, "--tokens", "16", "--rounds", "1",
                           "--repeat", "3", "--seed", "1", "--cuda-graph"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "ERROR SUMMARY: 0 errors" in proc.stdout + proc.stderr


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_swiglu_model_runs_and_passes_its_check(dtype):
    # LLaMA's gated MLP: the pair's SiLU and multiply in a kernel's store where the pick takes an epilogue
    proc = run("--mlp", "swiglu", "--frontend", "nn", "--dtype", dtype, "--d", "256", "--tokens", "16", "512",
               "--rounds", "1", "--repeat", "3", "--seed", "7")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gated MLP (SwiGLU)" in proc.stdout and "FAILED" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_16_bit_model_runs_and_passes_its_check(dtype):
    # the ladder's way with the table's 16-bit rows, dlight's, and torch eager in the dtype (where installed)
    proc = run("--dtype", dtype, "--d", "256", "--tokens", "1", "512", "--rounds", "1", "--repeat", "3", "--seed", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"d 256, {dtype}, nn frontend" in proc.stdout and "FAILED" not in proc.stdout + proc.stderr
    assert "x dlight at >= 16 tokens" in proc.stdout
