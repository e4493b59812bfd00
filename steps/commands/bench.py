"""python -m steps.bench: the fp32-accurate steps, the dispatch rule's pick and cuBLAS over the shape set.

    python -m steps.bench                           # steps 11, 14, 19, "fastest" and cuBLAS fp32, every shape
    python -m steps.bench --steps 10,11 --class odd,k-heavy
    python -m steps.bench --shapes 1000x1500x700,64x2048x2048   # ad-hoc shapes, beside or instead of classes
    python -m steps.bench --save                    # results/<gpu>/shapes.json, shapes.csv, shapes.png, docs/measured.md,
                                                    # and schedules/tuned/dispatch.json (the dispatch table)
    python -m steps.bench --steps 13,18,20,22,23 --save-dispatch   # the TF32 rows, against cuBLAS TF32
    python -m steps.bench --dtype bf16 --save-dispatch    # bf16 inputs: the bf16 rows (every step with a bf16 form)
    python -m steps.bench --dtype bf16 --steps 27,29 --shapes 4096x4096x4096 --in-turns   # each step in turns with cuBLAS
    python -m steps.bench --dtype bf16 --steps 24 --fastest --graph   # every kernel replayed from CUDA graphs, cuBLAS too
    python -m steps.bench --steps all --check-only  # every step correct on every shape; nothing timed
    python -m steps.bench --build-only              # anywhere: build every kernel, report its resources
    python -m steps.bench --list                    # the shape set: classes, why, shapes

The shapes are ``bench/shapes.toml`` (steps/results/shapeset.py). By default the run times the
fp32-accurate candidates of the dispatch rule (schedules/dispatch.py): the final step that
computes in fp32 on CUDA cores (11) and the tensor-core steps that give fp32's accuracy (14, and
19 on Hopper); then "fastest", the kernel ``schedules.fastest`` picks for each shape, timed as a
row of its own (in a second phase, so with ``--save`` it reads the table this run is about to
write, and without it the committed one); and cuBLAS strict fp32. The baseline is timed twice:
beside the steps, shape by shape, and again in the second phase in turns with the pick, in the
same job (three rounds each, ``harness.time_beside_cublas``): the row "cuBLAS again", to which
the fastest row's ratio is. A kernel's speed follows the board's power and clocks, which follow
what ran just before: on an H200 (2026-11-29) one timing of the same kernel read up to 11% apart
within a run at 2048-4096³, and cuBLAS's as much, so only a ratio of two timings taken together
means much (docs/method.md). ``--in-turns`` times every step so too (cuBLAS once per step and
shape: for a few shapes, where a ratio has to decide a bar). It prints per shape TFLOPS and
each row's ratio to cuBLAS, then per class and over the whole set the geometric mean of that
ratio and the worst shape. ``--save`` (the whole set, every kernel passed) also writes this
GPU's entry of ``schedules/tuned/dispatch.json``: every candidate's median per shape, the
measurements the rule chooses from; ``--fastest`` adds the row to a run with ``--steps``. The method is the ladder's
(steps/measure/harness.py): fresh random inputs, C poisoned with NaN, ‖C − C_ref‖/‖C_ref‖ ≤ 1e-5
against float64, then kernel time (time_evaluator for TVM kernels, a replayed CUDA graph for
cuBLAS) guarded against host-bound readings (†; a ratio involving one is left out of the
geometric means and said so). ``--graph`` replays every TVM kernel from a CUDA graph too
(``harness.tvm_graph``), so the host is out of the way at every shape; with ``--save`` each
precision's rows of the dispatch table then say ``"timer": "cuda graph"`` (docs/method.md).

Worker processes (``--workers``, default the CPU count up to 12) build and load the kernels in
parallel; one at a time holds the GPU, for its float64 reference, the check and the timing,
so timings never overlap and no BLAS threads compete with one. A kernel that faults costs
that kernel: its worker is replaced (steps/commands/sweep.py's Pool). A failed shape is reported, the
run goes on, and the exit code is 1; ``--save`` then writes nothing. Bad input (a class, a
shape, a step, a broken shapes file, no GPU) prints one line and exits 2.

``--dtype fp16`` / ``bf16`` (issue 49) runs the 16-bit candidates instead: by default every step
with that dtype's form that runs on the arch (``Step.dtypes``), the "fastest" row (the rule's
pick for that precision) and cuBLAS in the dtype (fp32 compute), the ratio's baseline
(``--references`` maps to that dtype's rows, as the ladder's does); each kernel is checked against
the float64 product of its 16-bit inputs to the dtype's tolerance. A run of TF32 steps alone
(``--steps 13,18,20,22,23``) is likewise TF32's: cuBLAS TF32 its baseline, the TF32 pick its
"fastest" row. ``--save-dispatch`` then writes this GPU's rows of that precision in the dispatch
table, the others kept; ``--save`` also writes that precision's benchmark beside fp32's
(results/<gpu>/tf32/, bf16/ or fp16/shapes.{json,csv,png}), a block of its own in
docs/measured.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import schedules
from schedules import ConfigError

from .. import results
from ..measure import dtypes, harness, nvcc, references
from ..report.pipes import quiet_broken_pipe
from ..results import shapes, shapeset
from . import cli, ladder, options, sweep

PROG = "python -m steps.bench"
BASELINE = references.CUBLAS.key


# --- which steps -------------------------------------------------------------------------------


def cuda_core_fp32(step) -> bool:
    """Whether a step computes in fp32 on CUDA cores (the registry's ``precision`` and
    ``tensor_cores``: steps 12-14 run on tensor cores, 12-13 in TF32)."""
    return step.precision == "fp32" and not step.tensor_cores


def default_steps(arch: str | None = None) -> list:
    """The dispatch rule's fp32-accurate candidates: the final CUDA-core fp32 step, every
    tensor-core step that computes to fp32's accuracy (3xTF32), and the CUDA-core kernels of one
    shape (step 24, the matrix-vector rung), those that run on `arch`, in the ladder's order."""
    others = [s for s in schedules.STEPS if s.precision == "fp32" and (s.tensor_cores or not s.schedules_a_block)
              and (arch is None or s.runs_on(arch))]
    return sorted([final_fp32_step()] + others, key=lambda s: s.number)


