"""python -m steps.special: fp32's special values, every fp32-accurate step against cuBLAS SGEMM.

    python -m steps.special                          # every fp32-accurate step, every class, 1024
    python -m steps.special --steps 11,14 --classes "scale 2^-64,inf and NaN"
    python -m steps.special --save                   # results/<gpu>/special_values.json, .md, docs/measured.md
    python -m steps.special --list                   # the data classes

"fp32-accurate" promises what SGEMM gives, at the ends of the exponent range and with inf and
NaN too, not only on data near 1. For each data class (steps/measure/special.py: scales from
2^60 down to 2^-70, rows of very different magnitude, exact zeros, fp32's largest value, +-inf
and NaN, a long K) the run draws one pair of operands, computes their float64 product, then
runs cuBLAS SGEMM (strict fp32) and every step on those very operands, C poisoned with NaN,
and scores each: the relative error over the entries float64 gives as finite, and whether NaN,
+inf and -inf land where float64's do. A step meets the contract on a class when its error is
within 2x SGEMM's on the same data (or at most 1e-6) and its NaN / inf pattern is float64's
wherever SGEMM's is (steps/results/special.py). The table goes to stdout; the exit code is 1
when a step misses on a class held to the contract. TF32 steps (12, 13) are reduced precision
by design and not taken.

``--dtype fp16`` / ``bf16`` (issue 47) runs the dtype's own classes (steps/measure/special.py:
bf16's range near 2^120 and past fp32's largest, below its smallest normal; fp16's 65504 and the
sums that overflow it, its subnormal outputs and inputs) on the steps that have the dtype, against
cuBLAS in the dtype (fp32 compute): the same contract, with the dtype's tolerance as the floor and
the NaN / inf pattern of the float64 product rounded to the dtype. ``--save`` writes
results/<gpu>/<dtype>/special_values.json and .md (docs/measured.md's block stays fp32's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import schedules
from schedules import ConfigError

from .. import results
from ..measure import dtypes, harness
from ..measure import special as data
from ..report import special as report
from ..report.pipes import quiet_broken_pipe
from ..results import special
from . import options

PROG = "python -m steps.special"
DEFAULT_SIZE = 1024
MIN_SIZE = 16  # the classes place their infinities and zeros inside 16 x 16
DEFAULT_SEED = 28
SHORT = {special.BASELINE: "cuBLAS SGEMM"}


def fp32_steps() -> list:
    return [s for s in schedules.STEPS if s.precision == "fp32"]


def parse_fp32_steps(text: str) -> list:
    from .ladder import parse_steps

    steps = parse_steps(text)
    tf32 = [s for s in steps if s.precision != "fp32"]
    if tf32:
        raise argparse.ArgumentTypeError(f"step {tf32[0].number} computes in TF32 (reduced precision): the suite "
                                         "holds fp32-accurate steps; steps "
                                         + ",".join(str(s.number) for s in fp32_steps()) + " are")
    return steps


def steps_of(dtype: str) -> list:
    """The steps a run holds to the contract: the fp32-accurate ones, or those with a 16-bit form."""
    return fp32_steps() if dtype == "fp32" else [s for s in schedules.STEPS if dtype in s.dtypes]


def parse_classes(text: str, dtype: str = "fp32") -> list:
    classes = data.classes_for(dtype)
    if text.strip().lower() == "all":
        return list(classes)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in {c.name for c in classes}]
    if unknown or not names:
        raise options.UsageError(f"unknown data class {unknown[0] if unknown else text!r}"
                                 + (f" for {dtype}" if dtype != "fp32" else "")
                                 + "; python -m steps.special --list names them")
    return [c for c in classes if c.name in names]


def parser() -> argparse.ArgumentParser:
    p = options.new_parser(PROG, __doc__.strip())
    p.add_argument("--steps", type=_parse_steps, default=None, metavar="RANGE",
                   help="fp32-accurate steps to hold to the contract, as python -m steps --steps (default: all of them; "
                        "with --dtype, the steps that have it)")
    p.add_argument("--classes", default=None, metavar="NAMES",
                   help="comma list of data classes (default: all; --list names them)")
    options.add_dtype_option(p)
    p.add_argument("--size", type=lambda t: options._at_least(t, MIN_SIZE), default=DEFAULT_SIZE, metavar="N",
                   help=f"M = N = K of the square classes (default {DEFAULT_SIZE}, at least {MIN_SIZE})")
    p.add_argument("--seed", type=lambda t: options._at_least(t, 0), default=DEFAULT_SEED,
                   help=f"seed of the operands (default {DEFAULT_SEED})")
    options.add_arch_option(p)
    p.add_argument("--save", action="store_true",
                   help="write results/<gpu>/special_values.json and special_values.md, and the docs/measured.md block "
                        "(needs every fp32-accurate step and every class)")
    p.add_argument("--list", action="store_true", help="list the data classes and exit")
    p.add_argument("--results-dir", type=Path, default=results.RESULTS_DIR, help=argparse.SUPPRESS)
    return p


def _parse_steps(text: str) -> list:
    from .ladder import parse_steps

    return parse_steps(text)


def format_list(dtype: str = "fp32") -> str:
    classes = data.classes_for(dtype)
    width = max(len(c.name) for c in classes)
    lines = []
    for c in classes:
        shape = "x".join(map(str, c.shape)) if c.shape else "size^3"
        lines.append(f"{c.name:<{width}}  {shape:<14}  {c.what}")
    return "\n".join(lines)


@quiet_broken_pipe
def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        dtype = args.dtype
        if args.list:
            print(format_list(dtype))
            return 0
        if args.steps is not None and dtype == "fp32":
            parse_fp32_steps(",".join(str(s.number) for s in args.steps))  # a TF32 step: one line
        for s in args.steps or ():
            s.check_dtype(dtype)  # a step without the dtype: the registry's one line
        steps = args.steps or steps_of(dtype)
        if not steps:
            raise options.UsageError(f"no step has a {dtype} form")
        classes = parse_classes(args.classes, dtype) if args.classes else list(data.classes_for(dtype))
        if args.save and (len(steps) != len(steps_of(dtype)) or len(classes) != len(data.classes_for(dtype))):
            raise options.UsageError("--save records the whole contract: every fp32-accurate step and every class "
                                     "(drop --steps and --classes)")
        if not harness.gpu_present():
            raise options.UsageError("no CUDA GPU found: the suite runs kernels (--list shows the classes)")
        if not harness.cublas_available():
            raise options.UsageError("CuPy is not installed: pip install -e \".[cublas]\" (cuBLAS SGEMM is the yardstick)")
        arch = options.pick_arch(PROG, args.arch, timing=True)
    except (options.UsageError, ConfigError, argparse.ArgumentTypeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE
    doc = run(steps, classes, args.size, args.seed, arch, dtype=dtype)
    print(report.render(doc))
    if args.save:
        save(doc, args.results_dir)
    return options.EXIT_FAILED if special.failures(doc) else 0


def run(steps, classes, size: int, seed: int, arch: str, progress=None, dtype: str = "fp32") -> dict:
    """Every class: one pair of operands, float64, cuBLAS SGEMM (or cuBLAS in the 16-bit dtype) and
    each step on them, scored."""
    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    kernels = data.StepKernels(arch)
    all_classes = data.classes_for(dtype)
    # a 16-bit row is held to the dtype's tolerance at least (fp32's rows keep ERROR_FLOOR)
    floor = {} if dtype == "fp32" else {"error_floor": dtypes.TOLERANCE[dtype]}
    kw = {} if dtype == "fp32" else {"dtype": dtype}
    rows = []
    for cls in classes:
        # A class's operands depend on the seed and the class alone, not on which others run.
        a, b = data.operands(cls, size, seed + all_classes.index(cls), **kw)
        ref = data.reference(a, b, **kw)
        base = _scored(special.BASELINE, cls, lambda: data.run_cublas(a, b, **kw), ref, dtype)
        rows.append({**base, "cublas_rel_err": base["rel_err"], "cublas_pattern_equal": base["pattern_equal"], **floor})
        for step in steps:
            row = _scored(f"step{step.number}", cls, lambda: kernels.run(step, a, b, **kw), ref, dtype)
            rows.append({**row, "cublas_rel_err": base["rel_err"], "cublas_pattern_equal": base["pattern_equal"],
                         **floor})
        progress(f"  {cls.name}: cuBLAS {report.error_text(base['rel_err'])}; "
                 + ", ".join(f"step {s.number} {report.error_text(r['rel_err'])}" for s, r in zip(steps, rows[-len(steps):])))
    return document(steps, classes, size, seed, rows, dtype)


def _scored(impl: str, cls, compute, ref, dtype: str = "fp32") -> dict:
    try:
        return {"impl": impl, "class": cls.name, **data.score(compute(), ref, dtype), "error": None}
    except Exception as exc:  # a build or launch failure is this row's, and the run goes on
        return {"impl": impl, "class": cls.name, "rel_err": None, "pattern_equal": False, "nonfinite": None,
                "ref_nonfinite": None, "error": harness._one_line(exc)}


def document(steps, classes, size: int, seed: int, rows: list[dict], dtype: str = "fp32") -> dict:
    if dtype == "fp32":
        impls = [{"key": special.BASELINE, "short": SHORT[special.BASELINE], "label": "cuBLAS SGEMM, strict fp32 "
                  "(cublasGemmEx, CUBLAS_COMPUTE_32F)"}]
    else:
        impls = [{"key": special.BASELINE, "short": f"cuBLAS {dtype}", "label": f"cuBLAS {dtype} "
                  f"(cublasGemmEx, A, B and C in {dtype}, CUBLAS_COMPUTE_32F)"}]
    impls += [{"key": f"step{s.number}", "short": f"step {s.number}", "label": f"step {s.number}: {s.name}",
               "step": s.number, "tensor_cores": s.tensor_cores} for s in steps]
    doc = {
        "schema": special.SCHEMA,
        "environment": harness.environment(),
        "method": {
            "reference": "float64 product of the same fp32 operands (numpy), IEEE inf / NaN rules",
            "rel_err": "||C - C64|| / ||C64|| over the entries C64 gives as finite; inf if C is NaN or inf at one",
            "pattern": "NaN, +inf and -inf of C at exactly C64's positions",
            "contract": f"rel_err <= max({special.ERROR_FACTOR:g} x cuBLAS SGEMM's, {special.ERROR_FLOOR:g}); "
                        "pattern equal wherever cuBLAS SGEMM's is",
            "seed": seed, "size": size, "output": "C poisoned with NaN before each call",
        },
        "classes": [{"name": c.name, "what": c.what, "shape": list(c.shape_for(size)),
                     "held_to_bar": c.held_to_bar} for c in classes],
        "implementations": impls,
        "rows": rows,
    }
    if dtype != "fp32":
        doc["dtype"] = dtype
        doc["method"].update(
            reference=f"float64 product of the same {dtype} operands (exact), IEEE inf / NaN rules",
            rel_err=f"||C - C64|| / ||C64|| over the entries C64 rounded to {dtype} has finite; inf if C is NaN or "
                    "inf at one",
            pattern=f"NaN, +inf and -inf of C at exactly those of C64 rounded to {dtype} (inf past its largest)",
            contract=f"rel_err <= max({special.ERROR_FACTOR:g} x cuBLAS {dtype}'s, {dtypes.TOLERANCE[dtype]:g}); "
                     f"pattern equal wherever cuBLAS {dtype}'s is")
    return doc


def save(doc: dict, results_dir: Path) -> None:
    from ..report import table

    special.validate(doc)
    dtype = doc.get("dtype", "fp32")
    gpu_dir = results.dtype_dir(Path(results_dir) / results.gpu_slug(doc["environment"]["gpu"]), dtype)
    title = "fp32's special values" if dtype == "fp32" else f"{dtype}'s special values"
    results.write_json_atomic(gpu_dir / special.JSON_NAME, doc)
    print(f"saved {gpu_dir / special.JSON_NAME}")
    results.write_text_atomic(gpu_dir / special.TABLE_NAME, f"# {title}\n\n{report.render(doc)}\n")
    print(f"saved {gpu_dir / special.TABLE_NAME}")
    if dtype == "fp32" and Path(results_dir).resolve() == results.RESULTS_DIR.resolve():
        print("docs/measured.md updated" if table.update_readme() else "docs/measured.md already up to date")
