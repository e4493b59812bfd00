"""Precision as an axis of the ladder (issue 47), in the measuring and reporting layer; no GPU.

The 16-bit operands on the host and their exact float64 conversion, the tolerance per dtype,
--dtype on the step command, the ladder and the sweep (one line and exit 2 for a step without
that dtype), which steps and priors a 16-bit ladder measures, the references of a dtype, and the
files and tables a 16-bit run writes. Steps get fake 16-bit forms here (monkeypatched registry
entries), so none of this depends on which steps have one.
"""

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import schedules
from steps import results
from steps.commands import cli, compare, ladder, options, sweep
from steps.measure import dtypes, harness, references
from steps.report import table

H100 = results.RESULTS_DIR / "nvidia-h100-80gb-hbm3"


# --- the operands: exact conversions ----------------------------------------------------------------


@pytest.mark.parametrize("bits, value", [
    (0x3F80, 1.0), (0xC000, -2.0), (0x4049, 3.140625), (0x3F81, 1 + 2**-7),
    (0x0001, 2.0**-133),  # the smallest subnormal
    (0x0080, 2.0**-126),  # the smallest normal
    (0x7F7F, (2 - 2**-7) * 2.0**127),  # the largest finite
    (0x7F80, math.inf), (0xFF80, -math.inf), (0x8000, -0.0),
])
def test_bf16_bit_patterns_convert_to_float64_exactly(bits, value):
    got = dtypes.to_float64(np.array([bits], dtype=np.uint16), "bf16")[0]
    assert got == value and math.copysign(1, got) == math.copysign(1, value)


def test_bf16_nan_pattern_is_nan():
    assert np.isnan(dtypes.to_float64(np.array([dtypes.BF16_NAN, 0xFFC1], dtype=np.uint16), "bf16")).all()


@pytest.mark.parametrize("bits, value", [(0x3C00, 1.0), (0x7BFF, 65504.0), (0x0001, 2.0**-24), (0x0400, 2.0**-14),
                                         (0x7C00, math.inf)])
def test_fp16_converts_to_float64_exactly(bits, value):
    assert dtypes.to_float64(np.array([bits], dtype=np.uint16).view(np.float16), "fp16")[0] == value


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8), 3.4e38, 1e-45, np.inf, np.nan],
                 dtype=np.float32)
    bits = dtypes.bf16_bits(x)
    # a tie goes to the even neighbour (1.0, then 1 + 2^-6); just above a tie, up; past the
    # largest finite bf16, inf; fp32's smallest subnormal rounds to zero; inf and NaN stay
    assert list(bits[:7]) == [0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F80, 0x0000, 0x7F80]
    assert np.isnan(dtypes.bf16_to_float32(bits[7:]))


def test_bf16_rounding_agrees_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = (np.random.default_rng(0).standard_normal(20000) * 10.0 ** np.random.default_rng(1).integers(-30, 30, 20000)
         ).astype(np.float32)
    assert np.array_equal(dtypes.bf16_bits(x), x.astype(ml_dtypes.bfloat16).view(np.uint16))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_operands_are_16_bit_values_and_the_reference_is_their_exact_product(dtype):
    a, b = harness.random_operands(8, 6, 5, np.random.default_rng(0), dtype)
    assert a.dtype == dtypes.STORAGE[dtype] and a.shape == (8, 5) and b.shape == (5, 6)
    a64, b64 = dtypes.to_float64(a, dtype), dtypes.to_float64(b, dtype)
    assert np.all(np.abs(a64) <= 1) and len(np.unique(a64)) > 10
    # the values are the 16-bit ones: rounding them again changes nothing
    assert np.array_equal(dtypes.from_float32(a64.astype(np.float32), dtype), a)
    ref = dtypes.reference(a, b, dtype)
    assert ref.dtype == np.float64
    assert ref[2, 3] == sum(a64[2, k] * b64[k, 3] for k in range(5))  # each product of 16-bit values is exact


def test_rows_given_one_seed_draw_the_same_inputs():
    seed = harness.shared_seed(5, (64, 32, 16))
    assert seed == harness.shared_seed(5, (64, 32, 16)) != harness.shared_seed(5, (64, 32, 17))
    # the worker's check (KernelRunner(seed=...).rng, first draw) and time_cublas's (a new generator)
    a1, b1 = harness.random_operands(64, 32, 16, np.random.default_rng(seed), "bf16")
    a2, b2 = harness.random_operands(64, 32, 16, np.random.default_rng(seed), "bf16")
    assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
    assert harness.shared_seed(None, (1, 1, 1)) != harness.shared_seed(None, (1, 1, 1))  # fresh without --seed


