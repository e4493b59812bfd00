"""A shape sweep's confirmation round without a GPU: finalists timed again in turns, and the pick.

``harness.alternating_timings`` runs on fake modules whose time_evaluator says what it was
asked and returns made-up samples; ``sweep_shapes`` on a fake pool (its first pass and its
confirmation each a fixed function of the config), so the ranking, the pick, the log and the
--from-log / --resume readers are the real ones. tests/test_rpc.py confirms through real RPC
servers; tests/test_rpc.py's GPU test on the GPU.
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

import schedules
from steps.commands import sweep
from steps.measure import harness

STEP = schedules.get_step(11)
SHAPE = (1024, 1024, 1024)

# --- alternating_timings -------------------------------------------------------------------------


class FakeMod:
    """A module whose time_evaluator records each call and returns `ms` per sample (a list: one
    value per call of the timed evaluator, in turn), in seconds as TVM's does."""

    def __init__(self, name: str, calls: list, ms):
        self.name, self.calls, self.ms = name, calls, list(ms)

    def time_evaluator(self, fn, dev, number, repeat, min_repeat_ms=0):
        assert fn == "main" and dev == "dev"

        def run(*args):
            assert args in (("a", "b", "c"), ("a2", "b2", "c2"))
            kind = "warm" if min_repeat_ms else ("probe" if repeat == 1 else "time")
            self.calls.append((self.name, kind, number, args[0]))
            value = 0.01 if kind != "time" else self.ms.pop(0)  # probe: 10 us a launch
            return type("R", (), {"results": [value * 1e-3] * repeat, "mean": value * 1e-3})()

        return run


def test_alternating_timings_take_turns_and_keep_each_ones_median_of_rounds():
    calls: list = []
    # b's third round reads slow (a clock dip): its median of rounds stays 2.0
    mods = [FakeMod("a", calls, [1.0, 1.1, 0.9, 1.0, 1.0]), FakeMod("b", calls, [2.0, 2.0, 9.0, 2.1, 1.9])]
    sets = [("a", "b", "c"), ("a2", "b2", "c2")]  # the same inputs at other addresses
    timings = harness.alternating_timings(mods, "dev", sets, repeat=4, rounds=5)
    assert calls[0] == ("a", "warm", 1, "a")  # one warm-up, then each one's probe
    assert calls[1:3] == [("a", "probe", 3, "a"), ("b", "probe", 3, "a")]
    # a probe of 10 us a launch: 100 launches a sample (harness.TARGET_SAMPLE_MS); the rounds take
    # turns on the argument sets
    assert [c[0] for c in calls[3:]] == list("ab" "ba" "ab" "ba" "ab")
    assert [c[3] for c in calls[3:]] == ["a", "a", "a2", "a2", "a", "a", "a2", "a2", "a", "a"]
    assert all(c[1:3] == ("time", 100) for c in calls[3:])
    a, b = timings
    assert a.rounds_ms == pytest.approx([1.0, 1.1, 0.9, 1.0, 1.0]) and a.median_ms == pytest.approx(1.0)
    assert b.rounds_ms == pytest.approx([2.0, 2.0, 9.0, 2.1, 1.9]) and b.median_ms == pytest.approx(2.0)
    assert (b.samples, b.min_ms, b.max_ms, b.launches_per_sample) == (20, pytest.approx(1.9), pytest.approx(9.0), 100)
    assert harness.alternating_timings([], "dev", [()], 4, 5) == []


# --- finalists and the pick ----------------------------------------------------------------------


def row(raster: int, gflops: float, **extra) -> dict:
    return {"M": 64, "N": 64, "K": 64, "config": {"raster": raster}, "gflops": gflops, **extra}


def test_finalists_are_the_fastest_few_within_reach_of_the_best():
    assert (sweep.FINALISTS, sweep.FINALIST_WITHIN) == (10, 0.10)
    results = [row(r, g) for r, g in enumerate([100, 99, 98, 97, 96, 95, 94, 93, 92, 91, 90.5, 85])]
    assert [r["config"]["raster"] for r in sweep.finalists(results)] == list(range(10))  # FINALISTS
    assert [r["config"]["raster"] for r in sweep.finalists([row(1, 50), row(2, 100), row(3, 89)])] == [2]


def test_the_pick_is_the_fastest_of_the_confirmation():
    assert sweep.pick([row(1, 100.0), row(4, 100.2), row(2, 99.0)])["config"] == {"raster": 4}


# --- sweep_shapes with a fake pool ----------------------------------------------------------------


LISTED = [c.as_dict() for c in STEP.module.sweep_candidates(*SHAPE, "sm_90", 132, 10)]


def first_speed(cfg: dict) -> float:
    """The first pass's made-up speed: 2% apart, in an order other than the list's."""
    i = LISTED.index(cfg)
    return 1000.0 * (1 + 0.02 * ((3 * i) % len(LISTED)))


class FakePool:
    confirmed: list = []
    again = staticmethod(lambda cfg, first: first)  # the confirmation's speed of a config

    def __init__(self, workers):
        pass

    def run(self, jobs, on_result):
        for job in jobs:
            _, (M, N, K), cfg, _, _ = job
            on_result(job, {"M": M, "N": N, "K": K, "config": cfg, "rel_err": 1e-7, "median_ms": 1.0,
                            "gflops": first_speed(cfg)})

    def confirm(self, step_number, arch, repeat, rounds, groups, on_result):
        for size, rows in groups:
            FakePool.confirmed.append((size, [r["config"] for r in rows], rounds))
            out = []
            for r in rows:
                g = FakePool.again(r["config"], r["gflops"])
                ms = harness.flops(*size) / g / 1e6
                timing = harness.Timing(ms, ms, ms, rounds * repeat, 1, rounds_ms=[ms] * rounds)
                out.append(harness.confirmed(r, timing))
            on_result((size,), {"M": size[0], "N": size[1], "K": size[2], "finalists": out})

    def close(self):
        pass


