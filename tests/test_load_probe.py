"""tools/load_probe.py (issue 33's finalist probes): what it builds and how `levels` ranks, without a GPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))  # the build's spawned processes import the tool by name
spec = importlib.util.spec_from_file_location("load_probe", TOOLS / "load_probe.py")
load_probe = importlib.util.module_from_spec(spec)
sys.modules["load_probe"] = load_probe
spec.loader.exec_module(load_probe)

FINALISTS = Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "load_probe_configs.json"


def test_build_history_writes_the_finalists_and_the_sweeps_candidates(tmp_path, monkeypatch):
    import schedules

    monkeypatch.setenv("ARCH", "sm_90")
    key = "256x256x16384"
    finalists = json.loads(FINALISTS.read_text())[key][:1]
    load_probe.build({key: finalists}, str(tmp_path), history=True)
    candidates = schedules.get_step(11).module.sweep_candidates(256, 256, 16384, "sm_90", 132, 25)
    assert len(candidates) == 25 and load_probe._candidates(key, "sm_90") == [c.as_dict() for c in candidates]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{key}_0.so"] + [f"{key}_cand{j}.so" for j in range(25)])


class _Timing:
    def __init__(self, ms):
        self.median_ms = ms


def test_levels_rank_each_config_by_its_fastest_instance_and_allocation(monkeypatch):
    from steps.measure import harness

    # 3 configs x 2 instances; per allocation, each module's median (ms). Config 0's second
    # instance is on the fast level on allocation 1 only; config 1 is steady; config 2 is slow.
    per_allocation = [[1.02, 1.02, 1.01, 1.01, 1.05, 1.05],
                      [1.02, 1.00, 1.01, 1.01, 1.05, 1.04]]
    calls = iter(per_allocation)
    monkeypatch.setattr(harness, "alternating_timings", lambda mods, dev, sets, repeat, rounds:
                        [_Timing(ms) for ms in next(calls)])
    row = load_probe._levels("1x4x4", list(range(6)), 2, None, ["a0", "a1"], "fresh")
    assert row["pairs_us"] == [[1020.0, 1020.0, 1020.0, 1000.0], [1010.0, 1010.0, 1010.0, 1010.0],
                               [1050.0, 1050.0, 1050.0, 1040.0]]
    assert row["rel"] == [1.0, pytest.approx(0.9901), pytest.approx(0.9615)]
    # the fastest, then the list's first within 0.5% and 1%: config 1 is 0.99 of config 0
    assert row["picks"] == {0.0: 0, 0.005: 0, 0.01: 0}
    calls = iter([list(reversed(p)) for p in per_allocation])  # the configs in the other order
    row = load_probe._levels("1x4x4", list(range(6)), 2, None, ["a0", "a1"], "fresh")
    # now the steady config (1.01 ms, 0.990 of the fastest) comes first in the list within 1%
    assert row["picks"] == {0.0: 2, 0.005: 2, 0.01: 1}
