"""The host-bound guard, driven with fake timings: no GPU needed.

A number is kernel time only if the host submits each launch faster than the GPU runs it.
harness.host_submit_us measures the host side; harness.is_host_bound compares it with the GPU
time per launch at HOST_BOUND_FRACTION (70%); the tables, results and gates read the verdict.
"""

import pytest

from steps.commands import cli, options
from steps.measure import harness


@pytest.mark.parametrize("host_us, gpu_ms, bound", [
    (5.0, 0.015, False),    # cuBLAS through the low-level binding at 512³: 5 µs host, 15 µs GPU
    (22.6, 0.015, True),    # cupy.matmul's Python path at 512³: the host is the clock
    (10.4, 0.015, False),   # just under 70%
    (10.5, 0.015, True),    # exactly 70%: bound
    (3.0, 2.5, False),      # a 2.5 ms kernel is never host-bound
])
def test_is_host_bound_on_both_sides_of_the_threshold(host_us, gpu_ms, bound):
    assert harness.is_host_bound(host_us, gpu_ms) is bound


def test_unknown_timings_are_unknown_not_passed():
    assert harness.is_host_bound(None, 0.015) is None
    assert harness.is_host_bound(5.0, None) is None
    assert harness.Timing(0.015, 0.014, 0.02, 30, 67).host_bound is None


class FakeClock:
    """A host clock that advances only when the fake GPU stream is given work."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_host_submit_us_times_submissions_not_the_gpu():
    clock, syncs = FakeClock(), []

    def submit():  # each launch costs the host 4 µs; the GPU's time never enters
        clock.now += 4e-6

    def sync():  # waiting for the GPU takes 1 ms of wall clock, outside the timed runs
        syncs.append(clock.now)
        clock.now += 1e-3

    host = harness.host_submit_us(submit, sync, gpu_ms=0.015, rounds=3, clock=clock)
    assert host == pytest.approx(4.0)
    assert len(syncs) == 4  # before each round and once at the end: no launch left in flight


def test_host_submit_us_uses_enough_launches_and_stays_under_the_queue_depth():
    counts = []
    clock = FakeClock()

    def submit():
        counts[-1] += 1
        clock.now += 1e-6

    def sync():
        counts.append(0)

    harness.host_submit_us(submit, sync, gpu_ms=0.001, rounds=1, clock=clock)  # a 1 µs kernel
    harness.host_submit_us(submit, sync, gpu_ms=100.0, rounds=1, clock=clock)  # a 100 ms kernel
    launches = [c for c in counts if c]
    assert launches == [50, 5]  # capped at 50 (queue depth), at least 5 (timer resolution)


def test_timing_and_measurement_carry_the_verdict():
    fast_host = harness.Timing(0.015, 0.014, 0.02, 30, 67, host_us=4.0)
    slow_host = harness.Timing(0.015, 0.014, 0.02, 30, 67, host_us=22.6)
    assert fast_host.host_bound is False and slow_host.host_bound is True
    # Judged against the fastest sample: a median the host's stalls inflated does not hide it.
    inflated = harness.Timing(0.040, 0.0208, 0.061, 30, 25, host_us=20.9)
    assert inflated.host_bound is True and not harness.is_host_bound(20.9, inflated.median_ms)
    m = harness.Measurement(512, 512, 512, rel_err=1e-7)
    m.set_timing(slow_host)
    assert (m.host_us, m.host_bound) == (22.6, True)
    assert m.gflops == pytest.approx(harness.flops(512, 512, 512) / 0.015e-3 / 1e9)


def test_step_table_marks_a_host_bound_row_and_its_cublas():
    size = (512, 512, 512)
    m = harness.Measurement(*size, rel_err=1e-7)
    m.set_timing(harness.Timing(0.015, 0.014, 0.02, 30, 67, host_us=22.6))
    row = cli.Row(size, m, None, "step 9", prior_gflops=1000.0, cublas_gflops=9000.0, cublas_host_bound=True)
    text = cli.format_table([row])
    line = next(line for line in text.splitlines() if line.strip().startswith("512x512x512"))
    assert line.endswith(options.HOST_MARK) and "22.6" in line
    assert "cuBLAS at this size is host-bound" in text and options.HOST_LEGEND in text


def test_check_error_never_passes_nan():
    m = harness.Measurement(8, 8, 8, rel_err=float("nan"))
    assert "wrong result" in harness.check_error(m, 1e-5).error
    assert harness.check_error(harness.Measurement(8, 8, 8, rel_err=2e-4), harness.TF32_TOLERANCE).ok
    assert not harness.check_error(harness.Measurement(8, 8, 8, rel_err=2e-4), harness.TOLERANCE).ok
