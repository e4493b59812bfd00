"""tools/device_hold.sh: what a device call need not carry leaves the tree and comes back."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "device_hold.sh"


def _repo(tmp_path, files: dict):
    """A git repository of `files` ({path: text}) and the hold folder: (repo, hold, run(*args, also=""))."""
    repo, hold = tmp_path / "repo", tmp_path / "hold"
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)

    def run(*a, also=""):
        return subprocess.run(["bash", str(SCRIPT), *a], cwd=repo, capture_output=True, text=True,
                              env={"HOLD": str(hold), "PATH": "/usr/bin:/bin", "ALSO": also})
    return repo, hold, run


def _files(repo):
    return sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_plots_csvs_and_evidence_go_out_and_come_back(tmp_path):
    files = {"a.py": "code", "results/g/shapes.png": "png", "results/g/shapes.csv": "csv",
             "results/g/evidence/probe.txt": "ev", "results/g/shapes.json": "{}"}
    repo, hold, run = _repo(tmp_path, files)
    out = run("out")
    assert out.returncode == 0 and "moved 3 files" in out.stdout
    assert _files(repo) == ["a.py", "results/g/shapes.json"]  # what the GPU's commands read stays
    assert run("out").returncode == 2  # a second 'out' would mix two holds
    (repo / "results/g/shapes.png").write_text("new")  # a call's result brought back first wins
    assert run("back").returncode == 0 and not hold.exists()
    assert {n: (repo / n).read_text() for n in files} == {**files, "results/g/shapes.png": "new"}
    assert run("back").returncode == 2 and run("sideways").returncode == 2


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_also_moves_one_gpus_results_folder(tmp_path):
    files = {"a.py": "code", "results/h100/step1.json": "{}", "results/h100/model.txt": "t",
             "results/h200/step1.json": "{}", "docs/x.md": "d"}
    repo, hold, run = _repo(tmp_path, files)
    for bad in ("results/none", "results/h100/x", "elsewhere"):
        assert run("out", also=bad).returncode == 2 and not hold.exists()
    out = run("out", also="docs results/h100")
    assert out.returncode == 0 and "moved 3 files" in out.stdout
    assert _files(repo) == ["a.py", "results/h200/step1.json"]
    assert run("back").returncode == 0 and {n: (repo / n).read_text() for n in files} == files
