"""python -m steps: the whole ladder in one process, one combined table, saved and plotted.

    python -m steps                        # on a GPU: every step at 512, 1024, 2048
    python -m steps --steps 3-6 --save     # a range; saves results, CSV, roofs, plots, README
    python -m steps --build-only           # anywhere: threads, shared memory, registers per step

Every step is measured once per size, and its "× prior" is the step before it measured in
the same run (each step's prior is measured too: 1,4,7 measures 3 and 6 as well); step 1's
prior is numpy on the host CPU. cuBLAS is timed once per size. A step that fails at one size
is reported and the run goes on; the exit code is then 1, and ``--save`` writes nothing for
that step. Without a GPU the ladder is built only (one note on stderr), and ``--save`` is an
error. Progress goes to stderr, one ``[n/total]`` line per kernel built or measured (as
``python -m steps.bench`` prints), the table to stdout. Bad input prints one line and exits 2.

``--dtype fp16`` / ``bf16`` (issue 47) runs the 16-bit ladder: the steps that have that dtype
(``Step.dtypes``), each one's "× prior" against the step before it that has it (the first has
none), and the references of that dtype (cuBLAS with fp32 compute, the baseline of "% cuBLAS";
dlight's default schedule). ``--steps`` naming a step without that dtype is bad input.
``--save`` writes into results/<gpu>/<dtype>/ (steps/results/__init__.py): the step files,
references.json, ladder.csv and that dtype's two plots, gflops.png and pct_cublas.png
(steps/report/plot.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import schedules
from schedules import ConfigError

from .. import results
from ..measure import harness, nvcc, references, roofline
from ..report.pipes import quiet_broken_pipe
from . import cli, compare, options

PROG = "python -m steps"


# --- arguments ------------------------------------------------------------------------------


def parse_steps(text: str) -> list:
    """'all', '7', '3-6' or '1,4,7' (or a mix, '1,3-5') -> the registry's Steps, in order."""
    numbers = [s.number for s in schedules.STEPS]
    span = f"steps are {numbers[0]}-{numbers[-1]}"
    text = text.strip().lower()
    if text == "all":
        return list(schedules.STEPS)
    chosen: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise argparse.ArgumentTypeError(f"cannot read {part.strip()!r}: use e.g. 3-6, 7, 1,4,7 or all")
        low = int(match[1])
        high = int(match[2]) if match[2] else low
        if low > high:
            raise argparse.ArgumentTypeError(f"range {low}-{high} runs backwards")
        unknown = [n for n in (low, high) if n not in numbers]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown step {unknown[0]}; {span}")
        chosen.update(range(low, high + 1))
    return [s for s in schedules.STEPS if s.number in chosen]


def parser() -> argparse.ArgumentParser:
    p = options.parser(PROG, __doc__.strip())
    options.add_run_options(p, explain=False)
    # --explain is per step: accepted here only to say so (an error), and not listed.
    p.add_argument("--explain", action="store_true", help=argparse.SUPPRESS)
    # The step CLI's options, said for the whole ladder.
    helps = {
        "--save": "write results/<gpu>/stepN.json (steps whose every size passed), ladder.csv, machine.json, "
                  "the plots and the README table (needs a GPU)",
        "--compare": "time the steps now and show each beside RESULTS/stepN.json (a results/<gpu> folder): "
                     "before, after, ratio; a drop over 15%% exits 1 (needs a GPU)",
    }
    for action in p._actions:
        for flag, text in helps.items():
            if flag in action.option_strings:
                action.help = text
    # Repeatable, like --sizes: `--steps 1-3 --steps 7` runs 1, 2, 3 and 7.
    p.add_argument("--steps", type=parse_steps, action="append", default=None, metavar="RANGE",
                   help="which steps: all (default), 7, 3-6 or 1,4,7 (repeatable)")
    p.add_argument("--references", type=lambda text: references.keys_arg(text, allow_none=True), default=list(references.ALL), metavar="KEYS",
                   help=f"reference rows: all (default), none, or a comma list of {', '.join(references.KEYS)} "
                        "(cublas is the %% cuBLAS baseline)")
    return p


