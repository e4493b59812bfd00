"""Result files: schema, GPU slug, atomic writes that never leave half a file."""

import json

import pytest

from steps import results


def _doc(**overrides):
    doc = {
        "schema": 2, "step": 4, "name": "cooperative fetch", "idea": "x",
        "environment": {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-21T00:00:00+00:00"},
        "method": {"repeat": 30},
        "results": [{
            "M": 512, "N": 512, "K": 512, "config": {"block_m": 64}, "median_ms": 0.02,
            "min_ms": 0.019, "max_ms": 0.03, "gflops": 13000.0, "rel_err": 4e-7,
            "host_us": 3.0, "host_bound": False,
            "prior": {"name": "step 3", "gflops": 200.0}, "speedup_vs_prior": 65.0,
            "cublas_gflops": None, "cublas_host_bound": None, "pct_cublas": None,
        }],
    }
    doc.update(overrides)
    return doc


def test_gpu_slug():
    assert results.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert results.gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert results.gpu_slug("???") == "unknown-gpu"


def test_write_and_load_round_trip(tmp_path):
    path = results.step_path(tmp_path, "NVIDIA H200", 4)
    results.write_atomic(path, _doc())
    assert path == tmp_path / "nvidia-h200" / "step4.json"
    assert results.load(path) == _doc()
    assert results.committed("NVIDIA H200", 4, tmp_path)["step"] == 4
    assert results.committed("NVIDIA A100", 4, tmp_path) is None
    assert results.row_for(results.load(path), 512, 512, 512)["gflops"] == 13000.0
    assert results.row_for(results.load(path), 1024, 1024, 1024) is None
    assert [p.name for p in path.parent.iterdir()] == ["step4.json"]  # no temp files left


@pytest.mark.parametrize("bad", [
    {"schema": 3},
    {"results": []},
    {"environment": {"gpu": "x"}},
])
def test_invalid_documents_are_rejected(bad):
    with pytest.raises(results.ResultsError):
        results.validate(_doc(**bad))


def test_row_without_gflops_is_rejected():
    doc = _doc()
    doc["results"][0]["gflops"] = None
    with pytest.raises(results.ResultsError, match="gflops"):
        results.validate(doc)


def test_failed_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "gpu" / "step4.json"
    results.write_atomic(path, _doc())
    before = path.read_text()

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(results.json, "dump", explode)
    with pytest.raises(OSError):
        results.write_atomic(path, _doc(step=5))
    assert path.read_text() == before
    assert json.loads(before)["step"] == 4
    assert sorted(p.name for p in path.parent.iterdir()) == ["step4.json"]


def test_invalid_document_is_never_written(tmp_path):
    path = tmp_path / "step4.json"
    with pytest.raises(results.ResultsError):
        results.write_atomic(path, _doc(results=[]))
    assert not path.exists()


def test_committed_results_follow_the_schema():
    """Whatever is committed under results/ must load."""
    files = sorted(results.RESULTS_DIR.glob("*/step*.json"))
    for f in files:
        results.load(f)


def test_schema_2_rows_must_carry_the_guard_and_schema_1_still_loads():
    doc = _doc()
    del doc["results"][0]["host_bound"]
    with pytest.raises(results.ResultsError, match="host_bound"):
        results.validate(doc)
    old = _doc(schema=1)  # saved before the guard existed: loads, but is not comparable
    del old["results"][0]["host_us"], old["results"][0]["host_bound"], old["results"][0]["cublas_host_bound"]
    row = results.validate(old)["results"][0]
    assert "schema 1" in results.not_comparable(row)


def test_not_comparable_refuses_host_bound_rows():
    row = _doc()["results"][0]
    assert results.not_comparable(row) is None
    assert results.not_comparable(None) is None
    row.update(host_bound=True, host_us=18.0)
    assert "host-bound" in results.not_comparable(row) and "18.0 us" in results.not_comparable(row)
