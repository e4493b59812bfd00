"""results/<gpu>/special_values.json: the fp32 contract, measured (``python -m steps.special``).

One row per implementation and data class (steps/measure/special.py has the classes): its
error against float64 over the entries float64 gives as finite, whether its NaN / +inf / -inf
sit where float64's do, and cuBLAS SGEMM's two on the same operands, from the same run.

The contract (issue 28), per row of a step:

- error: ``rel_err <= max(ERROR_FACTOR * cuBLAS's rel_err, ERROR_FLOOR)``: within twice what
  SGEMM gives on the same data, or at most 1e-6;
- non-finite pattern: float64's wherever cuBLAS SGEMM has float64's (where SGEMM itself
  differs, nothing is asked of the step).

A 16-bit run (``--dtype``, issue 47) writes the same document into results/<gpu>/<dtype>/, its
rows held to cuBLAS in that dtype and to a floor of the dtype's tolerance (each row's
``error_floor``), its pattern that of the float64 product rounded to the dtype.

A class marked ``held_to_bar: false`` is a limit the suite measures and reports (the table marks
it), not part of the contract. No TVM, no numpy: the document is read where neither exists.
"""

from __future__ import annotations

from pathlib import Path

from . import ResultsError, load_document

SCHEMA = "special-values-1"
JSON_NAME, TABLE_NAME = "special_values.json", "special_values.md"
BASELINE = "cublas"
ERROR_FACTOR = 2.0
ERROR_FLOOR = 1e-6
ROW_KEYS = ("impl", "class", "rel_err", "pattern_equal", "cublas_rel_err", "cublas_pattern_equal", "error")


def error_ok(row: dict) -> bool:
    if row.get("error") or row["rel_err"] is None:
        return False
    floor = row.get("error_floor", ERROR_FLOOR)  # a 16-bit run's: the dtype's tolerance
    bar = floor if row["cublas_rel_err"] is None else max(ERROR_FACTOR * row["cublas_rel_err"], floor)
    return row["rel_err"] <= bar


def pattern_ok(row: dict) -> bool:
    return not row.get("error") and (bool(row["pattern_equal"]) or not row["cublas_pattern_equal"])


def passes(row: dict) -> bool:
    return error_ok(row) and pattern_ok(row)


def failures(doc: dict) -> list[dict]:
    """The step rows of classes held to the bar that miss it."""
    held = {c["name"] for c in doc["classes"] if c.get("held_to_bar", True)}
    return [r for r in doc["rows"] if r["impl"] != BASELINE and r["class"] in held and not passes(r)]


def validate(doc: dict) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ResultsError(f"not a {SCHEMA} document")
    for key in ("environment", "method", "classes", "implementations", "rows"):
        if key not in doc:
            raise ResultsError(f"{SCHEMA} document lacks {key!r}")
    classes = {c.get("name") for c in doc["classes"]}
    impls = {i.get("key") for i in doc["implementations"]}
    if BASELINE not in impls:
        raise ResultsError(f"{SCHEMA} document has no {BASELINE} rows to hold the steps to")
    for row in doc["rows"]:
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise ResultsError(f"row lacks {', '.join(missing)}")
        if row["class"] not in classes or row["impl"] not in impls:
            raise ResultsError(f"row of an unknown class or implementation: {row['impl']} / {row['class']}")
    return doc


def load(gpu_dir: Path) -> dict | None:
    """results/<gpu>/special_values.json, validated; None when absent."""
    return load_document(gpu_dir, JSON_NAME, validate)


def rows_by(doc: dict) -> dict:
    return {(r["impl"], r["class"]): r for r in doc["rows"]}