def chosen_steps(ranges: list[list] | None, dtype: str = "fp32") -> list:
    """The steps of every --steps given (all without one), in the registry's order. For 16-bit
    inputs, all means every step that has that dtype, and a step given that has not is a
    ConfigError (its one line names the steps that have it)."""
    if not ranges:
        return [s for s in schedules.STEPS if dtype in s.dtypes]
    numbers = {s.number for steps in ranges for s in steps}
    chosen = [s for s in schedules.STEPS if s.number in numbers]
    if len(chosen) == len(schedules.STEPS):  # --steps all
        return [s for s in chosen if dtype in s.dtypes]
    for s in chosen:
        s.check_dtype(dtype)
    return chosen


def prior_of(step, dtype: str = "fp32"):
    """The step before `step` in the registry, or None for the first (its prior is numpy); for
    16-bit inputs the step before it that has that dtype (None for the first: no prior)."""
    return cli.prior_step(step, dtype)


def runnable_steps(steps: list, arch: str, prog: str = PROG) -> list:
    """The steps that can run on `arch`: the Hopper rungs (sm_90a) are skipped elsewhere, with
    one line, instead of failing the ladder."""
    skipped = [s.number for s in steps if not s.runs_on(arch)]
    kept = [s for s in steps if s.runs_on(arch)]
    if skipped:
        numbers = ", ".join(map(str, skipped))
        if not kept:
            raise options.UsageError(f"step(s) {numbers} need a Hopper GPU (sm_90a: wgmma, TMA); this is {arch}")
        print(f"{prog}: skipping step(s) {numbers}: they need a Hopper GPU (sm_90a: wgmma, TMA); this is {arch}",
              file=sys.stderr)
    return kept


def with_priors(steps: list, dtype: str = "fp32") -> list:
    """The steps to measure: the requested ones and each one's prior, in the registry's order, so
    every × prior is same-run (a range adds its first step's prior; 1,4,7 adds 3 and 6)."""
    priors = (prior_of(s, dtype) for s in steps)
    wanted = {s.number for s in steps} | {p.number for p in priors if p is not None}
    return [s for s in schedules.STEPS if s.number in wanted]


