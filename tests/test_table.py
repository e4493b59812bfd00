"""The README ladder table is generated from results/, and it is in sync with them."""

import subprocess
import sys

from steps import results, table

from .checks import one_line_error
from .test_results import _doc


def test_render_from_a_fixture(tmp_path):
    for step, gflops in ((4, 13000.0), (5, 14000.0)):
        doc = _doc(step=step, name=f"step{step}")
        doc["results"][0].update(gflops=gflops, speedup_vs_prior=1.5, cublas_gflops=20000.0, pct_cublas=65.0)
        results.write_atomic(results.step_path(tmp_path, "NVIDIA H200", step), doc)
    text = table.render(tmp_path)
    assert "**NVIDIA H100 80GB HBM3**" in text and "2026-11-21" in text
    assert "| 4. step4 | 13.0 | 1.50× | 65% |" in text
    assert "| 5. step5 | 14.0 | 1.50× | 65% |" in text
    assert "cuBLAS SGEMM (TF32 off), TFLOPS: 512: 20.0" in text


def test_render_without_results(tmp_path):
    assert "No results committed yet" in table.render(tmp_path)


def test_readme_table_matches_committed_results():
    text = table.README.read_text()
    inside = text.split(table.BEGIN, 1)[1].split(table.END, 1)[0].strip()
    assert inside == table.render().strip(), "README table is stale: run python -m steps.table --readme"


def test_bad_input_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "steps.table", "--bogus"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    one_line_error(proc.stderr, "steps.table", "unrecognized arguments: --bogus")
