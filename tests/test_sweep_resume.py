"""--resume without a GPU: a sweep cut off and run again measures only what its log lacks.

The pool is a fake (each config's speed a fixed function of it), so the staged search, the
log and the ranking are the real ones and the whole runs in a second. tests/test_rpc.py
resumes a real sweep over RPC servers.
"""

from __future__ import annotations

import io
import json

import pytest

import schedules
from steps.commands import options, sweep

STEP = schedules.get_step(7)
SIZE = (1024, 1024, 1024)


def speed(cfg: dict) -> float:
    """A fixed, made-up speed per config, with one clear winner per stage."""
    return 1000.0 + sum((i + 1) * v for i, v in enumerate(cfg.values())) % 997


class FakePool:
    ran: list = []

    def __init__(self, workers):
        pass

    def run(self, jobs, on_result):
        for job in jobs:
            FakePool.ran.append(job)
            number, (M, N, K), cfg, _, _ = job
            on_result(job, {"M": M, "N": N, "K": K, "config": cfg, "rel_err": 1e-7, "median_ms": 1.0,
                            "gflops": speed(cfg)})

    def close(self):
        pass


@pytest.fixture
def fake_pool(monkeypatch):
    FakePool.ran = []
    monkeypatch.setattr(sweep, "Pool", FakePool)
    return FakePool


def test_a_staged_sweep_resumed_measures_only_what_its_log_lacks(fake_pool, tmp_path, capsys):
    log = io.StringIO()
    whole = sweep.sweep(STEP, [SIZE], "sm_90", 2, 2, 1, log)
    lines = log.getvalue().splitlines()
    assert len(lines) == len(fake_pool.ran) > 10
    # Cut off halfway: the log holds the first half.
    path = tmp_path / "sweep.jsonl"
    path.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    fake_pool.ran = []
    log = io.StringIO()
    again = sweep.sweep(STEP, [SIZE], "sm_90", 2, 2, 1, log, measured=sweep.measured_in_log(STEP, path))
    assert len(fake_pool.ran) == len(lines) - len(lines) // 2
    assert log.getvalue().splitlines() == lines[len(lines) // 2:]  # the same candidates, each logged once
    assert again == whole
    assert "candidates measured before (--resume)" in capsys.readouterr().err


def test_the_log_resumes_kernel_verdicts_and_measures_lost_ones_again(tmp_path):
    cfg = STEP.default_config(*SIZE).as_dict()
    other = {**cfg, "stages": 3}
    rows = [
        {"step": 7, "stage": "tile", "M": 1024, "N": 1024, "K": 1024, "config": cfg, "gflops": 5.0},
        {"step": 7, "stage": "tile", "M": 1024, "N": 1024, "K": 1024, "config": other, "error": "wrong result: x"},
        {"step": 7, "stage": "tile", "M": 512, "N": 512, "K": 512, "config": cfg, "error": "rpc: no server"},
        {"step": 8, "stage": "tile", "M": 512, "N": 512, "K": 512, "config": other, "gflops": 1.0},
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step": 7, "M"')
    done = sweep.measured_in_log(STEP, path)
    assert set(done) == {sweep.log_key(SIZE, cfg), sweep.log_key(SIZE, other)}
    assert done[sweep.log_key(SIZE, cfg)] == {"M": 1024, "N": 1024, "K": 1024, "config": cfg, "gflops": 5.0}
    # A key ignores the order of the config's fields.
    assert sweep.log_key(SIZE, dict(reversed(list(cfg.items())))) == sweep.log_key(SIZE, cfg)
    assert sweep.measured_in_log(STEP, tmp_path / "none.jsonl") == {}


def test_a_log_cut_short_gets_its_line_ended_before_appending(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n{"b"')
    with sweep._open_log(path) as log:
        log.write('{"c": 3}\n')
    assert path.read_text().splitlines() == ['{"a": 1}', '{"b"', '{"c": 3}']
    with sweep._open_log(tmp_path / "new.jsonl") as log:
        log.write("x\n")
    assert (tmp_path / "new.jsonl").read_text() == "x\n"


def test_resume_needs_a_log(capsys):
    assert sweep.main(["--step", "7", "--sizes", "1024", "--resume"]) == options.EXIT_USAGE
    assert "--resume" in capsys.readouterr().err
