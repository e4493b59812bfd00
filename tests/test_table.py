"""The README's tables are generated from results/, and they are in sync with them."""

import json
import subprocess
import sys

import pytest

from steps import results
from steps.measure import references
from steps.report import table

from .checks import one_line_error
from .test_results import _doc


def _save_steps(root, gpu="NVIDIA H200", date="2026-11-21T00:00:00+00:00", schema=2, cublas_bound=False):
    for step, gflops in ((4, 13000.0), (5, 14000.0)):
        doc = _doc(step=step, name=f"step{step}", schema=schema, environment={"gpu": gpu, "date": date})
        doc["results"][0].update(gflops=gflops, speedup_vs_prior=1.5, cublas_gflops=20000.0, pct_cublas=65.0,
                                 cublas_host_bound=cublas_bound)
        results.write_atomic(results.step_path(root, gpu, step), doc)
    return root / results.gpu_slug(gpu)


def _save_references(gpu_dir, dlight_bound=False):
    def row(gflops, bound=False):
        return [{"M": 512, "N": 512, "K": 512, "median_ms": 0.01, "min_ms": 0.01, "max_ms": 0.01,
                 "gflops": gflops, "rel_err": 1e-7, "host_us": 1.0, "host_bound": bound}]

    references.save(gpu_dir / "references.json", {
        "schema": references.SCHEMA, "environment": {}, "method": {}, "references": [
            {"key": "cublas", "results": row(20000.0)},
            {"key": "cublas_tf32", "results": row(40000.0)},
            {"key": "dlight", "results": row(7000.0, dlight_bound)},
            {"key": "metaschedule", "results": row(10000.0), "tuning": {"trials": 128}},
        ]})


def test_render_steps_and_reference_rows(tmp_path):
    gpu_dir = _save_steps(tmp_path)
    _save_references(gpu_dir)
    text = table.render(tmp_path)
    assert "**NVIDIA H200**" in text and "2026-11-21" in text and "median kernel time" in text
    assert "| 4. step4 | 13.0 | 1.50× | 65% |" in text
    assert "| 5. step5 | 14.0 | 1.50× | 65% |" in text
    assert "| *cuBLAS fp32 (TF32 off)* | 20.0 |  | 100% |" in text
    assert "| *cuBLAS TF32 (reduced precision)* | 40.0 |  | 200% |" in text
    assert "| *TVM MetaSchedule (128 trials)* | 10.0 |  | 50% |" in text
    assert "never the fp32 baseline" in text
    # the final step against each reference, from the same run: 14000 / 7000 and / 10000
    assert "**Step 5 (fp32 on CUDA cores) against each reference**" in text
    assert "TVM dlight (default schedule) 2.00×" in text and "TVM MetaSchedule (128 trials) 1.40×" in text
    # ... and against the step of its kind before it, same run: 14000 / 13000
    assert "TVM MetaSchedule (128 trials) 1.40×; step 4 1.08×." in text
    assert table.MARK not in text  # nothing host-bound


def test_host_bound_numbers_carry_the_mark(tmp_path):
    gpu_dir = _save_steps(tmp_path, cublas_bound=True)
    _save_references(gpu_dir, dlight_bound=True)
    text = table.render(tmp_path)
    assert f"| 4. step4 | 13.0 | 1.50× | 65%{table.MARK} |" in text
    assert f"| *TVM dlight (default schedule)* | 7.0{table.MARK} |" in text
    assert f"{table.MARK} host-bound" in text
    # and so does a ratio of the final step against a host-bound reference (14000 / 7000), and
    # one of a host-bound step against a reference that is not (14000 / 10000)
    assert f"TVM dlight (default schedule) 2.00×{table.MARK}" in text
    assert "TVM MetaSchedule (128 trials) 1.40×; step 4 1.08×." in text
    doc = json.loads(results.step_path(tmp_path, "NVIDIA H200", 5).read_text())
    doc["results"][0]["host_bound"] = True
    results.write_atomic(results.step_path(tmp_path, "NVIDIA H200", 5), doc)
    assert f"TVM MetaSchedule (128 trials) 1.40×{table.MARK}; step 4 1.08×{table.MARK}." in table.render(tmp_path)


def test_results_saved_before_the_guard_show_no_pct_cublas(tmp_path):
    _save_steps(tmp_path, schema=1)
    text = table.render(tmp_path)
    assert "Measured before the host-bound guard" in text
    assert "| 4. step4 | 13.0 | 1.50× | – |" in text
    assert "cuBLAS through `cupy.matmul` (host-bound at 512³), TFLOPS: 512: 20.0" in text


