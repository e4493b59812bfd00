"""python -m steps.plot: the ladder's plots, rendered headless from saved results.

    python -m steps.plot                       # the GPU the README shows (the one measured last)
    python -m steps.plot --gpu nvidia-h200     # another GPU's folder
    python -m steps.plot --all                 # every GPU folder under results/

It writes nothing but these PNGs, beside the results they come from, in results/<gpu-slug>/
(``python -m steps --save`` renders them for the GPU it measured; a GPU's page links those present):
- gflops.png      throughput per step per size, cuBLAS as a dashed line per size, and TVM's own
                  schedules (dlight, MetaSchedule: references.json) as dotted bars after the steps;
- speedup.png     each step over the step before it, per size (log scale; expected
                  regressions hatched, their reason is in stepN.json);
- pct_cublas.png  each step, and TVM's own schedules, as a percentage of cuBLAS strict-fp32 SGEMM;
- roofline.png    each step at its arithmetic intensity (from the global-memory bytes its
                  schedule moves, steps/measure/roofline.py) under the measured roofs in machine.json;
- shapes.png      (where python -m steps.bench --save wrote shapes.json) each step per shape of
                  the benchmark set, grouped by class: TFLOPS, and the ratio to cuBLAS fp32.
Each 16-bit ladder with results (issue 47; docs/sixteen-bit.md) gets two plots of its own in its
folder, results/<gpu-slug>/bf16/ and fp16/ (``python -m steps --dtype bf16 --save`` renders its
dtype's), drawn as the fp32 ones with each step named in the dtype (Step.name_for); a dtype with
no results renders nothing:
- bf16/gflops.png, fp16/gflops.png        throughput per step per size, cuBLAS in the dtype (fp32
                  sum) as a dashed line per size, dlight in the dtype as dotted bars;
- bf16/pct_cublas.png, fp16/pct_cublas.png  each step, and dlight, as a percentage of cuBLAS in
                  the dtype (fp32 sum), the baseline of the 16-bit tables' "% cuBLAS".
A bar whose number is host-bound (the guard in steps/measure/harness.py) is cross-hatched: it may time
the host, not the kernel. cuBLAS TF32 (reduced precision, several times the fp32 scale) is left
to the tables. A plot whose data is missing (no cuBLAS column, no machine.json) is skipped with
a note. Matplotlib's Agg canvas, no pyplot: nothing needs a display. Each PNG is saved with a
palette of at most 128 colours (flat-coloured charts: a third of the RGBA file's bytes, the
same picture; 32 for a bar plot of up to four sizes, 64 past that), so the committed plots of
several GPUs stay small.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from .. import results
from ..measure import roofline
from ..results import shapes
from .pipes import quiet_broken_pipe

PALETTE_COLOURS = 32
MANY_SIZES_COLOURS = 64  # bar plots of more than 4 sizes (the 16-bit ladders' 512-8192): 32 merge blue and purple
ROOFLINE_COLOURS = 128


def save_png(fig: Figure, path: Path, colours: int = PALETTE_COLOURS) -> None:
    """Render, then store as a palette PNG of `colours` (Pillow comes with matplotlib);
    atomically, so a failed run never leaves half a file. A few bar colours survive 32; a
    plot of many small markers (the roofline's 19 steps) needs ROOFLINE_COLOURS, or median cut
    merges the markers' colours into the grey of the grid."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB")
    palette = image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True)
    results.write_bytes_atomic(path, out.getvalue())


PLOTS = ("gflops.png", "speedup.png", "pct_cublas.png", "roofline.png")
DTYPE_PLOTS = ("gflops.png", "pct_cublas.png")  # a 16-bit ladder's, in results/<gpu>/<dtype>/
FIGSIZE = (10, 5.6)  # inches; at DPI 80 an 800 px image, the width the README shows it at
DPI = 80
STYLE = {"font.size": 12, "axes.titlesize": 14, "axes.labelsize": 12, "legend.fontsize": 11,
         "xtick.labelsize": 10.5, "ytick.labelsize": 11}