def sixteen_bit_steps(dtype: str, arch: str | None = None) -> list:
    """The dispatch rule's candidates for 16-bit inputs: every step with that dtype's form (those
    that run on `arch`)."""
    return [s for s in schedules.STEPS if dtype in s.dtypes and (arch is None or s.runs_on(arch))]


def run_precision(steps, dtype: str) -> str:
    """The precision a run measures: the dtype for 16-bit inputs; for fp32 inputs "tf32" where
    every step given computes in TF32 (its baseline is then cuBLAS TF32, and its "fastest" row the
    TF32 pick), else "fp32" (cuBLAS strict fp32, the fp32-accurate pick)."""
    if dtype != "fp32":
        return dtype
    return "tf32" if steps and all(s.precision == "tf32" for s in steps) else "fp32"


def final_fp32_step(steps=None):
    """The highest-numbered step that computes in fp32 on CUDA cores as a schedule of the base
    matmul (step 11, not the matrix-vector kernel of step 24): the default of a run."""
    eligible = [s for s in (schedules.STEPS if steps is None else steps)
                if cuda_core_fp32(s) and getattr(s, "schedules_a_block", True)]
    if not eligible:
        raise ConfigError("no step computes in fp32 on CUDA cores; give --steps")
    return max(eligible, key=lambda s: s.number)


def step_tolerance(step) -> float:
    """The bound a step's result is checked against (harness.tolerance: 1e-5, or TF32's own)."""
    return harness.tolerance(step)


def step_key(step) -> str:
    return f"step{step.number}"


# --- arguments --------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = options.new_parser(PROG, __doc__.strip())
    p.add_argument("--steps", type=ladder.parse_steps, action="append", default=None, metavar="RANGE",
                   help="which steps: 11, 10,11, 7-11 or all (repeatable; default: the fp32-accurate candidates "
                        f"of the dispatch rule, {', '.join(str(s.number) for s in default_steps())} here, and "
                        "the fastest row)")
    p.add_argument("--fastest", action="store_true",
                   help="with --steps: also the row of schedules.fastest's pick per shape (the default run has it)")
    p.add_argument("--references", type=lambda text: references.keys_arg(text, allow_none=True), default=None,
                   metavar="KEYS", help=f"reference rows: cublas (default; the ratio's baseline; cublas_tf32 "
                                        f"where every step given is a TF32 one), all, none, or "
                                        f"a comma list of {', '.join(references.KEYS)}")
    p.add_argument("--class", dest="classes", action="append", default=None, metavar="NAMES",
                   help="only these classes of the shape set, a comma list (repeatable; --list names them)")
    p.add_argument("--shapes", action="append", default=None, metavar="MxNxK,...",
                   help="ad-hoc shapes, e.g. 1000x1500x700,64x2048x2048 (repeatable); without --class, only these")
    options.add_repeat_option(p)
    options.add_arch_option(p)
    options.add_seed_option(p)
    p.add_argument("--workers", type=options._positive, default=sweep.default_workers(),
                   help=f"build processes (default: the CPU count, at most {sweep.MAX_WORKERS}; "
                        f"{sweep.default_workers()} here)")
    p.add_argument("--save", action="store_true",
                   help=f"write results/<gpu>/{shapes.JSON_NAME}, {shapes.CSV_NAME}, {shapes.PLOT_NAME} and the docs/measured.md block "
                        "(the whole set, every shape passed; needs a GPU)")
    p.add_argument("--save-dispatch", action="store_true",
                   help="write only this GPU's rows of schedules/tuned/dispatch.json for the steps timed (e.g. "
                        "--steps 13,18: the TF32 table), keeping the other precision's; the whole set, no GPU results")
    p.add_argument("--check-only", action="store_true",
                   help="check every kernel against float64 and time none (needs a GPU)")
    p.add_argument("--build-only", action="store_true",
                   help="build every kernel and report threads, shared memory, registers; no GPU needed")
    p.add_argument("--in-turns", action="store_true",
                   help="time every step in turns with the baseline, in one job (three rounds each), and each "
                        "step's ratio to that cuBLAS: a ratio that decides a bar, for a few shapes (it times cuBLAS "
                        "once per step); the fastest row is always timed so")
    p.add_argument("--graph", action="store_true",
                   help="time every TVM kernel (the steps, the fastest row, dlight's) replayed from a CUDA graph, as "
                        "cuBLAS is: kernel time at every shape, the host out of the way; with --save the tables "
                        "hold kernel times (each precision's rows say so)")
    p.add_argument("--list", action="store_true", help="print the shape set (classes, rationale, shapes) and stop")
    options.add_dtype_option(p)
    p.add_argument("--shape-set", type=Path, default=shapeset.SHAPES_PATH, help=argparse.SUPPRESS)
    p.add_argument("--results-dir", type=Path, default=results.RESULTS_DIR, help=argparse.SUPPRESS)
    p.add_argument("--dispatch-table", type=Path, default=schedules.dispatch.TABLE_PATH, help=argparse.SUPPRESS)
    return p


