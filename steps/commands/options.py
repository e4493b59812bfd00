"""What every command shares: its options, exit codes, one-line errors and little formatters.

The parsers are built from pieces, so each command lists only the options it honours:
``python -m steps.stepN`` is ``parser`` + ``add_run_options`` + ``add_config_option``
(steps/commands/cli.py), the ladder the same without ``--explain``, and ``steps.sweep``,
``steps.cublas``, ``steps.crosscheck`` and ``steps.bench`` pick single pieces. Bad input is a
``UsageError``: one line on stderr, exit code ``EXIT_USAGE``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import schedules

from .. import results
from ..measure import harness

DEFAULT_SIZES = (512, 1024, 2048)
DEFAULT_REPEAT = 30
DEFAULT_ARCH = "sm_90"  # without a GPU, or with one the ladder does not support (--build-only)
EXPLAIN_LINES = 400  # --explain cuts its output here unless --full (step 10's CUDA runs to 2,600)
EXIT_FAILED = 1
EXIT_USAGE = 2
HOST_MARK = "†"
HOST_LEGEND = (f"{HOST_MARK} host-bound: submitting one launch took >= "
               f"{100 * harness.HOST_BOUND_FRACTION:.0f}% of its GPU time, so the number may time the host, "
               "not the kernel (not used by the regression gates)")


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message; we want one line
        raise UsageError(message)


def _at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def _positive(text: str) -> int:
    return _at_least(text, 1)


def _non_negative(text: str) -> int:
    return _at_least(text, 0)


def _seed(text: str) -> int:
    """A seed numpy's default_rng takes: an integer >= 0."""
    return _at_least(text, 0)