SIZE_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")
STEP_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


# --- data -----------------------------------------------------------------------------------


def sizes_of(docs: list[dict]) -> list[tuple[int, int, int]]:
    return sorted({(r["M"], r["N"], r["K"]) for d in docs for r in d["results"]}, key=lambda s: (s[0] * s[1] * s[2], s))


def size_label(size) -> str:
    M, N, K = size
    return f"{M}³" if M == N == K else f"{M}×{N}×{K}"


def step_label(doc: dict, width: int | None = 11) -> str:
    """The x label of a step's bars: its number over its name, wrapped to `width` (None: on one
    line, for a ladder too long to stack them side by side)."""
    head = "TVM ref." if doc.get("reference") else f"{doc['step']}"
    if width is None:
        return f"{head} {doc['name']}"
    return f"{head}\n" + "\n".join(textwrap.wrap(doc["name"], width))


# Past this many bar groups the wrapped names collide: one line each, slanted.
SLANTED_LABELS_FROM = 12


# TVM's own schedules drawn beside the steps (cuBLAS is the dashed line; TF32 stays in tables).
PLOTTED_REFERENCES = {"dlight": "dlight", "metaschedule": "Meta-Schedule"}


def plotted_references(dtype: str = "fp32") -> dict[str, str]:
    """The reference rows drawn as bars for a `dtype` ladder (key -> name): dlight and MetaSchedule
    for fp32; for 16-bit, the dtype's own rows of those (dlight_bf16: MetaSchedule has none)."""
    from ..measure import references

    if dtype == "fp32":
        return dict(PLOTTED_REFERENCES)
    keys = {r.key for r in references.of_dtype(dtype)}
    return {f"{key}_{dtype}": name for key, name in PLOTTED_REFERENCES.items() if f"{key}_{dtype}" in keys}


def reference_docs(gpu_dir: Path, docs: list[dict], dtype: str = "fp32") -> list[dict]:
    """references.json's dlight and MetaSchedule rows, shaped like step documents (their
    % cuBLAS against the cuBLAS fp32 row of the same run), for the bar plots. For a 16-bit
    ladder (gpu_dir its results/<gpu>/<dtype>/), that dtype's dlight row against its cuBLAS."""
    from ..measure import references

    ref_doc = references.load(gpu_dir)
    if ref_doc is None:
        return []
    base_key = "cublas" if dtype == "fp32" else references.baseline(None, dtype).key
    out = []
    for key, name in plotted_references(dtype).items():
        entry = references.entry(ref_doc, key)
        if entry is None:
            continue
        rows = []
        for r in entry["results"]:
            base = references.row(ref_doc, base_key, (r["M"], r["N"], r["K"]))
            pct = 100.0 * r["gflops"] / base["gflops"] if base else None
            rows.append({**r, "pct_cublas": pct, "cublas_gflops": base["gflops"] if base else None,
                         "prior": {"name": "reference", "gflops": None}, "speedup_vs_prior": None})
        trials = (entry.get("tuning") or {}).get("trials")
        out.append({"step": key, "reference": True, "environment": docs[-1]["environment"],
                    "name": name + (f", {trials} trials" if trials else ""), "results": rows})
    return out


def _guarded(docs: list[dict]) -> bool:
    """Whether these results were timed with the host-bound guard (schema 2 on); before it,
    cuBLAS went through cupy.matmul and its numbers are not kernel time at small sizes."""
    return all(d.get("schema", 1) >= 2 for d in docs)


def _host_bound(doc: dict, size) -> bool:
    return bool(_value(doc, size, "host_bound"))


def gpu_name(docs: list[dict]) -> str:
    return docs[-1]["environment"].get("gpu", "unknown GPU")


def _value(doc: dict, size, key: str):
    row = results.row_for(doc, *size)
    return row.get(key) if row else None


