"""python -m steps.special's plumbing on the CPU: the data classes are what they say, the scores
and the contract's two checks fail and pass where they should (fake results on both sides),
the document round-trips, and the command's bad input is one line and exit 2.

The suite itself, on a GPU: tests/test_gpu_special.py and results/<gpu>/special_values.json.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import schedules
from steps.commands import special as command
from steps.measure import harness
from steps.measure import special as data
from steps.report import special as report
from steps.results import ResultsError
from steps.results import special

from .checks import one_line_error


# --- the data classes ----------------------------------------------------------------------------


def _magnitudes(x: np.ndarray) -> np.ndarray:
    x = np.abs(x[np.isfinite(x) & (x != 0)].astype(np.float64))
    return np.log2(x)


@pytest.mark.parametrize("e", data.SCALES)
def test_scale_classes_put_both_operands_at_their_power_of_two(e):
    a, b = data.operands(data.BY_NAME[f"scale 2^{e}"], 64, seed=1)
    for x in (a, b):
        assert x.dtype == np.float32 and x.shape == (64, 64)
        logs = _magnitudes(x)
        assert logs.max() < e and np.median(logs) > e - 3


def test_the_low_scales_make_the_products_subnormal():
    """2^-64: every product below fp32's smallest normal, 2^-126, where a flushing kernel
    returns zero; 2^-70: products near 2^-140, below the subnormal range's first bits."""
    a, b = data.operands(data.BY_NAME["scale 2^-64"], 64, seed=2)
    products = np.abs(a[:, :1].astype(np.float64) * b[:1, :].astype(np.float64))
    assert np.all(products < 2.0**-126)
    ref = data.reference(a, b)
    assert np.all(np.abs(ref[ref != 0]) < 2.0**-120)


def test_rows_span_2_to_the_120():
    a, _ = data.operands(data.BY_NAME["rows 2^-60..2^60"], 256, seed=3)
    row_max = np.log2(np.abs(a).max(axis=1))
    assert row_max.min() < -50 and row_max.max() > 50


