"""The reference rows: cuBLAS, and TVM's own schedulers, timed exactly as the steps are.

Every table of the ladder reads its steps against these, measured in the same run:

- ``cublas``: cuBLAS GEMM in strict fp32 (TF32 off), the baseline of every "% cuBLAS" column;
- ``cublas_tf32``: cuBLAS with inputs rounded to TF32 on tensor cores. Reduced precision, said
  so in its label and held to its own tolerance (``harness.TF32_TOLERANCE``); never a
  baseline for an fp32 step;
- ``dlight``: TVM's default GPU schedule (schedules/integration/references.py), no tuning;
- ``metaschedule``: TVM's auto-scheduler, replayed from the database committed for this GPU
  model (``python -m steps.cublas --tune`` writes it). A size or GPU with no committed record
  gives no row (said once), not a failure.

For 16-bit inputs (``--dtype fp16`` / ``bf16``, issue 47) the rows are that dtype's: ``cublas_fp16``
/ ``cublas_bf16``, cublasGemmEx with A, B and C in the dtype and CUBLAS_COMPUTE_32F (the baseline
of a 16-bit step's "% cuBLAS"), and ``dlight_fp16`` / ``dlight_bf16``, dlight's default schedule
of the 16-bit base matmul. Each is held to the dtype's tolerance (dtypes.TOLERANCE). There is no
TF32 row and no MetaSchedule database for them.

cuBLAS runs in this process (CuPy); the TVM references go through the steps' worker process
(``harness.KernelRunner.measure`` with a builder path), so a fault costs one row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from schedules.integration import references as tvm_refs

from .. import results
from . import dtypes, harness

SCHEMA = "references-1"


@dataclass(frozen=True)
class Reference:
    key: str
    label: str
    precision: str  # "fp32" or "tf32"
    tolerance: float
    builder: str | None = None  # "module:function" for TVM-built references; None: cuBLAS
    tf32: bool = False
    dtype: str = "fp32"  # the inputs' (and for 16-bit, C's) dtype


CUBLAS = Reference("cublas", "cuBLAS fp32 (TF32 off)", "fp32", harness.TOLERANCE)
CUBLAS_TF32 = Reference("cublas_tf32", "cuBLAS TF32 (reduced precision)", "tf32", harness.TF32_TOLERANCE, tf32=True)
DLIGHT = Reference("dlight", "TVM dlight (default schedule)", "fp32", harness.TOLERANCE,
                   "schedules.integration.references:build_dlight")
METASCHEDULE = Reference("metaschedule", "TVM MetaSchedule (tuned)", "fp32", harness.TOLERANCE,
                         "schedules.integration.references:build_metaschedule")
ALL = (CUBLAS, CUBLAS_TF32, DLIGHT, METASCHEDULE)
# The rows of a 16-bit ladder: cuBLAS (fp32 compute) and dlight in that dtype.
SIXTEEN_BIT = {
    dtype: (Reference(f"cublas_{dtype}", f"cuBLAS {dtype} (fp32 sum)", dtype, dtypes.TOLERANCE[dtype], dtype=dtype),
            Reference(f"dlight_{dtype}", f"TVM dlight {dtype} (default schedule)", dtype, dtypes.TOLERANCE[dtype],
                      "schedules.integration.references:build_dlight", dtype=dtype))
    for dtype in dtypes.SIXTEEN_BIT
}
KEYS = tuple(r.key for r in ALL)  # what --references / --only take (a 16-bit ladder maps them: for_dtype)
BY_KEY = {r.key: r for r in ALL + tuple(r for refs in SIXTEEN_BIT.values() for r in refs)}


def of_dtype(dtype: str) -> tuple:
    """Every reference row of a `dtype` ladder, in table order."""
    return ALL if dtype == "fp32" else SIXTEEN_BIT[dtypes.check(dtype)]


def for_dtype(refs, dtype: str) -> list:
    """The references chosen by fp32 key (``--references cublas,dlight``) as that dtype's rows:
    cublas -> cublas_bf16, dlight -> dlight_bf16; those with no such row (cuBLAS TF32,
    MetaSchedule) are dropped."""
    if dtype == "fp32":
        return list(refs)
    keys = {r.key for r in refs}
    return [r for r in SIXTEEN_BIT[dtypes.check(dtype)] if r.key.rsplit("_", 1)[0] in keys]


# A TF32 step's "% cuBLAS" is of cuBLAS TF32 (baseline below), marked so in every table.
TF32_MARK = "ᵀ"


def baseline(step, dtype: str = "fp32") -> Reference:
    """The cuBLAS a step is compared with: strict fp32, or TF32 for a reduced-precision step
    (steps 12-13). 3xTF32 (step 14) is fp32-accurate, so its baseline is strict fp32. For 16-bit
    inputs, cuBLAS in that dtype (fp32 sum)."""
    if dtype != "fp32":
        return SIXTEEN_BIT[dtypes.check(dtype)][0]
    return CUBLAS_TF32 if step.precision == "tf32" else CUBLAS


def parse_keys(text: str) -> list[Reference]:
    """'all' or a comma list of keys ('cublas,dlight') -> References, in table order."""
    if text.strip().lower() == "all":
        return list(ALL)
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in KEYS]
    if unknown or not keys:
        raise ValueError(f"unknown reference {unknown[0] if unknown else text!r}; known: {', '.join(KEYS)}")
    return [r for r in ALL if r.key in keys]


def keys_arg(text: str, allow_none: bool = False) -> list[Reference]:
    """parse_keys as an argparse type: bad keys are argparse's one-line error; with
    `allow_none`, 'none' means no reference rows."""
    import argparse

    if allow_none and text.strip().lower() == "none":
        return []
    try:
        return parse_keys(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def metaschedule_dir(gpu_name: str) -> Path:
    return tvm_refs.database_dir(results.gpu_slug(gpu_name))


def metaschedule_info(gpu_name: str) -> dict | None:
    """The committed tuning summary for this GPU model (trials, cost model, date), or None."""
    path = metaschedule_dir(gpu_name) / "tuning.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def label(ref: Reference, gpu_name: str | None = None) -> str:
    """The row label; MetaSchedule's names its trial budget when the tuning summary says it."""
    if ref is METASCHEDULE and gpu_name:
        info = metaschedule_info(gpu_name)
        if info and info.get("trials"):
            return f"TVM MetaSchedule ({info['trials']} trials)"
    return ref.label


