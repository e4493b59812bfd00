"""The plots render headless from a small fixture; missing data skips a plot with a note.
Also the roofline model's byte counts and peaks, which the roofline plot stands on."""

import json
import struct

import pytest
from PIL import Image

import schedules
from steps import results
from steps.measure import roofline
from steps.report import plot, table

from .test_results import _doc

GPU = "NVIDIA Fake G100"
SIZES = (256, 512)


def _write_fixture(root, cublas=True, machine=True, steps=(1, 2, 3, 4)):
    """results/<gpu>/stepN.json for a few steps and sizes, and machine.json."""
    gpu_dir = root / results.gpu_slug(GPU)
    for n in steps:
        step = schedules.get_step(n)
        rows = []
        for size in SIZES:
            gflops = 1000.0 * n * size / 256
            rows.append({
                **_doc()["results"][0],
                "M": size, "N": size, "K": size, "config": step.default_config(size, size, size).as_dict(),
                "gflops": gflops,
                "prior": {"name": f"step {n - 1}" if n > 1 else "numpy (CPU)", "gflops": 500.0},
                "speedup_vs_prior": gflops / 500.0,
                "cublas_gflops": 9000.0 if cublas else None,
                "pct_cublas": 100 * gflops / 9000.0 if cublas else None,
            })
        doc = _doc(step=n, name=step.name, results=rows,
                   environment={"gpu": GPU, "date": "2026-12-01T00:00:00+00:00"},
                   expected_regression=results.expected_regressions(step.module))
        results.write_atomic(gpu_dir / f"step{n}.json", doc)
    if machine:
        (gpu_dir / "machine.json").write_text(json.dumps({"gpu": GPU, "bandwidth_gbs": 3000.0,
                                                          "fp32_peak_gflops": 40000.0}))
    return gpu_dir


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_four_plots_from_a_fixture(tmp_path):
    gpu_dir = _write_fixture(tmp_path)
    lines = plot.render_gpu_dir(gpu_dir)
    assert lines == [f"wrote {gpu_dir / name}" for name in plot.PLOTS]
    for name in plot.PLOTS:
        width, height = _png_size(gpu_dir / name)
        assert 800 <= width <= 2000 and 400 <= height <= 1200, (name, width, height)
        # drawn, not blank; a palette of at most 32 colours (the roofline's many markers: 128,
        # and more than 32 used, or its steps' colours were merged)
        colours = plot.ROOFLINE_COLOURS if name == "roofline.png" else plot.PALETTE_COLOURS
        with Image.open(gpu_dir / name) as image:
            used = len(image.getcolors(256) or ())
            assert image.mode == "P" and 16 < used <= colours, (name, used)
            if name == "roofline.png":
                assert used > plot.PALETTE_COLOURS, used
        assert (gpu_dir / name).stat().st_size > 8_000, name
    assert not list(gpu_dir.glob(".*.tmp"))


def test_missing_cublas_and_machine_are_skipped_with_a_note(tmp_path):
    gpu_dir = _write_fixture(tmp_path, cublas=False, machine=False)
    lines = plot.render_gpu_dir(gpu_dir)
    assert lines[0] == f"wrote {gpu_dir / 'gflops.png'}" and lines[1] == f"wrote {gpu_dir / 'speedup.png'}"
    assert lines[2].startswith("skipped pct_cublas.png: no cuBLAS numbers")
    assert lines[3].startswith("skipped roofline.png: no usable machine.json")
    assert sorted(p.name for p in gpu_dir.glob("*.png")) == ["gflops.png", "speedup.png"]