def load_machine(gpu_dir: Path) -> dict | None:
    """machine.json (the measured roofs), or None when absent or unusable."""
    path = Path(gpu_dir) / "machine.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not (_positive(doc.get("bandwidth_gbs")) and _positive(doc.get("fp32_peak_gflops"))):
        return None
    return doc


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and value > 0


# --- drawing --------------------------------------------------------------------------------


def _bar_colours(sizes) -> int:
    """The palette of a bar plot: PALETTE_COLOURS, or MANY_SIZES_COLOURS past four sizes, where
    median cut at 32 merges the first size's blue into the last one's purple."""
    return PALETTE_COLOURS if len(sizes) <= 4 else MANY_SIZES_COLOURS


def _figure():
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    return fig, fig.add_subplot()


def _grouped_bars(ax, docs, sizes, key, hatch_for=None):
    """Bars per step (x), one per size. Reference bars (TVM's own schedules) are dotted, and a
    host-bound number is cross-hatched, whatever `hatch_for` says."""
    group = 0.8
    width = group / len(sizes)
    xs = range(len(docs))
    for i, size in enumerate(sizes):
        offset = -group / 2 + width * (i + 0.5)
        values = [_value(d, size, key) or 0 for d in docs]
        bars = ax.bar([x + offset for x in xs], values, width, label=size_label(size),
                      color=SIZE_COLORS[i % len(SIZE_COLORS)], edgecolor="white", linewidth=0.5)
        for bar, d in zip(bars, docs):
            hatch = "///" if hatch_for is not None and hatch_for(d, size) else None
            if d.get("reference"):
                hatch = "..."
            if _host_bound(d, size):
                hatch = "xx"
            if hatch:
                bar.set_hatch(hatch)
                bar.set_edgecolor("black")
    if len(docs) < SLANTED_LABELS_FROM:
        ax.set_xticks(list(xs), [step_label(d) for d in docs])
    else:
        ax.set_xticks(list(xs), [step_label(d, None) for d in docs], rotation=35, ha="right",
                      rotation_mode="anchor", fontsize=9)
    ax.set_xlim(-0.6, len(docs) - 0.4)
    first_ref = next((x for x, d in zip(xs, docs) if d.get("reference")), None)
    if first_ref is not None:
        ax.axvline(first_ref - 0.5, color="gray", linewidth=1, linestyle=":")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _legend_extras(handles, labels, docs, sizes) -> None:
    """Legend entries for the hatches in use: TVM's references, host-bound numbers. A size's entry
    is drawn plain: matplotlib draws a bar series' from its first bar, hatched where that one is."""
    from matplotlib.container import BarContainer

    for i, handle in enumerate(handles):
        if isinstance(handle, BarContainer) and handle.patches:
            handles[i] = Patch(facecolor=handle.patches[0].get_facecolor(), edgecolor="white", linewidth=0.5)
    if any(d.get("reference") for d in docs):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="..."))
        labels.append("TVM's own schedule (reference)")
    if any(_host_bound(d, s) for d in docs for s in sizes):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="xx"))
        labels.append("host-bound: not kernel time")