def new_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An empty parser whose errors are one line (UsageError), not usage + message."""
    return _Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_problem_options(p) -> None:
    # Both accumulate: `--sizes 512 --sizes 1024` runs both, as `--shape` does.
    p.add_argument("--sizes", type=_positive, nargs="+", action="extend", default=None, metavar="N",
                   help="square problem sizes M=N=K (repeatable; default: 512 1024 2048)")
    p.add_argument("--shape", type=_positive, nargs=3, action="append", default=[], metavar=("M", "N", "K"),
                   help="a problem M x N x K (repeatable); runs beside any --sizes")


def add_repeat_option(p, default: int = DEFAULT_REPEAT) -> None:
    p.add_argument("--repeat", type=_positive, default=default,
                   help=f"timing samples per kernel; the median is reported (default: {default})")


def add_arch_option(p) -> None:
    p.add_argument("--arch", default=None,
                   help=f"CUDA arch, one of {', '.join(schedules.VALID_ARCHS)} (default: the GPU's own, "
                        f"else {DEFAULT_ARCH})")


def add_seed_option(p) -> None:
    p.add_argument("--seed", type=_seed, default=None, help="seed (>= 0) for the random inputs (default: fresh)")


def parser(prog: str, description: str, repeat: int = DEFAULT_REPEAT) -> argparse.ArgumentParser:
    """The options every timing CLI shares: --sizes, --shape, --repeat, --arch, --seed."""
    p = new_parser(prog, description)
    add_problem_options(p)
    add_repeat_option(p, repeat)
    add_arch_option(p)
    add_seed_option(p)
    return p


def add_run_options(p, explain: bool = True) -> None:
    """What a step run can do besides timing: --save, --build-only, --compare, and (per step)
    --explain with its --tuned-prior and --full."""
    p.add_argument("--save", action="store_true",
                   help="write results/<gpu>/stepN.json (needs a GPU; written only if every size passed)")
    p.add_argument("--build-only", action="store_true",
                   help="build the kernels and report their resources; no GPU needed")
    if explain:
        p.add_argument("--explain", action="store_true",
                       help="print this step's docstring, its TVMScript diff against its prior (built at "
                            "this step's config, so the diff is the idea alone) and its CUDA kernel")
        p.add_argument("--tuned-prior", action="store_true",
                       help="with --explain: build the prior at its own tuned config instead")
        p.add_argument("--full", action="store_true",
                       help=f"with --explain: print everything (otherwise cut at {EXPLAIN_LINES} lines)")
    p.add_argument("--results-dir", type=Path, default=results.RESULTS_DIR, help=argparse.SUPPRESS)
    add_dtype_option(p)
    p.add_argument("--compare", type=Path, default=None, metavar="RESULTS",
                   help="time the step now and show it beside RESULTS (a stepN.json or a results/<gpu> "
                        "folder): before, after, ratio; a drop over 15%% exits 1 (needs a GPU)")


DTYPE_CHOICES = ("fp32", "fp16", "bf16")  # schedules.config.DTYPES' names


def add_dtype_option(p) -> None:
    """--dtype: the inputs' dtype (issue 47). fp16 and bf16 give C in that dtype, summed in fp32,
    checked against the float64 product of the 16-bit inputs and timed against cuBLAS in that dtype."""
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default="fp32",
                   help="the inputs' dtype: fp32 (default), or fp16 / bf16 (C in that dtype, fp32 sums; "
                        "results in results/<gpu>/<dtype>/)")


def config_override(text: str) -> dict[str, int]:
    """``--config stages=2,pad_a=4``: config fields to set, each FIELD=INTEGER (every config
    field is an integer). Which fields the step has is checked later, against the step."""
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name.isidentifier():
            raise argparse.ArgumentTypeError(f"expected FIELD=VALUE[,FIELD=VALUE...], got {text!r}")
        try:
            out[name] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: not an integer: {value!r}") from None
    return out


def add_config_option(p) -> None:
    p.add_argument("--config", type=config_override, action="append", default=[], metavar="FIELD=VALUE,...",
                   help="run at the step's tuned config with these fields changed, at every size, e.g. "
                        "--config stages=2,pad_a=4 (repeatable; --explain lists the fields). Not with --save: "
                        "results/ holds the tuned configs")


def config_overrides(args) -> dict[str, int]:
    """The --config fields of a run, merged; one field given two values is a UsageError."""
    merged: dict[str, int] = {}
    for override in getattr(args, "config", None) or []:
        for name, value in override.items():
            if merged.get(name, value) != value:
                raise UsageError(f"--config sets {name} twice ({merged[name]} and {value}); give it once")
            merged[name] = value
    return merged


def check_run_options(args) -> None:
    """Reject options that would be silently ignored together (UsageError, exit 2)."""
    explain = getattr(args, "explain", False)
    for flag, given in (("--save", args.save), ("--compare", args.compare is not None)):
        for mode, on in (("--build-only", args.build_only), ("--explain", explain)):
            if given and on:
                raise UsageError(f"{flag} needs timed kernels and {mode} times none; drop one of them")
    if explain and args.build_only:
        raise UsageError("--explain and --build-only print different things; give one of them")
    if getattr(args, "config", None) and args.save:
        raise UsageError("--save records the step's tuned configs, and --config changes them; drop one of them")
    for flag in ("tuned_prior", "full"):
        if getattr(args, flag, False) and not explain:
            raise UsageError(f"--{flag.replace('_', '-')} goes with --explain")


def resolve_arch(requested: str | None, gpu: str | None, timing: bool) -> tuple[str, str | None]:
    """The arch to build for, and a note for stderr or None.

    `requested` is --arch, `gpu` the attached GPU's arch (harness.gpu_arch(): None without one),
    `timing` whether the run times kernels when a GPU is there (not --build-only or --explain).
    Kept free of the GPU so tests can drive it with any arch. A GPU outside VALID_ARCHS (sm_75,
    sm_100, sm_120) cannot time the ladder (UsageError); building for it falls back to sm_90."""
    if requested is not None:
        schedules.target(requested)  # an unknown arch: ConfigError, one line
    supported = ", ".join(schedules.VALID_ARCHS)
    if gpu is not None and gpu not in schedules.VALID_ARCHS:
        if timing:
            raise UsageError(f"this GPU is {gpu}, which the ladder does not support (it supports {supported}), "
                             f"so nothing can be timed here; --build-only --arch {DEFAULT_ARCH} builds anyway")
        if requested is None:
            return DEFAULT_ARCH, (f"this GPU is {gpu}, which the ladder does not support ({supported}); "
                                  f"building for {DEFAULT_ARCH} (--arch picks another)")
    return requested or gpu or DEFAULT_ARCH, None


def pick_arch(prog: str, requested: str | None, timing: bool) -> str:
    """resolve_arch for the attached GPU; its note, if any, goes to stderr."""
    arch, note = resolve_arch(requested, harness.gpu_arch(), timing)
    if note:
        print(f"{prog}: note: {note}", file=sys.stderr)
    return arch


def requested_shapes(args) -> list[tuple[int, int, int]]:
    """The problems a run covers: each square --sizes N, then each --shape M N K.

    With neither given, the default square sizes (512, 1024, 2048)."""
    sizes = args.sizes if args.sizes is not None else ([] if args.shape else list(DEFAULT_SIZES))
    shapes = [(n, n, n) for n in sizes] + [tuple(shape) for shape in args.shape]
    return list(dict.fromkeys(shapes))  # in order, without repeats


def host_flag(m) -> str:
    """The host-bound marker for a measurement ('' when the guard passed or was not run)."""
    return f" {HOST_MARK}" if getattr(m, "host_bound", None) else ""


def _size(size) -> str:
    return "x".join(str(n) for n in size)


def _config_text(cfg) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.as_dict().items())


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def report_and_save(doc: dict, text: str, failed: list[str], save: bool, results_dir, json_name: str,
                    text_name: str, extra=None) -> int:
    """The end of a measuring command: its text on stdout, each failure as a FAILED line on
    stderr; then, only if nothing failed and --save asked, the document and the text in
    results/<gpu>/ (and `extra(gpu_dir)`'s files: a plot). Returns the exit code."""
    from .. import results

    print(text)
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    if failed:
        return EXIT_FAILED
    if save:
        gpu_dir = Path(results_dir) / results.gpu_slug(doc["environment"]["gpu"])
        results.write_json_atomic(gpu_dir / json_name, doc)
        results.write_text_atomic(gpu_dir / text_name, text + "\n")
        written = [json_name, text_name] + (extra(gpu_dir) if extra is not None else [])
        print(f"saved {', '.join(str(gpu_dir / n) for n in written)}")
    return 0


def tracker_address(text: str) -> tuple[str, int]:
    """--tracker's HOST:PORT (argparse's type: a bad one is argparse's one-line error)."""
    from ..measure import rpc

    try:
        return rpc.parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