def test_fp32_operands_are_unchanged():
    a, b = harness.random_operands(4, 3, 2, np.random.default_rng(7))
    again = np.random.default_rng(7)
    assert np.array_equal(a, again.uniform(-1, 1, (4, 2)).astype(np.float32))
    assert a.dtype == np.float32


# --- the tolerance -------------------------------------------------------------------------------------


def test_tolerances_are_the_unit_roundoff_plus_the_allowance_rounded_up():
    assert dtypes.UNIT_ROUNDOFF == {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
    assert dtypes.TOLERANCE == {"fp16": 1.5e-3, "bf16": 5e-3}
    for dtype, bound in dtypes.TOLERANCE.items():
        derived = dtypes.UNIT_ROUNDOFF[dtype] + dtypes.ACCUMULATION_ALLOWANCE
        assert derived <= bound < 1.05 * derived
    assert harness.tolerance(12, "bf16") == 5e-3 and harness.tolerance(12, "fp16") == 1.5e-3
    assert harness.tolerance(12) == harness.TF32_TOLERANCE  # fp32 inputs: as before


def _rounded_product(dtype, M=128, N=96, K=256, seed=0):
    a, b = harness.random_operands(M, N, K, np.random.default_rng(seed), dtype)
    ref = dtypes.reference(a, b, dtype)
    return a, b, ref


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_a_correctly_rounded_output_passes_with_the_typical_error(dtype):
    _, _, ref = _rounded_product(dtype)
    out = dtypes.from_float32(ref.astype(np.float32), dtype)  # the sum (to fp32), rounded once to the dtype
    err = harness.relative_error(out, ref, dtype)
    u = dtypes.UNIT_ROUNDOFF[dtype]
    assert 0.25 * u < err < 0.6 * u  # ~u/sqrt(3) times the spread of values within a binade
    assert err <= dtypes.TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_a_sum_rounded_to_16_bits_at_every_step_fails(dtype):
    a, b, ref = _rounded_product(dtype, M=32, N=32, K=1024)
    a64, b64 = dtypes.to_float64(a, dtype), dtypes.to_float64(b, dtype)
    acc = np.zeros((32, 32), dtype=np.float64)
    for k in range(a.shape[1]):  # a 16-bit accumulator: the bug the fp32 sum is there to avoid
        acc = dtypes.to_float64(dtypes.from_float32((acc + np.outer(a64[:, k], b64[k])).astype(np.float32), dtype), dtype)
    err = harness.relative_error(dtypes.from_float32(acc.astype(np.float32), dtype), ref, dtype)
    assert err > dtypes.TOLERANCE[dtype]


def test_nan_or_inf_never_passes():
    ref = np.ones((2, 2))
    out = dtypes.from_float32(np.ones((2, 2), np.float32), "bf16")
    assert harness.relative_error(out, ref, "bf16") == 0.0
    out[1, 1] = dtypes.BF16_NAN
    assert math.isinf(harness.relative_error(out, ref, "bf16"))
    assert math.isinf(harness.relative_error(np.full((2, 2), np.inf, np.float16), ref, "fp16"))
    assert np.all(dtypes.to_float64(dtypes.nan_filled((3, 3), "bf16"), "bf16") != 0)  # poison reads as NaN
    assert np.isnan(dtypes.to_float64(dtypes.nan_filled((3, 3), "bf16"), "bf16")).all()
    m = harness.check_error(harness.Measurement(1, 1, 1, rel_err=math.inf), dtypes.TOLERANCE["bf16"])
    assert not m.ok and "0.005" in m.error


def test_tvm_tensors_take_and_give_back_16_bit_patterns():
    import tvm

    bits = np.array([[0x3F80, 0x4000], [0xC040, dtypes.BF16_NAN]], dtype=np.uint16)
    t = dtypes.to_device(tvm, bits, "bf16", tvm.cpu())
    assert t.dtype == "bfloat16" and np.array_equal(dtypes.from_device(t, "bf16"), bits)
    h = np.array([1.5, -65504.0], np.float16)
    t = dtypes.to_device(tvm, h, "fp16", tvm.cpu())
    assert t.dtype == "float16" and np.array_equal(dtypes.from_device(t, "fp16"), h)


def test_cublas_data_types_are_library_types_h():
    assert harness.CUDA_DATA_TYPE == {"fp32": 0, "fp16": 2, "bf16": 14}  # CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF


# --- fake 16-bit forms ---------------------------------------------------------------------------------


@pytest.fixture
def sixteen_bit_steps(monkeypatch):
    """Steps 2, 3 and 5 with a fake bf16 form (their fp32 config whatever the dtype), the rest fp32 only."""
    def fake(step):
        if step.number not in (2, 3, 5):
            return dataclasses.replace(step, dtypes=("fp32",))
        orig = step._default_config
        return dataclasses.replace(step, dtypes=("fp32", "bf16"),
                                   _default_config=lambda M, N, K, dtype="fp32": orig(M, N, K))
    monkeypatch.setattr(schedules, "STEPS", tuple(fake(s) for s in schedules.STEPS))
    return [s for s in schedules.STEPS if s.number in (2, 3, 5)]


def test_priors_of_a_16_bit_ladder_are_the_steps_before_with_that_dtype(sixteen_bit_steps):
    two, three, five = sixteen_bit_steps
    assert ladder.chosen_steps(None, "bf16") == [two, three, five]
    assert ladder.chosen_steps(None, "fp16") == []
    assert [s.number for s in ladder.chosen_steps(None)] == [s.number for s in schedules.STEPS]  # fp32: all
    assert ladder.prior_of(five, "bf16") is three and ladder.prior_of(two, "bf16") is None
    assert ladder.prior_of(five).number == 4  # fp32: the registry's order, as before
    assert [s.number for s in ladder.with_priors([five], "bf16")] == [3, 5]
    assert [s.number for s in ladder.with_priors([five])] == [4, 5]
    assert cli.prior_label(two, "bf16") == "none (the first bf16 step)"
    assert cli.prior_label(five, "bf16") == "step 3" and cli.prior_label(schedules.STEPS[0]) == "numpy (CPU)"
    all_steps = ladder.parse_steps("all")
    assert ladder.chosen_steps([all_steps], "bf16") == [two, three, five]  # --steps all: those that have it


def test_a_step_without_the_dtype_is_one_line(sixteen_bit_steps, capsys):
    assert cli.main(4, ["--dtype", "bf16", "--build-only"]) == options.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err == "python -m steps.step4: error: step 4 has no bf16 form; steps with one: 2, 3, 5"
    assert ladder.main(["--dtype", "bf16", "--steps", "3-4", "--build-only"]) == options.EXIT_USAGE
    assert capsys.readouterr().err.strip() == "python -m steps: error: step 4 has no bf16 form; steps with one: 2, 3, 5"
    assert sweep.main(["--step", "10", "--dtype", "bf16", "--sizes", "256", "--dry-run"]) == options.EXIT_USAGE
    assert capsys.readouterr().err.strip() == "python -m steps.sweep: error: step 10 has no bf16 form; steps with one: 2, 3, 5"
    assert cli.main(4, ["--dtype", "fp16", "--explain"]) == options.EXIT_USAGE
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_dtype_choices_are_argparse_one_line(capsys):
    assert cli.main(4, ["--dtype", "fp8"]) == options.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'fp8'" in err[0]


def test_the_sweep_refuses_what_it_cannot_do_in_16_bit(sixteen_bit_steps, capsys):
    assert sweep.main(["--step", "5", "--dtype", "bf16", "--sizes", "256", "--write"]) == options.EXIT_USAGE
    assert "--write records fp32 configs" in capsys.readouterr().err
    assert sweep.main(["--step", "5", "--dtype", "bf16", "--sizes", "256", "--tracker", "h:1", "--key", "k"]) == 2
    assert "--tracker checks fp32 inputs" in capsys.readouterr().err


def test_a_sweep_job_carries_its_dtype():
    step = schedules.get_step(5)
    cfg = step.default_config(512, 512, 512)
    job = sweep.job_config(cfg, "bf16")
    assert job["dtype"] == "bf16" and sweep.config_of(step, job) == cfg  # a Config without the field
    assert sweep.job_config(cfg) == cfg.as_dict() and sweep._dtype_kw(job) == {"dtype": "bf16"}


def test_the_harness_refuses_a_dtype_before_any_worker(sixteen_bit_steps):
    with pytest.raises(schedules.ConfigError, match="step 4 has no bf16 form"):
        harness._resolve(4, 256, 256, 256, "sm_90", None, "bf16")
    assert harness._resolve(3, 256, 256, 256, "sm_90", None, "bf16") == 3
    with pytest.raises(schedules.ConfigError):
        harness._resolve("schedules.integration.references:build_dlight", 256, 256, 256, "sm_90", None, "fp8")


def test_a_builder_is_called_with_the_dtype(monkeypatch):
    seen = []
    monkeypatch.setattr(references.harness, "_one_line", harness._one_line)
    import schedules.integration.references as tvm_refs

    monkeypatch.setattr(tvm_refs, "build_dlight", lambda *a, **kw: seen.append((a, kw)))
    harness._build("schedules.integration.references:build_dlight", 64, 64, 64, "sm_90", None, "bf16")
    harness._build("schedules.integration.references:build_dlight", 64, 64, 64, "sm_90", None)
    assert seen == [((64, 64, 64, "sm_90", None), {"dtype": "bf16"}), ((64, 64, 64, "sm_90", None), {})]


# --- the references of a dtype ----------------------------------------------------------------------


def test_references_of_a_16_bit_ladder():
    assert [r.key for r in references.for_dtype(references.ALL, "bf16")] == ["cublas_bf16", "dlight_bf16"]
    assert [r.key for r in references.for_dtype([references.CUBLAS_TF32, references.METASCHEDULE], "fp16")] == []
    assert references.for_dtype([references.DLIGHT], "fp32") == [references.DLIGHT]
    base = references.baseline(schedules.get_step(12), "fp16")
    assert base.key == "cublas_fp16" and base.dtype == "fp16" and base.builder is None
    assert base.tolerance == dtypes.TOLERANCE["fp16"]
    assert references.baseline(schedules.get_step(12)).key == "cublas_tf32"  # fp32 inputs: as before
    dlight = references.BY_KEY["dlight_bf16"]
    assert dlight.builder == references.DLIGHT.builder and dlight.dtype == "bf16"
    assert references.KEYS == ("cublas", "cublas_tf32", "dlight", "metaschedule")  # what --references takes


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_dlight_schedules_the_16_bit_matmul(dtype):
    from schedules.integration import references as tvm_refs

    mod = tvm_refs.dlight_module(256, 256, 256, "sm_90", dtype)
    script = mod.script()
    assert "blockIdx" in script and f'"{schedules.DTYPES[dtype]}"' in script
    assert ("wmma" in script) == (dtype == "fp16")  # fp16 on dlight's tensor-core rule, bf16 on CUDA cores


# --- results and tables --------------------------------------------------------------------------------


def test_16_bit_results_live_in_a_folder_of_their_dtype(tmp_path):
    assert results.step_path(tmp_path, "NVIDIA H100 80GB HBM3", 12) == tmp_path / "nvidia-h100-80gb-hbm3" / "step12.json"
    assert results.step_path(tmp_path, "NVIDIA H100 80GB HBM3", 12, "bf16") == (
        tmp_path / "nvidia-h100-80gb-hbm3" / "bf16" / "step12.json")
    (tmp_path / "bf16").mkdir()
    assert compare.results_file(tmp_path, 12, "bf16") == tmp_path / "bf16" / "step12.json"
    assert compare.results_file(tmp_path / "bf16", 12, "bf16") == tmp_path / "bf16" / "step12.json"
    assert compare.results_file(tmp_path, 12) == tmp_path / "step12.json"
    assert results.regression_attribute("fp16") == "EXPECTED_REGRESSION_FP16"


def _bf16_rows(step, sizes, gflops, prior_gflops, prior_name):
    rows = []
    for n in sizes:
        size = (n, n, n)
        m = harness.Measurement(n, n, n, median_ms=harness.flops(*size) / (gflops * 1e9) * 1e3, gflops=gflops,
                                rel_err=1.7e-3, host_us=1.0, host_bound=False)
        m.min_ms = m.max_ms = m.median_ms
        rows.append(cli.Row(size, m, step.default_config(*size), prior_name, prior_gflops=prior_gflops,
                            cublas_gflops=4 * gflops, cublas_host_bound=False))
    return rows


def test_the_table_shows_a_16_bit_ladder_beside_the_fp32_one(sixteen_bit_steps, tmp_path):
    root = tmp_path / "results"
    shutil.copytree(H100, root / H100.name, ignore=shutil.ignore_patterns("*.png", "evidence", *results.DTYPE_DIRS))
    before = table.render(root, base=Path(table.README).parent)
    assert "bf16 inputs" not in before  # no 16-bit results: the fp32 page alone

    env = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-28T00:00:00+00:00", "sm_count": 132}
    two, three, _ = sixteen_bit_steps
    for step, gflops, prior, name in ((two, 200_000.0, None, "none (the first bf16 step)"),
                                      (three, 100_000.0, 200_000.0, "step 2")):
        doc = cli.document(step, _bf16_rows(step, (512, 1024), gflops, prior, name), env, 30, "bf16")
        assert doc["dtype"] == "bf16" and doc["baseline"] == "cublas_bf16"
        assert doc["method"]["tolerance"] == 5e-3 and doc["precision"] == "bf16"
        results.write_atomic(results.step_path(root, env["gpu"], step.number, "bf16"), doc)
    ref_doc = references.document({("cublas_bf16", (512, 512, 512)): _timed(512, 800_000.0),
                                   ("dlight_bf16", (512, 512, 512)): _timed(512, 40_000.0)}, env, 30, env["gpu"])
    assert [e.get("dtype") for e in ref_doc["references"]] == ["bf16", "bf16"]
    references.save(root / H100.name / "bf16" / "references.json", ref_doc)

    text = table.render(root, base=Path(table.README).parent)
    assert text.startswith(before)  # the fp32 ladder as it was, then the bf16 one
    bf16 = text[len(before):]
    assert "**bf16 inputs**" in bf16 and "held to 0.005" in bf16 and "(docs/sixteen-bit.md)" in bf16
    lines = bf16.splitlines()
    step2 = next(line for line in lines if line.startswith("| 2. "))
    step3 = next(line for line in lines if line.startswith("| 3. "))
    assert step2.split(" | ")[1:4] == ["200.0", "–", "25%"]  # no prior; % of cuBLAS bf16
    assert "0.50×↓" not in step3 and step3.split(" | ")[1:4] == ["100.0", "0.50×", "25%"]
    assert step3.endswith("| 1.7e-03 |")
    assert any(line.startswith("| *cuBLAS bf16 (fp32 sum)* | 800.0 |  | 100%") for line in lines)
    assert any(line.startswith("| *TVM dlight bf16 (default schedule)* | 40.0 |  | 5%") for line in lines)
    assert "fp16 inputs" not in text
    # the fp32 files are untouched and still what the fp32 table reads
    assert len(results.load_gpu_dir(root / H100.name)) == len(results.load_gpu_dir(H100))


def test_a_16_bit_table_names_the_steps_in_their_dtype():
    doc = {"step": 15, "name": "wgmma (TF32)"}
    assert table._name_in(doc, "bf16") == "wgmma (bf16)"  # a file saved with the TF32 form's name
    assert table._name_in({"step": 99, "name": "gone"}, "bf16") == "gone"


def _timed(n, gflops):
    m = harness.Measurement(n, n, n, gflops=gflops, median_ms=harness.flops(n, n, n) / (gflops * 1e9) * 1e3,
                            rel_err=1e-3, host_us=1.0, host_bound=False)
    m.min_ms = m.max_ms = m.median_ms
    return m


def test_no_16_bit_results_no_16_bit_table(tmp_path):
    (tmp_path / "bf16").mkdir()  # an empty dtype folder (a run that saved nothing) shows nothing either
    assert table.render_dtypes(tmp_path) == ""
    committed = any((H100 / d).is_dir() and list((H100 / d).glob("step*.json")) for d in results.DTYPE_DIRS)
    assert (table.render_dtypes(H100) != "") == committed


# --- a 16-bit ladder on a fake GPU: what it measures and where it saves ------------------------------


class FakeRunner:
    calls: list = []

    def __init__(self, repeat=30, seed=None):
        pass

    seeds: list = []

    def measure(self, step, M, N, K, arch, config=None, dtype="fp32", seed=None):
        number = step if isinstance(step, str) else step.number
        FakeRunner.calls.append((number, M, dtype))
        FakeRunner.seeds.append((M, seed))
        gflops = 500.0 if isinstance(step, str) else 1000.0 * step.number
        return _timed(M, gflops)

    def close(self):
        pass


@pytest.fixture
def fake_gpu(monkeypatch):
    FakeRunner.calls, FakeRunner.seeds = [], []
    env = {"gpu": "NVIDIA Fake G100", "date": "2026-12-01T00:00:00+00:00", "tvm_version": "0.27",
           "sm_count": 100, "compute_capability": "9.0", "sm_clock_mhz": "1500", "driver": "1.0"}
    cublas = []
    monkeypatch.setattr(harness, "gpu_present", lambda: True)
    monkeypatch.setattr(harness, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness, "cublas_available", lambda: True)
    monkeypatch.setattr(harness, "KernelRunner", FakeRunner)
    monkeypatch.setattr(harness, "environment", lambda: dict(env))

    def time_cublas(M, N, K, repeat=30, seed=None, tf32=False, dtype="fp32"):
        cublas.append((M, tf32, dtype))
        FakeRunner.seeds.append((M, seed))
        return harness.Timing(1.0, 1.0, 1.0, 1, 1, 1.0), 2e-3

    monkeypatch.setattr(harness, "time_cublas", time_cublas)
    monkeypatch.setattr(harness, "time_numpy", lambda *a, **kw: pytest.fail("a 16-bit ladder has no numpy prior"))
    return cublas


def test_a_bf16_ladder_measures_its_steps_priors_and_references_and_saves_beside_fp32(
        sixteen_bit_steps, fake_gpu, tmp_path, capsys):
    code = ladder.main(["--dtype", "bf16", "--steps", "5", "--sizes", "256", "--save", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    # step 5 and its bf16 prior (3, not 4), dlight in bf16; cuBLAS bf16 once (no TF32 row)
    assert FakeRunner.calls == [(references.DLIGHT.builder, 256, "bf16"), (3, 256, "bf16"), (5, 256, "bf16")]
    assert fake_gpu == [(256, False, "bf16")]
    # every row of the size on the same inputs: one seed, cuBLAS's included
    assert len(FakeRunner.seeds) == 4 and len({seed for _, seed in FakeRunner.seeds}) == 1
    assert FakeRunner.seeds[0][1] is not None
    gpu_dir = tmp_path / "nvidia-fake-g100"
    assert sorted(p.name for p in gpu_dir.iterdir()) == ["bf16"]  # nothing of the fp32 ladder's
    assert sorted(p.name for p in (gpu_dir / "bf16").iterdir()) == [
        "gflops.png", "ladder.csv", "pct_cublas.png", "references.json", "step5.json"]  # its plots, no fp32 ones
    assert f"wrote {gpu_dir / 'bf16' / 'gflops.png'}" in out and f"wrote {gpu_dir / 'bf16' / 'pct_cublas.png'}" in out
    doc = results.load(gpu_dir / "bf16" / "step5.json")
    row = results.row_for(doc, 256, 256, 256)
    assert doc["dtype"] == "bf16" and row["prior"] == {"name": "step 3", "gflops": 3000.0}
    assert row["speedup_vs_prior"] == pytest.approx(5 / 3)
    assert row["pct_cublas"] == pytest.approx(100 * 5000 / (harness.flops(256, 256, 256) / 1e6))
    refs = json.loads((gpu_dir / "bf16" / "references.json").read_text())
    assert [e["key"] for e in refs["references"]] == ["cublas_bf16", "dlight_bf16"]
    lines = out.splitlines()
    assert any(line.startswith("5. registers") and "1.67x" in line for line in lines)
    assert any(line.startswith("cuBLAS bf16 (fp32 sum)") for line in lines)
    assert any("held to 0.005" in line and "step before that has bf16" in line for line in lines)
    assert any(line.startswith("rel err at 256x256x256 (same inputs): step 5 1.0e-03, cuBLAS bf16 (fp32 sum) 2.0e-03")
               for line in lines)
    assert results.row_for(doc, 256, 256, 256)["cublas_rel_err"] == 2e-3


def test_a_bf16_step_run_compares_with_its_bf16_prior_and_cublas(sixteen_bit_steps, fake_gpu, tmp_path, capsys):
    code = cli.main(5, ["--dtype", "bf16", "--sizes", "256", "--save", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [c for c in FakeRunner.calls if c[0] != references.DLIGHT.builder] == [(5, 256, "bf16"), (3, 256, "bf16")]
    assert fake_gpu == [(256, False, "bf16")]
    assert "bf16 inputs, C in bf16" in out and "% cuBLAS is of cuBLAS bf16" in out
    assert "cuBLAS bf16's rel err on the same inputs: 256x256x256 2.0e-03" in out
    assert len({seed for _, seed in FakeRunner.seeds}) == 1  # step, prior, cuBLAS: the same inputs
    doc = results.load(tmp_path / "nvidia-fake-g100" / "bf16" / "step5.json")
    assert doc["method"]["tolerance"] == 5e-3 and doc["baseline"] == "cublas_bf16"
    # the first bf16 step has no prior, and no numpy
    assert cli.main(2, ["--dtype", "bf16", "--sizes", "256"]) == 0
    assert "none (the first bf16 step)" in capsys.readouterr().out


# --- 16-bit special values (python -m steps.special --dtype) -------------------------------------------


def _correctly_rounded(a, b, dtype):
    """What a correct 16-bit kernel returns: the exact product, summed (here in float64), rounded
    once to the dtype."""
    with np.errstate(all="ignore"):
        return dtypes.from_float32(special_data.reference(a, b, dtype).astype(np.float32), dtype)


from steps.measure import special as special_data  # noqa: E402
from steps.commands import special as special_command  # noqa: E402
from steps.results import special as special_results  # noqa: E402


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_each_16_bit_class_scores_a_correctly_rounded_output_as_correct(dtype):
    for cls in special_data.classes_for(dtype):
        a, b = special_data.operands(cls, 64, 3, dtype)
        assert a.dtype == dtypes.STORAGE[dtype]
        score = special_data.score(_correctly_rounded(a, b, dtype), special_data.reference(a, b, dtype), dtype)
        assert score["pattern_equal"], cls.name
        assert score["rel_err"] < 0.2, (cls.name, score)  # subnormal outputs keep few bits: ~0.1 at K = 64


def _fp32_sum_in_order(a, b, dtype, ks):
    """C summed in fp32, one k at a time in the order `ks`, as a kernel's accumulator does."""
    A, B = (dtypes.to_float64(x, dtype).astype(np.float32) for x in (a, b))
    acc = np.zeros((A.shape[0], B.shape[1]), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in ks:
            acc = acc + np.outer(A[:, k], B[k, :])
    return acc


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_class_is_marked_order_dependent_exactly_where_an_fp32_sums_inf_pattern_moves_with_its_order(dtype):
    """order_dependent (the GPU test lets cuBLAS differ from the rounded product there): on bf16's
    scale 2^63 the same fp32 sum run forwards and backwards over K puts inf in different places;
    on every other class the two orders agree with each other."""
    for cls in special_data.classes_for(dtype):
        a, b = special_data.operands(cls, 64, 3, dtype)
        K = a.shape[1]
        forwards = np.isinf(_fp32_sum_in_order(a, b, dtype, range(K)))
        backwards = np.isinf(_fp32_sum_in_order(a, b, dtype, range(K - 1, -1, -1)))
        assert (forwards != backwards).any() == cls.order_dependent, cls.name


def test_16_bit_classes_reach_the_ends_of_their_range():
    def rounded_ref(dtype, name):
        cls = next(c for c in special_data.classes_for(dtype) if c.name == name)
        a, b = special_data.operands(cls, 64, 3, dtype)
        return a, b, special_data.rounded_reference(special_data.reference(a, b, dtype), dtype)

    _, _, ref = rounded_ref("bf16", "scale 2^63")
    assert 0 < np.isinf(ref).sum() < ref.size  # sums past bf16's (and fp32's) largest: inf, some
    a, _, ref = rounded_ref("fp16", "fp16 max")
    assert np.abs(dtypes.to_float64(a, "fp16")).max() == 65504.0 and 0 < np.isinf(ref).sum() < ref.size
    _, _, ref = rounded_ref("fp16", "sums near 65504")
    assert 0.2 < np.isinf(ref).mean() < 0.45
    _, _, ref = rounded_ref("fp16", "scale 2^-10")
    assert np.abs(ref).max() < 2.0**-14 and np.count_nonzero(ref) > 0.9 * ref.size  # fp16 subnormal outputs
    a, _, _ = rounded_ref("fp16", "subnormal inputs")
    assert 0 < np.abs(dtypes.to_float64(a, "fp16")).max() < 2.0**-14
    _, _, ref = rounded_ref("bf16", "scale 2^-66")
    assert np.abs(ref).max() < 2.0**-126 and np.count_nonzero(ref) > 0.9 * ref.size


def test_a_16_bit_accumulator_or_a_flush_is_caught():
    # fp16 max: a 16-bit accumulator overflows where an fp32 sum cancels exactly
    cls = special_data.SIXTEEN_BIT_CLASSES["fp16"][0]
    a, b = special_data.operands(cls, 64, 3, "fp16")
    ref = special_data.reference(a, b, "fp16")
    a64, b64 = dtypes.to_float64(a, "fp16"), dtypes.to_float64(b, "fp16")
    acc = np.zeros(ref.shape, np.float16)
    with np.errstate(all="ignore"):
        for k in range(a.shape[1]):
            acc = (acc.astype(np.float64) + np.outer(a64[:, k], b64[k])).astype(np.float16)
    assert not special_data.score(acc, ref, "fp16")["pattern_equal"]
    # subnormal outputs flushed to zero: the whole of the error
    cls = next(c for c in special_data.SIXTEEN_BIT_CLASSES["fp16"] if c.name == "scale 2^-10")
    a, b = special_data.operands(cls, 64, 3, "fp16")
    flushed = np.zeros((64, 64), np.float16)
    assert special_data.score(flushed, special_data.reference(a, b, "fp16"), "fp16")["rel_err"] == pytest.approx(1.0)


def test_the_16_bit_suite_runs_end_to_end_with_fake_kernels(sixteen_bit_steps, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(harness, "gpu_present", lambda: True)
    monkeypatch.setattr(harness, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(harness, "cublas_available", lambda: True)
    monkeypatch.setattr(harness, "environment", lambda: {"gpu": "Test GPU", "date": "2026-11-28T00:00:00+00:00"})
    monkeypatch.setattr(special_data, "run_cublas", lambda a, b, dtype="fp32": _correctly_rounded(a, b, dtype))
    monkeypatch.setattr(special_data.StepKernels, "__init__", lambda self, arch: None)

    def kernel(self, step, a, b, dtype="fp32"):
        out = _correctly_rounded(a, b, dtype)
        if step.number == 3:  # step 3 flushes subnormal outputs to zero
            values = dtypes.to_float64(out, dtype)
            out = np.where(np.abs(values) < 2.0**-126, np.uint16(0), out)
        return out

    monkeypatch.setattr(special_data.StepKernels, "run", kernel)
    code = special_command.main(["--dtype", "bf16", "--size", "32", "--save", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == options.EXIT_FAILED  # step 3 misses
    doc = json.loads((tmp_path / "test-gpu" / "bf16" / special_results.JSON_NAME).read_text())
    assert doc["dtype"] == "bf16" and [c["name"] for c in doc["classes"]] == [
        c.name for c in special_data.SIXTEEN_BIT_CLASSES["bf16"]]
    assert [i["key"] for i in doc["implementations"]] == ["cublas", "step2", "step3", "step5"]
    missed = {(r["impl"], r["class"]) for r in special_results.failures(doc)}
    assert missed == {("step3", "scale 2^-66")}
    assert all(r["error_floor"] == 5e-3 for r in doc["rows"])
    assert "cuBLAS bf16" in out and "rounded to bf16" in out
    assert not (tmp_path / "test-gpu" / special_results.JSON_NAME).exists()  # fp32's file untouched


def test_a_bf16_ladder_compares_with_its_own_saved_files(sixteen_bit_steps, fake_gpu, tmp_path, capsys):
    assert ladder.main(["--dtype", "bf16", "--steps", "3", "--sizes", "256", "--save", "--results-dir", str(tmp_path),
                        "--references", "none"]) == 0
    gpu_dir = tmp_path / "nvidia-fake-g100"
    capsys.readouterr()
    # the GPU folder or its bf16 folder: both find bf16/step3.json
    for where in (gpu_dir, gpu_dir / "bf16"):
        assert ladder.main(["--dtype", "bf16", "--steps", "3", "--sizes", "256", "--compare", str(where),
                            "--references", "none"]) == 0
        assert "1.000x" in capsys.readouterr().out
    # fp32 finds no fp32 file there; a bf16 file given as fp32's is refused in one line
    assert cli.main(3, ["--sizes", "256", "--compare", str(gpu_dir / "bf16" / "step3.json")]) == options.EXIT_USAGE
    assert capsys.readouterr().err.strip().endswith("holds bf16 results, not fp32")