def check_options(args) -> None:
    """Options that contradict each other, or that the mode would silently ignore."""
    modes = [flag for flag, on in (("--save", args.save), ("--save-dispatch", args.save_dispatch),
                                   ("--check-only", args.check_only),
                                   ("--build-only", args.build_only), ("--list", args.list)) if on]
    if len(modes) > 1:
        raise options.UsageError(f"{modes[0]} and {modes[1]} do different things; give one of them")
    if (args.save or args.save_dispatch) and (args.classes or args.shapes):
        flag = "--save" if args.save else "--save-dispatch"
        raise options.UsageError(f"{flag} publishes the whole shape set; drop --class and --shapes")
    if args.references is not None and (args.check_only or args.build_only or args.list):
        raise options.UsageError(f"--references are timed, and {modes[0]} times nothing; drop one of them")
    if args.list and args.steps:
        raise options.UsageError("--list prints the shapes only; drop --steps")
    if args.fastest and (args.check_only or args.build_only or args.list):
        raise options.UsageError("--fastest is a timed row; drop --check-only, --build-only or --list")
    if args.in_turns and (args.check_only or args.build_only or args.list):
        raise options.UsageError("--in-turns is a way of timing; drop --check-only, --build-only or --list")
    if args.graph and (args.check_only or args.build_only or args.list):
        raise options.UsageError("--graph is a way of timing; drop --check-only, --build-only or --list")


@dataclass(frozen=True)
class Item:
    """One shape of a run and the class it belongs to."""

    class_name: str
    shape: tuple[int, int, int]


def chosen_items(args, shape_set: shapeset.ShapeSet) -> list[Item]:
    """The shapes a run covers: the chosen classes (all without --class or --shapes), then the
    ad-hoc shapes (under their class when the set has them, else 'ad hoc'), without repeats."""
    names = [n.strip() for text in args.classes or () for n in text.split(",") if n.strip()]
    if args.classes and not names:
        raise shapeset.ShapeSetError("--class needs a class name; --list names them")
    items = []
    if names or not args.shapes:
        items = [Item(c, s) for c, s in (shape_set.select(names) if names else shape_set).shapes()]
    for text in args.shapes or ():
        for shape in shapeset.parse_shapes(text):
            items.append(Item(shape_set.class_of(shape) or shapeset.AD_HOC, shape))
    seen, out = set(), []
    for item in items:
        if item.shape not in seen:
            seen.add(item.shape)
            out.append(item)
    return out


def format_list(shape_set: shapeset.ShapeSet, items: list[Item]) -> str:
    shown = {i.shape for i in items}
    lines = [f"{shape_set.path.name}: {len(shape_set.shapes())} shapes in {len(shape_set.classes)} classes "
             f"(sha256 {shape_set.sha256[:12]})"]
    for c in shape_set.classes:
        shapes = [s for s in c.shapes if s in shown]
        if shapes:
            lines += ["", f"{c.name} ({len(shapes)}): {c.rationale}",
                      "  " + ", ".join(shapeset.shape_text(s) for s in shapes)]
    ad_hoc = [i.shape for i in items if i.class_name == shapeset.AD_HOC]
    if ad_hoc:
        lines += ["", f"{shapeset.AD_HOC} ({len(ad_hoc)}): " + ", ".join(map(shapeset.shape_text, ad_hoc))]
    return "\n".join(lines)


