"""The results layer: the files runs write and read, and their models (no TVM, no GPU).

This module is the step results, ``results/<gpu-slug>/stepN.json``, written atomically, read by
tests and plots, and the writing and the GPU folders every document shares. Beside it:
shapes.py (the shape benchmark's shapes.json), crosscheck.py (crosscheck.json) and
shapeset.py (bench/shapes.toml, the set the benchmark runs).

Schema (version 2)::

    {"schema": 2, "step": 4, "name": "...", "idea": "...",
     "environment": {gpu, sm_count, driver, sm_clock_mhz, ..., cuda_runtime, tvm_version, date},
     "method": {"timer": ..., "repeat": 30, "tolerance": 1e-05, "host_bound": ...},
     "results": [{"M", "N", "K", "config": {...}, "median_ms", "min_ms", "max_ms", "gflops",
                  "rel_err", "host_us", "host_bound", "prior": {"name", "gflops"},
                  "speedup_vs_prior", "cublas_gflops", "cublas_host_bound", "pct_cublas"}, ...],
     "expected_regression": {"2048": "why step N is slower than step N-1 there"}}

``host_us`` is the host time to submit one launch and ``host_bound`` whether it reached 70% of
the GPU time per launch (harness.is_host_bound); ``cublas_host_bound`` the same for the cuBLAS
row of that size. Version 1 files (before the guard, cuBLAS timed through ``cupy.matmul``)
still load: their rows have no guard, so ``host_bound`` reads as unknown (None) and the
regression gates refuse them like host-bound rows.

``expected_regression`` (size -> reason) is copied from the step module's
``EXPECTED_REGRESSION``; files written before it existed lack it and still load.

Precision as an axis (issue 47): the fp32 ladder's files are ``results/<gpu>/stepN.json``,
``references.json`` and ``ladder.csv``, as they always were; a 16-bit ladder's are the same
names in a folder of its dtype, ``results/<gpu>/bf16/`` and ``results/<gpu>/fp16/``
(``dtype_dir``). A 16-bit step file says ``"dtype": "bf16"``; a file without the key is fp32.
"""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
from pathlib import Path

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"
REQUIRED_ROW_KEYS = ("M", "N", "K", "config", "median_ms", "min_ms", "max_ms", "gflops", "rel_err",
                     "prior", "speedup_vs_prior", "cublas_gflops", "pct_cublas")
GUARD_ROW_KEYS = ("host_us", "host_bound", "cublas_host_bound")  # required from schema 2 on


class ResultsError(ValueError):
    """A results file that does not follow the schema."""