def test_the_readme_shows_the_gpu_measured_last_and_links_the_others(tmp_path):
    _save_steps(tmp_path, gpu="NVIDIA H200", date="2026-11-21T00:00:00+00:00")
    _save_steps(tmp_path, gpu="NVIDIA H100 80GB HBM3", date="2026-11-22T00:00:00+00:00")
    text = table.render(tmp_path)
    assert text.startswith("**NVIDIA H100 80GB HBM3**") and "**NVIDIA H200**" not in text
    assert f"[NVIDIA H200]({(tmp_path / 'nvidia-h200' / 'README.md').as_posix()}) (measured 2026-11-21)" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{table.BEGIN}\nold\n{table.END}\n{table.CHECK_BEGIN}\nold\n{table.CHECK_END}\n")
    assert table.update_readme(readme, tmp_path)
    page = (tmp_path / "nvidia-h200" / "README.md").read_text()
    assert page.startswith("# NVIDIA H200: the ladder, measured") and "| 4. step4 | 13.0 |" in page
    assert not (tmp_path / "nvidia-h100-80gb-hbm3" / "README.md").exists()
    assert "No cross-check committed yet" in readme.read_text()
    assert not table.update_readme(readme, tmp_path)  # a second run changes nothing
    # A cross-check of the older GPU only: the README shows it, naming its GPU, rather than none.
    _save_crosscheck(tmp_path / "nvidia-h200")
    assert table.update_readme(readme, tmp_path)
    block = readme.read_text().split(table.CHECK_BEGIN, 1)[1].split(table.CHECK_END, 1)[0]
    assert block.strip().startswith("NVIDIA H200, 2026-11-21:") and "| step 10 | 512 | 1 |" in block


def test_the_readme_prefers_the_gpu_with_the_shape_set(tmp_path):
    # the H100 measured first but with the benchmark shape set: the ladder table shows it, as the
    # shape block below it does, rather than the GPU measured last
    _save_steps(tmp_path, gpu="NVIDIA H100 80GB HBM3", date="2026-11-21T00:00:00+00:00")
    _save_steps(tmp_path, gpu="NVIDIA H200", date="2026-11-22T00:00:00+00:00")
    assert table.render(tmp_path).startswith("**NVIDIA H200**")
    (tmp_path / "nvidia-h100-80gb-hbm3" / "shapes.json").write_text("{}")
    text = table.render(tmp_path)
    assert text.startswith("**NVIDIA H100 80GB HBM3**") and "[NVIDIA H200](" in text


def test_shape_block_falls_back_to_the_newest_gpu_that_has_one(tmp_path, monkeypatch):
    from steps.results import shapes

    _save_steps(tmp_path, gpu="NVIDIA H200", date="2026-11-21T00:00:00+00:00")
    _save_steps(tmp_path, gpu="NVIDIA H100 80GB HBM3", date="2026-11-22T00:00:00+00:00")
    _save_steps(tmp_path, gpu="NVIDIA A100", date="2026-11-20T00:00:00+00:00")
    seen = []
    monkeypatch.setattr(table, "shapes_summary", lambda doc, gpu_dir, base=None: f"shapes of {gpu_dir.name}")
    have = {"nvidia-h200", "nvidia-a100"}  # not the H100, measured last

    def load(gpu_dir):
        seen.append(gpu_dir.name)
        return {"gpu": gpu_dir.name} if gpu_dir.name in have else None

    monkeypatch.setattr(shapes, "load", load)
    assert table.render_shapes(tmp_path) == "shapes of nvidia-h200"
    # newest first, stops at the first found; then that GPU's other precisions (none here)
    assert seen == ["nvidia-h100-80gb-hbm3", "nvidia-h200", "tf32", "fp16", "bf16"]
    have.clear()
    assert "_No shape benchmark committed yet" in table.render_shapes(tmp_path)


def _save_crosscheck(gpu_dir):
    checks = [{"label": "cuBLAS fp32", "M": 512, "N": 512, "K": 512, "kernels_per_call": 2, "harness_ms": 0.0127,
               "ncu_ms": 0.0148, "ratio": 0.858, "agrees": False, "error": None},
              {"label": "step 10", "M": 512, "N": 512, "K": 512, "kernels_per_call": 1, "harness_ms": 0.0111,
               "ncu_ms": 0.0113, "ratio": 0.983, "agrees": True, "error": None}]
    (gpu_dir / "crosscheck.json").write_text(json.dumps(
        {"environment": {"gpu": "NVIDIA H200", "date": "2026-11-21T00:00:00"}, "method": {"calls": 20},
         "checks": checks}))