@pytest.fixture
def fake_pool(monkeypatch):
    FakePool.confirmed = []
    FakePool.again = staticmethod(lambda cfg, first: first)
    monkeypatch.setattr(sweep, "Pool", FakePool)
    monkeypatch.setattr(sweep, "FINALIST_WITHIN", 1.0)  # every candidate within reach: 10 finalists
    return FakePool


def run_sweep(rounds: int = 3):
    log = io.StringIO()
    best = sweep.sweep_shapes(STEP, [SHAPE], "sm_90", 2, 10, 1, log, 132, rounds=rounds)
    return best, [json.loads(line) for line in log.getvalue().splitlines()]


def test_a_shape_sweep_keeps_the_confirmations_pick_and_logs_every_finalist(fake_pool, capsys):
    listed = LISTED
    assert len(listed) == 10
    first = sorted(listed, key=first_speed, reverse=True)
    # The confirmation reads the first pass's fastest 5% slower: the second fastest wins.
    fake_pool.again = staticmethod(lambda cfg, g: g * (0.95 if cfg == first[0] else 1.0))
    best, lines = run_sweep()
    [(size, cfgs, rounds)] = fake_pool.confirmed
    assert size == SHAPE and rounds == 3 and cfgs == first[:sweep.FINALISTS]
    shape_rows = [r for r in lines if r["stage"] == "shape"]
    again = [r for r in lines if r["stage"] == "confirm"]
    assert len(shape_rows) == len(listed) and len(again) == sweep.FINALISTS
    assert [r["config"] for r in again if r["pick"]] == [first[1]]
    kept = best[SHAPE]["best"]
    assert kept["config"] == first[1] and kept["gflops"] == pytest.approx(first_speed(first[1]))
    assert kept["first_gflops"] == pytest.approx(first_speed(first[1])) and len(kept["rounds_ms"]) == 3
    out = capsys.readouterr().out
    assert f"best at 1024x1024x1024: {kept['gflops'] / 1e3:.1f} TFLOPS (timed again in 3 rounds" in out
    # --from-log ranks the log as the sweep did
    assert sweep.best_from_log(STEP, _file(lines))[SHAPE]["best"]["config"] == first[1]


def _file(lines: list[dict]) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_no_confirmation_keeps_the_first_pass_fastest(fake_pool):
    best, lines = run_sweep(rounds=0)
    assert not fake_pool.confirmed and all(r["stage"] == "shape" for r in lines)
    assert best[SHAPE]["best"]["gflops"] == max(r["gflops"] for r in lines)


def test_a_later_confirmation_in_a_log_replaces_an_earlier_one_and_resume_skips_both(fake_pool, tmp_path):
    _, lines = run_sweep()
    again = [r for r in lines if r["stage"] == "confirm"]
    # a resumed sweep confirmed the shape again and picked another finalist
    later = [{**r, "pick": r["config"] == again[-1]["config"]} for r in again]
    path = _file(lines + later)
    assert sweep.best_from_log(STEP, path)[SHAPE]["best"]["config"] == again[-1]["config"]
    measured = sweep.measured_in_log(STEP, path)
    assert len(measured) == sum(r["stage"] == "shape" for r in lines)
    assert all("rounds_ms" not in r for r in measured.values())  # the first pass's rows, not the confirmation's


def test_confirm_is_for_a_shape_sweep_and_not_negative(capsys):
    from .checks import one_line_error

    assert sweep.main(["--step", "7", "--sizes", "1024", "--confirm", "2", "--dry-run"]) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", "--confirm", "step 7")
    assert sweep.main(["--step", "11", "--shapes", "256x256x256", "--confirm", "-1", "--dry-run"]) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", "--confirm", ">= 0")


# --- tools/winners.py reads the picks ------------------------------------------------------------------

_spec = importlib.util.spec_from_file_location("winners", Path(__file__).resolve().parent.parent / "tools" / "winners.py")
winners = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(winners)


def test_winners_compares_the_confirmations_picks_with_their_timings():
    a = [row(1, 100.0, stage="shape"), row(2, 98.0, stage="shape"),
         row(1, 99.0, stage="confirm", pick=False), row(2, 99.2, stage="confirm", pick=True)]
    b = [row(1, 97.0, stage="shape"), row(2, 100.0, stage="shape"),
         row(1, 99.0, stage="confirm", pick=False), row(2, 100.0, stage="confirm", pick=True)]
    (same,) = winners.compare(a, b)
    assert same["verdict"] == "same" and same["a_best_gflops"] == 99.2  # a's pick, as confirmed
    # picks 0.2% apart: each within the band of the other in the other log's confirmation
    c = [row(1, 99.0, stage="confirm", pick=True), row(2, 99.3, stage="confirm", pick=False)]
    (within,) = winners.compare(a, c)
    assert within["verdict"] == "within" and within["b_pick_in_a"] == pytest.approx(99.0 / 99.2, abs=1e-4)
