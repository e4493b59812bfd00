"""The command line every ``python -m steps.stepN`` shares: build, verify, time, report, save.

With a GPU it times the step and its prior (the step before it, or numpy for step 1) in the
same process, and cuBLAS when CuPy is installed. Without one it builds the kernels and prints
their resources (threads, shared memory, and registers/spills from nvcc where present).
Bad input exits 2 with one line on stderr; a kernel that fails at run time is reported for
its size, the rest still run, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import schedules
from schedules import ConfigError

from ..measure import harness, nvcc
from .. import results
from ..report.pipes import quiet_broken_pipe  # every CLI's main: quiet when stdout's reader has gone

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


def _seed(text: str) -> int:
    """A seed numpy's default_rng takes: an integer >= 0."""
    return _at_least(text, 0)


# The parsers are built from pieces, so each CLI lists only the options it honours:
# steps.stepN = parser + add_run_options; steps (the ladder) the same without --explain;
# steps.sweep and steps.cublas pick single pieces.


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
    p.add_argument("--compare", type=Path, default=None, metavar="RESULTS",
                   help="time the step now and show it beside RESULTS (a stepN.json or a results/<gpu> "
                        "folder): before, after, ratio; a drop over 15%% exits 1 (needs a GPU)")


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


def step_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """python -m steps.stepN's options."""
    p = parser(prog, description)
    add_run_options(p)
    add_config_option(p)
    return p


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


@dataclass
class Row:
    """One size of the report table."""

    size: tuple[int, int, int]
    measurement: harness.Measurement
    config: object
    prior_name: str
    prior_gflops: float | None = None
    cublas_gflops: float | None = None  # the step's cuBLAS baseline at this size, this run (fp32 or TF32)
    cublas_host_bound: bool | None = None

    @property
    def speedup(self) -> float | None:
        m = self.measurement
        return m.gflops / self.prior_gflops if m.gflops and self.prior_gflops else None

    @property
    def pct_cublas(self) -> float | None:
        m = self.measurement
        return 100.0 * m.gflops / self.cublas_gflops if m.gflops and self.cublas_gflops else None


def host_flag(m) -> str:
    """The host-bound marker for a measurement ('' when the guard passed or was not run)."""
    return f" {HOST_MARK}" if getattr(m, "host_bound", None) else ""