def plot_gflops(docs, path: Path, refs=(), dtype: str = "fp32") -> str:
    """TFLOPS per step and size; cuBLAS (in `dtype`: the docs' own cublas_gflops) dashed."""
    sizes = sizes_of(docs)
    fig, ax = _figure()
    shown = list(docs) + list(refs)
    tflops_docs = [{**d, "results": [{**r, "tflops": r["gflops"] / 1000} for r in d["results"]]} for d in shown]
    _grouped_bars(ax, tflops_docs, sizes, "tflops")
    for i, size in enumerate(sizes if _guarded(docs) else ()):
        cublas = next((_value(d, size, "cublas_gflops") for d in docs if _value(d, size, "cublas_gflops")), None)
        if cublas:
            ax.axhline(cublas / 1000, color=SIZE_COLORS[i % len(SIZE_COLORS)], linestyle="--", linewidth=1.5,
                       label=f"cuBLAS {'' if dtype == 'fp32' else dtype + ' '}{size_label(size)}")
    tops = [r["gflops"] for d in shown for r in d["results"]] + [r.get("cublas_gflops") or 0 for d in docs for r in d["results"]]
    ax.set_ylim(0, max(tops) / 1000 * 1.3)  # headroom for the legend above the tallest bar or line
    ax.set_xlabel("step")
    ax.set_ylabel("TFLOPS (10¹² FLOP/s, median)")
    square = all(s[0] == s[1] == s[2] for s in sizes)
    inputs = "fp32" if dtype == "fp32" else f"{dtype} (fp32 sum)"
    ax.set_title(f"{gpu_name(docs)}: {inputs} matmul throughput per step" + (" (M = N = K)" if square else ""))
    handles, labels = ax.get_legend_handles_labels()
    _legend_extras(handles, labels, shown, sizes)
    ax.legend(handles, labels, ncols=2, loc="upper left", title="size")
    save_png(fig, path, _bar_colours(sizes))
    return f"wrote {path}"


def plot_speedup(docs, path: Path) -> str:
    stepped = [d for d in docs if any(str(r["prior"]["name"]).startswith("step") for r in d["results"])]
    if not stepped:
        return f"skipped {path.name}: no step has a prior step in these results"
    sizes = sizes_of(stepped)
    fig, ax = _figure()

    def expected(doc, size):
        return results.expected_regression(doc, *size, module=_module_of(doc["step"])) is not None

    _grouped_bars(ax, stepped, sizes, "speedup_vs_prior", hatch_for=expected)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.axhline(1.0, color="black", linewidth=1)
    values = [v for d in stepped for s in sizes if (v := _value(d, s, "speedup_vs_prior"))]
    if values:
        ax.set_ylim(min(values + [1.0]) / 1.8, max(values + [1.0]) * 2.2)
    group = 0.8 / len(sizes)
    crowded = len(stepped) * len(sizes) > 18
    for x, d in enumerate(stepped):
        for i, size in enumerate(sizes):
            v = _value(d, size, "speedup_vs_prior")
            if v:
                ax.annotate(_times(v), (x - 0.4 + group * (i + 0.5), v), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8.5, rotation=90 if crowded else 0)
    handles, labels = ax.get_legend_handles_labels()
    if any(expected(d, s) for d in stepped for s in sizes):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///"))
        labels.append("expected regression")
    ax.legend(handles, labels, loc="upper left", title="size")
    ax.set_xlabel("step")
    ax.set_ylabel("× the step before (log scale)")
    ax.set_title(f"{gpu_name(docs)}: speedup of each step over the one before, same run")
    save_png(fig, path)
    return f"wrote {path}"


def _times(value: float) -> str:
    """A speedup in at most five characters: 0.07×, 1.03×, 29×."""
    return f"{value:.0f}×" if value >= 10 else f"{value:.2f}×"