def test_crosscheck_block(tmp_path):
    _save_crosscheck(_save_steps(tmp_path))
    text = table.render_crosscheck(tmp_path)
    assert "| cuBLAS fp32 | 512 | 2 | 12.70 | 14.80 | 0.858 **(> 5%)** |" in text
    assert "| step 10 | 512 | 1 | 11.10 | 11.30 | 0.983 |" in text and "1 of 2 within 5%." in text


def test_render_without_results(tmp_path):
    assert "No results committed yet" in table.render(tmp_path)


def test_readme_tables_match_committed_results():
    text = table.README.read_text()
    inside = text.split(table.BEGIN, 1)[1].split(table.END, 1)[0].strip()
    assert inside == table.render().strip(), "README table is stale: run python -m steps.table --readme"
    measured, base = table.MEASURED.read_text(), table.MEASURED.parent
    check = measured.split(table.CHECK_BEGIN, 1)[1].split(table.CHECK_END, 1)[0].strip()
    assert check == table.render_crosscheck().strip(), "docs/measured.md's cross-check is stale: python -m steps.table --readme"
    shapes = measured.split(table.SHAPES_BEGIN, 1)[1].split(table.SHAPES_END, 1)[0].strip()
    assert shapes == table.render_shapes(base=base).strip(), "docs/measured.md's shapes are stale: python -m steps.table --readme"
    special = measured.split(table.SPECIAL_BEGIN, 1)[1].split(table.SPECIAL_END, 1)[0].strip()
    assert special == table.render_special().strip(), "docs/measured.md's special values are stale: python -m steps.table --readme"


def _readme_lines() -> tuple[int, int]:
    """(hand-written lines, the line "## Set up" is on): every line outside the generated ladder
    block counts, blank ones too, the block's markers with the block."""
    lines = table.README.read_text().splitlines()
    begin = next(i for i, line in enumerate(lines) if line == table.BEGIN)
    end = next(i for i, line in enumerate(lines) if line == table.END)
    setup = next(i for i, line in enumerate(lines, 1) if line.startswith("## Set up"))
    return len(lines) - (end - begin + 1), setup


def test_the_readme_is_short_and_starts_with_setting_up():
    """A newcomer's README: set-up within the first 60 lines, at most 120 hand-written lines;
    measurements and their histories live in docs/ (docs/measured.md)."""
    hand, setup = _readme_lines()
    assert setup <= 60, f"## Set up starts on line {setup}"
    assert hand <= 120, f"{hand} hand-written lines in README.md"
    text = table.README.read_text()
    for block in (table.CHECK_BEGIN, table.SHAPES_BEGIN, table.SPECIAL_BEGIN):
        assert block not in text and block in table.MEASURED.read_text(), block


def test_links_in_a_block_are_relative_to_its_document(tmp_path):
    """The shape block's plot and shapes.toml links work from docs/ as from the README's folder."""
    readme_block = table.render_shapes()
    docs_block = table.render_shapes(base=table.MEASURED.parent)
    assert "](bench/shapes.toml)" in readme_block and "](../bench/shapes.toml)" in docs_block
    assert "](results/" in readme_block and "](../results/" in docs_block


def test_other_gpu_pages_match_committed_results():
    by_gpu = table._gpu_dirs(results.RESULTS_DIR)
    others = [slug for slug in by_gpu if slug != table.primary_gpu(by_gpu)]
    assert others, "results/ holds one GPU: the README shows it, no page to check"
    for slug in others:
        page = results.RESULTS_DIR / slug / "README.md"
        assert page.read_text() == table.gpu_page(results.RESULTS_DIR, slug, by_gpu[slug]), slug
    assert not (results.RESULTS_DIR / table.primary_gpu(by_gpu) / "README.md").exists()


def test_a_gpu_page_shows_each_precisions_shape_benchmark(tmp_path):
    # A GPU measured in 16 bits and TF32 alone (no fp32 shapes.json) still shows its rows, each
    # block against its own cuBLAS and with its own plot.
    gpu_dir = tmp_path / "results" / "nvidia-h200"
    for precision in ("tf32", "bf16"):
        (gpu_dir / precision).mkdir(parents=True)
        src = results.RESULTS_DIR / "nvidia-h200" / precision
        for name in ("shapes.json", "shapes.png"):
            (gpu_dir / precision / name).write_bytes((src / name).read_bytes())
    # bf16's rows say they were timed from CUDA graphs (steps.bench --graph); TF32's, made a
    # time_evaluator run here, do not.
    tf32 = json.loads((gpu_dir / "tf32" / "shapes.json").read_text())
    tf32["method"]["timer"] = "time_evaluator (TVM kernels) and a replayed CUDA graph (cuBLAS)"
    (gpu_dir / "tf32" / "shapes.json").write_text(json.dumps(tf32))
    bf16 = json.loads((gpu_dir / "bf16" / "shapes.json").read_text())
    bf16["method"]["timer"] = "CUDA events around replays of a CUDA graph (--graph)"
    (gpu_dir / "bf16" / "shapes.json").write_text(json.dumps(bf16))
    docs = table._gpu_dirs(results.RESULTS_DIR)["nvidia-h200"]
    page = table.gpu_page(tmp_path / "results", "nvidia-h200", docs)
    tf32_at, bf16_at = page.index("against cuBLAS TF32 in the same run"), page.index("against cuBLAS bf16")
    assert "## The benchmark shape set" in page and tf32_at < bf16_at and "against cuBLAS fp16" not in page
    assert "× cuBLAS TF32, grouped by class](tf32/shapes.png)" in page[tf32_at:bf16_at]
    assert "](bf16/shapes.png)" in page[bf16_at:]
    graph = "`python -m steps.bench --graph`): "
    assert page.count(graph) == 1 and tf32_at < page.index(graph) < bf16_at


