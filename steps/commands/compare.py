"""``--compare RESULTS``: a changed step timed now, beside its saved numbers.

The proof a contributor attaches to a change: per size, GFLOPS before (from a stepN.json, or
a results/<gpu> folder holding one), GFLOPS after (measured now, same GPU model expected),
and their ratio. A drop of more than 15% is flagged and makes the exit code 1, as does a
kernel that fails now; a missing or unreadable file is bad input (one line, exit 2).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import results
from ..measure import harness
from . import options

DROP_FLAG = 0.85  # after / before below this is flagged: beyond timing noise, a real loss


@dataclass
class Comparison:
    """One size: the saved GFLOPS, the GFLOPS now, and the configs behind each."""

    size: tuple[int, int, int]
    before: float | None
    after: float | None
    before_config: dict | None = None
    after_config: dict | None = None
    error: str | None = None  # the kernel failed now
    refused: str | None = None  # why the two numbers are not compared (host-bound, unguarded)

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.after and self.before else None

    @property
    def dropped(self) -> bool:
        return self.refused is None and self.ratio is not None and self.ratio < DROP_FLAG

    @property
    def bad(self) -> bool:
        return self.dropped or self.error is not None


def results_file(path: Path, step_number: int, dtype: str = "fp32") -> Path:
    """RESULTS as given: a stepN.json, or a results/<gpu> folder that holds stepN.json (for 16-bit
    inputs, in its <dtype>/ folder, unless RESULTS is that folder already)."""
    path = Path(path)
    if not path.is_dir():
        return path
    if dtype != "fp32" and path.name != dtype:
        path = results.dtype_dir(path, dtype)
    return path / f"step{step_number}.json"


def load_before(path: Path, step_number: int, dtype: str = "fp32") -> dict:
    """The saved results to compare against; UsageError (exit 2) when they cannot be used."""
    file = results_file(path, step_number, dtype)
    if not file.exists():
        raise options.UsageError(f"--compare: {file} does not exist")
    try:
        doc = results.load(file)
    except (OSError, json.JSONDecodeError, results.ResultsError) as exc:
        raise options.UsageError(f"--compare: {file} is not a results file: {exc}") from None
    if doc["step"] != step_number:
        raise options.UsageError(f"--compare: {file} holds step {doc['step']}'s results, not step {step_number}'s")
    if results.doc_dtype(doc) != dtype:
        raise options.UsageError(f"--compare: {file} holds {results.doc_dtype(doc)} results, not {dtype}")
    return doc


def saved_shapes(doc: dict) -> list[tuple[int, int, int]]:
    return [(r["M"], r["N"], r["K"]) for r in doc["results"]]


def comparisons(doc: dict, measured: dict) -> list[Comparison]:
    """Pair each size measured now ({size: (Measurement, config)}) with the saved row."""
    out = []
    for size, (m, config) in measured.items():
        row = results.row_for(doc, *size)
        refused = results.not_comparable(row)
        if refused is None and m.ok and m.host_bound:
            refused = f"host-bound now (host {m.host_us:.1f} us per launch vs {m.median_ms * 1e3:.1f} us GPU)"
        out.append(Comparison(
            size,
            before=row["gflops"] if row else None,
            after=m.gflops if m.ok else None,
            before_config=row.get("config") if row else None,
            after_config=config.as_dict() if hasattr(config, "as_dict") else config,
            error=m.error,
            refused=refused,
        ))
    return out


def format_comparison(step_number: int, name: str, items: list[Comparison], source: str) -> str:
    header = f"{'size':>16}  {'before GFLOPS':>13}  {'after GFLOPS':>12}  {'after/before':>12}"
    lines = [f"step {step_number} ({name}): before = {source}, after = measured now", header, "-" * len(header)]
    for c in items:
        before = f"{c.before:.0f}" if c.before else "-"
        if c.error:
            lines.append(f"{options._size(c.size):>16}  {before:>13}  FAILED: {c.error}")
            continue
        ratio = f"{c.ratio:.3f}x" if c.ratio else "-"
        flag = f"  DROP > {100 * (1 - DROP_FLAG):.0f}%" if c.dropped else ""
        if c.refused:
            flag = f"  not compared: {c.refused}"
        lines.append(f"{options._size(c.size):>16}  {before:>13}  {c.after:>12.0f}  {ratio:>12}{flag}")
        if c.before_config is not None and c.after_config is not None and c.before_config != c.after_config:
            lines.append(f"{'':>16}  config before: {_config_text(c.before_config)}")
            lines.append(f"{'':>16}  config now:    {_config_text(c.after_config)}")
    if any(c.before is None for c in items):
        lines.append("-: the saved results have no row for that size")
    return "\n".join(lines)


def warn_if_other_gpu(doc: dict, gpu_now: str | None, source: str) -> None:
    gpu_then = doc["environment"].get("gpu")
    if gpu_now and gpu_then and results.gpu_slug(gpu_now) != results.gpu_slug(gpu_then):
        print(f"warning: {source} was measured on {gpu_then}, this is {gpu_now}: the ratio compares GPUs",
              file=sys.stderr)


def close(runner) -> None:
    """Stop the runner's measurement worker process, where it has one."""
    stop = getattr(runner, "close", None)
    if stop is not None:
        stop()


def measure_safely(runner, step, size, arch, config, dtype: str = "fp32", seed: int | None = None) -> harness.Measurement:
    """runner.measure, with anything it raises turned into a failed Measurement. `seed` (16-bit
    runs): the size's inputs, shared by its rows (harness.shared_seed)."""
    try:
        return runner.measure(step, *size, arch, config) if dtype == "fp32" else \
            runner.measure(step, *size, arch, config, dtype=dtype, seed=seed)
    except Exception as exc:  # ConfigError at build time, or anything unforeseen
        return harness.Measurement(*size, error=harness._one_line(exc))


def _config_text(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())
