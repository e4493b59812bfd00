"""The ncu cross-check's parsing and per-call summing, on a real report: no GPU needed.

tests/data/ncu_cublas_512_splitk.csv is what Nsight Compute 2025.3 wrote on an H100
(2026-11-22) for four cuBLAS fp32 calls at 512^3 replayed from a CUDA graph: each call
launches two kernels (split-K, grids 8x8x4 and 8x8x2), so a call's time is their sum.
"""

from pathlib import Path

import pytest

from steps.commands import crosscheck

FIXTURE = Path(__file__).parent / "data" / "ncu_cublas_512_splitk.csv"


def test_parse_kernels_reads_the_real_report_in_launch_order():
    kernels = crosscheck.parse_kernels(FIXTURE.read_text())
    assert len(kernels) == 8
    assert all(name.startswith("sm80_xmma_gemm_f32f32") for name, _ in kernels)
    assert [ns for _, ns in kernels[:2]] == [11456.0, 4320.0]  # "11,456" with its separator


def test_per_call_sums_the_split_k_pair():
    sums, names = crosscheck.per_call(crosscheck.parse_kernels(FIXTURE.read_text()), calls=4)
    assert len(names) == 2
    assert sums == [11456.0 + 4320.0, 10816.0 + 3840.0, 10880.0 + 3968.0, 10880.0 + 3968.0]


def test_per_call_refuses_a_count_that_does_not_divide():
    kernels = crosscheck.parse_kernels(FIXTURE.read_text())
    with pytest.raises(crosscheck.NcuError, match="whole number"):
        crosscheck.per_call(kernels, calls=3)
    with pytest.raises(crosscheck.NcuError, match="launched"):  # calls that launch different kernels
        crosscheck.per_call([("gemm", 1.0), ("reduce", 2.0), ("gemm", 1.0), ("gemm", 2.0)], calls=2)


def test_units_and_a_missing_report():
    text = FIXTURE.read_text().replace('"ns"', '"usecond"')
    assert crosscheck.parse_kernels(text)[0][1] == pytest.approx(11456.0 * 1e3)
    with pytest.raises(crosscheck.NcuError, match="no CSV report"):
        crosscheck.parse_kernels("==PROF== Connected to process 1\n==PROF== Disconnected\n")
    with pytest.raises(crosscheck.NcuError, match="unexpected unit"):
        crosscheck.parse_kernels(FIXTURE.read_text().replace('"ns"', '"cycle"'))


def test_a_check_agrees_within_five_percent_only():
    ok = crosscheck.Check("cublas", "cuBLAS", 512, 512, 512, harness_ms=0.0150, ncu_ms=0.0148)
    off = crosscheck.Check("cublas", "cuBLAS", 512, 512, 512, harness_ms=0.0127, ncu_ms=0.0148)
    assert ok.agrees and not off.agrees
    assert off.as_dict()["ratio"] == pytest.approx(0.0127 / 0.0148)
    assert "DIFFERS" in crosscheck.format_check(off) and crosscheck.format_check(ok).endswith("ok")


def test_without_a_gpu_it_is_one_line(capsys):
    from steps.measure import harness

    if harness.gpu_present():
        pytest.skip("checks the no-GPU path")
    assert crosscheck.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m steps.crosscheck: error: the cross-check profiles kernels on a CUDA GPU and none was found"]
