"""The dispatch rule: which step of the ladder to run for a shape, chosen from measurements.

    import schedules
    choice = schedules.fastest(1000, 1500, 700)              # fp32-accurate, an H100's table
    choice.step.number, choice.config, choice.why            # 19, Wgmma3xTF32Config(...), '...'
    lib = schedules.build(choice.step, 1000, 1500, 700, config=choice.config)

No step wins everywhere. On an H100 step 19 (3xTF32 on wgmma) is 2.3x cuBLAS SGEMM on large
squares, but its tiles are 128 x 128 and its k loop pays three wgmma per slice: at 512^3 step 14
beats it, and on a tiny output with a long K, or a matrix-vector product, the CUDA-core step 11
(split-K, its own shape rule) beats both. So the choice is measured, not modelled:
``python -m steps.bench --save`` times every candidate on every shape of ``bench/shapes.toml`` and
writes ``schedules/tuned/dispatch.json``: per GPU, per precision, per shape, each step's median
kernel time. ``fastest`` reads that table only (no GPU, no clock, no file but this committed one):

1. **A measured shape** gets the step that was fastest there.
2. **Any other shape** gets the step that was fastest at its nearest measured shape, distance
   measured in log2 of each of M, N and K (so 3000x3000x1 is near 2048x2048x1, not near
   3072^3: a factor of two counts the same at every size and in every dimension). The audit in
   ``results/<gpu>/evidence/dispatch_audit.txt`` times the rule's pick on shapes outside the set against
   every candidate there.
3. **An arch with no table** (sm_80, sm_86, sm_89 today), or a precision with no rows, gets the
   portable rule: step 11 for fp32 (CUDA cores run everywhere, and split-K and its shape rule
   cover every shape), step 13 for tf32, fp16 and bf16 (mma.sync, sm_80 and up).

A rung meant for one kind of shape (step 24, the matrix-vector kernel: M <= 16 or N <= 2;
``Step.applies_to``) is picked only for a query of that kind, whatever the nearest row says.

The precisions: "fp32" (fp32 inputs, SGEMM's accuracy: steps 1-11, 14, 19, 24, 25, 28), "tf32" (fp32 inputs
rounded to TF32: 12, 13, 15-18, 20-23, 26, 27, 29-31), and "fp16" / "bf16" (16-bit inputs, fp32 sums, C in the
dtype: the steps with that dtype, ``Step.dtypes``). A TF32 query also weighs the same GPU's fp32
rows (``ALSO_SERVES``): an fp32-accurate kernel meets TF32's tolerance, and at a matrix-vector
product the CUDA-core steps 11 and 24 beat every tensor-core one (their rows come from another
run, and `why` says so). Where a table has no rows of a precision,
the portable rule answers, and says so in ``why``; but fp16 and bf16 stand in for each other,
the same kernels at the same tensor-core rate (a GPU measured in one reads the other's rows, and
says so). The dlight rule takes a model's fp32 and tf32 matmuls (``MODEL_PRECISIONS``); the
Relax pass those and, in a bf16 or fp16 model, its 16-bit ones (schedules/integration/relax_dispatch.py).

Which GPU's rows: the table holds an entry per GPU measured (an H100's and an H200's, each in
every precision). ``gpu`` names one (``fastest(..., gpu="NVIDIA H200")``; steps.bench
and steps.model pass the GPU they run on where the table has it: ``table_gpu``); naming none
reads the first entry of the arch's family. A precision the named GPU was not measured in
comes from its own other 16-bit dtype first, then from the family's other entries in order.

The step's own config for the shape comes with it (``Step.default_config``: its tuned entry or
its shape rule), so the kernel is the one the table's row measured wherever the shape was
measured. ``why`` says which of the three cases chose.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .config import ConfigError, check_sizes

TABLE_PATH = Path(__file__).resolve().parent / "tuned" / "dispatch.json"
SCHEMA = "dispatch-1"
SIXTEEN_BIT = ("fp16", "bf16")  # a precision that is also the inputs' dtype
PRECISIONS = ("fp32", "tf32") + SIXTEEN_BIT
MODEL_PRECISIONS = ("fp32", "tf32")  # what the dlight rule takes (fp32 models; the Relax pass: 16-bit too)
# The portable rule, for an arch no table covers: the step per precision, and why.
PORTABLE = {"fp32": 11, "tf32": 13, "fp16": 13, "bf16": 13}


def computes(step, precision: str) -> bool:
    """Whether `step` is a candidate for `precision`: its own precision for fp32 inputs (fp32 or
    tf32), or a form for that 16-bit dtype."""
    return precision in step.dtypes if precision in SIXTEEN_BIT else step.precision == precision


# A precision whose rows may also offer another's steps, measured on the same GPU: an fp32-accurate
# kernel meets TF32's tolerance, and where a product streams its operands (a matrix-vector one)
# the CUDA-core steps 11 and 24 need no tensor-core tile and run as fast as the memory (H200,
# 2026-11-29: 4096 x 1 x 4096 step 11 18.5 us in the fp32 rows, TF32's pick 23.5 us, cuBLAS TF32 21.8).
ALSO_SERVES = {"tf32": "fp32"}


def serves(step, precision: str) -> bool:
    """Whether `step` may answer a query in `precision`: it computes in it, or in a precision at
    least as accurate that ALSO_SERVES offers (an fp32-accurate step for TF32)."""
    return computes(step, precision) or (precision in ALSO_SERVES and computes(step, ALSO_SERVES[precision]))


def _with_also(measured: dict, also: dict | None) -> dict:
    """`measured` (a precision's rows) with `also`'s steps (another precision's rows, the same
    GPU's) as more candidates, matched by shape; a shape `also` lacks gets no time for them."""
    if not also:
        return measured
    theirs = {tuple(r[:3]): r[3] for r in also["shapes"]}
    none = [None] * len(also["steps"])
    return {**measured, "steps": list(measured["steps"]) + list(also["steps"]),
            "shapes": [[*r[:3], list(r[3]) + list(theirs.get(tuple(r[:3]), none))] for r in measured["shapes"]]}


def config_for(step, M: int, N: int, K: int, precision: str):
    """The step's config for the shape: its 16-bit one for fp16 and bf16."""
    return step.default_config(M, N, K, precision) if precision in SIXTEEN_BIT else step.default_config(M, N, K)


@dataclass(frozen=True)
class Choice:
    """What ``fastest`` picked: the step, its config for the shape, and why."""

    step: object  # a schedules.Step
    config: object  # the step's Config dataclass
    why: str
    measured_ms: float | None = None  # the table's time of this step at this very shape, if measured


def family(arch: str) -> str:
    """The table an arch reads: sm_90a runs what sm_90 measured (a Hopper GPU reports sm_90)."""
    return "sm_90" if arch in ("sm_90", "sm_90a") else arch


def validate(doc: dict) -> dict:
    """A dispatch table: {schema, generated_by, gpus: [{gpu, slug, arch, date, shape_set_sha256,
    precisions: {precision: {steps: [n, ...], shapes: [[M, N, K, [ms per step, null where it
    failed]], ...], date, and "timer": "cuda graph" (GRAPH_TIMER) where the rows are kernel times from CUDA
    graphs (steps.bench --graph)}}}]}; ConfigError, one line, where it is not one."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("gpus"), list):
        raise ConfigError(f"{TABLE_PATH.name} is not a {SCHEMA} table")
    for entry in doc["gpus"]:
        for key in ("gpu", "slug", "arch", "date", "precisions"):
            if key not in entry:
                raise ConfigError(f"{TABLE_PATH.name}: a GPU entry lacks {key!r}")
        for precision, table in entry["precisions"].items():
            if precision not in PRECISIONS:
                raise ConfigError(f"{TABLE_PATH.name}: unknown precision {precision!r}")
            steps = table["steps"]
            for row in table["shapes"]:
                if len(row) != 4 or len(row[3]) != len(steps):
                    raise ConfigError(f"{TABLE_PATH.name}: a row of {entry['slug']} {precision} does not "
                                      f"give one time per step")
    return doc


@lru_cache(maxsize=None)
def _load(path: str) -> dict:
    p = Path(path)
    if not p.exists():
        return {"schema": SCHEMA, "gpus": []}
    try:
        return validate(json.loads(p.read_text()))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p.name} is not JSON: {exc}") from None


def table(path: Path | None = None) -> dict:
    """The committed dispatch table (an empty one where none is committed)."""
    return _load(str(TABLE_PATH if path is None else path))


def _entries(doc: dict | None) -> list:
    """`doc`'s GPU entries (default: the committed table's), in the table's order."""
    return (table() if doc is None else doc)["gpus"]


def gpu_entry(arch: str, gpu: str | None = None, doc: dict | None = None) -> dict | None:
    """`doc`'s (default: the committed table's) entry for `gpu` (a slug or a name), else the
    first entry measured on an arch of `arch`'s family; None where there is none."""
    entries = _entries(doc)
    if gpu is not None:
        for e in entries:
            if gpu in (e["slug"], e["gpu"]):
                return e
        known = ", ".join(e["slug"] for e in entries) or "none"
        raise ConfigError(f"no dispatch table for GPU {gpu!r}; tables: {known}")
    return next((e for e in entries if family(e["arch"]) == family(arch)), None)


def table_gpu(gpu_name: str | None, doc: dict | None = None) -> str | None:
    """`gpu_name` (a GPU's name as the driver gives it) where `doc` (default: the committed table)
    has an entry measured on that GPU, else None: the rule's default, the first entry of the arch's
    family. What a caller that knows its GPU passes as ``gpu``, so each GPU takes its own rows."""
    return gpu_name if any(e["gpu"] == gpu_name for e in _entries(doc)) else None


def log_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """Euclidean distance between two shapes in log2 of each dimension."""
    return math.sqrt(sum((math.log2(x) - math.log2(y)) ** 2 for x, y in zip(a, b)))


# How much slower than the fastest, at the row, a step may be and still win by issuing faster
# (_host_bound). Scaling a row's time to a smaller query assumes both fill the GPU alike, which
# holds for kernels of about the same speed there, not for one whose tiles run out first (step 20
# at 16 tokens: 3x step 23's time at the nearest row, a few tiles for 132 SMs at the query).
HOST_BOUND_WINDOW = 1.25
# Rows of kernel time (timer GRAPH_TIMER: steps.bench --graph) spread short kernels' times, where
# time_evaluator's back-to-back calls evened them out with the host's: at 16 x 1024 x 4096 in bf16
# (H200) step 26 read 1.30x step 23 at the nearest row of kernel time (16 x 4096 x 4096), while in
# the model at that very shape it ran 5.0 us in one kernel against step 23's 4.7 in two
# (results/nvidia-h200/evidence/model_launches.txt). At 1.25 the host's time was never asked, and
# the block took a launch more. Step 20's 3x stays out.
GRAPH_TIMER = "cuda graph"
HOST_BOUND_WINDOW_GRAPH = 1.5


def _host_bound(pool, times, steps, host, cfg, scale, window=HOST_BOUND_WINDOW):
    """The index in `pool` of least ``max(time x scale, host(step, config))``, what a call takes
    where the host issues the kernels while the GPU runs them (times in ms, at the row's shape:
    `scale` takes them to the query's FLOPs; host in us), among the steps within `window` of the
    fastest at the row (HOST_BOUND_WINDOW, or HOST_BOUND_WINDOW_GRAPH for rows of kernel time);
    and a note where that changed the pick. Only
    steps whose scaled time is below the fastest one's cost are asked for their host time (each
    answer may schedule a kernel)."""
    t = {i: times[i] * scale * 1e3 for i in pool}
    fastest = min(pool, key=lambda i: times[i])
    cost = {fastest: max(t[fastest], host(steps[fastest], cfg(steps[fastest])))}
    for i in pool:
        if i != fastest and t[i] < cost[fastest] and times[i] <= window * times[fastest]:
            cost[i] = max(t[i], host(steps[i], cfg(steps[i])))
    best = min(cost, key=lambda i: (cost[i], times[i], i))
    if best == fastest:
        return best, ""
    return best, (f": step {steps[best].number} over step {steps[fastest].number}, whose kernels are "
                  f"~{t[fastest]:.1f} us here but take the host {cost[fastest]:.1f} us to issue, "
                  f"against {cost[best]:.1f}")


def choose(M: int, N: int, K: int, precision: str, arch: str, steps, gpu: str | None = None,
           doc: dict | None = None, allow=None, host=None) -> Choice:
    """``schedules.fastest`` over `steps` (the registry, passed in: this module sits below it);
    `allow(step)`, if given, leaves out the steps it refuses (a model takes only kernels that
    build without the ladder's own lowering passes: schedules/integration/relax_dispatch.py).
    `host(step, config)`, if given, is the microseconds the caller's host takes to issue the
    step's kernels (a model's VM: relax_dispatch.host_time); the pick is then the least of the
    measured time, scaled to the query's FLOPs, and that host time, whichever is longer: where
    kernels of a few microseconds are issued one by one the host sets the pace, and a kernel
    fewer beats a kernel faster. The portable rule takes no host time."""
    check_sizes(M, N, K)
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    by_number = {s.number: s for s in steps if allow is None or allow(s)}
    shape = (M, N, K)
    # The named GPU's entry, then the others of the arch's family in the table's order: a GPU
    # measured in some precisions only (as the H200 was, in bf16 alone, at first) takes another
    # GPU's rows in the rest.
    named = gpu_entry(arch, gpu, doc)
    entries = [e for e in [named] + _entries(doc)
               if e is not None and family(e["arch"]) == family(arch)]
    entry, measured, borrowed = None, None, None
    for entry in entries:
        tables = entry.get("precisions", {})
        measured, borrowed = tables.get(precision), None
        if not measured and precision in SIXTEEN_BIT:
            # fp16 and bf16 run the same kernels at the same tensor-core rate (steps 13-22 at 512-8192
            # within 0-7% of each other on the H100, results/<gpu>/fp16, bf16): the other 16-bit
            # dtype's rows beat the portable rule's step 13, a third to a half as fast at 2048-8192.
            borrowed = next(d for d in SIXTEEN_BIT if d != precision)
            measured = tables.get(borrowed)
        if measured:
            break
    also = entry.get("precisions", {}).get(ALSO_SERVES.get(precision)) if measured and not borrowed else None
    if measured:
        own_steps = len(measured["steps"])
        measured = _with_also(measured, also)
        runnable = [i for i, n in enumerate(measured["steps"])
                    if n in by_number and by_number[n].runs_on(arch) and serves(by_number[n], precision)]
        rows = [(tuple(r[:3]), r[3]) for r in measured["shapes"] if any(r[3][i] is not None for i in runnable)]
        window = HOST_BOUND_WINDOW_GRAPH if measured.get("timer") == GRAPH_TIMER else HOST_BOUND_WINDOW
        if runnable and rows:
            at, times = min(rows, key=lambda r: (log_distance(r[0], shape), r[0]))
            # A rung of one kind of shape (step 24: M <= 16 or N <= 2) only where the query is of that kind.
            fits = [i for i in runnable if times[i] is not None and by_number[measured["steps"][i]].applies_to(M, N, K)]
            pool = fits or [i for i in runnable if times[i] is not None]
            best, changed = min(pool, key=lambda i: times[i]), ""
            if host is not None:
                steps_at = {i: by_number[measured["steps"][i]] for i in pool}
                best, changed = _host_bound(pool, times, steps_at, host, lambda s: config_for(s, M, N, K, precision),
                                            M * N * K / math.prod(at), window)
            step = by_number[measured["steps"][best]]
            where = f"{entry['gpu']}, {measured.get('date', entry['date'])[:10]}"
            if entry is not named and named is not None:
                where += f"; no {precision} rows of {named['gpu']}"
            if borrowed:
                where += f"; {borrowed}'s rows: no {precision} measurements, the same kernels in the other 16-bit dtype"
            among = ", ".join(str(measured["steps"][i]) for i in runnable if i < own_steps)
            extra = [str(measured["steps"][i]) for i in runnable if i >= own_steps]
            if extra:
                among += (f" and the {ALSO_SERVES[precision]}-accurate {', '.join(extra)} (its rows of "
                          f"{also.get('date', entry['date'])[:10]})")
            pick = "quickest to issue and run" if changed else "fastest"
            if at == shape:
                why = f"{pick} of steps {among} measured at this shape ({where}){changed}"
                return Choice(step, config_for(step, M, N, K, precision), why, None if borrowed else times[best])
            why = f"{pick} of steps {among} at the nearest measured shape {'x'.join(map(str, at))} ({where}){changed}"
            return Choice(step, config_for(step, M, N, K, precision), why)
    if PORTABLE[precision] not in by_number:
        raise ConfigError(f"no {precision} step is allowed at {M}x{N}x{K} on {arch}")
    step = by_number[PORTABLE[precision]]
    return Choice(step, config_for(step, M, N, K, precision),
                  f"no {precision} measurements for {family(arch)}: the portable rule (step {step.number})")