def plot_pct_cublas(docs, path: Path, refs=(), dtype: str = "fp32") -> str:
    """Each step (and reference) as % of cuBLAS: strict fp32 SGEMM (TF32 for the TF32 steps),
    or for a 16-bit ladder cuBLAS in `dtype` with fp32 sum (the docs' pct_cublas either way)."""
    if not _guarded(docs):
        return (f"skipped {path.name}: cuBLAS in these results was timed before the host-bound guard "
                "(cupy.matmul, host-bound at 512^3); re-measure to plot % cuBLAS")
    if not any(_value(d, s, "pct_cublas") for d in docs for s in sizes_of(docs)):
        return f"skipped {path.name}: no cuBLAS numbers in these results (install CuPy: pip install -e \".[cublas]\")"
    sizes = sizes_of(docs)
    fig, ax = _figure()
    shown = list(docs) + list(refs)
    _grouped_bars(ax, shown, sizes, "pct_cublas")
    ax.axhline(100, color="black", linestyle="--", linewidth=1.2,
               label="cuBLAS = 100%" if dtype == "fp32" else f"cuBLAS {dtype} = 100%")
    if dtype != "fp32":  # steps near cuBLAS: headroom above 100% for the legend (two columns)
        top = max([v for d in shown for s in sizes if (v := _value(d, s, "pct_cublas"))] + [100.0])
        ax.set_ylim(0, top * 1.45)
    ax.set_xlabel("step")
    tf32 = [str(d["step"]) for d in docs if d.get("baseline") == "cublas_tf32"]
    if dtype != "fp32":
        ax.set_ylabel(f"% of cuBLAS {dtype} (fp32 sum)")
        ax.set_title(f"{gpu_name(docs)}: each {dtype} step as a share of cuBLAS {dtype} (fp32 sum)")
    else:
        # The TF32 steps' peer said once, in the title (the y label has no room for their numbers).
        ax.set_ylabel("% of cuBLAS (its peer's precision)" if tf32 else "% of cuBLAS SGEMM (TF32 off)")
        ax.set_title(f"{gpu_name(docs)}: each step as a share of cuBLAS"
                     + (f"\nfp32 steps: of SGEMM, TF32 off; TF32 steps ({', '.join(tf32)}): of cuBLAS TF32" if tf32 else
                        " strict fp32"))
    handles, labels = ax.get_legend_handles_labels()
    _legend_extras(handles, labels, shown, sizes)
    ax.legend(handles, labels, loc="upper left", title="size", ncols=1 if dtype == "fp32" else 2)
    save_png(fig, path, _bar_colours(sizes))
    return f"wrote {path}"


def plot_roofline(docs, machine: dict | None, path: Path) -> str:
    if machine is None:
        return (f"skipped {path.name}: no usable machine.json beside the results "
                "(python -m steps --save measures bandwidth and FP32 peak)")
    bandwidth, peak = machine["bandwidth_gbs"], machine["fp32_peak_gflops"]
    sizes = sizes_of(docs)
    points = []  # (step doc, size index, intensity, TFLOPS)
    for d in docs:
        module = _module_of(d["step"])
        for r in d["results"]:
            size = (r["M"], r["N"], r["K"])
            points.append((d, sizes.index(size), roofline.intensity(*size, r["config"], module), r["gflops"] / 1000))
    ridge = peak / bandwidth
    lo = min([p[2] for p in points] + [ridge]) / 3
    hi = max([p[2] for p in points] + [ridge]) * 4
    fig, ax = _figure()
    fig.get_layout_engine().set(rect=(0, 0.05, 1, 0.95))  # room for the note under the axes
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, bandwidth * x) / 1000 for x in xs], color="black", linewidth=2)
    step_numbers = [d["step"] for d in docs]
    colors = _step_colors(len(step_numbers))
    for d, size_index, x, y in points:
        ax.scatter(x, y, s=80, color=colors[step_numbers.index(d["step"])],
                   marker=STEP_MARKERS[size_index % len(STEP_MARKERS)], edgecolor="black", linewidth=0.6, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(lo, hi)
    ax.set_ylim(min([p[3] for p in points] + [bandwidth * lo / 1000]) / 2.5, peak / 1000 * 2.5)
    ax.grid(which="both", alpha=0.25)
    step_handles = [ax.scatter([], [], color=colors[i], marker="o", edgecolor="black", linewidth=0.6,
                               label=f"{d['step']}. {d['name']}") for i, d in enumerate(docs)]
    size_handles = [ax.scatter([], [], color="lightgray", edgecolor="black", marker=STEP_MARKERS[i % len(STEP_MARKERS)],
                               label=size_label(s)) for i, s in enumerate(sizes)]
    size_legend = ax.legend(handles=size_handles, loc="upper left", title="size", fontsize=10)
    ax.add_artist(size_legend)
    fig.legend(handles=step_handles, loc="outside right upper", title="step", fontsize=10)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of global memory the schedule moves)")
    ax.set_ylabel("TFLOPS (10¹² FLOP/s, median)")
    ax.set_title(f"{gpu_name(docs)}: roofline of the ladder")
    ax.text(hi / 1.15, peak / 1000 * 1.1, f"FP32 peak {peak / 1000:.1f} TFLOPS (measured clock)",
            ha="right", va="bottom", fontsize=10.5)
    fig.draw_without_rendering()  # lay out first: the slope's angle on screen depends on it
    x0 = lo * 1.15
    x1 = x0 * 3
    (px0, py0), (px1, py1) = ax.transData.transform([(x0, bandwidth * x0 / 1000), (x1, bandwidth * x1 / 1000)])
    angle = math.degrees(math.atan2(py1 - py0, px1 - px0))
    ax.text(x0, bandwidth * x0 / 1000 * 1.3, f"global memory {bandwidth / 1000:.2f} TB/s (measured)",
            rotation=angle, rotation_mode="anchor", ha="left", va="bottom", fontsize=10.5)
    fig.text(0.01, 0.01, "Bytes counted from each step's tiles; L1/L2 hits are not subtracted, "
             "so a point above the memory roof gets part of its reuse from the caches.", fontsize=9.5, color="dimgray")
    save_png(fig, path, ROOFLINE_COLOURS)
    return f"wrote {path}"


