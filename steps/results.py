"""Result files: ``results/<gpu-slug>/stepN.json``, written atomically, read by tests and plots.

Schema (version 1)::

    {"schema": 1, "step": 4, "name": "...", "idea": "...",
     "environment": {gpu, sm_count, driver, sm_clock_mhz, ..., cuda_runtime, tvm_version, date},
     "method": {"timer": ..., "repeat": 30, "tolerance": 1e-05},
     "results": [{"M", "N", "K", "config": {...}, "median_ms", "min_ms", "max_ms", "gflops",
                  "rel_err", "prior": {"name", "gflops"}, "speedup_vs_prior",
                  "cublas_gflops", "pct_cublas"}, ...]}
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

SCHEMA_VERSION = 1
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
REQUIRED_ROW_KEYS = ("M", "N", "K", "config", "median_ms", "min_ms", "max_ms", "gflops", "rel_err",
                     "prior", "speedup_vs_prior", "cublas_gflops", "pct_cublas")


class ResultsError(ValueError):
    """A results file that does not follow the schema."""


def gpu_slug(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': one folder per GPU model."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return slug or "unknown-gpu"


def step_path(results_dir: Path, gpu_name: str, step_number: int) -> Path:
    return Path(results_dir) / gpu_slug(gpu_name) / f"step{step_number}.json"


def validate(doc: dict) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_VERSION:
        raise ResultsError(f"not a schema-{SCHEMA_VERSION} results document")
    for key in ("step", "name", "environment", "method", "results"):
        if key not in doc:
            raise ResultsError(f"results document lacks {key!r}")
    if "gpu" not in doc["environment"] or "date" not in doc["environment"]:
        raise ResultsError("results environment must name the gpu and the date")
    if not doc["results"]:
        raise ResultsError("results document has no rows")
    for row in doc["results"]:
        missing = [k for k in REQUIRED_ROW_KEYS if k not in row]
        if missing:
            raise ResultsError(f"result row lacks {', '.join(missing)}")
        if not (isinstance(row["gflops"], (int, float)) and row["gflops"] > 0):
            raise ResultsError(f"result row has no positive gflops: {row['gflops']!r}")
    return doc


def write_atomic(path: Path, doc: dict) -> None:
    """Validate, then write to a temporary file beside `path` and rename it into place."""
    validate(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load(path: Path) -> dict:
    with open(path) as f:
        return validate(json.load(f))


def committed(gpu_name: str, step_number: int, results_dir: Path = RESULTS_DIR) -> dict | None:
    """The committed results of a step on this GPU model, or None if there are none."""
    path = step_path(results_dir, gpu_name, step_number)
    return load(path) if path.exists() else None


def row_for(doc: dict, M: int, N: int, K: int) -> dict | None:
    for row in doc["results"]:
        if (row["M"], row["N"], row["K"]) == (M, N, K):
            return row
    return None