@quiet_broken_pipe
def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        check_options(args)
        shape_set = shapeset.load(args.shape_set)
        items = chosen_items(args, shape_set)
        if args.list:
            print(format_list(shape_set, items))
            return 0
        dtype = args.dtype
        if args.steps:
            steps = ladder.chosen_steps(args.steps)
            for s in steps:
                s.check_dtype(dtype)  # one line naming the steps that have it
        else:
            steps = default_steps(args.arch) if dtype == "fp32" else sixteen_bit_steps(dtype, args.arch)
        with_fastest = (args.fastest or not args.steps) and not (args.check_only or args.build_only)
        args.precision = run_precision(steps, dtype)
        baseline = references.CUBLAS_TF32 if args.precision == "tf32" else references.CUBLAS
        refs = references.for_dtype([baseline] if args.references is None else args.references, dtype)
        if args.check_only or args.build_only:
            refs = []
        if args.in_turns and baseline_key(args) not in {r.key for r in refs}:
            raise options.UsageError(f"--in-turns times each step beside its baseline ({baseline_key(args)}); "
                                     "give it among --references")
        configs = {(s.number, i.shape): cli._checked_config(s, *i.shape, dtype=dtype) for s in steps for i in items}
        arch = options.pick_arch(PROG, args.arch, timing=not args.build_only)
        steps = ladder.runnable_steps(steps, arch, PROG)
        if args.build_only:
            return build_only(steps, items, configs, arch, args.workers, dtype)
        if not harness.gpu_present():
            raise options.UsageError("no CUDA GPU found: --check-only and timing need one (--build-only builds without)")
        for ref in refs:
            if ref.builder is None and not harness.cublas_available():
                raise options.UsageError(f"{ref.label} needs CuPy and libcublas (pip install -e \".[cublas]\"); "
                                     "or --references none")
        return run(steps, refs, items, configs, arch, args, shape_set, with_fastest)
    except (options.UsageError, ConfigError, shapeset.ShapeSetError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE


# --- worker processes -------------------------------------------------------------------------

_poisoned = False  # in a worker: a CUDA fault has broken this process's context


def _job(kind: str, key, shape, config, arch: str, repeat: int, seed: int, tolerance: float, timed: bool,
         dtype: str = "fp32", beside: str | None = None, graph: bool = False) -> dict:
    """One kernel in a pool worker: ``kind`` "step" (key: a step number), "fastest" (the same,
    the pick), "tvm" (key: a reference's "module:function" builder, config its argument), "cublas"
    (key: the reference key) or "build" (build and nvcc only, no GPU). Returns
    Measurement.as_dict() (for "build": the nvcc report and an error or None). The build, and the
    NVRTC compile that loading does, run outside the GPU lock; the float64 reference, the check
    and the timing inside it. `beside` (a cuBLAS reference's key): the kernel and that cuBLAS
    timed in turns (``harness.time_beside_cublas``), and {"pick": ..., AGAIN: ...} returned.
    `graph` (--graph): the kernel timed from a CUDA graph, alone or beside cuBLAS."""
    global _poisoned
    if _poisoned:  # exit, so the pool replaces this process; the job is retried in a fresh one
        os._exit(3)
    M, N, K = shape
    if kind == "build":
        return _build_report(key, shape, config, arch, dtype)
    # "fastest": the dispatch rule's pick, a step kernel like any other (key: its number)
    lock = sweep._gpu_lock
    if kind == "cublas":
        with lock:
            m = references.measure(references.BY_KEY[key], shape, None, arch, None, repeat, seed)
        _poisoned = m.error is not None and not m.error.startswith("wrong result")
        return m.as_dict()
    m = harness.Measurement(M, N, K)
    try:
        lib = harness._build(key, M, N, K, arch, config, dtype)
        func = lib["main"]
    except Exception as exc:  # a valid config TVM or NVRTC could not compile: this kernel fails
        m.error = f"build failed: {harness._one_line(exc)}"
        return m.as_dict()
    if beside is not None:
        return _pair(m, lib, beside, repeat, seed, tolerance, dtype, graph)
    with lock:
        try:
            runner = harness.KernelRunner(repeat=repeat, seed=seed, isolate=False)
            m.rel_err = runner.check(func, M, N, K, dtype)
            if timed:
                m.set_timing(runner.time(lib, M, N, K, dtype, graph=graph))
        except Exception as exc:  # a load, launch or fault: CUDA's context here may be gone
            m.error = harness._one_line(exc)
            _poisoned = True
            return m.as_dict()
    return harness.check_error(m, tolerance).as_dict()


PAIR_ROUNDS = 3  # the pick and cuBLAS in turns: kernel, cuBLAS; cuBLAS, kernel; kernel, cuBLAS


def _pair(m: harness.Measurement, lib, base_key: str, repeat: int, seed: int, tolerance: float, dtype: str,
          graph: bool = False) -> dict:
    """A kernel's job with its baseline beside it (the fastest row's; with --in-turns, each
    step's): the kernel checked, then it and cuBLAS (`base_key`) timed in turns
    (``harness.time_beside_cublas``); both rows' dicts, the kernel's under "pick"."""
    global _poisoned
    ref = references.BY_KEY[base_key]
    theirs = harness.Measurement(m.M, m.N, m.K)
    with sweep._gpu_lock:
        try:
            runner = harness.KernelRunner(repeat=repeat, seed=seed, isolate=False)
            m.rel_err = runner.check(lib["main"], m.M, m.N, m.K, dtype)
            mine_t, theirs_t, theirs.rel_err = harness.time_beside_cublas(
                lib, runner.dev, m.M, m.N, m.K, repeat, PAIR_ROUNDS, seed, tf32=ref.tf32, dtype=dtype, graph=graph)
        except Exception as exc:  # a load, launch or fault: CUDA's context here may be gone
            m.error = theirs.error = harness._one_line(exc)
            _poisoned = True
            return {"pick": m.as_dict(), AGAIN: theirs.as_dict()}
    m.set_timing(mine_t)
    theirs.set_timing(theirs_t)
    return {"pick": harness.check_error(m, tolerance).as_dict(),
            AGAIN: harness.check_error(theirs, ref.tolerance).as_dict()}


def _build_report(number: int, shape, config, arch: str, dtype: str = "fp32") -> dict:
    try:
        source = schedules.cuda_source(schedules.build(number, *shape, arch=arch, config=config, dtype=dtype))
    except Exception as exc:
        return {"report": None, "error": f"build failed: {harness._one_line(exc)}"}
    report = nvcc.compile_report(source, schedules.get_step(number).build_arch(arch)) if nvcc.available() else None
    if report is not None and not report.ok:
        return {"report": report, "error": f"nvcc failed: {options._last_line(report.log)}"}
    return {"report": report, "error": None}


def _died(job: tuple, why: str) -> dict:
    kind, _, (M, N, K) = job[:3]
    if kind == "build":
        return {"report": None, "error": why}
    return harness.Measurement(M, N, K, error=why).as_dict()


def run_jobs(jobs: list[tuple], workers: int, on_result) -> None:
    pool = sweep.Pool(max(1, min(workers, len(jobs))), evaluate=_job, died=_died)
    try:
        pool.run(jobs, on_result)
    finally:
        pool.close()


# --- no GPU: build only ---------------------------------------------------------------------------


def build_only(steps, items, configs, arch, workers: int, dtype: str = "fp32") -> int:
    started = time.monotonic()
    jobs = [("build", s.number, i.shape, configs[(s.number, i.shape)], arch, 0, 0, 0.0, False, dtype)
            for s in steps for i in items]
    done: dict = {}
    progress = ladder.Progress(len(jobs))

    def on_result(job, res):
        done[(job[1], job[2])] = res
        progress.report(f"step {job[1]} {shapeset.shape_text(job[2])}", res["error"] or "built")

    run_jobs(jobs, workers, on_result)
    built = [ladder.Built(s, i.shape, configs[(s.number, i.shape)], done[(s.number, i.shape)]["report"],
                          done[(s.number, i.shape)]["error"]) for s in steps for i in items]
    print(ladder.format_build_summary(built, arch, nvcc.available()))
    print(f"built {len(built)} kernels in {time.monotonic() - started:.1f} s with {min(workers, len(jobs))} workers")
    return options.EXIT_FAILED if any(b.error for b in built) else 0


# --- GPU: check and time ------------------------------------------------------------------------


@dataclass
class Impl:
    """One implementation of a run: a step or a reference row."""

    key: str
    label: str
    step: object = None  # a schedules.Step, or None for a reference
    ref: object = None  # a references.Reference, or None for a step
    dispatch: bool = False  # the "fastest" row: schedules.fastest's pick per shape
    dtype: str = "fp32"  # the inputs'
    beside: str | None = None  # the baseline again, timed in turns with this row (the key of the fastest or a step row)

    def as_dict(self) -> dict:
        if self.dispatch:
            return {"key": self.key, "label": self.label, "step": FASTEST, "name": "dispatch rule",
                    "dispatch": True, "tolerance": harness.TOLERANCE if self.dtype == "fp32"
                    else dtypes.tolerance(self.dtype)}
        if self.step is not None:
            return {"key": self.key, "label": self.label, "step": self.step.number, "name": self.step.name_for(self.dtype),
                    "cuda_core_fp32": cuda_core_fp32(self.step) and self.dtype == "fp32",
                    "tolerance": harness.tolerance(self.step, self.dtype)}
        return {"key": self.key, "label": self.label, "reference": True, "precision": self.ref.precision,
                "tolerance": self.ref.tolerance, **({"beside": self.beside} if self.beside else {})}


FASTEST = "fastest"
AGAIN = "again"  # the key's suffix of the baseline timed again, in turns with the fastest row (or a step's)


def implementations(steps, refs, gpu_name: str | None, with_fastest: bool = False, dtype: str = "fp32",
                    baseline: str | None = None, in_turns: bool = False) -> list[Impl]:
    """The run's rows: the steps, the fastest row, the references; with the fastest row and the
    `baseline` among the references, that baseline once more, timed in turns with the fastest row;
    `in_turns`, once more for each step too."""
    base = next((r for r in refs if r.key == baseline), None)
    again = []
    if base is not None:
        label = references.label(base, gpu_name)
        if with_fastest:
            again.append(Impl(f"{base.key}_{AGAIN}", f"{label}, again beside the fastest row", ref=base, dtype=dtype,
                              beside=FASTEST))
        if in_turns:
            again += [Impl(f"{base.key}_{AGAIN}_{step_key(s)}", f"{label}, in turns with step {s.number}", ref=base,
                           dtype=dtype, beside=step_key(s)) for s in steps]
    return ([Impl(step_key(s), f"step {s.number} ({s.name_for(dtype)})", step=s, dtype=dtype) for s in steps]
            + ([Impl(FASTEST, "fastest (schedules.fastest's pick per shape)", dispatch=True, dtype=dtype)]
               if with_fastest else [])
            + [Impl(r.key, references.label(r, gpu_name), ref=r, dtype=dtype) for r in refs] + again)


def jobs_for(impls: list[Impl], items: list[Item], configs, arch, args, gpu_name) -> tuple[list[tuple], list[str]]:
    """The pool's jobs, shape by shape, and a note for each reference that has no row at some
    shapes (one line per reference and reason)."""
    import numpy as np

    rng = np.random.default_rng(args.seed)  # one seed per job, drawn in a fixed order: reproducible
    timed, dtype = not args.check_only, args.dtype
    jobs, missing = [], {}
    for item in items:
        for impl in impls:
            seed = int(rng.integers(2**63 - 1))
            if impl.dispatch or impl.beside:  # timed in the second phase (fastest_jobs), once the table is known
                continue
            if impl.step is not None:
                if not impl.step.applies_to(*item.shape):  # a rung of one kind of shape (step 24: M <= 16 or N <= 2)
                    missing.setdefault((impl.label, "not a shape it is for (its module's applies)"), []).append(
                        shapeset.shape_text(item.shape))
                    continue
                cfg = configs[(impl.step.number, item.shape)]
                beside = next((i.ref.key for i in impls if i.beside == impl.key
                               and not references.available(i.ref, item.shape, gpu_name)), None)
                jobs.append(("step", impl.step.number, item.shape, cfg, arch, args.repeat, seed,
                             harness.tolerance(impl.step, dtype), timed, dtype, beside, args.graph))
                continue
            why_not = references.available(impl.ref, item.shape, gpu_name)
            if why_not:
                missing.setdefault((impl.label, why_not), []).append(shapeset.shape_text(item.shape))
            elif impl.ref.builder is None:
                jobs.append(("cublas", impl.key, item.shape, None, arch, args.repeat, seed, impl.ref.tolerance, timed,
                             dtype))
            else:
                config = str(references.metaschedule_dir(gpu_name)) if impl.ref is references.METASCHEDULE else None
                jobs.append(("tvm", impl.ref.builder, item.shape, config, arch, args.repeat, seed,
                             impl.ref.tolerance, timed, dtype, None, args.graph))
    notes = [f"{label}: no row at {len(shapes)} shape{'s' if len(shapes) > 1 else ''} "
             f"({', '.join(shapes[:3])}{', ...' if len(shapes) > 3 else ''}): {why}"
             for (label, why), shapes in missing.items()]
    return jobs, notes


def _impl_of_job(job: tuple, impls: list[Impl]) -> Impl:
    kind, key = job[0], job[1]
    if kind == FASTEST:
        return next(impl for impl in impls if impl.dispatch)
    for impl in impls:
        if (kind == "step" and impl.step is not None and impl.step.number == key) or \
                (kind == "cublas" and impl.key == key) or \
                (kind == "tvm" and impl.ref is not None and impl.ref.builder == key):
            return impl
    raise KeyError(job[:3])


def run(steps, refs, items, configs, arch, args, shape_set, with_fastest: bool = False) -> int:
    env = harness.environment()
    gpu_name = env.get("gpu")
    impls = implementations(steps, refs, gpu_name, with_fastest, args.dtype, baseline_key(args), args.in_turns)
    mode = "checked, not timed" if args.check_only else f"median of {args.repeat} CUDA-event samples"
    print(f"{PROG}: {', '.join(i.label for i in impls)} over {len(items)} shapes; {gpu_name} "
          f"({env.get('sm_count')} SMs, driver {env.get('driver')}), TVM {env['tvm_version']}, arch {arch}, {mode}")
    jobs, notes = jobs_for(impls, items, configs, arch, args, gpu_name)
    for note in notes:
        print(note, file=sys.stderr)
    started = time.monotonic()
    measured: dict = {}
    progress = ladder.Progress(len(jobs) + sum(1 for j in jobs if j[10:] and j[10]))  # a pair reports two rows

    def on_result(job, res):
        if len(job) > 10 and job[10]:  # a kernel and its baseline, timed in turns (_pair)
            pair = res if "pick" in res else {"pick": res, AGAIN: res}  # a worker that died: both failed
            impl = _impl_of_job(job, impls)
            one(job, impl, pair["pick"])
            one(job, next(i for i in impls if i.beside == impl.key), pair[AGAIN])
        else:
            one(job, _impl_of_job(job, impls), res)

    def one(job, impl, res):
        m = harness.Measurement(**res)
        measured[(impl.key, job[2])] = m
        outcome = ("ok" if args.check_only else f"{m.gflops / 1e3:.2f} TFLOPS") if m.ok else f"FAILED ({m.error})"
        if m.ok and m.rel_err is not None:
            outcome += f", rel err {m.rel_err:.1e}"
        progress.report(f"{impl.label} {shapeset.shape_text(job[2])}", outcome)

    run_jobs(jobs, args.workers, on_result)
    table, choices = None, {}
    failed_first = any(not m.ok for m in measured.values())
    # The table: with --save, from a run with the fastest row (the rule's full candidates); with
    # --save-dispatch, from the steps given, their precision's rows replaced and the other's kept.
    if ((args.save and with_fastest) or args.save_dispatch) and not failed_first:
        table = dispatch_table(steps, items, measured, env, arch, shape_set,
                               schedules.dispatch.table(Path(args.dispatch_table)), args.dtype, args.graph)
    if with_fastest:
        # Phase two: the dispatch rule's pick per shape, timed as its own row. With --save it
        # reads the table this run measured (and is about to write); without, the committed one.
        choices = {i.shape: schedules.fastest(*i.shape, precision=getattr(args, "precision", args.dtype), arch=arch,
                                              gpu=schedules.dispatch.table_gpu(gpu_name, table), doc=table) for i in items}
        fast_jobs = fastest_jobs(items, choices, arch, args,
                                 next((i.ref for i in impls if i.beside == FASTEST), None), gpu_name)
        progress.total += len(fast_jobs) + sum(1 for j in fast_jobs if j[10])
        jobs += fast_jobs
        run_jobs(fast_jobs, args.workers, on_result)
    env = harness.environment()  # again, now that the GPU is warm: clocks under load
    doc = document(impls, items, configs, measured, env, args, shape_set, choices)
    print(format_report(doc))
    failed = [r for r in doc["results"] if r.get("error")]
    for r in failed:
        print(f"FAILED {r['impl']} {shapeset.shape_text((r['M'], r['N'], r['K']))}: {r['error']}", file=sys.stderr)
    if args.save or args.save_dispatch:
        if failed:
            print(f"not saved: {len(failed)} kernel(s) failed", file=sys.stderr)
        else:
            if args.save:  # --save-dispatch writes the table alone
                save(doc, Path(args.results_dir))
            published = Path(args.shape_set).resolve() == shapeset.SHAPES_PATH.resolve()
            if table is not None and doc["shape_set"]["complete"] and published:
                path = Path(args.dispatch_table)
                results.write_json_atomic(path, table)
                print(f"saved {path} (this GPU's entry of the dispatch table)")
            elif table is not None:
                print("dispatch table not written: it is measured on the published shape set only", file=sys.stderr)
    print(f"{len(jobs)} kernels in {time.monotonic() - started:.0f} s with {min(args.workers, len(jobs))} workers",
          file=sys.stderr)
    return options.EXIT_FAILED if failed else 0


# --- the results document: results/<gpu>/shapes.json ---------------------------------------------


def fastest_jobs(items: list[Item], choices: dict, arch: str, args, baseline=None,
                 gpu_name: str | None = None) -> list[tuple]:
    """The second phase, a job per shape: the pick, and with `baseline` (a cuBLAS reference) that
    baseline timed in turns with it in the same job (``_pair``)."""
    import numpy as np

    rng = np.random.default_rng(None if args.seed is None else args.seed + 1)  # its own seeds: timed afresh
    jobs = []
    for i in items:
        beside = None if baseline is None or references.available(baseline, i.shape, gpu_name) else baseline.key
        jobs.append((FASTEST, choices[i.shape].step.number, i.shape, choices[i.shape].config, arch, args.repeat,
                     int(rng.integers(2**63 - 1)), harness.tolerance(choices[i.shape].step, args.dtype), True,
                     args.dtype, beside, args.graph))
    return jobs


GRAPH_TIMER = schedules.dispatch.GRAPH_TIMER  # a precision's rows timed from CUDA graphs (--graph): kernel time, no host in it


def dispatch_table(steps, items: list[Item], measured: dict, env: dict, arch: str, shape_set,
                   base: dict, dtype: str = "fp32", graph: bool = False) -> dict:
    """`base` (the dispatch table the run writes to) with this GPU's entry replaced by this run's: per precision, the steps timed and each one's median per
    shape, dated. A precision this run timed no step of keeps the table it had (measured on the
    same shape set), so a TF32 run never wipes the fp32 rows, nor an fp32 run the TF32 ones.
    `graph` (--graph): the rows are kernel times from CUDA graphs, and say so ("timer")."""
    from schedules import dispatch

    precisions = {}
    # fp32 inputs give the fp32 and tf32 rows (each step under its own precision); 16-bit inputs
    # that dtype's, every step timed.
    for precision in (dispatch.MODEL_PRECISIONS if dtype == "fp32" else (dtype,)):
        chosen = [s for s in steps if dispatch.computes(s, precision)]
        if not chosen:
            continue
        rows = []
        for item in items:
            times = []
            for s in chosen:
                m = measured.get((step_key(s), item.shape))
                times.append(round(m.median_ms, 6) if m is not None and m.ok and m.median_ms else None)
            rows.append([*item.shape, times])
        precisions[precision] = {"steps": [s.number for s in chosen], "shapes": rows, "date": env["date"],
                                 **({"timer": GRAPH_TIMER} if graph else {})}
    slug = results.gpu_slug(env["gpu"])
    before = next((e for e in base["gpus"] if e["slug"] == slug), None)
    if before is not None and before.get("shape_set_sha256") == shape_set.sha256:
        for precision, kept in before["precisions"].items():
            if precision not in precisions:
                precisions[precision] = {"date": before["date"], **kept}
    entry = {"gpu": env["gpu"], "slug": slug, "arch": dispatch.family(arch),
             "date": env["date"], "driver": env.get("driver"), "tvm_version": env.get("tvm_version"),
             "shape_set_sha256": shape_set.sha256, "precisions": dict(sorted(precisions.items()))}
    # In place where this GPU had an entry (the first of an arch's family is what a caller that
    # names no GPU reads, so a re-measured GPU must not move behind another); else last.
    gpus = [entry if e["slug"] == slug else e for e in base["gpus"]] + ([entry] if before is None else [])
    return dispatch.validate({"schema": dispatch.SCHEMA,
                              "generated_by": "python -m steps.bench --save (median kernel ms per step and shape)",
                              "gpus": gpus})


def document(impls: list[Impl], items: list[Item], configs, measured: dict, env: dict, args, shape_set,
             choices: dict | None = None) -> dict:
    """Every (shape, implementation) measured, with the environment, the method and the set.

    Schema ``shapes-1``: {schema, environment, method, shape_set: {path, version, sha256,
    complete, classes: [{name, rationale}]}, baseline, implementations: [{key, label, step |
    reference, ...}], results: [{class, M, N, K, impl, config, median_ms, min_ms, max_ms,
    gflops, rel_err, host_us, host_bound, error}]}. ``complete``: whether the run covered the
    whole set, as --save requires."""
    every = {s for _, s in shape_set.shapes()}
    used = {i.class_name for i in items}
    rows = []
    for item in items:
        for impl in impls:
            m = measured.get((impl.key, item.shape))
            if m is None:  # a reference with no row at this shape (said on stderr)
                continue
            if impl.dispatch:  # the pick: its step, its config, why
                choice = choices[item.shape]
                config = {"step": choice.step.number, **choice.config.as_dict()}
            else:
                config = configs[(impl.step.number, item.shape)].as_dict() if impl.step is not None else None
            rows.append({"class": item.class_name, "M": m.M, "N": m.N, "K": m.K, "impl": impl.key, "config": config,
                         "median_ms": m.median_ms, "min_ms": m.min_ms, "max_ms": m.max_ms, "gflops": m.gflops,
                         "rel_err": m.rel_err, "host_us": m.host_us, "host_bound": m.host_bound, "error": m.error})
    method = references.method(args.repeat)
    if args.graph:
        method["timer"] = ("CUDA events around replays of a CUDA graph of ~1 ms of calls (--graph): TVM kernels "
                           "(captured on a stream of their own, each graph proved against a plain call) and cuBLAS")
    method.update(tolerance=harness.TOLERANCE if args.dtype == "fp32" else dtypes.tolerance(args.dtype),
                  timed=not args.check_only, seed=args.seed,
                  check="fresh random inputs in [-1, 1), C poisoned with NaN, ||C - C_ref|| / ||C_ref|| "
                        "against float64")
    return {
        "schema": shapes.SCHEMA,
        "environment": env,
        "method": method,
        "shape_set": {
            "path": _repo_path(shape_set.path), "version": shapeset.VERSION, "sha256": shape_set.sha256,
            "complete": {i.shape for i in items} == every and len(items) == len(every),
            "classes": [{"name": c.name, "rationale": c.rationale} for c in shape_set.classes if c.name in used]
                       + ([{"name": shapeset.AD_HOC, "rationale": "shapes given with --shapes"}]
                          if shapeset.AD_HOC in used else []),
        },
        "baseline": baseline_key(args),
        **({} if args.dtype == "fp32" else {"dtype": args.dtype}),
        "implementations": [impl.as_dict() for impl in impls],
        "results": rows,
    }


def baseline_key(args) -> str:
    """The reference every ratio is to: cuBLAS in the run's precision (strict fp32, TF32 for a run
    of TF32 steps, or the 16-bit dtype)."""
    if args.dtype != "fp32":
        return references.baseline(None, args.dtype).key
    return references.CUBLAS_TF32.key if getattr(args, "precision", "fp32") == "tf32" else BASELINE


def _repo_path(path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(results.RESULTS_DIR.parent).as_posix()
    except ValueError:
        return str(path)


# --- the text report -------------------------------------------------------------------------------


def _tflops_cell(row: dict | None) -> str:
    if row is None:
        return "-"
    if row.get("error"):
        return "FAILED"
    if not row.get("gflops"):
        return "ok" if row.get("rel_err") is not None else "-"
    return f"{row['gflops'] / 1e3:.2f}" + (options.HOST_MARK if row.get("host_bound") else "")


def _ratio_cell(value: float | None, why: str | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f"({options.HOST_MARK})" if why == "host-bound" else "")


SHORT = {"cublas": "cuBLAS", "cublas_tf32": "cuBLAS TF32", "dlight": "dlight", "metaschedule": "MetaSched."}


def _short(impl: dict) -> str:
    """A column header: 'step 10', 'cuBLAS'."""
    if impl.get("beside"):
        return "cuBLAS again" if impl["beside"] == FASTEST else f"cuBLAS ({impl['beside']})"
    return shapes.title(impl) if "step" in impl else SHORT.get(impl["key"], impl["key"])


def format_report(doc: dict) -> str:
    """Per shape, grouped by class: each implementation's TFLOPS (or ok / FAILED when only
    checked) and each step's ratio to the baseline; then the summary per step."""
    index = shapes.rows_by(doc)
    impls = doc["implementations"]
    timed = doc["method"].get("timed", True)
    base = doc["baseline"]
    has_base = any(i["key"] == base for i in impls)
    columns = []  # (header, cell function)
    for impl in impls:
        columns.append((_short(impl),
                        lambda shape, k=impl["key"]: _tflops_cell(index.get((k, shape)))))
        if timed and has_base and impl["key"] != base:
            columns.append(("x cuBLAS", lambda shape, k=impl["key"]: _ratio_cell(*shapes.ratio(doc, k, shape, index))))
    shape_width = max([len(shapeset.shape_text(s)) for _, s in shapes.shapes_in_order(doc)] + [5])
    widths = [max(len(h), 9) for h, _ in columns]
    unit = "TFLOPS" if timed else "check"
    lines = [f"{'':<{shape_width}}" + "".join(f"  {h:>{w}}" for (h, _), w in zip(columns, widths)),
             f"{'shape':<{shape_width}}" + "".join(f"  {(unit if h != 'x cuBLAS' else ''):>{w}}"
                                                   for (h, _), w in zip(columns, widths))]
    rule = "-" * len(lines[0])
    lines.append(rule)
    last = None
    for class_name, shape in shapes.shapes_in_order(doc):
        if class_name != last:
            lines.append(f"[{class_name}]")
            last = class_name
        lines.append(f"{shapeset.shape_text(shape):<{shape_width}}"
                     + "".join(f"  {cell(shape):>{w}}" for (_, cell), w in zip(columns, widths)))
    lines.append(rule)
    legend = [f"{_short(i)}: {i['label']}" for i in impls]
    lines.append("; ".join(legend))
    if shapes.graph_timed(doc):
        lines.append("--graph: every TVM kernel replayed from a CUDA graph, as cuBLAS is (kernel time, the host out "
                     "of the way)")
    for impl in shapes.step_impls(doc):
        err = shapes.max_rel_err(doc, impl["key"])
        failed = sum(1 for r in doc["results"] if r["impl"] == impl["key"] and r.get("error"))
        verdict = f"{failed} of the shapes FAILED" if failed else "every shape passed"
        lines.append(f"{shapes.title(impl)}: {verdict}; largest relative error "
                     f"{'-' if err is None else f'{err:.1e}'} (bound {impl['tolerance']:g})")
    if timed and has_base:
        for impl in shapes.step_impls(doc):
            lines += ["", format_summary(doc, impl)]
    if any(r.get("host_bound") for r in doc["results"]):
        lines.append(options.HOST_LEGEND + "; a ratio with † is left out of the geometric means")
    return "\n".join(lines)


def format_summary(doc: dict, impl: dict) -> str:
    base_label = next(i["label"] for i in doc["implementations"] if i["key"] == doc["baseline"])
    stats = shapes.summarize(doc, impl["key"])
    width = max(len(s.name) for s in stats)
    lines = [f"{shapes.title(impl)} ({impl['name']}) against {base_label}: geometric mean of the ratio, and the "
             "worst shape, per class",
             f"{'class':<{width}}  {'shapes':>6}  {'geomean':>7}  worst"]
    for s in stats:
        worst = f"{shapeset.shape_text(s.worst[0])} {s.worst[1]:.2f}x" if s.worst else "-"
        if s.name == shapes.ALL and s.worst:
            worst += f" ({dict((sh, c) for c, sh in shapes.shapes_in_order(doc))[s.worst[0]]})"
        notes = []
        if s.host_bound:
            notes.append(f"{len(s.host_bound)} host-bound left out")
        if s.failed:
            notes.append(f"{len(s.failed)} failed")
        geomean = f"{s.geomean:.2f}x" if s.geomean else "-"
        lines.append(f"{s.name:<{width}}  {s.shapes:>6}  {geomean:>7}  {worst}" + (f"  ({'; '.join(notes)})" if notes else ""))
    low = shapes.below_bar(doc, impl["key"])
    lines.append(f"below {shapes.BAR:g}x cuBLAS: " + (", ".join(f"{shapeset.shape_text(s)} {r:.2f}x ({c})" for c, s, r in low)
                                              if low else "none"))
    host = shapes.below_bar_host_bound(doc, impl["key"])
    if host:
        lines.append(f"below {shapes.BAR:g}x with a host-bound timing, not judged: "
                     + ", ".join(f"{shapeset.shape_text(s)} {r:.2f}x{options.HOST_MARK} ({c})" for c, s, r in host))
    return "\n".join(lines)


# --- --save: shapes.json, shapes.csv, shapes.png, docs/measured.md ---------------------------------

def save(doc: dict, results_dir: Path) -> None:
    """shapes.json and shapes.csv (each whole or not at all), then the plot and docs/measured.md."""
    from ..report import plot, table

    shapes.validate(doc)
    gpu_dir = shapes.folder(Path(results_dir) / results.gpu_slug(doc["environment"]["gpu"]), shapes.precision_of(doc))
    results.write_json_atomic(gpu_dir / shapes.JSON_NAME, doc)
    print(f"saved {gpu_dir / shapes.JSON_NAME}")
    results.write_text_atomic(gpu_dir / shapes.CSV_NAME, shapes.shapes_csv(doc))
    print(f"saved {gpu_dir / shapes.CSV_NAME}")
    try:  # the measurements are saved by now; a plotting problem must not hide that
        line = plot.render_shapes(gpu_dir)
    except Exception as exc:
        print(f"{shapes.PLOT_NAME} not rendered: {harness._one_line(exc)} (retry: python -m steps.plot)", file=sys.stderr)
    else:
        print(line)
    if Path(results_dir).resolve() == results.RESULTS_DIR.resolve():
        print("docs/measured.md updated" if table.update_readme() else "docs/measured.md already up to date")