def test_zeros_fp32_max_and_nonfinite_classes_hold_their_values():
    a, b = data.operands(data.BY_NAME["exact zeros"], 64, seed=4)
    assert np.mean(a == 0) > 0.4 and not a[1].any() and not b[:, 64 // 3].any()
    a, _ = data.operands(data.BY_NAME["fp32 max"], 64, seed=5)
    assert np.all(np.abs(a[:, 3]) == np.finfo(np.float32).max) and np.all(np.isfinite(a))
    a, b = data.operands(data.BY_NAME["inf and NaN"], 64, seed=6)
    assert a[data.POS_INF] == np.inf and a[data.NEG_INF] == -np.inf and np.isnan(b[data.NAN_AT])
    assert np.count_nonzero(~np.isfinite(a)) == 2 and np.count_nonzero(~np.isfinite(b)) == 1
    row = b[data.POS_INF[1]]
    assert b[data.ZERO_AT] == 0 and np.all(row * 8 == np.round(row * 8))  # TF32-exact where A's +inf meets B
    ref = data.reference(a, b)
    # float64's rules: +inf * 0 makes that output NaN, the NaN in B a whole column, the infinities their rows
    assert np.isnan(ref[data.POS_INF[0], data.ZERO_AT[1]]) and np.all(np.isnan(ref[:, data.NAN_AT[1]]))
    assert np.isposinf(ref[data.POS_INF[0]]).sum() + np.isneginf(ref[data.POS_INF[0]]).sum() > 40


def test_long_k_is_16_by_16_by_2_to_the_20():
    cls = data.BY_NAME["long K"]
    assert cls.shape_for(1024) == (16, 16, 1 << 20) and cls.held_to_bar
    assert not data.BY_NAME["tiny x huge"].held_to_bar  # a limit, reported, not a bar


def test_operands_are_fresh_per_seed_and_the_same_for_one_seed():
    cls = data.BY_NAME["scale 2^0"]
    a1, _ = data.operands(cls, 32, seed=7)
    a2, _ = data.operands(cls, 32, seed=7)
    a3, _ = data.operands(cls, 32, seed=8)
    assert np.array_equal(a1, a2) and not np.array_equal(a1, a3)


# --- scoring ---------------------------------------------------------------------------------


def test_score_of_an_exact_output_is_zero_and_a_flushed_one_is_one():
    a, b = data.operands(data.BY_NAME["scale 2^-64"], 64, seed=9)
    ref = data.reference(a, b)
    assert data.score(ref.astype(np.float32), ref)["rel_err"] < 1e-6
    flushed = data.score(np.zeros_like(ref, dtype=np.float32), ref)
    assert flushed["rel_err"] == pytest.approx(1.0) and flushed["pattern_equal"]


def test_score_sees_nan_where_float64_has_inf():
    a, b = data.operands(data.BY_NAME["inf and NaN"], 64, seed=10)
    ref = data.reference(a, b)
    good = ref.astype(np.float32)
    assert data.score(good, ref)["pattern_equal"]
    bad = good.copy()
    bad[np.isinf(ref)] = np.nan  # 3xTF32's inf - inf in the small half
    scored = data.score(bad, ref)
    assert not scored["pattern_equal"] and scored["rel_err"] == pytest.approx(data.score(good, ref)["rel_err"])
    bad = good.copy()
    bad[0, 0] = np.nan  # NaN where float64 is finite: the error is inf, it never passes
    assert data.score(bad, ref)["rel_err"] == float("inf")


# --- the contract, on fake rows --------------------------------------------------------------


def _row(rel_err, cublas=5e-7, pattern=True, cublas_pattern=True, impl="step14", error=None):
    return {"impl": impl, "class": "c", "rel_err": rel_err, "pattern_equal": pattern, "cublas_rel_err": cublas,
            "cublas_pattern_equal": cublas_pattern, "error": error}


@pytest.mark.parametrize("row, ok", [
    (_row(9.9e-7), True),                      # under 2x cuBLAS
    (_row(1.01e-6), False),                    # just over 2x cuBLAS (and over 1e-6)
    (_row(9e-7, cublas=1e-9), True),           # over 2x cuBLAS, but at most 1e-6
    (_row(1.1e-6, cublas=1e-9), False),
    (_row(3e-3, cublas=1.7e-3), True),         # the subnormal range: SGEMM itself is coarse
    (_row(float("inf")), False),
    (_row(None, error="launch failed"), False),
])
def test_error_bar(row, ok):
    assert special.error_ok(row) is ok


@pytest.mark.parametrize("pattern, cublas_pattern, ok", [(True, True, True), (False, True, False),
                                                         (False, False, True), (True, False, True)])
def test_pattern_bar_applies_where_cublas_keeps_float64s(pattern, cublas_pattern, ok):
    assert special.pattern_ok(_row(1e-7, pattern=pattern, cublas_pattern=cublas_pattern)) is ok


def _doc(rows, held=True):
    return {"schema": special.SCHEMA, "environment": {"gpu": "Test GPU", "date": "2026-11-24T00:00:00+00:00"},
            "method": {}, "classes": [{"name": "c", "what": "", "shape": [64, 64, 64], "held_to_bar": held}],
            "implementations": [{"key": "cublas", "short": "cuBLAS SGEMM"}, {"key": "step14", "short": "step 14"}],
            "rows": rows}


def test_failures_count_only_steps_on_classes_held_to_the_bar():
    rows = [_row(5e-7, impl="cublas"), _row(1e-3)]
    assert [r["impl"] for r in special.failures(_doc(rows))] == ["step14"]
    assert special.failures(_doc(rows, held=False)) == []
    assert special.failures(_doc([_row(5e-7, impl="cublas"), _row(6e-7)])) == []


def test_table_marks_a_miss_and_a_limit():
    text = report.render(_doc([_row(5e-7, impl="cublas"), _row(1e-3, pattern=False)]))
    assert "**1.0e-03 ✗ ✗ inf/NaN**" in text and "1 step rows miss it: step14 on c." in text
    text = report.render(_doc([_row(5e-7, impl="cublas"), _row(6e-7)], held=False))
    assert "| c (limit) | 64×64×64 | 5.0e-07 | 6.0e-07 |" in text
    assert "Every step meets it on every class held to it." in text


def test_document_validation_and_round_trip(tmp_path):
    doc = _doc([_row(5e-7, impl="cublas"), _row(6e-7)])
    assert special.validate(doc) is doc
    (tmp_path / special.JSON_NAME).write_text(json.dumps(doc))
    assert special.load(tmp_path) == doc and special.load(tmp_path / "none") is None
    with pytest.raises(ResultsError, match="lacks 'rows'"):
        special.validate({k: v for k, v in doc.items() if k != "rows"})
    with pytest.raises(ResultsError, match="no cublas rows"):
        special.validate({**doc, "implementations": doc["implementations"][1:]})
    with pytest.raises(ResultsError, match="unknown class"):
        special.validate({**doc, "rows": [{**_row(1e-7), "class": "other"}]})


# --- the command -------------------------------------------------------------------------------


def test_the_suite_runs_end_to_end_with_fake_kernels(monkeypatch, tmp_path, capsys):
    """The run's wiring, with numpy's fp32 product standing in for cuBLAS and a flushing,
    NaN-making step standing in for a broken one: the table shows it, the exit code is 1,
    --save writes whole documents."""
    def fp32(a, b):
        with np.errstate(all="ignore"):
            return (a @ b).astype(np.float32)

    def broken(self, step, a, b):
        out = fp32(a, b)
        if step.number == 14:
            out[np.abs(out) < 2.0**-100] = 0.0  # flushes
            out[np.isinf(out)] = np.nan  # and turns inf into NaN
        return out

    monkeypatch.setattr(harness, "gpu_present", lambda: True)
    monkeypatch.setattr(harness, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness, "cublas_available", lambda: True)
    monkeypatch.setattr(harness, "environment", lambda: {"gpu": "Test GPU", "date": "2026-11-24T00:00:00+00:00"})
    monkeypatch.setattr(data, "run_cublas", fp32)
    monkeypatch.setattr(data.StepKernels, "__init__", lambda self, arch: None)
    monkeypatch.setattr(data.StepKernels, "run", broken)
    classes = "scale 2^0,scale 2^-64,inf and NaN"
    assert command.main(["--steps", "11,14", "--classes", classes, "--size", "64"]) == 1
    out = capsys.readouterr().out
    assert "| scale 2^-64 | 64×64×64 |" in out and "step14 on scale 2^-64" in out and "step14 on inf and NaN" in out
    assert "step11 on" not in out
    # --save needs the whole suite; with it, both files land and hold what was printed
    monkeypatch.setattr(data, "CLASSES", tuple(data.BY_NAME[n] for n in classes.split(",")))
    monkeypatch.setattr(command, "fp32_steps", lambda: [schedules.get_step(11), schedules.get_step(14)])
    assert command.main(["--size", "64", "--save", "--results-dir", str(tmp_path)]) == 1
    doc = special.load(tmp_path / "test-gpu")
    assert {r["impl"] for r in doc["rows"]} == {"cublas", "step11", "step14"} and len(doc["rows"]) == 9
    assert (tmp_path / "test-gpu" / special.TABLE_NAME).read_text().count("| scale 2^") == 2


@pytest.mark.parametrize("args, words", [
    (["--steps", "13"], ["step 13 computes in TF32"]),
    (["--steps", "99"], ["unknown step 99"]),
    (["--classes", "bogus"], ["unknown data class 'bogus'", "--list"]),
    (["--size", "8"], ["--size", ">= 16"]),
    (["--save", "--steps", "11"], ["--save records the whole contract"]),
    (["--bogus"], ["unrecognized arguments"]),
])
def test_bad_input_is_one_line_exit_2(capsys, args, words):
    assert command.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_line_error(err, "steps.special", *words)


def test_without_a_gpu_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(harness, "gpu_present", lambda: False)
    assert command.main([]) == 2
    one_line_error(capsys.readouterr().err, "steps.special", "no CUDA GPU found")


def test_list_names_every_class():
    proc = subprocess.run([sys.executable, "-m", "steps.special", "--list"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    assert [line.split("  ")[0].strip() for line in proc.stdout.splitlines()] == [c.name for c in data.CLASSES]