@quiet_broken_pipe
def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        dtype = args.dtype
        steps = chosen_steps(args.steps, dtype)
        shapes = options.requested_shapes(args)
        if args.explain:
            raise options.UsageError("--explain is per step: python -m steps.stepN --explain")
        options.check_run_options(args)
        arch = options.pick_arch(PROG, args.arch, timing=not args.build_only)
        steps = runnable_steps(steps, arch)
        if args.save and args.compare is not None:
            raise options.UsageError("--compare does not save; run --save on its own")
        measured_steps = steps if args.build_only else with_priors(steps, dtype)
        configs = {(s.number, size): cli._checked_config(s, *size, dtype=dtype) for s in measured_steps for size in shapes}
        if args.build_only:
            return build_only(steps, shapes, configs, arch, dtype)
        if not harness.gpu_present():
            if args.save:
                raise options.UsageError("--save needs a CUDA GPU and none was found")
            if args.compare is not None:
                raise options.UsageError("--compare needs a CUDA GPU and none was found")
            print(f"{PROG}: no CUDA GPU found; building only (timing needs a GPU)", file=sys.stderr)
            return build_only(steps, shapes, configs, arch, dtype)
        before = _compare_docs(args.compare, steps, dtype) if args.compare is not None else None
        return run(steps, shapes, configs, arch, args, before)
    except (options.UsageError, ConfigError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE


# --- no GPU: the ladder's resources -------------------------------------------------------------


@dataclass
class Built:
    """One step at one size, built: what the build-only summary prints."""

    step: object
    size: tuple[int, int, int]
    config: object
    report: object = None  # an nvcc.PtxasReport, or None without nvcc
    error: str | None = None


def build_all(steps, shapes, configs, arch, progress: Progress | None = None, dtype: str = "fp32") -> list[Built]:
    """Build every step at every size; nvcc's resource reports run in parallel threads.

    TVM's build is fast (~0.1 s a kernel) and not thread-safe to rely on, so it stays serial;
    nvcc (~1 s a kernel) is a subprocess, so a thread pool overlaps those. Each kernel, once
    built and reported, is one line on stderr (``progress``; bench's ``[n/total]``); the lines
    all come from this thread, between builds and at the end."""
    progress = progress or Progress(len(steps) * len(shapes))
    built: list[Built] = []
    pending = []

    def done(item: Built) -> None:
        progress.report(f"step {item.step.number} {options._size(item.size)}", item.error or "built")

    def finish(item: Built, future) -> None:
        try:
            item.report = future.result()
        except Exception as exc:
            item.error = f"nvcc failed: {harness._one_line(exc)}"
        else:
            if item.report is not None and not item.report.ok:
                item.error = f"nvcc failed: {options._last_line(item.report.log)}"
        done(item)

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for step in steps:
            for size in shapes:
                item = Built(step, size, configs[(step.number, size)])
                built.append(item)
                try:
                    lib = schedules.build(step, *size, arch=arch, config=item.config, **cli._dtype_kw(dtype))
                    source = schedules.cuda_source(lib)
                except Exception as exc:
                    item.error = f"build failed: {harness._one_line(exc)}"
                    done(item)
                    continue
                if nvcc.available():
                    pending.append((item, pool.submit(nvcc.compile_report, source, step.build_arch(arch))))
                else:
                    done(item)
                for entry in [e for e in pending if e[1].done()]:  # reports finished meanwhile
                    pending.remove(entry)
                    finish(*entry)
        for item, future in pending:
            finish(item, future)
    return built


def format_build_summary(built: list[Built], arch: str, have_nvcc: bool, dtype: str = "fp32") -> str:
    steps = list(dict.fromkeys(b.step.number for b in built))
    name_width = max([len(f"{b.step.number}. {b.step.name}") for b in built] + [4])
    header = (f"{'step':<{name_width}}  {'size':>16}  {'threads':>7}  {'smem B':>7}  {'regs':>5}  "
              f"{'spills':>6}  config")
    inputs = f", {dtype} inputs" if dtype != "fp32" else ""
    lines = [f"ladder: {len(steps)} step{'s' if len(steps) != 1 else ''}, arch {arch}{inputs}, built only (no timing)",
             header, "-" * len(header)]
    last, dynamic = None, False
    for b in built:
        label = f"{b.step.number}. {b.step.name}" if b.step.number != last else ""
        last = b.step.number
        prefix = f"{label:<{name_width}}  {options._size(b.size):>16}"
        if b.error:
            lines.append(f"{prefix}  FAILED: {b.error}")
            continue
        tiles = getattr(b.config, "shared_bytes", 0)
        if b.report is None:
            regs, spills, smem = "-", "-", str(tiles)
        else:
            regs, spills, smem = b.report.registers, b.report.spills, str(b.report.shared_bytes)
            if tiles > b.report.shared_bytes:  # ptxas sees static shared only
                smem, dynamic = f"{tiles} dyn", True
        note = schedules.transforms.padding.describe(b.config, *b.size)
        lines.append(f"{prefix}  {b.config.threads:>7}  {smem:>9}  {regs!s:>5}  {spills!s:>6}  "
                     f"{options._config_text(b.config)}" + (f" ({note})" if note else ""))
    if dynamic:
        lines.append("dyn: dynamic shared memory, from the config's tiles (ptxas reports static shared only)")
    if not have_nvcc:
        lines.append("(nvcc not found: registers and spills not reported; smem B is the config's tiles)")
    return "\n".join(lines)


def build_only(steps, shapes, configs, arch, dtype: str = "fp32") -> int:
    started = time.monotonic()
    built = build_all(steps, shapes, configs, arch, dtype=dtype)
    print(format_build_summary(built, arch, nvcc.available(), dtype))
    print(f"built {len(built)} kernels in {time.monotonic() - started:.1f} s")
    return options.EXIT_FAILED if any(b.error for b in built) else 0


# --- GPU: measure the ladder ------------------------------------------------------------------


class Progress:
    """One stderr line per finished item: running count, seconds since the start, the outcome."""

    def __init__(self, total: int, stream=None, clock=time.monotonic):
        self.total, self.done = total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.started = clock()

    def report(self, what: str, outcome: str) -> None:
        self.done += 1
        width = len(str(self.total))
        print(f"[{self.done:>{width}}/{self.total}] {self.clock() - self.started:6.1f} s  {what}: {outcome}",
              file=self.stream, flush=True)


def _outcome(m: harness.Measurement) -> str:
    if m.ok:
        return f"{m.gflops:.0f} GFLOPS"
    return f"FAILED ({m.error})"


def measure_ladder(steps, shapes, configs, arch, args, progress: Progress | None = None,
                   refs=None, gpu_name: str | None = None, dtype: str = "fp32"):
    """Time the references, then each step (and each one's prior) once per size.

    Returns (rows, measured_refs): rows maps (step number, size) to a cli.Row whose prior is
    the step before it measured here (numpy for the first step) and whose % cuBLAS is against
    the cuBLAS fp32 row of this run; measured_refs maps (reference key, size) to a Measurement
    (steps/measure/references.py; a reference that cannot run at a size has no entry, said once)."""
    refs = references.for_dtype(list(references.ALL) if refs is None else list(refs), dtype)
    measured_steps = with_priors(steps, dtype)
    # The first step's prior is numpy on the CPU (fp32 only: a 16-bit ladder's first step has none).
    needs_numpy = prior_of(steps[0], dtype) is None and dtype == "fp32"
    runnable = []
    for ref in refs:
        for size in shapes:
            why_not = references.available(ref, size, gpu_name)
            if why_not:
                print(f"{references.label(ref, gpu_name)}: no row at {options._size(size)}: {why_not}", file=sys.stderr)
            else:
                runnable.append((ref, size))
    total = len(shapes) * (len(measured_steps) + int(needs_numpy)) + len(runnable)
    progress = progress or Progress(total)
    runner = harness.KernelRunner(repeat=args.repeat, seed=args.seed)

    measured_refs: dict = {}
    measurements: dict = {}
    numpy_gflops: dict = {}
    # A 16-bit ladder checks every row of a size on the same inputs (one seed per size), so the
    # steps' errors and cuBLAS's stand side by side; fp32's draw as before.
    seeds = {size: harness.shared_seed(args.seed, size) for size in shapes} if dtype != "fp32" else {}
    try:
        for ref, size in runnable:
            m = references.measure(ref, size, runner, arch, gpu_name, args.repeat, seeds.get(size, args.seed))
            measured_refs[(ref.key, size)] = m
            progress.report(f"{references.label(ref, gpu_name)} {options._size(size)}", _outcome(m))

        for size in shapes if needs_numpy else ():
            numpy_gflops[size] = harness.time_numpy(*size, seed=args.seed).gflops(*size)
            progress.report(f"numpy (CPU) {options._size(size)}", f"{numpy_gflops[size]:.0f} GFLOPS")

        for step in measured_steps:
            for size in shapes:
                m = compare.measure_safely(runner, step, size, arch, configs[(step.number, size)], dtype,
                                           seeds.get(size))
                measurements[(step.number, size)] = m
                progress.report(f"step {step.number} {options._size(size)}", _outcome(m))
    finally:
        compare.close(runner)

    rows: dict = {}
    for step in steps:
        prior = prior_of(step, dtype)
        for size in shapes:
            row = cli.Row(size, measurements[(step.number, size)], configs[(step.number, size)],
                          cli.prior_label(step, dtype))
            if prior is None:
                row.prior_gflops = numpy_gflops.get(size)
            else:
                p = measurements[(prior.number, size)]
                row.prior_gflops = p.gflops if p.ok else None
            base = measured_refs.get((references.baseline(step, dtype).key, size))
            if base is not None and base.ok:
                row.cublas_gflops, row.cublas_host_bound = base.gflops, base.host_bound
                row.cublas_rel_err = base.rel_err
            rows[(step.number, size)] = row
    return rows, measured_refs


def _cell_gflops(m: harness.Measurement) -> str:
    return f"{m.gflops:.0f}" + (options.HOST_MARK if m.host_bound else "")


def format_ladder_table(steps, shapes, rows: dict, measured_refs: dict, gpu_name: str | None = None,
                        dtype: str = "fp32") -> str:
    """One row per step; per size GFLOPS, × prior, % cuBLAS; then one row per reference timed.

    A host-bound number carries options.HOST_MARK (and the legend is printed). For 16-bit
    inputs, the references and the % cuBLAS baseline are that dtype's."""
    ref_rows = [r for r in references.of_dtype(dtype) if any((r.key, s) in measured_refs for s in shapes)]
    cublas_key = references.CUBLAS.key if dtype == "fp32" else references.baseline(None, dtype).key
    labels = [f"{s.number}. {s.name_for(dtype)}" for s in steps] + [references.label(r, gpu_name) for r in ref_rows]
    name_width = max(len(x) for x in labels + ["step"])
    cell = 27  # GFLOPS (9) + x prior (7) + % cuBLAS (7) + 2-space gaps
    top = f"{'':<{name_width}}" + "".join(f"  {options._size(size):^{cell}}" for size in shapes)
    sub = f"{'step':<{name_width}}" + f"  {'GFLOPS':>9}  {'x prior':>7}  {'% cuBLAS':>7}" * len(shapes)
    lines = [top, sub, "-" * len(sub)]
    flagged = False
    for step in steps:
        cells = []
        for size in shapes:
            r = rows[(step.number, size)]
            m = r.measurement
            if not m.ok:
                cells.append(f"  {'FAILED':>{cell}}")
                continue
            flagged = flagged or bool(m.host_bound)
            speed = f"{r.speedup:.2f}x" if r.speedup else "-"
            tf32 = step.precision_of(dtype) == "tf32"
            pct = f"{r.pct_cublas:.0f}%" + (references.TF32_MARK if tf32 else "") if r.pct_cublas else "-"
            cells.append(f"  {_cell_gflops(m):>9}  {speed:>7}  {pct:>7}")
        lines.append(f"{f'{step.number}. {step.name_for(dtype)}':<{name_width}}" + "".join(cells))
    for ref in ref_rows:
        cells = []
        for size in shapes:
            m = measured_refs.get((ref.key, size))
            base = measured_refs.get((cublas_key, size))
            if m is None:
                cells.append(f"  {'-':>9}{'':>18}")
            elif not m.ok:
                cells.append(f"  {'FAILED':>{cell}}")
            else:
                flagged = flagged or bool(m.host_bound)
                pct = f"{100 * m.gflops / base.gflops:.0f}%" if base is not None and base.ok else "-"
                cells.append(f"  {_cell_gflops(m):>9}  {'':>7}  {pct:>7}")
        lines.append(f"{references.label(ref, gpu_name):<{name_width}}" + "".join(cells))
    first = rows[(steps[0].number, shapes[0])]
    if dtype != "fp32":
        from ..measure import dtypes

        lines.append(f"{dtype} inputs, C in {dtype} (fp32 sums), held to {dtypes.TOLERANCE[dtype]:g} against the "
                     f"float64 product of the {dtype} inputs. x prior: against the step before that has {dtype}, "
                     f"measured in this run (step {steps[0].number}'s: {first.prior_name}); GFLOPS = 2*M*N*K / median "
                     f"time; % cuBLAS: of cuBLAS {dtype} (fp32 compute) in this run")
        for size in shapes:  # every row of a size checked on the same inputs: the errors side by side
            errs = [f"step {s.number} {rows[(s.number, size)].measurement.rel_err:.1e}" for s in steps
                    if rows[(s.number, size)].measurement.rel_err is not None]
            errs += [f"{references.label(r, gpu_name)} {measured_refs[(r.key, size)].rel_err:.1e}" for r in ref_rows
                     if (r.key, size) in measured_refs and measured_refs[(r.key, size)].rel_err is not None]
            if errs:
                lines.append(f"rel err at {options._size(size)} (same inputs): " + ", ".join(errs))
    else:
        lines.append(f"x prior: against the step before, measured in this run (step {steps[0].number}'s: "
                     f"{first.prior_name}); GFLOPS = 2*M*N*K / median time; % cuBLAS: of cuBLAS fp32 in this run")
    if dtype == "fp32" and (any(r.key == references.CUBLAS_TF32.key for r in ref_rows)
                            or any(s.precision == "tf32" for s in steps)):
        lines.append(f"cuBLAS TF32 is reduced precision (tolerance {harness.TF32_TOLERANCE:g}, not 1e-5): "
                     f"the peer of the TF32 steps ({references.TF32_MARK}: % of cuBLAS TF32), never a baseline for fp32")
    if flagged:
        lines.append(options.HOST_LEGEND)
    return "\n".join(lines)


def run(steps, shapes, configs, arch, args, before: dict | None = None) -> int:
    env = harness.environment()
    dtype = getattr(args, "dtype", "fp32")
    inputs = f" ({dtype} inputs)" if dtype != "fp32" else ""
    print(f"{PROG}: steps {', '.join(str(s.number) for s in steps)}{inputs} at {', '.join(map(options._size, shapes))}; "
          f"{env.get('gpu')} ({env.get('sm_count')} SMs, driver {env.get('driver')}), TVM {env['tvm_version']}, "
          f"arch {arch}, median of {args.repeat} CUDA-event samples")
    started = time.monotonic()
    rows, measured_refs = measure_ladder(steps, shapes, configs, arch, args, refs=args.references,
                                         gpu_name=env.get("gpu"), dtype=dtype)
    print(format_ladder_table(steps, shapes, rows, measured_refs, env.get("gpu"), dtype))
    failed = [r for r in rows.values() if not r.measurement.ok]
    for (number, size), r in rows.items():
        if not r.measurement.ok:
            print(f"FAILED step {number} {options._size(size)}: {r.measurement.error}", file=sys.stderr)
    dropped = False
    if before is not None:
        dropped = print_comparisons(steps, shapes, rows, before)
    if args.save:
        save(steps, shapes, rows, args, arch, measured_refs)
    print(f"ladder measured in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return options.EXIT_FAILED if failed or dropped else 0


# --- --compare for the whole ladder -----------------------------------------------------------


def _compare_docs(path: Path, steps, dtype: str = "fp32") -> dict:
    """--compare DIR for the ladder: the saved stepN.json of each requested step found there
    (for 16-bit inputs, in DIR/<dtype>/ unless DIR is that folder)."""
    path = Path(path)
    if not path.is_dir():
        raise options.UsageError(f"--compare: {path} is not a results folder (for one file use python -m steps.stepN)")
    docs = {s.number: compare.load_before(path, s.number, dtype) for s in steps
            if compare.results_file(path, s.number, dtype).exists()}
    if not docs:
        raise options.UsageError(f"--compare: {path} holds no stepN.json for steps {', '.join(str(s.number) for s in steps)}")
    return docs


def print_comparisons(steps, shapes, rows, before: dict) -> bool:
    """Before/after per step found in `before`; True when any size dropped or failed."""
    bad = False
    for step in steps:
        doc = before.get(step.number)
        if doc is None:
            print(f"\nstep {step.number}: no saved results to compare with")
            continue
        measured = {size: (rows[(step.number, size)].measurement, rows[(step.number, size)].config)
                    for size in shapes}
        items = compare.comparisons(doc, measured)
        print()
        print(compare.format_comparison(step.number, step.name, items, f"saved step{step.number}.json"))
        bad = bad or any(c.bad for c in items)
    return bad


# --- --save: step files, ladder.csv, machine.json, plots, README table -------------------------


CSV_FIELDS = ("gpu", "step", "name", "M", "N", "K", "gflops", "median_ms", "min_ms", "max_ms", "host_us",
              "host_bound", "speedup_vs_prior", "prior", "cublas_gflops", "pct_cublas", "rel_err", "global_bytes",
              "intensity_flop_per_byte", "expected_regression", "config", "date")


def ladder_csv(gpu_dir: Path) -> str:
    """Every saved step × size in one CSV: the flat view of results/<gpu>/stepN.json (or of a
    16-bit ladder's results/<gpu>/<dtype>/stepN.json, whose operands have half fp32's bytes)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for doc in results.load_gpu_dir(gpu_dir):
        module = _module_of(doc["step"])
        for r in doc["results"]:
            M, N, K = r["M"], r["N"], r["K"]
            nbytes = roofline.global_bytes(M, N, K, r["config"], module)
            if results.doc_dtype(doc) != "fp32":  # every term counts 4-byte elements: 2 for 16-bit
                nbytes //= 2
            writer.writerow({
                "gpu": doc["environment"]["gpu"], "step": doc["step"], "name": doc["name"],
                "M": M, "N": N, "K": K, "gflops": _num(r["gflops"]), "median_ms": _num(r["median_ms"]),
                "min_ms": _num(r["min_ms"]), "max_ms": _num(r["max_ms"]), "host_us": _num(r.get("host_us")),
                "host_bound": "" if r.get("host_bound") is None else int(r["host_bound"]),
                "speedup_vs_prior": _num(r["speedup_vs_prior"]), "prior": r["prior"]["name"],
                "cublas_gflops": _num(r["cublas_gflops"]), "pct_cublas": _num(r["pct_cublas"]),
                "rel_err": _num(r["rel_err"]), "global_bytes": nbytes,
                "intensity_flop_per_byte": _num(harness.flops(M, N, K) / nbytes),
                "expected_regression": results.expected_regression(doc, M, N, K, module) or "",
                "config": " ".join(f"{k}={v}" for k, v in r["config"].items()),
                "date": doc["environment"]["date"],
            })
    return out.getvalue()


def _module_of(number: int):
    try:
        return schedules.get_step(number).module
    except ConfigError:
        return None


def _num(value) -> str:
    return "" if value is None else f"{value:.6g}"


def render_plots(render) -> None:
    """Call render() (plot.render_gpu_dir or render_dtype_dir) and print its lines; a failure is
    one line on stderr: the measurements are saved by then, and a plotting problem must not hide that."""
    try:
        rendered = render()
    except Exception as exc:
        print(f"plots not rendered: {harness._one_line(exc)} (retry: python -m steps.plot)", file=sys.stderr)
    else:  # printed outside the try: a closed stdout is no plotting problem
        for line in rendered:
            print(line)


def save(steps, shapes, rows, args, arch, measured_refs: dict | None = None) -> None:
    """Write what passed, atomically; then the references, the CSV, the measured roofs, plots
    and the README table."""
    from ..report import plot, table

    env = harness.environment()  # now that the GPU is warm: clocks under load
    dtype = getattr(args, "dtype", "fp32")
    gpu_dir = results.dtype_dir(Path(args.results_dir) / results.gpu_slug(env["gpu"]), dtype)
    if measured_refs:
        doc = references.document(measured_refs, env, args.repeat, env["gpu"])
        if doc["references"]:
            references.save(gpu_dir / "references.json", doc)
            print(f"saved {gpu_dir / 'references.json'}")
    for step in steps:
        step_rows = [rows[(step.number, size)] for size in shapes]
        if not all(r.measurement.ok for r in step_rows):
            print(f"step {step.number} not saved: some sizes failed", file=sys.stderr)
            continue
        path = results.step_path(args.results_dir, env["gpu"], step.number, dtype)
        results.write_atomic(path, cli.document(step, step_rows, env, args.repeat, dtype))
        print(f"saved {path}")
    if dtype != "fp32":
        # A 16-bit ladder: its step files, references.json, ladder.csv and its two plots in
        # results/<gpu>/<dtype>/; machine.json is the fp32 ladder's. The README's table per dtype follows.
        if results.load_gpu_dir(gpu_dir):
            results.write_text_atomic(gpu_dir / "ladder.csv", ladder_csv(gpu_dir))
            print(f"saved {gpu_dir / 'ladder.csv'}")
            render_plots(lambda: plot.render_dtype_dir(gpu_dir.parent, dtype))
        if Path(args.results_dir).resolve() == results.RESULTS_DIR.resolve():
            print("README.md table updated" if table.update_readme() else "README.md table already up to date")
        return
    try:
        bandwidth = roofline.measure_bandwidth(arch)
        print(f"global-memory bandwidth: {bandwidth['bandwidth_gbs']:.0f} GB/s ({bandwidth['method']})",
              file=sys.stderr)
        machine = roofline.machine_doc(env, bandwidth)
        results.write_json_atomic(gpu_dir / "machine.json", machine)
        print(f"saved {gpu_dir / 'machine.json'}")
    except Exception as exc:  # the roofline plot is then skipped; the step files stand
        print(f"machine.json not saved: bandwidth measurement failed: {harness._one_line(exc)}", file=sys.stderr)
    if not results.load_gpu_dir(gpu_dir):
        return
    results.write_text_atomic(gpu_dir / "ladder.csv", ladder_csv(gpu_dir))
    print(f"saved {gpu_dir / 'ladder.csv'}")
    render_plots(lambda: plot.render_gpu_dir(gpu_dir))
    if Path(args.results_dir).resolve() == results.RESULTS_DIR.resolve():
        print("README.md table updated" if table.update_readme() else "README.md table already up to date")