def test_plot_cli(tmp_path, capsys):
    _write_fixture(tmp_path, steps=(2, 3), machine=False)
    assert plot.main(["--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 3 and "skipped roofline.png" in out
    assert plot.main(["--results-dir", str(tmp_path), "--gpu", "no-such-gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m steps.plot: error: no results folder")
    assert plot.main(["--results-dir", str(tmp_path / "empty")]) == 2
    assert plot.main(["--bogus"]) == 2
    assert "unrecognized" in capsys.readouterr().err


def test_readme_links_only_the_plots_present(tmp_path):
    gpu_dir = _write_fixture(tmp_path, steps=(1, 2), cublas=False, machine=False)
    plot.render_gpu_dir(gpu_dir)
    text = table.render(tmp_path)
    assert f"]({(gpu_dir / 'gflops.png').as_posix()})" in text and "speedup.png" in text
    assert "pct_cublas.png" not in text and "roofline.png" not in text


# --- the roofline model ------------------------------------------------------------------------


def test_global_bytes_per_schedule_kind():
    M = N = K = 1024
    # step 1: a row of A and a column of B per element of C, plus C once
    assert roofline.global_bytes(M, N, K, {"block_m": 8, "block_n": 32}) == 4 * (2 * M * N * K + M * N)
    # step 2: thread_m rows of A and thread_n columns of B per thread, over K
    regs = {"block_m": 64, "block_n": 64, "thread_m": 8, "thread_n": 4}
    threads = (M // 8) * (N // 4)
    assert roofline.global_bytes(M, N, K, regs) == 4 * (threads * 12 * K + M * N)
    # shared tiles: A once per block column, B once per block row, C once
    shared = {**regs, "block_n": 128, "block_k": 16}
    assert roofline.global_bytes(M, N, K, shared) == 4 * (M * K * (N // 128) + K * N * (M // 64) + M * N)
    # sizes that the tile does not divide round up, as padded blocks still load whole tiles
    assert roofline.global_bytes(100, 100, 8, {"block_m": 64, "block_n": 64, "block_k": 8}) == \
        4 * (100 * 8 * 2 + 8 * 100 * 2 + 100 * 100)
    assert roofline.intensity(M, N, K, {"block_m": 8, "block_n": 32}) == pytest.approx(0.25, rel=1e-3)


def test_a_step_module_may_count_its_own_bytes():
    class Module:
        @staticmethod
        def global_bytes(M, N, K, config):
            return 123

    assert roofline.global_bytes(64, 64, 64, {"block_k": 8}, Module) == 123


def test_fp32_peak():
    assert roofline.fp32_peak_gflops(132, 1980, "9.0") == pytest.approx(66908.16)  # H200
    assert roofline.fp32_peak_gflops(108, 1410, "8.0") == pytest.approx(19491.84)  # A100: 64 lanes per SM
    doc = roofline.machine_doc({"gpu": "G", "sm_count": 132, "compute_capability": "9.0", "sm_clock_mhz": "1980"},
                               {"bandwidth_gbs": 4000.0, "method": "m", "median_ms": 1, "min_ms": 1, "max_ms": 1})
    assert doc["fp32_peak_gflops"] == pytest.approx(66908.16) and "under load" in doc["fp32_peak_method"]
    no_clock = roofline.machine_doc({"sm_count": 132, "compute_capability": "9.0"},
                                    {"bandwidth_gbs": 4000.0, "method": "m", "median_ms": 1, "min_ms": 1, "max_ms": 1})
    assert no_clock["fp32_peak_gflops"] is None


def test_bandwidth_copy_kernel_builds_with_float4():
    lib = roofline.build_copy(roofline.COPY_THREADS * roofline.COPY_VECTOR * 64, "sm_90")
    source = schedules.cuda_source(lib)
    assert "float4" in source and "__launch_bounds__(256)" in source


def _write_references(gpu_dir, host_bound_dlight=False):
    """references.json beside the fixture: cuBLAS, dlight (optionally host-bound), MetaSchedule."""
    from steps.measure import references

    def rows(gflops, bound=False):
        return [{"M": s, "N": s, "K": s, "median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0, "gflops": gflops,
                 "rel_err": 1e-7, "host_us": 1.0, "host_bound": bound} for s in SIZES]

    doc = {"schema": references.SCHEMA, "environment": {"gpu": GPU}, "method": {}, "references": [
        {"key": "cublas", "label": "cuBLAS fp32", "precision": "fp32", "tolerance": 1e-5, "results": rows(9000.0)},
        {"key": "dlight", "label": "TVM dlight", "precision": "fp32", "tolerance": 1e-5,
         "results": rows(3000.0, host_bound_dlight)},
        {"key": "metaschedule", "label": "TVM MetaSchedule", "precision": "fp32", "tolerance": 1e-5,
         "results": rows(4500.0), "tuning": {"trials": 64}},
    ]}
    references.save(gpu_dir / "references.json", doc)


def test_reference_bars_beside_the_steps(tmp_path):
    gpu_dir = _write_fixture(tmp_path)
    _write_references(gpu_dir, host_bound_dlight=True)
    refs = plot.reference_docs(gpu_dir, results.load_gpu_dir(gpu_dir))
    assert [d["step"] for d in refs] == ["dlight", "metaschedule"]
    assert refs[1]["name"] == "Meta-Schedule, 64 trials"
    assert plot._value(refs[1], (256, 256, 256), "pct_cublas") == pytest.approx(50.0)  # 4500 of cuBLAS's 9000
    assert plot._host_bound(refs[0], (256, 256, 256)) and not plot._host_bound(refs[1], (256, 256, 256))
    with_refs = plot.render_gpu_dir(gpu_dir)
    assert with_refs[0] == f"wrote {gpu_dir / 'gflops.png'}" and with_refs[2] == f"wrote {gpu_dir / 'pct_cublas.png'}"
    assert plot.reference_docs(_write_fixture(tmp_path / "bare"), []) == []  # no references.json: no bars


# --- the 16-bit ladders' plots (issue 47): results/<gpu>/<dtype>/ -------------------------------


def _write_dtype_fixture(gpu_dir, dtype="bf16", steps=(12, 13, 15), sizes=(512, 1024, 2048, 4096, 8192)):
    """results/<gpu>/<dtype>/stepN.json for a few tensor-core steps (saved with the TF32 form's name,
    as the committed files are) and references.json with cuBLAS and dlight in the dtype."""
    from steps.measure import references

    folder = results.dtype_dir(gpu_dir, dtype)
    cublas = {s: 100_000.0 * s / 512 for s in sizes}
    for n in steps:
        step = schedules.get_step(n)
        rows = []
        for size in sizes:
            gflops = cublas[size] * n / 20
            rows.append({**_doc()["results"][0], "M": size, "N": size, "K": size, "config": {"dtype": dtype},
                         "gflops": gflops, "prior": {"name": "none", "gflops": None}, "speedup_vs_prior": None,
                         "cublas_gflops": cublas[size], "pct_cublas": 100 * gflops / cublas[size]})
        doc = _doc(step=n, name=step.name, results=rows, dtype=dtype, baseline=f"cublas_{dtype}",
                   environment={"gpu": GPU, "date": "2026-12-01T00:00:00+00:00"})
        results.write_atomic(folder / f"step{n}.json", doc)

    def ref_rows(scale):
        return [{"M": s, "N": s, "K": s, "median_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0, "gflops": cublas[s] * scale,
                 "rel_err": 1e-3, "host_us": 1.0, "host_bound": False} for s in sizes]

    references.save(folder / "references.json", {
        "schema": references.SCHEMA, "environment": {"gpu": GPU}, "method": {}, "references": [
            {"key": f"cublas_{dtype}", "label": f"cuBLAS {dtype} (fp32 sum)", "precision": dtype,
             "tolerance": 5e-3, "results": ref_rows(1.0)},
            {"key": f"dlight_{dtype}", "label": f"TVM dlight {dtype}", "precision": dtype,
             "tolerance": 5e-3, "results": ref_rows(0.1)}]})
    return folder


def test_a_sixteen_bit_folder_gets_its_two_plots(tmp_path):
    gpu_dir = _write_fixture(tmp_path)
    folder = _write_dtype_fixture(gpu_dir, "bf16")
    lines = plot.render_gpu_dir(gpu_dir)
    # the fp32 four, then bf16's two in its folder; fp16 has no results: nothing, not even a line
    assert lines == ([f"wrote {gpu_dir / name}" for name in plot.PLOTS]
                     + [f"wrote {folder / name}" for name in plot.DTYPE_PLOTS])
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(plot.DTYPE_PLOTS)
    assert not (gpu_dir / "fp16").exists()
    for name in plot.DTYPE_PLOTS:
        width, height = _png_size(folder / name)
        assert (width, height) == _png_size(gpu_dir / name)  # the fp32 plot's frame
        with Image.open(folder / name) as image:  # five sizes: the wider palette, and used
            used = len(image.getcolors(256) or ())
            assert image.mode == "P" and plot.PALETTE_COLOURS < used <= plot.MANY_SIZES_COLOURS, (name, used)
        assert 8_000 < (folder / name).stat().st_size < 40_000, name  # small enough to commit
    assert not list(folder.glob(".*.tmp"))


def test_sixteen_bit_plots_name_steps_and_references_in_the_dtype(tmp_path, monkeypatch):
    gpu_dir = _write_fixture(tmp_path, steps=(1,), machine=False)
    folder = _write_dtype_fixture(gpu_dir, "fp16", steps=(12, 15), sizes=SIZES)
    drawn = {}

    def capture(name):
        real = getattr(plot, name)

        def wrapper(docs, path, refs=(), dtype="fp32"):
            drawn[name] = (docs, refs, dtype)
            return real(docs, path, refs, dtype)
        monkeypatch.setattr(plot, name, wrapper)

    capture("plot_gflops")
    capture("plot_pct_cublas")
    assert plot.render_dtype_dir(gpu_dir, "fp16") == [f"wrote {folder / name}" for name in plot.DTYPE_PLOTS]
    docs, refs, dtype = drawn["plot_gflops"]
    assert dtype == "fp16" and [d["name"] for d in docs] == [schedules.get_step(n).name_for("fp16") for n in (12, 15)]
    assert [d["name"] for d in docs] != [schedules.get_step(n).name for n in (12, 15)]  # not the TF32 names
    # dlight in fp16, its % against cuBLAS fp16 (not fp32's rows: this folder has none)
    assert [r["step"] for r in refs] == ["dlight_fp16"] and refs[0]["name"] == "dlight"
    assert plot._value(refs[0], (256, 256, 256), "pct_cublas") == pytest.approx(10.0)
    assert drawn["plot_pct_cublas"][2] == "fp16"
    assert len(SIZES) <= 4 and plot._bar_colours(SIZES) == plot.PALETTE_COLOURS


def test_no_sixteen_bit_results_no_sixteen_bit_plots(tmp_path, capsys):
    gpu_dir = _write_fixture(tmp_path, machine=False)
    (gpu_dir / "bf16").mkdir()  # an empty dtype folder (a run that saved nothing) renders nothing either
    assert plot.render_dtypes(gpu_dir) == []
    assert plot.render_dtype_dir(gpu_dir, "fp16") == []
    assert plot.main(["--results-dir", str(tmp_path)]) == 0
    assert "bf16" not in capsys.readouterr().out
    assert list((gpu_dir / "bf16").iterdir()) == [] and not (gpu_dir / "fp16").exists()


def test_plot_cli_renders_the_sixteen_bit_plots(tmp_path, capsys):
    gpu_dir = _write_fixture(tmp_path, steps=(2, 3), machine=False)
    bf16 = _write_dtype_fixture(gpu_dir, "bf16", sizes=SIZES)
    fp16 = _write_dtype_fixture(gpu_dir, "fp16", sizes=SIZES)
    assert plot.main(["--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-4:] == [f"wrote {folder / name}" for folder in (fp16, bf16) for name in plot.DTYPE_PLOTS]
