"""results/<gpu>/shapes.json: the shape benchmark's document, and how it is read.

``python -m steps.bench`` (steps/commands/bench.py) measures and writes it; the README's block
(steps/report/table.py) and shapes.png (steps/report/plot.py) read it through this module, so the
rows, the ratio to the baseline, the class order, the geometric means and the bar live once,
below all three. No TVM, no GPU.

Schema ``shapes-1``: {schema, environment, method, shape_set: {path, version, sha256, complete,
classes: [{name, rationale}]}, baseline, implementations: [{key, label, step | reference, ...}],
results: [{class, M, N, K, impl, config, median_ms, min_ms, max_ms, gflops, rel_err, host_us,
host_bound, error}]}. A reference implementation with ``beside: KEY`` is the baseline timed again
in turns with implementation KEY (the fastest row; with --in-turns each step), and KEY's ratios
are to it (``baseline_row``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from . import ResultsError, load_document

SCHEMA = "shapes-1"
JSON_NAME, CSV_NAME, PLOT_NAME = "shapes.json", "shapes.csv", "shapes.png"
BAR = 0.9  # issue 13: the final CUDA-core step at >= 0.9x cuBLAS fp32 on every shape; those below are listed


# --- the document: validated, loaded ----------------------------------------------------------


class ShapesError(ResultsError):
    """A shapes.json that does not follow its schema."""


def validate(doc: dict) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ShapesError(f"not a {SCHEMA} document")
    for key in ("environment", "method", "shape_set", "baseline", "implementations", "results"):
        if key not in doc:
            raise ShapesError(f"{SCHEMA} document lacks {key!r}")
    if "gpu" not in doc["environment"] or "date" not in doc["environment"]:
        raise ShapesError("environment must name the gpu and the date")
    keys = {i.get("key") for i in doc["implementations"]}
    if not doc["results"]:
        raise ShapesError("no results")
    for row in doc["results"]:
        missing = [k for k in ("class", "M", "N", "K", "impl", "gflops", "rel_err", "host_bound", "error") if k not in row]
        if missing:
            raise ShapesError(f"result row lacks {', '.join(missing)}")
        if row["impl"] not in keys:
            raise ShapesError(f"result row of unknown implementation {row['impl']!r}")
    return doc


def load(gpu_dir: Path) -> dict | None:
    """results/<gpu>/shapes.json, validated; None when absent."""
    return load_document(gpu_dir, JSON_NAME, validate)


# A benchmark of another precision than fp32 lives in a folder of its own beside fp32's:
# results/<gpu>/tf32/shapes.json (a run of TF32 steps), results/<gpu>/bf16/ and fp16/ (--dtype).
OTHER_PRECISIONS = ("tf32", "fp16", "bf16")


def precision_of(doc: dict) -> str:
    """What a benchmark document measured: its dtype (fp16, bf16), tf32 where its baseline is
    cuBLAS TF32 (a run of TF32 steps), else fp32."""
    return doc.get("dtype") or ("tf32" if doc["baseline"] == "cublas_tf32" else "fp32")


def folder(gpu_dir: Path, precision: str) -> Path:
    """Where a benchmark of `precision` is saved for one GPU."""
    return Path(gpu_dir) if precision == "fp32" else Path(gpu_dir) / precision


# --- reading a document: ratios, geometric means, worst shapes -------------------------------------


def _shape(row: dict) -> tuple[int, int, int]:
    return row["M"], row["N"], row["K"]


def rows_by(doc: dict) -> dict:
    return {(r["impl"], _shape(r)): r for r in doc["results"]}


def shapes_in_order(doc: dict) -> list[tuple[str, tuple[int, int, int]]]:
    """(class, shape) in the document's order, once each."""
    seen: dict = {}
    for r in doc["results"]:
        seen.setdefault(_shape(r), r["class"])
    return [(c, s) for s, c in seen.items()]


def baseline_row(doc: dict, impl: str, shape, index: dict | None = None) -> dict | None:
    """The baseline's row that impl's ratio at `shape` is to: the baseline timed in turns with
    impl where the run did so (an implementation whose ``beside`` is impl), else the baseline's
    own row."""
    index = rows_by(doc) if index is None else index
    again = next((i["key"] for i in doc["implementations"] if i.get("beside") == impl), None)
    row = index.get((again, tuple(shape))) if again else None
    return row if row is not None else index.get((doc["baseline"], tuple(shape)))


def ratio(doc: dict, impl: str, shape, index: dict | None = None) -> tuple[float | None, str | None]:
    """impl's TFLOPS over the baseline's at `shape` (``baseline_row``), and why not when there is
    none to compare: a failed or missing row, or a host-bound timing on either side."""
    index = rows_by(doc) if index is None else index
    mine, base = index.get((impl, tuple(shape))), baseline_row(doc, impl, shape, index)
    if mine is None or mine.get("error"):
        return None, "failed" if mine is not None else "missing"
    if base is None or base.get("error"):
        return None, "no baseline"
    if not mine.get("gflops") or not base.get("gflops"):
        return None, "not timed"
    if mine.get("host_bound") or base.get("host_bound"):
        return mine["gflops"] / base["gflops"], "host-bound"
    return mine["gflops"] / base["gflops"], None


