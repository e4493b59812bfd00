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
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import schedules
from schedules import ConfigError

from .. import results
from ..measure import harness, nvcc
from ..report.pipes import quiet_broken_pipe  # every CLI's main: quiet when stdout's reader has gone
from . import compare
from .options import (EXIT_FAILED, EXIT_USAGE, EXPLAIN_LINES, HOST_LEGEND, HOST_MARK, UsageError, _config_text,
                      _last_line, _size, add_config_option, add_run_options, check_run_options, config_overrides,
                      host_flag, parser, pick_arch, requested_shapes)


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
    cublas_rel_err: float | None = None  # 16-bit runs: cuBLAS's error on the step's own inputs

    @property
    def speedup(self) -> float | None:
        m = self.measurement
        return m.gflops / self.prior_gflops if m.gflops and self.prior_gflops else None

    @property
    def pct_cublas(self) -> float | None:
        m = self.measurement
        return 100.0 * m.gflops / self.cublas_gflops if m.gflops and self.cublas_gflops else None


def step_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """python -m steps.stepN's options."""
    p = parser(prog, description)
    add_run_options(p)
    add_config_option(p)
    return p


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
        dtype = step.check_dtype(args.dtype)  # a step with no such form: its one line, exit 2
        sizes = requested_shapes(args)
        arch = pick_arch(prog, args.arch, timing=not (args.explain or args.build_only))
        step.build_arch(arch)  # the Hopper rungs on another arch: one line, before anything runs
        overrides = config_overrides(args)
        configs = {size: _checked_config(step, *size, overrides=overrides, dtype=dtype) for size in sizes}
        if args.compare is not None:
            return compare_step(step, args, arch)
        if args.explain:
            if len(sizes) > 1 and (args.sizes is not None or args.shape):  # not for the defaults
                print(f"{prog}: note: --explain shows one problem, the first given: {_size(sizes[0])} "
                      f"(of {len(sizes)})", file=sys.stderr)
            explain(step, sizes[0], configs[sizes[0]], arch, tuned_prior=args.tuned_prior, full=args.full,
                    dtype=dtype)
            return 0
        if args.build_only:
            return build_only(step, sizes, configs, arch, dtype)
        if not harness.gpu_present():
            if args.save:
                raise UsageError("--save needs a CUDA GPU and none was found")
            print(f"{prog}: no CUDA GPU found; building only (timing needs a GPU)", file=sys.stderr)
            return build_only(step, sizes, configs, arch, dtype)
        return benchmark(step, sizes, configs, arch, args)
    except (UsageError, ConfigError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def compare_step(step, args, arch: str) -> int:
    """``python -m steps.stepN --compare RESULTS``: time the step now at the saved sizes."""
    if args.save:
        raise UsageError("--compare does not save; run --save on its own once the change is final")
    dtype = args.dtype
    doc = compare.load_before(args.compare, step.number, dtype)
    given = args.sizes is not None or bool(args.shape)
    shapes = requested_shapes(args) if given else compare.saved_shapes(doc)
    overrides = config_overrides(args)
    configs = {size: _checked_config(step, *size, overrides=overrides, dtype=dtype) for size in shapes}
    if not harness.gpu_present():
        raise UsageError("--compare needs a CUDA GPU and none was found")
    source = str(compare.results_file(args.compare, step.number, dtype))
    runner = harness.KernelRunner(repeat=args.repeat, seed=args.seed)
    measured = {}
    try:
        for size in shapes:
            measured[size] = (compare.measure_safely(runner, step, size, arch, configs[size], dtype), configs[size])
            print(f"  {_size(size)}: measured", file=sys.stderr, flush=True)
    finally:
        compare.close(runner)
    compare.warn_if_other_gpu(doc, harness.environment().get("gpu"), source)
    items = compare.comparisons(doc, measured)
    print(compare.format_comparison(step.number, step.name, items, source))
    return EXIT_FAILED if any(c.bad for c in items) else 0


def _checked_config(step, M, N, K, overrides: dict | None = None, dtype: str = "fp32"):
    """The step's tuned config at M x N x K (for `dtype` inputs), with `overrides` (--config) set;
    validated, or a one-line ConfigError that names the size."""
    cfg = step.default_config(M, N, K) if dtype == "fp32" else step.default_config(M, N, K, dtype)
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


def prior_step(step, dtype: str = "fp32"):
    """The step `step` is measured against: the one before it in the registry (None for the
    first, whose prior is numpy), or the module's PRIOR where the one before it computes another
    precision (step 20, TF32, after step 19, 3xTF32); for 16-bit inputs, the latest such step
    that has that dtype (None for the first: it has no prior)."""
    named = getattr(step.module, "PRIOR", None)  # a rung after one of another precision (20 after 19)
    earlier = [s for s in schedules.STEPS if s.number < step.number and dtype in s.dtypes
               and (named is None or s.number <= named)]
    return earlier[-1] if earlier else None


def prior_label(step, dtype: str = "fp32") -> str:
    """How the prior column names step's prior."""
    prior = prior_step(step, dtype)
    if prior is not None:
        return f"step {prior.number}"
    return "numpy (CPU)" if dtype == "fp32" else f"none (the first {dtype} step)"


def build_only(step, sizes, configs, arch, dtype: str = "fp32") -> int:
    built = step.build_arch(arch)
    print(f"step {step.number}: {step.name_for(dtype)} ({step.idea}); arch {arch}"
          + (f" (built for {built})" if built != arch else "") + (f"; {dtype} inputs" if dtype != "fp32" else ""))
    have_nvcc = nvcc.available()
    header = f"{'size':>16}  {'threads':>7}  {'smem B':>7}  {'regs':>5}  {'spills':>6}  config"
    print(header)
    print("-" * len(header))
    failed = False
    for size in sizes:
        cfg = configs[size]
        try:
            lib = schedules.build(step, *size, arch=arch, config=cfg, **_dtype_kw(dtype))
        except ConfigError:
            raise
        except Exception as exc:  # a TVM failure for a valid config: report it for this size
            failed = True
            print(f"{_size(size):>16}  build failed: {harness._one_line(exc)}")
            continue
        report = nvcc.compile_report(schedules.cuda_source(lib), step.build_arch(arch)) if have_nvcc else None
        if report is None:
            regs, spills, smem = "-", "-", cfg.shared_bytes
        elif not report.ok:
            failed = True
            print(f"{_size(size):>16}  nvcc failed: {_last_line(report.log)}")
            continue
        else:
            # ptxas sees static shared memory only; dynamic (above 48 KB) comes from the config.
            regs, spills, smem = report.registers, report.spills, max(report.shared_bytes, cfg.shared_bytes)
        note = schedules.transforms.padding.describe(cfg, *size)  # odd shapes: padded tiles, narrower vector
        print(f"{_size(size):>16}  {cfg.threads:>7}  {smem:>7}  {regs!s:>5}  {spills!s:>6}  {_config_text(cfg)}"
              + (f" ({note})" if note else ""))
    if not have_nvcc:
        print("(nvcc not found: registers and spills not reported)")
    return EXIT_FAILED if failed else 0


def _dtype_kw(dtype: str) -> dict:
    """schedules.build's / Step.schedule's keyword for `dtype`: none for fp32 (the call as before)."""
    return {} if dtype == "fp32" else {"dtype": dtype}


# --- --explain: what this step changed ---------------------------------------------------


def explain(step, size, cfg, arch, tuned_prior: bool = False, full: bool = False, dtype: str = "fp32") -> None:
    """What the step adds, taught: its docstring, both configs, the TVMScript diff against its
    prior, and the CUDA kernel with the helpers it calls; cut at EXPLAIN_LINES unless `full`.
    For 16-bit inputs the prior is the step before it with that dtype (prior_step), else the
    unscheduled 16-bit matmul."""
    M, N, K = size
    kw = _dtype_kw(dtype)
    lines = [f"# step {step.number}: {step.name_for(dtype)} — {step.idea}"]
    lines += ["#"] + [f"# {line}".rstrip() for line in step.doc.strip().splitlines()] + ["#"]
    lines.append(f"# {_size(size)}, arch {arch}" + (f", {dtype} inputs (C in {dtype}, fp32 sums)" if kw else ""))
    lines.append(f"# step {step.number} config: {_config_text(cfg)}")
    lines += own_pieces(step)
    script = step.schedule(M, N, K, cfg, **kw).mod.script()
    prior = prior_step(step, dtype)
    if prior is not None:
        prior_cfg, how = prior_config(step, prior, cfg, size, arch, tuned=tuned_prior, dtype=dtype)
        lines.append(f"# step {prior.number} config: {_config_text(prior_cfg)} ({how})")
        before = prior.schedule(M, N, K, prior_cfg, **kw).mod.script()
        label = f"step {prior.number} ({prior.name_for(dtype)})"
    else:
        before = schedules.matmul(M, N, K, *([schedules.DTYPES[dtype]] if kw else [])).script()
        label = "unscheduled matmul" + (f" ({dtype})" if kw else "")
    lines.append(f"# TVMScript diff against {label}")
    lines += difflib.unified_diff(before.splitlines(), script.splitlines(), label,
                                  f"step {step.number} ({step.name_for(dtype)})", lineterm="", n=2)
    lib = schedules.build(step, M, N, K, arch=arch, config=cfg, **kw)
    lines += ["", f"# CUDA kernel ({arch}), with the helper functions it calls"]
    lines += kernel_only(schedules.cuda_source(lib)).splitlines()
    if not full and len(lines) > EXPLAIN_LINES:
        cut = len(lines) - EXPLAIN_LINES
        lines = lines[:EXPLAIN_LINES] + [f"# ... {cut} more lines not shown (--full shows all {len(lines)})"]
    print("\n".join(lines))


def own_pieces(step) -> list[str]:
    """A written rung's own code (the Hopper rungs list it in PIECES): the source of each piece,
    so --explain shows what the rung adds to its prior's pieces."""
    names = getattr(step.module, "PIECES", ())
    if not names:
        return []
    path = Path(inspect.getsourcefile(step.module)).name
    lines = [f"# step {step.number}'s own pieces (schedules/{path}): {', '.join(names)}"]
    for name in names:
        lines += inspect.getsource(getattr(step.module, name)).rstrip().splitlines()
    return lines


def prior_config(step, prior, cfg, size, arch, tuned: bool = False, dtype: str = "fp32"):
    """The config --explain builds `prior` with, and a few words saying which it is.

    By default `cfg` itself, cut down to the fields prior.Config has (each step's Config
    extends its prior's): same tiles, threads and stages on both sides of the diff, so the
    diff is the step's idea alone, not a change of tuned config beside it. With `tuned`, or
    where that config is not valid for the prior (step 1 at step 2's 64x64 tile would need
    4096 threads), the prior's own tuned config; also where step.Config does not extend
    prior.Config (step 12's warp tiles for tensor cores after step 11's thread tiles: fields
    of one name, such as warp_m, mean different things there)."""
    tuned_cfg = prior.default_config(*size) if dtype == "fp32" else prior.default_config(*size, dtype)
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
    dtype = getattr(args, "dtype", "fp32")
    runner = harness.KernelRunner(repeat=args.repeat, seed=args.seed)
    prior = prior_step(step, dtype)
    prior_name = prior_label(step, dtype)
    with_cublas = harness.cublas_available()
    env = harness.environment()
    print(f"step {step.number}: {step.name_for(dtype)} — {step.idea}" + (f" ({dtype} inputs)" if dtype != "fp32" else ""))
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
        # 16-bit: the step, its prior and cuBLAS checked on the same inputs (one seed for the size)
        seed = harness.shared_seed(args.seed, size) if dtype != "fp32" else args.seed
        kw = {} if dtype == "fp32" else {"dtype": dtype, "seed": seed}
        row = Row(size, runner.measure(step, M, N, K, arch, configs[size], **kw), configs[size], prior_name)
        if prior is not None:
            p = runner.measure(prior, M, N, K, arch, _checked_config(prior, M, N, K, dtype=dtype), **kw)
            row.prior_gflops = p.gflops if p.ok else None
        elif dtype == "fp32":
            row.prior_gflops = harness.time_numpy(M, N, K, seed=args.seed).gflops(M, N, K)
        if with_cublas:
            from ..measure import references

            c = references.measure(references.baseline(step, dtype), size, runner, arch, env.get("gpu"), args.repeat,
                                   seed)
            row.cublas_gflops, row.cublas_host_bound = (c.gflops, c.host_bound) if c.ok else (None, None)
            row.cublas_rel_err = c.rel_err if c.ok else None
            if not c.ok:
                print(f"cuBLAS failed at {_size(size)}: {c.error}", file=sys.stderr)
        rows.append(row)
        m = row.measurement
        print(f"  {_size(size)}: " + (f"{m.gflops:.0f} GFLOPS" if m.gflops else f"failed ({m.error})"),
              file=sys.stderr, flush=True)
    print(format_table(rows, tf32=step.precision_of(dtype) == "tf32", dtype=dtype))
    failures = [r for r in rows if not r.measurement.ok]
    for r in failures:
        print(f"FAILED {_size(r.size)}: {r.measurement.error}", file=sys.stderr)
    if args.save:
        env = harness.environment()  # again, now that the GPU is warm: clocks under load
        if failures:
            print("not saved: some sizes failed", file=sys.stderr)
        else:
            path = results.step_path(args.results_dir, env["gpu"], step.number, dtype)
            results.write_atomic(path, document(step, rows, env, args.repeat, dtype))
            print(f"saved {path}")
    return EXIT_FAILED if failures else 0


def document(step, rows, env, repeat, dtype: str = "fp32") -> dict:
    from ..measure import references

    precision = step.precision_of(dtype)
    doc = {
        "schema": results.SCHEMA_VERSION,
        "step": step.number,
        "name": step.name_for(dtype),
        "idea": step.idea,
        "precision": precision,
        "tensor_cores": step.tensor_cores,
        # What "cublas_gflops" / "pct_cublas" are of: cuBLAS strict fp32, or TF32 for a TF32 step,
        # or cuBLAS in the inputs' dtype (fp32 sum) for a 16-bit run.
        "baseline": references.baseline(step, dtype).key,
        "environment": env,
        "method": {
            "timer": "CUDA events: tvm time_evaluator (TVM), cupy.cuda.Event around cublasGemmEx calls "
                     "through CuPy's low-level binding (cuBLAS, TF32 off)",
            "statistic": "median of samples; each sample the mean of back-to-back launches (~1 ms)",
            "repeat": repeat,
            "tolerance": harness.tolerance(step, dtype),
            "precision": precision,
            "host_bound": f"host time to submit one launch >= {harness.HOST_BOUND_FRACTION:g} x GPU time per launch",
            "flops": "2*M*N*K",
        },
        # Sizes where this step may be slower than its prior, with why (the step-over-step gate).
        "expected_regression": results.expected_regressions(step.module, dtype),
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
    if dtype != "fp32":  # fp32 files stay as they were: no key means fp32 (results.doc_dtype)
        doc["dtype"] = dtype
        for row, r in zip(doc["results"], rows):  # cuBLAS's error on the same inputs, beside the step's
            row["cublas_rel_err"] = r.cublas_rel_err
    return doc


def format_table(rows: list[Row], tf32: bool = False, dtype: str = "fp32") -> str:
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
        if dtype != "fp32":
            from ..measure import dtypes

            lines.append(f"{dtype} inputs, C in {dtype} (fp32 sums): rel err against the float64 product of the "
                         f"{dtype} inputs, held to {dtypes.TOLERANCE[dtype]:g}; % cuBLAS is of cuBLAS {dtype}")
            errs = [f"{_size(r.size)} {r.cublas_rel_err:.1e}" for r in rows if r.cublas_rel_err is not None]
            if errs:
                lines.append(f"cuBLAS {dtype}'s rel err on the same inputs: " + ", ".join(errs))
        if any(r.measurement.host_bound or r.cublas_host_bound for r in rows):
            lines.append(HOST_LEGEND)
    return "\n".join(lines)
