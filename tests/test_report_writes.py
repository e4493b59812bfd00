"""The report commands write only what they document: each is run in a copy of the tree, and any
file it adds or changes must be one its docstring names.

    python -m steps.plot            the README's GPU's PNGs, its 16-bit ladders' in their folders
                                    (steps/report/plot.py's docstring)
    python -m steps.table           nothing: it prints
    python -m steps.table --readme  the generated blocks of README.md and docs/measured.md and the
                                    other GPUs' results/<gpu>/README.md; on a committed tree nothing
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from steps.report import plot, table

ROOT = Path(__file__).resolve().parent.parent
# What the commands read and write; the packages too, so `python -m` in the copy runs the copy.
COPIED = ("README.md", "docs", "results", "bench", "steps", "schedules")


def _copy_tree(dest: Path) -> Path:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _listing(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _run(root: Path, *args: str) -> tuple[set[str], str]:
    """Run python -m ARGS in the copy; the files it added or changed, and its stdout."""
    before = _listing(root)
    proc = subprocess.run([sys.executable, "-m", *args], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    after = _listing(root)
    assert set(before) <= set(after), f"{args} removed {sorted(set(before) - set(after))}"
    return {p for p in after if before.get(p) != after[p]}, proc.stdout


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return _copy_tree(tmp_path_factory.mktemp("tree"))


def _primary_slug() -> str:
    return table.primary_gpu(table._gpu_dirs(ROOT / "results"), ROOT / "results")


def test_the_copy_runs_its_own_code(tree):
    """Otherwise the checks below would watch a copy while the command wrote into this tree."""
    proc = subprocess.run([sys.executable, "-c", "import steps, schedules; print(steps.__file__, schedules.__file__)"],
                          cwd=tree, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == [str(tree / "steps" / "__init__.py"), str(tree / "schedules" / "__init__.py")]


def documented_pngs(doc: str) -> set[str]:
    """The PNGs a docstring's list names, relative to the GPU's folder: each "- " line's leading
    names, one or a comma list ("- gflops.png", "- bf16/gflops.png, fp16/gflops.png")."""
    lines = re.findall(r"^- ((?:[\w/]+\.png, )*[\w/]+\.png)", doc, re.M)
    return {name for line in lines for name in line.split(", ")}


def test_plot_writes_only_the_readme_gpus_pngs(tree):
    documented = documented_pngs(plot.__doc__)
    assert {"gflops.png", "speedup.png", "pct_cublas.png", "roofline.png", "shapes.png"} <= documented
    assert {f"{dtype}/{name}" for dtype in ("bf16", "fp16") for name in plot.DTYPE_PLOTS} <= documented
    written, out = _run(tree, "steps.plot")
    allowed = {f"results/{_primary_slug()}/{name}" for name in documented}
    assert written <= allowed, sorted(written)  # (the committed plots re-render byte for byte)
    said = {Path(line.split(" ", 1)[1]).resolve().relative_to(tree.resolve()).as_posix()
            for line in out.splitlines() if line.startswith("wrote ")}
    assert said and said <= allowed and said >= written, out


def test_table_prints_and_writes_nothing(tree):
    written, out = _run(tree, "steps.table")
    assert not written, sorted(written)
    assert "| step |" in out


def test_table_readme_changes_nothing_on_the_committed_tree(tree):
    written, out = _run(tree, "steps.table", "--readme")
    assert not written, f"stale generated blocks: {sorted(written)} (run python -m steps.table --readme)"
    assert "already up to date" in out


def test_table_readme_rewrites_only_its_documents(tree):
    """A stale block anywhere: only README.md, docs/measured.md and results/<gpu>/README.md change."""
    for doc in ("README.md", "docs/measured.md"):
        path = tree / doc
        text = path.read_text()
        begin = table.BEGIN if doc == "README.md" else table.SHAPES_BEGIN
        path.write_text(text.replace(begin, begin + "\nstale line", 1))
    written, _ = _run(tree, "steps.table", "--readme")
    pages = {f"results/{p.parent.name}/README.md" for p in (tree / "results").glob("*/README.md")}
    assert written == {"README.md", "docs/measured.md"}, sorted(written)
    assert written <= {"README.md", "docs/measured.md"} | pages
    assert "stale line" not in (tree / "README.md").read_text() + (tree / "docs/measured.md").read_text()


def test_the_check_catches_an_undocumented_file(tree, tmp_path):
    """The checks above can fail: a command that writes one more file is caught."""
    script = tmp_path / "extra.py"
    script.write_text("from pathlib import Path\nPath('results/untracked.png').write_bytes(b'x')\n")
    before = _listing(tree)
    subprocess.run([sys.executable, str(script)], cwd=tree, check=True, timeout=60)
    written = {p for p, h in _listing(tree).items() if before.get(p) != h}
    (tree / "results" / "untracked.png").unlink()
    assert written == {"results/untracked.png"}
    assert not written <= {f"results/{_primary_slug()}/{name}" for name in ("gflops.png",)}
