"""tools/rpc_scaling.py: a scaling run split over two calls (--servers 1, then --servers 2
--runs-from the first's run) reports both counts against the one-server run, on CPU servers;
--report-only joins runs of several calls into one table without running anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "rpc_scaling.py"
SWEEP = ["--candidates", "2", "--shapes", "64x64x64,33x65x129", "--cpu-test"]


def scaling(*args: str, logs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--gpus", "0,1", *args, *SWEEP, "--logs", str(logs)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_a_run_split_over_two_calls_reports_every_count_against_one_server(tmp_path):
    first = scaling("--servers", "1", logs=tmp_path / "a")
    assert first.returncode == 0, first.stderr[-2000:]
    saved = json.loads((tmp_path / "a" / "rpc-scaling-run-1.json").read_text())
    assert saved["servers"] == 1 and saved["candidates"] == 2 and len(saved["rows"]) >= 4

    second = scaling("--servers", "2", "--runs-from", str(tmp_path / "a" / "rpc-scaling-run-1.json"),
                     logs=tmp_path / "b")
    assert second.returncode == 0, second.stderr[-2000:]
    table = [line.split() for line in second.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in table[:2]] == ["1", "2"], second.stdout
    assert table[0][1] == f"{saved['wall_s']:.1f}" and table[0][2] == "1.00x"  # the first call's run is the base
    assert "winners, 2 servers against 1: 2 shapes" in second.stdout

    # Both calls' runs in one table, run nowhere: the GPU from the files, the first call's one
    # server also as the control (so its winners against the base are all the same).
    joined = scaling("--report-only", "--runs-from", str(tmp_path / "a" / "rpc-scaling-run-1.json"),
                     str(tmp_path / "b" / "rpc-scaling-run-2.json"),
                     "--control-from", str(tmp_path / "a" / "rpc-scaling-run-1.json"), logs=tmp_path / "c")
    assert joined.returncode == 0, joined.stderr[-2000:]
    assert "on CPU (llvm, a trial of the tool)" in joined.stdout and not (tmp_path / "c").exists()
    rows = [line.split() for line in joined.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [row[:3] for row in rows[:2]] == [["1", f"{saved['wall_s']:.1f}", "1.00x"], table[1][:3]]
    assert "control, one server again: " + f"{saved['wall_s']:.1f} s (+0.0% from the first); winners against " \
        "the first: 2 shapes: 2 the same winner" in joined.stdout


def test_runs_from_another_sweep_or_without_one_server_is_refused_in_one_line(tmp_path):
    run = tmp_path / "rpc-scaling-run-1.json"
    run.write_text(json.dumps({"servers": 1, "candidates": 5, "wall_s": 1.0, "rows": []}))
    other = scaling("--servers", "2", "--runs-from", str(run), logs=tmp_path)
    assert other.returncode == 2 and "ran 5 candidates a shape, this call 2" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1
    no_one = scaling("--servers", "2", logs=tmp_path)
    assert no_one.returncode == 2 and "must include 1" in no_one.stderr
    run.write_text(json.dumps({"servers": 1, "candidates": 2, "wall_s": 1.0, "rows": []}))  # no "gpu" in it
    unnamed = scaling("--report-only", "--runs-from", str(run), logs=tmp_path)
    assert unnamed.returncode == 2 and "say which with --gpu-name" in unnamed.stderr
    two = scaling("--report-only", "--runs-from", str(run), "--control-from", str(run), "--control", logs=tmp_path)
    assert two.returncode == 2 and "not with --servers, --control" in two.stderr
    both = scaling("--servers", "2", "--runs-from", str(run), "--control-from", str(run), "--control", logs=tmp_path)
    assert both.returncode == 2 and "--control-from takes a one-server run, and not with --control" in both.stderr
    servers = scaling("--report-only", "--runs-from", str(run), "--servers", "2", logs=tmp_path)
    assert servers.returncode == 2 and len(servers.stderr.strip().splitlines()) == 1


def test_a_sweep_that_stops_before_its_first_result_is_one_line_not_a_traceback(tmp_path):
    # 2026-11-28: --candidates 50 against the sweep's old limit of 25 ended in a FileNotFoundError
    # for the log the sweep never wrote, a device call spent to learn it.
    over = subprocess.run([sys.executable, str(TOOL), "--gpus", "0", "--servers", "1", "--candidates", "65",
                           "--shapes", "64x64x64", "--cpu-test", "--logs", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert over.returncode == 1 and "Traceback" not in over.stderr, over.stderr[-2000:]
    said = [line for line in over.stderr.splitlines() if line.startswith("rpc_scaling: error:")]
    assert len(said) == 1 and "--candidates must be at most 64, got 65" in said[0]
