"""Fault isolation without a GPU: KernelRunner.measure in a worker process, restarted after a
failure, driven by fake servers that fault, die or hang like a broken CUDA context would.

The GPU version (a real misaligned-address kernel) is in tests/test_gpu_shapes.py.
"""

from __future__ import annotations

import time

import pytest

import schedules
from schedules.config import GridConfig
from steps.measure import harness, worker

from .fake_worker import EXIT, HANG, OK, SEGFAULT, STICKY_FAULT, fake_serve


@pytest.fixture
def runner():
    r = harness.KernelRunner(repeat=3, seed=0, worker_target=fake_serve, timeout_s=30)
    yield r
    r.close()


def measure(runner, M: int) -> harness.Measurement:
    return runner.measure(1, M, 8, 8, "sm_90")


def test_one_worker_for_a_clean_run(runner):
    pids = {measure(runner, OK).gflops for _ in range(4)}
    assert len(pids) == 1 and runner.worker_starts == 1  # started once, reused


def test_a_sticky_fault_fails_one_measurement_only(runner):
    assert measure(runner, OK).ok
    bad = measure(runner, STICKY_FAULT)
    assert not bad.ok and "misaligned address" in bad.error
    after = measure(runner, OK)  # without a restart this would read "context poisoned"
    assert after.ok, after.error
    assert runner.worker_starts == 2


@pytest.mark.parametrize("how, words", [(EXIT, "exit code 9"), (SEGFAULT, "SIGSEGV")])
def test_a_dead_worker_is_reported_and_replaced(runner, how, words):
    first = measure(runner, OK)
    dead = measure(runner, how)
    assert not dead.ok and "worker process died" in dead.error and words in dead.error
    assert "\n" not in dead.error
    again = measure(runner, OK)
    assert again.ok and again.gflops != first.gflops  # a new process (another pid)
    assert runner.worker_starts == 2


def test_a_hung_worker_is_killed_after_the_timeout():
    with harness.KernelRunner(repeat=3, worker_target=fake_serve, timeout_s=3) as runner:
        assert measure(runner, OK).ok  # the first call includes the worker's start-up
        t0 = time.monotonic()
        hung = measure(runner, HANG)
        assert time.monotonic() - t0 < 20
        assert not hung.ok and "no reply within 3 s" in hung.error
        assert measure(runner, OK).ok
        assert runner.worker_starts == 2


def test_config_errors_are_raised_before_any_worker_starts(runner):
    with pytest.raises(schedules.ConfigError, match="unknown step"):
        runner.measure(99, 8, 8, 8, "sm_90")
    with pytest.raises(schedules.ConfigError, match="unknown arch"):
        runner.measure(1, 8, 8, 8, "sm_75")
    with pytest.raises(schedules.ConfigError, match="threads per block"):
        runner.measure(1, 8, 8, 8, "sm_90", GridConfig(block_m=64, block_n=64))
    with pytest.raises(schedules.ConfigError, match="positive integer"):
        runner.measure(1, 0, 8, 8, "sm_90")
    with pytest.raises(schedules.ConfigError, match="module:function"):
        runner.measure("no_colon_here", 8, 8, 8, "sm_90")
    assert runner.worker_starts == 0


def test_seeded_runs_send_the_same_seeds():
    seen = []

    class Recorder:
        starts = 1

        def call(self, request, timeout_s=None):
            seen.append(request[1][-1])
            return "ok", harness.Measurement(8, 8, 8, 1.0, 1.0, 1.0, 1.0, 0.0).as_dict()

    for _ in range(2):
        r = harness.KernelRunner(repeat=3, seed=42)
        r._worker = Recorder()
        for _ in range(3):
            r.measure(1, 8, 8, 8, "sm_90")
    assert seen[:3] == seen[3:] and len(set(seen[:3])) == 3


# --- the real server (TVM imported in the child; no GPU needed for these) -----------------


def test_real_worker_reports_config_errors_raised_while_building():
    """Step 2 given step 1's config passes its own validate, then fails in Step.schedule in
    the worker; the parent raises the same one-line ConfigError."""
    with harness.KernelRunner(repeat=1) as runner:
        with pytest.raises(schedules.ConfigError, match="step 2 takes a RegisterTileConfig, got GridConfig"):
            runner.measure(2, 64, 64, 64, "sm_90", GridConfig())
        assert runner.worker_starts == 1


@pytest.mark.skipif(harness.gpu_present(), reason="checks the failure path without a GPU")
def test_real_worker_without_a_gpu_reports_a_failed_measurement():
    with harness.KernelRunner(repeat=1) as runner:
        m = runner.measure(1, 64, 64, 64, "sm_90")
        assert not m.ok and m.error and "\n" not in m.error
        assert m.median_ms is None


def test_worker_plumbing_survives_a_stop_without_a_start():
    w = worker.Worker(fake_serve)
    w.stop()
    assert not w.alive and w.starts == 0