def available(ref: Reference, size, gpu_name: str) -> str | None:
    """None when `ref` can be measured at `size`, else why not (one line)."""
    if ref.builder is None:
        return None if harness.cublas_available() else "CuPy not installed (pip install -e \".[cublas]\")"
    if ref is METASCHEDULE and size not in tvm_refs.tuned_sizes(metaschedule_dir(gpu_name)):
        return (f"not tuned for {results.gpu_slug(gpu_name)} at {'x'.join(map(str, size))} "
                "(python -m steps.cublas --tune)")
    return None


def measure(ref: Reference, size, runner, arch: str, gpu_name: str, repeat: int, seed=None) -> harness.Measurement:
    """Check and time one reference at one size; failures become ``error``, never exceptions."""
    M, N, K = size
    if ref.builder is None:
        m = harness.Measurement(M, N, K)
        try:
            kw = {} if ref.dtype == "fp32" else {"dtype": ref.dtype}
            timing, m.rel_err = harness.time_cublas(M, N, K, repeat=repeat, seed=seed, tf32=ref.tf32, **kw)
        except Exception as exc:
            m.error = harness._one_line(exc)
            return m
        m.set_timing(timing)
        return harness.check_error(m, ref.tolerance)
    config = str(metaschedule_dir(gpu_name)) if ref is METASCHEDULE else None
    try:
        if ref.dtype == "fp32":
            return runner.measure(ref.builder, M, N, K, arch, config)
        # 16-bit: the seed is the size's, so this row is checked on the steps' inputs (harness.measure)
        return runner.measure(ref.builder, M, N, K, arch, config, dtype=ref.dtype, seed=seed)
    except Exception as exc:
        return harness.Measurement(M, N, K, error=harness._one_line(exc))


# --- results/<gpu>/references.json -----------------------------------------------------------


def document(measured: dict, env: dict, repeat: int, gpu_name: str) -> dict:
    """{(key, size): Measurement} -> the references.json document (rows that passed)."""
    refs = []
    for ref in BY_KEY.values():
        rows = [_row(m) for (key, _), m in measured.items() if key == ref.key and m.ok]
        if not rows:
            continue
        entry = {"key": ref.key, "label": label(ref, gpu_name), "precision": ref.precision,
                 "tolerance": ref.tolerance, "results": rows}
        if ref.dtype != "fp32":
            entry["dtype"] = ref.dtype
        if ref is METASCHEDULE:
            entry["tuning"] = metaschedule_info(gpu_name)
        refs.append(entry)
    return {"schema": SCHEMA, "environment": env, "method": method(repeat), "references": refs}


def method(repeat: int) -> dict:
    return {
        "timer": "CUDA events around back-to-back launches: tvm time_evaluator (TVM kernels), "
                 "cupy.cuda.Event around cublasGemmEx calls through CuPy's low-level binding (cuBLAS)",
        "statistic": "median of samples; each sample the mean of back-to-back launches (~1 ms)",
        "repeat": repeat,
        "host_bound": f"host time to submit one launch >= {harness.HOST_BOUND_FRACTION:g} x GPU time per launch",
        "flops": "2*M*N*K",
    }


def _row(m: harness.Measurement) -> dict:
    return {"M": m.M, "N": m.N, "K": m.K, "median_ms": m.median_ms, "min_ms": m.min_ms, "max_ms": m.max_ms,
            "gflops": m.gflops, "rel_err": m.rel_err, "host_us": m.host_us, "host_bound": m.host_bound}


def validate(doc: dict) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise results.ResultsError(f"not a {SCHEMA} document")
    for key in ("environment", "method", "references"):
        if key not in doc:
            raise results.ResultsError(f"references document lacks {key!r}")
    for entry in doc["references"]:
        if entry.get("key") not in BY_KEY or not entry.get("results"):
            raise results.ResultsError(f"bad reference entry {str(entry)[:80]}")
        for row in entry["results"]:
            if not (isinstance(row.get("gflops"), (int, float)) and row["gflops"] > 0):
                raise results.ResultsError(f"reference row has no positive gflops: {row.get('gflops')!r}")
    return doc


def load(gpu_dir: Path) -> dict | None:
    """results/<gpu>/references.json, validated; None when absent."""
    path = Path(gpu_dir) / "references.json"
    if not path.exists():
        return None
    return validate(json.loads(path.read_text()))


def save(path: Path, doc: dict) -> None:
    validate(doc)
    results.write_json_atomic(path, doc)


def row(doc: dict | None, key: str, size) -> dict | None:
    """One reference's saved row at `size` (M, N, K), or None."""
    for entry in (doc or {}).get("references", []):
        if entry["key"] == key:
            for r in entry["results"]:
                if (r["M"], r["N"], r["K"]) == tuple(size):
                    return r
    return None


def entry(doc: dict | None, key: str) -> dict | None:
    return next((e for e in (doc or {}).get("references", []) if e["key"] == key), None)