def _step_colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _module_of(number: int):
    import schedules

    try:
        return schedules.get_step(number).module
    except schedules.ConfigError:
        return None


# --- the shape benchmark (python -m steps.bench --save): shapes.png -----------------------------

SHAPES_FIGSIZE = (14, 8)  # 43 shapes side by side need the width; two panels the height
SHAPES_DPI = 80  # 1120 px wide: legible at the README's width, and a smaller file to commit


def shapes_title(doc: dict) -> str:
    """shapes.png's title: the GPU, the benchmark's precision (its dtype, or TF32), the date."""
    precision = {"tf32": "TF32"}.get(shapes.precision_of(doc), shapes.precision_of(doc))
    return (f"{doc['environment'].get('gpu', 'unknown GPU')}: {precision} matmul over the benchmark shape set "
            f"({doc['environment']['date'][:10]})")


def plot_shapes(doc: dict, path: Path) -> str:
    """Each step per shape of the set, grouped by class: TFLOPS (log scale, cuBLAS as a black
    tick) above, the ratio to cuBLAS in the run's precision below (1.0 solid, the issue's 0.9 dashed).
    Host-bound bars are cross-hatched and their ratios are not kernel-time ratios."""

    if not doc["method"].get("timed", True):
        return f"skipped {path.name}: the run only checked correctness (--check-only); nothing was timed"
    index = shapes.rows_by(doc)
    order = shapes.shapes_in_order(doc)
    steps = shapes.step_impls(doc)
    base = doc["baseline"]
    has_base = any(i["key"] == base for i in doc["implementations"])
    fig = Figure(figsize=SHAPES_FIGSIZE, dpi=SHAPES_DPI, layout="constrained")
    if has_base:
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        top, bottom = fig.add_subplot(), None
    colors = _step_colors(max(len(steps), 1))
    group = 0.8
    width = group / max(len(steps), 1)
    xs = list(range(len(order)))
    for k, impl in enumerate(steps):
        offset = -group / 2 + width * (k + 0.5)
        rows = [index.get((impl["key"], shape)) for _, shape in order]
        tflops = [(r["gflops"] or 0) / 1e3 if r and not r.get("error") and r.get("gflops") else 0 for r in rows]
        label = "fastest (dispatch rule)" if impl.get("dispatch") else f"{impl['step']}. {impl['name']}"
        bars = top.bar([x + offset for x in xs], tflops, width, color=colors[k], label=label, linewidth=0)
        _hatch_host_bound(bars, rows)
        if bottom is not None:
            values = [shapes.ratio(doc, impl["key"], shape, index) for _, shape in order]
            bars = bottom.bar([x + offset for x in xs], [v or 0 for v, _ in values], width, color=colors[k],
                              linewidth=0)
            _hatch_host_bound(bars, rows, [shapes.baseline_row(doc, impl["key"], s, index) for _, s in order])
    if has_base:
        cublas = [index.get((base, shape)) for _, shape in order]
        pts = [(x, r["gflops"] / 1e3) for x, r in zip(xs, cublas) if r and not r.get("error") and r.get("gflops")]
        base_label = next(i["label"] for i in doc["implementations"] if i["key"] == base)
        top.scatter([x for x, _ in pts], [y for _, y in pts], marker="_", s=260, linewidths=2.2, color="black",
                    zorder=3, label=base_label)
        bottom.axhline(1.0, color="black", linewidth=1.2)
        bottom.axhline(0.9, color="black", linewidth=1, linestyle="--", label="0.9× cuBLAS")
        bottom.set_ylabel(f"× cuBLAS {shapes.precision_of(doc)} (log scale)")
        ratios = [v for impl in steps for _, s in order if (v := shapes.ratio(doc, impl["key"], s, index)[0])]
        bottom.set_yscale("log")  # 0.5× and 2× the same distance from 1×
        bottom.set_ylim(min(ratios + [0.8]) / 1.25, max(ratios + [1.25]) * 1.25)
        bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        bottom.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}×" if v in (0.5, 2, 3) else ""))
        bottom.grid(axis="y", which="both", alpha=0.25)
        bottom.set_axisbelow(True)
    top.set_yscale("log")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    top.set_ylabel("TFLOPS (median kernel time)")
    top.grid(axis="y", which="both", alpha=0.25)
    top.set_axisbelow(True)
    last = bottom if bottom is not None else top
    last.set_xticks(xs, [_shape_tick(s) for _, s in order], rotation=90, fontsize=8.5)
    last.set_xlim(-0.6, len(order) - 0.4)
    starts = [x for x, (c, _) in enumerate(order) if x == 0 or order[x - 1][0] != c]
    for ax in (top, bottom) if bottom is not None else (top,):
        for x in starts[1:]:
            ax.axvline(x - 0.5, color="gray", linewidth=1, linestyle=":")
    for i, x in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(order)
        top.text((x + end - 1) / 2, 1.01, order[x][0], transform=top.get_xaxis_transform(), ha="center",
                 va="bottom", fontsize=10)
    handles, labels = top.get_legend_handles_labels()
    if bottom is not None:
        more_handles, more_labels = bottom.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    if any(r.get("host_bound") for r in doc["results"]):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="xx"))
        labels.append("host-bound: not kernel time")
    # As many columns as the figure's width holds for the longest label (~210 characters of
    # fontsize 10 across 14 inches, a handle and padding ~6 more each): five overflowed the
    # figure with steps 29-31's names.
    ncols = max(1, min(len(labels), 5, 210 // (max(map(len, labels), default=0) + 6)))
    fig.legend(handles, labels, loc="outside lower center", fontsize=10, ncols=ncols)
    fig.suptitle(shapes_title(doc))
    save_png(fig, path)
    return f"wrote {path}"


def _shape_tick(shape) -> str:
    M, N, K = shape
    return f"{M}³" if M == N == K else f"{M}×{N}×{K}"


def _hatch_host_bound(bars, rows, base_rows=None) -> None:
    for i, bar in enumerate(bars):
        bound = bool(rows[i] and rows[i].get("host_bound"))
        if base_rows is not None:
            bound = bound or bool(base_rows[i] and base_rows[i].get("host_bound"))
        if bound:
            bar.set_hatch("xx")
            bar.set_edgecolor("black")
            bar.set_linewidth(0.6)


def render_shapes(gpu_dir: Path) -> str:
    """shapes.png from gpu_dir's shapes.json (steps.bench writes both); one line."""

    doc = shapes.load(gpu_dir)
    path = Path(gpu_dir) / shapes.PLOT_NAME
    if doc is None:
        return f"skipped {path.name}: no {shapes.JSON_NAME} in {gpu_dir}"
    with rc_context(STYLE):
        return plot_shapes(doc, path)


# --- entry points -----------------------------------------------------------------------------


def render_dtype_dir(gpu_dir: Path, dtype: str) -> list[str]:
    """A 16-bit ladder's two plots (DTYPE_PLOTS) into results/<gpu>/<dtype>/ from its stepN.json
    and references.json, each step named in the dtype; one line each, none where it has no results."""
    from .table import _name_in

    folder = results.dtype_dir(gpu_dir, dtype)
    docs = results.load_gpu_dir(folder) if folder.is_dir() else []
    if not docs:
        return []
    refs = reference_docs(folder, docs, dtype)
    docs = [{**d, "name": _name_in(d, dtype)} for d in docs]
    with rc_context(STYLE):
        return [plot_gflops(docs, folder / "gflops.png", refs, dtype),
                plot_pct_cublas(docs, folder / "pct_cublas.png", refs, dtype)]


def render_dtypes(gpu_dir: Path) -> list[str]:
    """render_dtype_dir for every 16-bit dtype (results.DTYPE_DIRS) in order."""
    return [line for dtype in results.DTYPE_DIRS for line in render_dtype_dir(gpu_dir, dtype)]


def render_gpu_dir(gpu_dir: Path) -> list[str]:
    """Render the four plots into gpu_dir from its stepN.json (and machine.json), shapes.png where
    shapes.json is there, and each 16-bit ladder's two in its folder (render_dtypes); one line each."""
    gpu_dir = Path(gpu_dir)
    docs = results.load_gpu_dir(gpu_dir)
    shape_lines = [render_shapes(gpu_dir)] if (gpu_dir / shapes.JSON_NAME).exists() else []
    if not docs:
        return [f"no stepN.json in {gpu_dir}: nothing to plot"] + shape_lines + render_dtypes(gpu_dir)
    refs = reference_docs(gpu_dir, docs)
    with rc_context(STYLE):
        return [
            plot_gflops(docs, gpu_dir / "gflops.png", refs),
            plot_speedup(docs, gpu_dir / "speedup.png"),
            plot_pct_cublas(docs, gpu_dir / "pct_cublas.png", refs),
            plot_roofline(docs, load_machine(gpu_dir), gpu_dir / "roofline.png"),
        ] + shape_lines + render_dtypes(gpu_dir)


@quiet_broken_pipe
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m steps.plot", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default=None, metavar="SLUG",
                   help="one results/<SLUG> folder (default: the GPU the README shows)")
    p.add_argument("--all", action="store_true", help="every GPU folder under --results-dir")
    p.add_argument("--results-dir", type=Path, default=results.RESULTS_DIR, help="where the GPU folders are")
    p.error = lambda message: _usage(message)  # one line, exit 2
    try:
        args = p.parse_args(argv)
        if args.gpu is not None and args.all:
            raise _UsageError("--gpu and --all: one or the other")
        if args.gpu is not None:
            folders = [args.results_dir / args.gpu]
            if not folders[0].is_dir():
                raise _UsageError(f"no results folder {folders[0]}")
        else:
            folders = sorted(d for d in Path(args.results_dir).glob("*") if d.is_dir() and results.load_gpu_dir(d))
            if not folders:
                raise _UsageError(f"no results under {args.results_dir}: run python -m steps --save on a GPU")
            if not args.all:  # the README's GPU: the plots it links
                from .table import readme_gpu_dir

                folders = [readme_gpu_dir(args.results_dir)]
        for folder in folders:
            for line in render_gpu_dir(folder):
                print(line)
    except BrokenPipeError:  # stdout's reader has gone (| head): not bad input; quiet_broken_pipe ends it
        raise
    except (_UsageError, ValueError, OSError) as exc:  # ResultsError, bad JSON, unreadable
        print(f"python -m steps.plot: error: {exc}", file=sys.stderr)
        return 2
    return 0


class _UsageError(Exception):
    pass


def _usage(message: str):
    raise _UsageError(message)