@dataclass
class ClassSummary:
    """One class (or the whole run): the geometric mean of the ratios that compare kernel
    time, and the worst shape among them."""

    name: str
    shapes: int = 0
    ratios: list = field(default_factory=list)  # (shape, ratio), comparable ones
    host_bound: list = field(default_factory=list)  # shapes whose ratio is left out: †
    failed: list = field(default_factory=list)  # shapes where the implementation failed

    @property
    def geomean(self) -> float | None:
        if not self.ratios:
            return None
        return math.exp(sum(math.log(r) for _, r in self.ratios) / len(self.ratios))

    @property
    def worst(self) -> tuple | None:
        return min(self.ratios, key=lambda sr: sr[1]) if self.ratios else None


ALL = "all"


def summarize(doc: dict, impl: str) -> list[ClassSummary]:
    """Per class in the document's order, then ALL over every shape."""
    index = rows_by(doc)
    by_class: dict[str, ClassSummary] = {}
    overall = ClassSummary(ALL)
    for class_name, shape in shapes_in_order(doc):
        for summary in (by_class.setdefault(class_name, ClassSummary(class_name)), overall):
            summary.shapes += 1
            value, why = ratio(doc, impl, shape, index)
            if why is None:
                summary.ratios.append((shape, value))
            elif why == "host-bound":
                summary.host_bound.append(shape)
            elif why == "failed":
                summary.failed.append(shape)
    return list(by_class.values()) + [overall]


def below_bar(doc: dict, impl: str, bar: float = BAR) -> list[tuple]:
    """(class, shape, ratio) of every shape where impl's kernel-time ratio is below `bar`, worst first."""
    index = rows_by(doc)
    out = []
    for class_name, shape in shapes_in_order(doc):
        value, why = ratio(doc, impl, shape, index)
        if why is None and value < bar:
            out.append((class_name, shape, value))
    return sorted(out, key=lambda item: item[2])


def below_bar_host_bound(doc: dict, impl: str, bar: float = BAR) -> list[tuple]:
    """(class, shape, ratio) where impl's ratio is below `bar` but a host-bound timing (†) is
    involved: not kernel time, so not judged, and listed beside the judged ones, not dropped."""
    index = rows_by(doc)
    out = []
    for class_name, shape in shapes_in_order(doc):
        value, why = ratio(doc, impl, shape, index)
        if why == "host-bound" and value < bar:
            out.append((class_name, shape, value))
    return sorted(out, key=lambda item: item[2])


def graph_timed(doc: dict) -> bool:
    """Whether the run timed every TVM kernel replayed from a CUDA graph (steps.bench --graph)."""
    return "(--graph)" in doc.get("method", {}).get("timer", "")


def title(impl: dict) -> str:
    """A step row's short name: 'step 11', or 'fastest' for the dispatch rule's row."""
    return "fastest" if impl.get("dispatch") else f"step {impl['step']}"


def step_impls(doc: dict) -> list[dict]:
    return [i for i in doc["implementations"] if "step" in i]


def max_rel_err(doc: dict, impl: str) -> float | None:
    errors = [r["rel_err"] for r in doc["results"] if r["impl"] == impl and r["rel_err"] is not None]
    return max(errors) if errors else None


# --- written: shapes.json one row a line, shapes.csv flat ------------------------------------------

CSV_FIELDS = ("gpu", "class", "M", "N", "K", "impl", "label", "gflops", "median_ms", "min_ms", "max_ms",
              "host_us", "host_bound", "rel_err", "cublas_gflops", "ratio_to_cublas", "date")


def shapes_csv(doc: dict) -> str:
    """One line per shape and implementation: the flat view of shapes.json, for a spreadsheet
    (each kernel's config, 140 characters of a step-11 row, stays in shapes.json)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    index = rows_by(doc)
    labels = {i["key"]: i["label"] for i in doc["implementations"]}
    for r in doc["results"]:
        base = baseline_row(doc, r["impl"], _shape(r), index)
        value, _ = ratio(doc, r["impl"], _shape(r), index) if r["impl"] != doc["baseline"] else (None, None)
        writer.writerow({
            "gpu": doc["environment"]["gpu"], "class": r["class"], "M": r["M"], "N": r["N"], "K": r["K"],
            "impl": r["impl"], "label": labels[r["impl"]], "gflops": _num(r["gflops"]),
            "median_ms": _num(r.get("median_ms")), "min_ms": _num(r.get("min_ms")), "max_ms": _num(r.get("max_ms")),
            "host_us": _num(r.get("host_us")), "host_bound": "" if r.get("host_bound") is None else int(r["host_bound"]),
            "rel_err": _num(r["rel_err"]), "cublas_gflops": _num(base and base.get("gflops")),
            "ratio_to_cublas": _num(value),
            "date": doc["environment"]["date"],
        })
    return out.getvalue()


def _num(value) -> str:
    return "" if value is None else f"{value:.6g}"
