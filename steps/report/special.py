"""The special-values table: each data class, cuBLAS SGEMM's error and each fp32-accurate step's,
from results/<gpu>/special_values.json (steps/results/special.py holds the contract).

The same markdown goes to stdout (``python -m steps.special``), to
results/<gpu>/special_values.md and to docs/measured.md's generated block.
"""

from __future__ import annotations

from ..results import special

MISS = "✗"  # over the error bar, or NaN / inf where float64 has none (or the reverse)
PATTERN_MARK = "ⁿ"  # cuBLAS's own NaN / inf pattern differs from float64's: nothing asked of the steps


def error_text(value) -> str:
    """An error as the table prints it: 5.2e-07, inf, or – for none."""
    if value is None:
        return "–"
    return "inf" if value == float("inf") else f"{value:.1e}"


def cell(row: dict | None) -> str:
    if row is None:
        return "–"
    if row.get("error"):
        return f"failed ({MISS})"
    text = error_text(row["rel_err"])
    if row["impl"] == special.BASELINE:
        return text + ("" if row["pattern_equal"] else f" {PATTERN_MARK}")
    marks = []
    if not special.error_ok(row):
        marks.append(MISS)
    if not special.pattern_ok(row):
        marks.append(f"{MISS} inf/NaN")
    return f"**{text} {' '.join(marks)}**" if marks else text


def render(doc: dict) -> str:
    """Classes down, implementations across: the errors, marked where a step misses."""
    env = doc["environment"]
    index = special.rows_by(doc)
    impls = doc["implementations"]
    dtype = doc.get("dtype", "fp32")
    finite = "float64 gives as finite" if dtype == "fp32" else f"float64 rounded to {dtype} gives as finite"
    head = "| data class | shape | " + " | ".join(i["short"] for i in impls) + " |"
    lines = [f"{env.get('gpu', '?')}, {env.get('date', '?')[:10]}, driver {env.get('driver', '?')}: "
             f"‖C − C₆₄‖ / ‖C₆₄‖ against the float64 product of the same {dtype} operands, over the entries "
             f"{finite}; one run, one set of operands per class for every implementation.",
             "", head, "|---|---|" + "---:|" * len(impls)]
    for c in doc["classes"]:
        name = c["name"] if c.get("held_to_bar", True) else f"{c['name']} (limit)"
        shape = "×".join(str(n) for n in c["shape"])
        lines.append(f"| {name} | {shape} | " + " | ".join(cell(index.get((i["key"], c["name"]))) for i in impls) + " |")
    failed = special.failures(doc)
    if dtype == "fp32":
        lines += ["", f"The contract: a step's error at most {special.ERROR_FACTOR:g}× cuBLAS SGEMM's on the same "
                  f"operands (or ≤ {special.ERROR_FLOOR:g}), and NaN, +inf and −inf where float64 has them wherever "
                  f"SGEMM has them. {MISS}: missed. (limit): measured, not held to the contract."]
    else:
        floor = next((r["error_floor"] for r in doc["rows"] if "error_floor" in r), special.ERROR_FLOOR)
        lines += ["", f"The contract: a step's error at most {special.ERROR_FACTOR:g}× cuBLAS {dtype}'s on the same "
                  f"operands (or ≤ {floor:g}, the {dtype} tolerance), and NaN, +inf and −inf where the float64 product "
                  f"rounded to {dtype} has them wherever cuBLAS {dtype} has them. {MISS}: missed."]
    if any(not r["pattern_equal"] for r in doc["rows"] if r["impl"] == special.BASELINE):
        lines.append(f"{PATTERN_MARK}: cuBLAS's own NaN / inf pattern differs from float64's there.")
    lines.append("Every step meets it on every class held to it." if not failed else
                 f"{len(failed)} step rows miss it: "
                 + ", ".join(f"{r['impl']} on {r['class']}" for r in failed) + ".")
    return "\n".join(lines)
