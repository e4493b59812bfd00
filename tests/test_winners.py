"""tools/winners.py: two sweeps' winners are the same, within the band, or different."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "winners.py"
spec = importlib.util.spec_from_file_location("winners", TOOL)
winners = importlib.util.module_from_spec(spec)
spec.loader.exec_module(winners)


def rows(gflops: dict, shape=(64, 64, 64), errors=()) -> list[dict]:
    out = [{"M": shape[0], "N": shape[1], "K": shape[2], "config": {"raster": r}, "gflops": g}
           for r, g in gflops.items()]
    out += [{"M": shape[0], "N": shape[1], "K": shape[2], "config": {"raster": r}, "error": "wrong result"}
            for r in errors]
    return out


def test_the_same_pick_is_the_same():
    (row,) = winners.compare(rows({1: 100.0, 2: 90.0}), rows({1: 101.0, 2: 95.0}))
    assert row["verdict"] == "same" and row["shape"] == "64x64x64"


def test_picks_within_the_band_are_equally_good_and_beyond_it_different():
    a = rows({1: 100.0, 2: 98.0, 4: 90.0})
    (within,) = winners.compare(a, rows({1: 97.6, 2: 100.0, 4: 90.0}))
    assert winners.BAND == 0.025 and within["verdict"] == "within"
    assert within["b_pick_in_a"] == pytest.approx(0.98) and within["a_pick_in_b"] == pytest.approx(0.976)
    (far,) = winners.compare(a, rows({1: 97.0, 2: 100.0, 4: 90.0}))
    assert far["verdict"] == "DIFFERENT"  # a's pick 3% behind in b
    assert far["a_pick_gflops"] == [100.0, 97.0] and far["b_pick_gflops"] == [98.0, 100.0]  # both timings
    (strict,) = winners.compare(a, rows({1: 99.5, 2: 100.0, 4: 90.0}), band=0.001)
    assert strict["verdict"] == "DIFFERENT"


def test_a_pick_the_other_log_failed_or_lacks_is_different():
    (row,) = winners.compare(rows({1: 100.0, 2: 99.9}), rows({2: 100.0}, errors=(1,)))
    assert row["verdict"] == "DIFFERENT" and row["a_pick_in_b"] == 0.0


def test_the_command_reads_logs_and_exits_by_verdict(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(json.dumps(r) for r in rows({1: 100.0, 2: 99.8}) + rows({1: 50.0}, (8, 8, 8))) + "\n")
    b.write_text("\n".join(json.dumps(r) for r in rows({1: 99.7, 2: 100.0}) + rows({1: 51.0}, (8, 8, 8))) + "\n")
    assert winners.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "2 shapes: 1 the same winner, 1 within the 2.5% band, 0 different" in out
    b.write_text("\n".join(json.dumps(r) for r in rows({1: 90.0, 2: 100.0})) + "\n")
    assert winners.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT" in out and "GFLOPS" in out and "100.0 / 90.0" in out  # a's pick, timed by both runs
    assert winners.main([str(tmp_path / "missing.jsonl"), str(b)]) == 2