def test_bad_input_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "steps.table", "--bogus"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    one_line_error(proc.stderr, "steps.table", "unrecognized arguments: --bogus")


def test_tf32_steps_and_expected_regressions_are_marked(tmp_path):
    """A TF32 step's % cuBLAS is of cuBLAS TF32 (marked ᵀ); a step slower than its prior by
    design carries ↓ and its reason; each kind of step gets its own line against its peers."""
    gpu = "NVIDIA H200"
    for step, gflops, speedup, extra in (
        (13, 160000.0, 2.7, {"precision": "tf32", "tensor_cores": True, "baseline": "cublas_tf32"}),
        (14, 53000.0, 0.33, {"precision": "fp32", "tensor_cores": True, "baseline": "cublas",
                             "expected_regression": {"512": "three TF32 products per product"}}),
    ):
        doc = _doc(step=step, name=f"step{step}", schema=2, environment={"gpu": gpu, "date": "2026-11-22T00:00:00+00:00"})
        doc.update(extra)
        pct = 400.0 if step == 13 else 265.0
        doc["results"][0].update(gflops=gflops, speedup_vs_prior=speedup, cublas_gflops=40000.0, pct_cublas=pct,
                                 cublas_host_bound=False)
        results.write_atomic(results.step_path(tmp_path, gpu, step), doc)
    _save_references(tmp_path / results.gpu_slug(gpu))
    text = table.render(tmp_path)
    assert "| 13. step13 | 160.0 | 2.70× | 400%ᵀ |" in text
    assert "| 14. step14 | 53.0 | 0.33×↓ | 265% |" in text
    assert "↓ step 14, slower than its prior by design: three TF32 products per product." in text
    assert "**Step 13 (TF32 on tensor cores) against each reference**" in text and "cuBLAS TF32 (reduced precision) 4.00×" in text
    assert "**Step 14 (fp32-accurate on tensor cores) against each reference**" in text
    assert "cuBLAS fp32 (TF32 off) 2.65×" in text
    assert "MetaSchedule (128 trials) 5.30×." in text  # no step of its kind before it here


def test_a_step_from_another_run_is_compared_with_its_own_baseline_only(tmp_path):
    """The "against each reference (same run)" line: a step measured in a later run than the
    references file (steps 20-22 beside the 2026-11-25 ladder) uses the cuBLAS timed beside it in
    its own rows, and no other reference."""
    gpu = "NVIDIA H200"
    doc = _doc(step=13, name="step13", schema=2, environment={"gpu": gpu, "date": "2026-11-27T20:49:19+00:00"})
    doc.update(precision="tf32", tensor_cores=True, baseline="cublas_tf32")
    doc["results"][0].update(gflops=160000.0, speedup_vs_prior=2.7, cublas_gflops=80000.0, pct_cublas=200.0,
                             cublas_host_bound=False)
    results.write_atomic(results.step_path(tmp_path, gpu, 13), doc)
    gpu_dir = tmp_path / results.gpu_slug(gpu)
    _save_references(gpu_dir)
    refs = json.loads((gpu_dir / "references.json").read_text())
    refs["environment"] = {"gpu": gpu, "date": "2026-11-25T03:00:19+00:00"}
    (gpu_dir / "references.json").write_text(json.dumps(refs))
    text = table.render(tmp_path)
    assert "cuBLAS TF32 (reduced precision) 2.00×" in text  # 160 / its own 80, not the file's 40
    assert "measured 2026-11-27" in text
    # The same run (one timestamp): the references file's row.
    refs["environment"]["date"] = "2026-11-27T20:49:19+00:00"
    (gpu_dir / "references.json").write_text(json.dumps(refs))
    assert "cuBLAS TF32 (reduced precision) 4.00×" in table.render(tmp_path)