def gpu_slug(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': one folder per GPU model."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return slug or "unknown-gpu"


DTYPE_DIRS = ("fp16", "bf16")  # results/<gpu>/<dtype>/: the 16-bit ladders' files


def dtype_dir(gpu_dir: Path, dtype: str = "fp32") -> Path:
    """Where a ladder of `dtype` inputs keeps its files: results/<gpu>/ for fp32, as before;
    results/<gpu>/<dtype>/ for fp16 and bf16."""
    if dtype == "fp32":
        return Path(gpu_dir)
    if dtype not in DTYPE_DIRS:
        raise ResultsError(f"unknown dtype {dtype!r}")
    return Path(gpu_dir) / dtype


def doc_dtype(doc: dict) -> str:
    """The inputs' dtype a step file was measured with (fp32 for files written before issue 47)."""
    return doc.get("dtype", "fp32")


def step_path(results_dir: Path, gpu_name: str, step_number: int, dtype: str = "fp32") -> Path:
    return dtype_dir(Path(results_dir) / gpu_slug(gpu_name), dtype) / f"step{step_number}.json"


def validate(doc: dict) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") not in READABLE_SCHEMAS:
        raise ResultsError(f"not a schema-{SCHEMA_VERSION} results document")
    for key in ("step", "name", "environment", "method", "results"):
        if key not in doc:
            raise ResultsError(f"results document lacks {key!r}")
    if "gpu" not in doc["environment"] or "date" not in doc["environment"]:
        raise ResultsError("results environment must name the gpu and the date")
    if not doc["results"]:
        raise ResultsError("results document has no rows")
    for row in doc["results"]:
        required = REQUIRED_ROW_KEYS + (GUARD_ROW_KEYS if doc["schema"] >= 2 else ())
        missing = [k for k in required if k not in row]
        if missing:
            raise ResultsError(f"result row lacks {', '.join(missing)}")
        if not (isinstance(row["gflops"], (int, float)) and row["gflops"] > 0):
            raise ResultsError(f"result row has no positive gflops: {row['gflops']!r}")
    expected = doc.get("expected_regression", {})
    if not (isinstance(expected, dict) and all(isinstance(k, str) and isinstance(v, str) and v
                                               for k, v in expected.items())):
        raise ResultsError("expected_regression must map sizes (strings) to non-empty reasons")
    return doc


def write_atomic(path: Path, doc: dict) -> None:
    """Validate, then write to a temporary file beside `path` and rename it into place."""
    validate(doc)
    write_json_atomic(path, doc)


def write_json_atomic(path: Path, doc) -> None:
    """Any JSON document (machine.json), written like write_atomic but not schema-checked."""
    write_with_atomic(path, lambda f: dump(doc, f))


ROW_SEPARATORS = (",", ":")  # a row's line without the spaces: files the repository keeps


def dumps(doc) -> str:
    """dump's text, as a string."""
    out = io.StringIO()
    dump(doc, out)
    return out.getvalue()


SIGNIFICANT_DIGITS = 7  # a float's digits in a kept file: a median to 0.1 ppm, not 17 digits of noise


def rounded(value):
    """`value` with every float cut to SIGNIFICANT_DIGITS (ints, strings, None as they are)."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def dump(doc, f) -> None:
    """A document as JSON with one line per row: each top-level list of objects (a step's
    "results", special values' "rows", or the document itself) one object a line, the rest
    indented, every float to SIGNIFICANT_DIGITS. Under half the size of indent=2 for files the
    repository keeps, and still one diff line per changed measurement."""
    doc = rounded(doc)
    if _rows(doc):
        _dump_rows(doc, f, "")
        f.write("\n")
        return
    if not isinstance(doc, dict):
        json.dump(doc, f, indent=2)
        f.write("\n")
        return
    f.write("{")
    for n, (key, value) in enumerate(doc.items()):
        f.write(f"{',' if n else ''}\n  {json.dumps(key)}: ")
        if _rows(value):
            _dump_rows(value, f, "  ")
        else:
            text = io.StringIO()
            json.dump(value, text, indent=2)
            f.write(text.getvalue().replace("\n", "\n  "))
    f.write("\n}\n")


def _dump_rows(rows: list, f, indent: str) -> None:
    f.write("[")
    for n, row in enumerate(rows):
        f.write(f"{',' if n else ''}\n{indent}  ")
        json.dump(row, f, separators=ROW_SEPARATORS)
    f.write(f"\n{indent}]")


def _rows(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(row, dict) for row in value)


def write_text_atomic(path: Path, text: str) -> None:
    """Text (ladder.csv) written whole or not at all, like write_atomic."""
    write_with_atomic(path, lambda f: f.write(text))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Bytes (a plot's PNG) written whole or not at all, like write_atomic."""
    write_with_atomic(path, lambda f: f.write(data), binary=True)


def write_with_atomic(path: Path, write, binary: bool = False) -> None:
    """Call write(file) on a temporary file beside `path`, then rename it into place.

    A reader never sees half a file, and a failure leaves the old file as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="")) as f:
            write(f)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for everyone to read
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


def load_document(gpu_dir: Path, name: str, validate=lambda doc: doc) -> dict | None:
    """results/<gpu>/<name>, parsed and validated; None when absent (one GPU has no such run)."""
    path = Path(gpu_dir) / name
    if not path.exists():
        return None
    return validate(json.loads(path.read_text()))


def committed(gpu_name: str, step_number: int, results_dir: Path = RESULTS_DIR, dtype: str = "fp32") -> dict | None:
    """The committed results of a step on this GPU model (for `dtype` inputs), or None if there are none."""
    path = step_path(results_dir, gpu_name, step_number, dtype)
    return load(path) if path.exists() else None


def load_gpu_dir(gpu_dir: Path) -> list[dict]:
    """Every results/<gpu>/stepN.json in one folder, validated, in step order."""
    paths = [p for p in Path(gpu_dir).glob("step*.json") if re.fullmatch(r"step\d+\.json", p.name)]
    return sorted((load(p) for p in paths), key=lambda d: d["step"])


def not_comparable(row: dict | None) -> str | None:
    """Why a saved row cannot be held against a new measurement (a regression gate, --compare),
    or None when it can: a host-bound or unguarded number times the host, not the kernel."""
    if row is None:
        return None
    if "host_bound" not in row or row["host_bound"] is None:
        return "saved before the host-bound guard (schema 1): not known to be kernel time"
    if row["host_bound"]:
        return f"saved as host-bound (host {row['host_us']:.1f} us per launch vs {row['median_ms'] * 1e3:.1f} us GPU)"
    return None


def row_for(doc: dict, M: int, N: int, K: int) -> dict | None:
    for row in doc["results"]:
        if (row["M"], row["N"], row["K"]) == (M, N, K):
            return row
    return None


def size_key(M: int, N: int, K: int) -> str:
    """How a size is named in ``expected_regression``: '2048' when square, else '512x1024x256'."""
    return str(M) if M == N == K else f"{M}x{N}x{K}"


def regression_attribute(dtype: str = "fp32") -> str:
    """The step module's name for its expected regressions with `dtype` inputs: EXPECTED_REGRESSION
    for fp32 (against the step before it), EXPECTED_REGRESSION_BF16 / _FP16 for a 16-bit ladder
    (against the step before it that has the dtype: another prior, so marks of its own)."""
    return "EXPECTED_REGRESSION" if dtype == "fp32" else f"EXPECTED_REGRESSION_{dtype.upper()}"


def expected_regressions(module, dtype: str = "fp32") -> dict[str, str]:
    """A step module's EXPECTED_REGRESSION (size or (M, N, K) -> reason), keyed by size_key; for
    16-bit inputs its EXPECTED_REGRESSION_<DTYPE> (regression_attribute)."""
    out = {}
    for size, reason in getattr(module, regression_attribute(dtype), {}).items():
        key = size_key(*size) if isinstance(size, tuple) else size_key(size, size, size)
        out[key] = str(reason)
    return out


def expected_regression(doc: dict, M: int, N: int, K: int, module=None) -> str | None:
    """Why this step is allowed to be slower than its prior at M x N x K, or None.

    The committed file's ``expected_regression`` decides; a file written before that field
    existed falls back to the step module's EXPECTED_REGRESSION (when `module` is given; for a
    16-bit file, the module's marks for its dtype)."""
    if "expected_regression" in doc:
        marks = doc["expected_regression"]
    else:
        marks = expected_regressions(module, doc_dtype(doc)) if module is not None else {}
    return marks.get(size_key(M, N, K))