@quiet_broken_pipe
def main(step_number: int, argv: list[str] | None = None) -> int:
    try:
        step = schedules.get_step(step_number)
    except ConfigError as exc:  # an unknown step number: one line, exit 2
        print(f"python -m steps.step{step_number}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    prog = f"python -m steps.step{step.number}"
    summary = step.doc.strip().splitlines()[0] if step.doc else step.name
    try:
        args = step_parser(prog, summary).parse_args(argv)
        check_run_options(args)
        sizes = requested_shapes(args)
        arch = pick_arch(prog, args.arch, timing=not (args.explain or args.build_only))
        overrides = config_overrides(args)
        configs = {size: _checked_config(step, *size, overrides=overrides) for size in sizes}
        if args.compare is not None:
            from . import compare  # it imports this module

            return compare.compare_step(step, args, arch)
        if args.explain:
            if len(sizes) > 1 and (args.sizes is not None or args.shape):  # not for the defaults
                print(f"{prog}: note: --explain shows one problem, the first given: {_size(sizes[0])} "
                      f"(of {len(sizes)})", file=sys.stderr)
            explain(step, sizes[0], configs[sizes[0]], arch, tuned_prior=args.tuned_prior, full=args.full)
            return 0
        if args.build_only:
            return build_only(step, sizes, configs, arch)
        if not harness.gpu_present():
            if args.save:
                raise UsageError("--save needs a CUDA GPU and none was found")
            print(f"{prog}: no CUDA GPU found; building only (timing needs a GPU)", file=sys.stderr)
            return build_only(step, sizes, configs, arch)
        return benchmark(step, sizes, configs, arch, args)
    except (UsageError, ConfigError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _checked_config(step, M, N, K, overrides: dict | None = None):
    """The step's tuned config at M x N x K, with `overrides` (--config) set; validated, or a
    one-line ConfigError that names the size."""
    cfg = step.default_config(M, N, K)
    if overrides:
        names = [f.name for f in dataclasses.fields(step.Config)]
        unknown = [name for name in overrides if name not in names]
        if unknown:
            raise ConfigError(f"step {step.number}'s config has no field {', '.join(unknown)}; "
                              f"its fields: {', '.join(names)}")
        cfg = step.Config.from_dict({**cfg.as_dict(), **overrides})
    try:
        cfg.validate(M, N, K)
    except ConfigError as exc:
        raise ConfigError(f"{M}x{N}x{K}: {exc}") from None
    return cfg


# --- no GPU: build and report resources ----------------------------------------------------


def build_only(step, sizes, configs, arch) -> int:
    print(f"step {step.number}: {step.name} ({step.idea}); arch {arch}")
    have_nvcc = nvcc.available()
    header = f"{'size':>16}  {'threads':>7}  {'smem B':>7}  {'regs':>5}  {'spills':>6}  config"
    print(header)
    print("-" * len(header))
    failed = False
    for size in sizes:
        cfg = configs[size]
        try:
            lib = schedules.build(step, *size, arch=arch, config=cfg)
        except ConfigError:
            raise
        except Exception as exc:  # a TVM failure for a valid config: report it for this size
            failed = True
            print(f"{_size(size):>16}  build failed: {harness._one_line(exc)}")
            continue
        report = nvcc.compile_report(schedules.cuda_source(lib), arch) if have_nvcc else None
        if report is None:
            regs, spills, smem = "-", "-", cfg.shared_bytes
        elif not report.ok:
            failed = True
            print(f"{_size(size):>16}  nvcc failed: {_last_line(report.log)}")
            continue
        else:
            # ptxas sees static shared memory only; dynamic (above 48 KB) comes from the config.
            regs, spills, smem = report.registers, report.spills, max(report.shared_bytes, cfg.shared_bytes)
        note = schedules.padding.describe(cfg, *size)  # odd shapes: padded tiles, narrower vector
        print(f"{_size(size):>16}  {cfg.threads:>7}  {smem:>7}  {regs!s:>5}  {spills!s:>6}  {_config_text(cfg)}"
              + (f" ({note})" if note else ""))
    if not have_nvcc:
        print("(nvcc not found: registers and spills not reported)")
    return EXIT_FAILED if failed else 0


# --- --explain: what this step changed ---------------------------------------------------


def explain(step, size, cfg, arch, tuned_prior: bool = False, full: bool = False) -> None:
    """What the step adds, taught: its docstring, both configs, the TVMScript diff against its
    prior, and the CUDA kernel with the helpers it calls; cut at EXPLAIN_LINES unless `full`."""
    M, N, K = size
    lines = [f"# step {step.number}: {step.name} — {step.idea}"]
    lines += ["#"] + [f"# {line}".rstrip() for line in step.doc.strip().splitlines()] + ["#"]
    lines.append(f"# {_size(size)}, arch {arch}")
    lines.append(f"# step {step.number} config: {_config_text(cfg)}")
    script = step.schedule(M, N, K, cfg).mod.script()
    if step.number > 1:
        prior = schedules.get_step(step.number - 1)
        prior_cfg, how = prior_config(step, prior, cfg, size, arch, tuned=tuned_prior)
        lines.append(f"# step {prior.number} config: {_config_text(prior_cfg)} ({how})")
        before = prior.schedule(M, N, K, prior_cfg).mod.script()
        label = f"step {prior.number} ({prior.name})"
    else:
        before = schedules.matmul(M, N, K).script()
        label = "unscheduled matmul"
    lines.append(f"# TVMScript diff against {label}")
    lines += difflib.unified_diff(before.splitlines(), script.splitlines(), label,
                                  f"step {step.number} ({step.name})", lineterm="", n=2)
    lib = schedules.build(step, M, N, K, arch=arch, config=cfg)
    lines += ["", f"# CUDA kernel ({arch}), with the helper functions it calls"]
    lines += kernel_only(schedules.cuda_source(lib)).splitlines()
    if not full and len(lines) > EXPLAIN_LINES:
        cut = len(lines) - EXPLAIN_LINES
        lines = lines[:EXPLAIN_LINES] + [f"# ... {cut} more lines not shown (--full shows all {len(lines)})"]
    print("\n".join(lines))


def prior_config(step, prior, cfg, size, arch, tuned: bool = False):
    """The config --explain builds `prior` with, and a few words saying which it is.

    By default `cfg` itself, cut down to the fields prior.Config has (each step's Config
    extends its prior's): same tiles, threads and stages on both sides of the diff, so the
    diff is the step's idea alone, not a change of tuned config beside it. With `tuned`, or
    where that config is not valid for the prior (step 1 at step 2's 64x64 tile would need
    4096 threads), the prior's own tuned config; also where step.Config does not extend
    prior.Config (step 12's warp tiles for tensor cores after step 11's thread tiles: fields
    of one name, such as warp_m, mean different things there)."""
    tuned_cfg = prior.default_config(*size)
    if tuned:
        return tuned_cfg, f"step {prior.number}'s own tuned config, --tuned-prior"
    if not issubclass(step.Config, prior.Config):
        return tuned_cfg, (f"step {prior.number}'s own tuned config: step {step.number}'s "
                           f"{step.Config.__name__} does not extend {prior.Config.__name__}")
    names = {f.name for f in dataclasses.fields(prior.Config)}
    try:
        shared = prior.Config(**{k: v for k, v in cfg.as_dict().items() if k in names})
        shared.validate(*size)
        shared.check_shared_memory(arch)
    except ConfigError as exc:
        return tuned_cfg, (f"step {prior.number}'s own tuned config: step {step.number}'s does not "
                           f"fit step {prior.number}: {exc}")
    return shared, f"step {step.number}'s, so the diff is the idea alone; --tuned-prior diffs tuned configs"


# A device function in TVM's preamble: `__forceinline__ __device__ void name(...) {`.
_DEVICE_FUNCTION = re.compile(
    r"^[ \t]*(?:static[ \t]+)?(?:(?:__forceinline__|inline)[ \t]+)*__device__\b[^;{(]*?(\w+)[ \t]*\(", re.M)


def kernel_only(source: str) -> str:
    """The kernel and the device helpers it calls (cp.async's inline asm and the like), without
    TVM's preamble of includes, macros and helpers this kernel does not use."""
    start = source.find('extern "C" __global__')
    if start < 0:
        return source
    helpers = _device_functions(source[:start])
    kernel = source[start:]
    kept: set[str] = set()
    text = kernel
    while True:  # helpers the kernel calls, then helpers those call
        new = {name for name in helpers if name not in kept and re.search(rf"\b{name}\b", text)}
        if not new:
            break
        kept |= new
        text = "\n".join(helpers[name] for name in new)
    used = [body for name, body in helpers.items() if name in kept]  # in TVM's order
    return "\n".join(used + [kernel])


def _device_functions(text: str) -> dict[str, str]:
    """{name: definition} of the device functions defined (not just declared) in `text`."""
    found: dict[str, str] = {}
    end = 0
    for match in _DEVICE_FUNCTION.finditer(text):
        if match.start() < end:
            continue
        brace, semicolon = text.find("{", match.end()), text.find(";", match.end())
        if brace < 0 or 0 <= semicolon < brace:  # a declaration
            continue
        end = _block_end(text, brace)
        found[match[1]] = text[match.start():end].rstrip()
    return found


def _block_end(text: str, brace: int) -> int:
    """The index after the `}` closing the `{` at `brace`; braces in strings do not count (the
    asm templates hold "{\\n" and "}\\n")."""
    depth, i, quote = 0, brace, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


# --- GPU: verify, time, compare, save --------------------------------------------------------


def benchmark(step, sizes, configs, arch, args) -> int:
    runner = harness.KernelRunner(repeat=args.repeat, seed=args.seed)
    prior = schedules.get_step(step.number - 1) if step.number > 1 else None
    prior_name = f"step {prior.number}" if prior else "numpy (CPU)"
    with_cublas = harness.cublas_available()
    env = harness.environment()
    print(f"step {step.number}: {step.name} — {step.idea}")
    print(f"{env.get('gpu')} ({env.get('sm_count')} SMs, SM clock {env.get('sm_clock_mhz')} MHz, "
          f"driver {env.get('driver')}), TVM {env['tvm_version']}, arch {arch}; "
          f"median of {args.repeat} CUDA-event samples" + ("" if with_cublas else "; CuPy not installed: no cuBLAS column"))
    overrides = config_overrides(args)
    if overrides:  # the prior keeps its own tuned config: x prior is against the ladder's prior
        print(f"config: step {step.number}'s tuned config with "
              + " ".join(f"{k}={v}" for k, v in overrides.items()) + f" (--config); {prior_name} at its own")
    rows = []
    for size in sizes:
        M, N, K = size
        row = Row(size, runner.measure(step, M, N, K, arch, configs[size]), configs[size], prior_name)
        if prior is not None:
            p = runner.measure(prior, M, N, K, arch, _checked_config(prior, M, N, K))
            row.prior_gflops = p.gflops if p.ok else None
        else:
            row.prior_gflops = harness.time_numpy(M, N, K, seed=args.seed).gflops(M, N, K)
        if with_cublas:
            from ..measure import references

            c = references.measure(references.baseline(step), size, runner, arch, env.get("gpu"), args.repeat,
                                   args.seed)
            row.cublas_gflops, row.cublas_host_bound = (c.gflops, c.host_bound) if c.ok else (None, None)
            if not c.ok:
                print(f"cuBLAS failed at {_size(size)}: {c.error}", file=sys.stderr)
        rows.append(row)
        m = row.measurement
        print(f"  {_size(size)}: " + (f"{m.gflops:.0f} GFLOPS" if m.gflops else f"failed ({m.error})"),
              file=sys.stderr, flush=True)
    print(format_table(rows, tf32=step.precision == "tf32"))
    failures = [r for r in rows if not r.measurement.ok]
    for r in failures:
        print(f"FAILED {_size(r.size)}: {r.measurement.error}", file=sys.stderr)
    if args.save:
        env = harness.environment()  # again, now that the GPU is warm: clocks under load
        if failures:
            print("not saved: some sizes failed", file=sys.stderr)
        else:
            path = results.step_path(args.results_dir, env["gpu"], step.number)
            results.write_atomic(path, document(step, rows, env, args.repeat))
            print(f"saved {path}")
    return EXIT_FAILED if failures else 0


def document(step, rows, env, repeat) -> dict:
    return {
        "schema": results.SCHEMA_VERSION,
        "step": step.number,
        "name": step.name,
        "idea": step.idea,
        "precision": step.precision,
        "tensor_cores": step.tensor_cores,
        # What "cublas_gflops" / "pct_cublas" are of: cuBLAS strict fp32, or TF32 for a TF32 step.
        "baseline": "cublas_tf32" if step.precision == "tf32" else "cublas",
        "environment": env,
        "method": {
            "timer": "CUDA events: tvm time_evaluator (TVM), cupy.cuda.Event around cublasGemmEx calls "
                     "through CuPy's low-level binding (cuBLAS, TF32 off)",
            "statistic": "median of samples; each sample the mean of back-to-back launches (~1 ms)",
            "repeat": repeat,
            "tolerance": harness.tolerance(step),
            "precision": step.precision,
            "host_bound": f"host time to submit one launch >= {harness.HOST_BOUND_FRACTION:g} x GPU time per launch",
            "flops": "2*M*N*K",
        },
        # Sizes where this step may be slower than its prior, with why (the step-over-step gate).
        "expected_regression": results.expected_regressions(step.module),
        "results": [
            {
                "M": r.size[0], "N": r.size[1], "K": r.size[2],
                "config": r.config.as_dict(),
                "median_ms": r.measurement.median_ms,
                "min_ms": r.measurement.min_ms,
                "max_ms": r.measurement.max_ms,
                "gflops": r.measurement.gflops,
                "rel_err": r.measurement.rel_err,
                "host_us": r.measurement.host_us,
                "host_bound": r.measurement.host_bound,
                "prior": {"name": r.prior_name, "gflops": r.prior_gflops},
                "speedup_vs_prior": r.speedup,
                "cublas_gflops": r.cublas_gflops,
                "cublas_host_bound": r.cublas_host_bound,
                "pct_cublas": r.pct_cublas,
            }
            for r in rows
        ],
    }


def format_table(rows: list[Row], tf32: bool = False) -> str:
    header = (f"{'size':>16}  {'median ms':>9}  {'min-max ms':>17}  {'GFLOPS':>8}  "
              f"{'x prior':>8}  {'% cuBLAS':>8}  {'rel err':>8}  {'host us':>7}")
    lines = [header, "-" * len(header)]
    for r in rows:
        m = r.measurement
        if not m.ok and m.median_ms is None:
            lines.append(f"{_size(r.size):>16}  FAILED: {m.error}")
            continue
        speed = f"{r.speedup:.2f}x" if r.speedup else "-"
        pct = f"{r.pct_cublas:.0f}%" if r.pct_cublas else "-"
        err = f"{m.rel_err:.1e}" if m.rel_err is not None else "-"
        host = f"{m.host_us:.1f}" if m.host_us is not None else "-"
        flag = host_flag(m) + ("" if m.ok else "  WRONG")
        lines.append(f"{_size(r.size):>16}  {m.median_ms:>9.4f}  {m.min_ms:>8.4f}-{m.max_ms:<8.4f}  "
                     f"{m.gflops:>8.0f}  {speed:>8}  {pct:>8}  {err:>8}  {host:>7}{flag}")
        if r.cublas_host_bound:
            lines.append(f"{'':>16}  cuBLAS at this size is host-bound {HOST_MARK}: its % is not a kernel-time ratio")
    if rows:
        lines.append(f"x prior: against {rows[0].prior_name}, measured in this run; "
                     "host us: host time to submit one launch")
        if tf32:
            lines.append(f"TF32 (reduced precision): rel err held to {harness.TF32_TOLERANCE:g}, not 1e-5; "
                         "% cuBLAS is of cuBLAS TF32, its peer")
        if any(r.measurement.host_bound or r.cublas_host_bound for r in rows):
            lines.append(HOST_LEGEND)
    return "\n".join(lines)


def _size(size) -> str:
    return "x".join(str(n) for n in size)


def _config_text(cfg) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.as_dict().items())


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"
