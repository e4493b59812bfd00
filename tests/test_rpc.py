"""Tuning over TVM's RPC tracker: the distribution, its faults and resuming, on real processes.

A real tracker and two real servers on 127.0.0.1 (ports chosen free), started by the launcher
(steps/commands/rpc_pool.py) and watched by it as ``python -m steps.rpc_pool`` watches them.
The candidates are the sweep's own, built for the CPU (``--rpc-target llvm``,
``rpc.build_cpu``), a few of them misbehaving on purpose (tests/rpc_kernels.py): every path
under test, the client threads, sessions, faults, the results and the log, is the one a GPU
sweep takes. Every process is stopped at the end, and every wait is bounded. One GPU test
(marked) compares a sweep through a tracker with the local sweep on the same candidates.
"""

from __future__ import annotations

import collections
import gc
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

import schedules
from steps.commands import rpc_pool, sweep
from steps.measure import harness, rpc

from .checks import one_line_error
from .rpc_kernels import CRASH, HANG, IDLE, SLOW

ROOT = Path(__file__).resolve().parent.parent
STEP = schedules.get_step(11)
SIZE = (256, 512, 128)
KEY = "ladder-test"
RESULT_KEYS = {"M", "N", "K", "config", "rel_err", "median_ms", "gflops"}

pytestmark = pytest.mark.skipif(bool(rpc_pool.missing_packages(tracker=True)),
                                reason=f"TVM's RPC processes need {rpc_pool.missing_packages(tracker=True)}: "
                                       "pip install -e '.[test]'")


def configs(count: int, size=SIZE, **changes) -> list[dict]:
    """`count` distinct sweep candidates of step 11 at `size`, as dicts (with `changes`)."""
    cfgs = [c.as_dict() for c in STEP.module.sweep_candidates(*size, "sm_90", 132, 25)][:count]
    assert len(cfgs) == count
    return [{**c, **changes} for c in cfgs]


def jobs_of(cfgs: list[dict], size=SIZE, repeat: int = 2) -> list[tuple]:
    return [(STEP.number, size, c, "sm_90", repeat) for c in cfgs]


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:g} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def launch():
    """A tracker and two servers on 127.0.0.1, watched (a server that dies or stops serving is
    restarted) until the module's tests are done; then everything is stopped."""
    lines = []
    launch = rpc_pool.Launch(["0", "1"], KEY, host="127.0.0.1", port=0, server_port=0, say=lines.append,
                             ready_s=90)
    stop = threading.Event()

    def watch():
        while not stop.wait(0.5):
            launch.watch()

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        launch.start()
        assert all("--no-fork" in s.proc.args for s in launch.servers)  # sessions spawn by default
        watcher.start()
        launch.lines = lines
        yield launch
    finally:
        stop.set()
        watcher.join(10)
        launch.stop()
        alive = [p.proc.pid for p in launch.servers + [launch.tracker_process] if p.proc and p.proc.poll() is None]
        assert not alive, f"processes left running: {alive}"
        assert launch.no_torch is None  # its folder removed


def test_the_servers_python_keeps_torch_out(tmp_path):
    """The servers' environment puts a folder first on PYTHONPATH whose torch fails to import
    (tvm_ffi imports torch wherever it is installed: 2.6 s of each spawned session's start on
    the H100's host); TVM imports there all the same. A stand-in torch further along the path
    would leave a mark if imported."""
    stand_in = tmp_path / "site" / "torch"
    stand_in.mkdir(parents=True)
    mark = tmp_path / "imported"
    (stand_in / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    folder = rpc_pool.no_torch_folder()
    try:
        env = rpc_pool.server_environment("0", folder)
        env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
        code = "import tvm, sys\ntry:\n    import torch\nexcept ImportError:\n    sys.exit(0)\nsys.exit(1)\n"
        assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0
        assert not mark.exists()
        env["PYTHONPATH"] = str(tmp_path / "site")  # and without the folder, the stand-in is imported
        subprocess.run([sys.executable, "-c", "import torch"], env=env, timeout=60, check=True)
        assert mark.exists()
    finally:
        shutil.rmtree(folder)


@pytest.fixture
def tracker(launch) -> rpc.Tracker:
    """The launcher's tracker, once both servers are registered (a test before may have
    crashed or killed them: the launcher restarts them)."""
    wait_until(lambda: len(launch.tracker.servers()) == 2, 60, "both servers registered")
    return launch.tracker


def run_pool(remote: rpc.Remote, jobs: list[tuple], timeout_s: float = 90, during=None):
    """Run the jobs through a RemotePool in a thread bounded in time; {config's json: result}."""
    pool = sweep.RemotePool(1, remote, "sm_90")
    results, failure = {}, []

    def go():
        try:
            pool.run(jobs, lambda job, res: results.setdefault(json.dumps(job[2], sort_keys=True), res))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failure.append(exc)

    runner = threading.Thread(target=go, daemon=True)
    try:
        runner.start()
        if during is not None:
            during(pool)
        runner.join(timeout_s)
        assert not runner.is_alive(), f"the sweep did not finish within {timeout_s:g} s"
        assert not failure, failure
    finally:
        if not runner.is_alive():
            assert not os.listdir(pool.directory), "exported libraries left behind"
            pool.close()
    assert not os.path.exists(pool.directory)
    assert len(results) == len(jobs), "a candidate got no result, or two"
    return pool, results


def test_the_check_library_outlives_the_build_processes():
    """An RPC sweep stops its build processes once every candidate is built, while the servers
    still measure; a session opened after that (a renewal, a retry) uploads the check's library
    again, so it stays until the pool closes."""
    builds = sweep.BuildPool(1)
    try:
        path = builds.checker("cpu", "sm_90").result(timeout=300)
        assert builds.checker("cpu", "sm_90").result() == path  # built once
        builds.stop_workers()
        assert os.path.isfile(path)
    finally:
        builds.close()
    assert not os.path.exists(path)


# --- the distribution ----------------------------------------------------------------------------


def test_both_servers_measure_and_results_read_as_the_local_paths(tracker):
    """Eight candidates over two servers, each checked against float64 as the local sweep checks:
    one that writes no output reads the NaN the check poisoned it with, and fails."""
    cfgs = configs(8)
    cfgs[5]["raster"] = IDLE
    remote = rpc.Remote(tracker, target="llvm", builder="tests.rpc_kernels:build", timeout_s=30, wait_s=30)
    pool, results = run_pool(remote, jobs_of(cfgs))
    assert len(pool.runner.served) == 2 and sum(pool.runner.served.values()) == 8, pool.runner.served
    wrong = results.pop(json.dumps(cfgs[5], sort_keys=True))
    assert wrong["error"] == "wrong result: relative error inf" and wrong["rel_err"] == float("inf"), wrong
    for res in results.values():
        # the local sweep's result, and where its time went (build here, load and run there)
        assert set(res) == RESULT_KEYS | {"build_s", "rpc"}, res
        assert res["build_s"] > 0 and res["rpc"]["load_s"] > 0 and res["rpc"]["run_s"] > 0
        assert res["rpc"]["server"] in pool.runner.served
        assert res["rel_err"] <= harness.TOLERANCE and res["gflops"] > 0 and res["median_ms"] > 0


def test_the_probes_session_is_the_first_clients_and_the_others_open_meanwhile(tracker):
    """A spawned session costs seconds to start: the one that asked the servers what they are
    measures too, and one on the other server opens while it asks, so two servers cost two
    sessions, both opened before the first candidate; the server time is split. The candidates
    sleep 0.4 s a call (SLOW): fast ones could all go to one session before the other's thread
    first polled, on a loaded host (a fresh-clone CI run did that)."""
    remote = rpc.Remote(tracker, target="llvm", builder="tests.rpc_kernels:build", timeout_s=30, wait_s=30)
    info = remote.connect()
    handed = remote.handover["sessions"]
    assert info["servers"] == 2 and "session" not in info and len(handed) == 2
    servers = {f.result(timeout=60).server for f in handed}
    assert len(servers) == 2, servers  # one on each server
    slow = list({json.dumps(c, sort_keys=True): c for c in configs(12, raster=SLOW)}.values())[:6]  # 6 distinct
    pool, results = run_pool(remote, jobs_of(slow))
    assert remote.take_sessions() == []  # taken by the pool's runner
    assert pool.runner.opened == 0, pool.runner.opened
    assert set(pool.runner.served) == servers, pool.runner.served
    assert sum(pool.runner.served.values()) == 6 and all("error" not in r for r in results.values())
    # each session's device was readied before its first candidate, and that candidate says how long it took
    assert sum("warm_s" in r["rpc"] for r in results.values()) == 2, [r["rpc"] for r in results.values()]
    for r in results.values():
        phases = r["rpc"]
        assert phases["run_s"] == pytest.approx(phases["operands_s"] + phases["check_s"] + phases["time_s"], abs=0.01)


def test_a_forking_server_measures_too():
    """--fork (TVM's default server): each session a fork of its server instead of a fresh Python.
    The launcher spawns by default, since CUDA failed in forked sessions on the H100 (2026-11-25);
    on the CPU, forking works and starts sessions sooner."""
    launch = rpc_pool.Launch(["0"], KEY + "-fork", host="127.0.0.1", port=0, server_port=0, say=lambda line: None,
                             ready_s=90, spawn=False)
    try:
        launch.start()
        assert not any("--no-fork" in s.proc.args for s in launch.servers)
        wait_until(lambda: len(launch.tracker.servers()) == 1, 60, "the server registered")
        remote = rpc.Remote(launch.tracker, target="llvm", builder="tests.rpc_kernels:build", timeout_s=60, wait_s=30)
        pool, results = run_pool(remote, jobs_of(configs(2)))
        assert len(results) == 2 and all(r["rel_err"] <= harness.TOLERANCE and r["gflops"] > 0
                                         for r in results.values()), results
    finally:
        launch.stop()
    assert not [s.proc.pid for s in launch.servers if s.proc and s.proc.poll() is None]


def test_a_timeout_and_a_crashing_kernel_cost_their_candidates_only(launch, tracker):
    """A kernel that sleeps past --timeout fails as a timeout; one that aborts crashes its
    server's session twice (it is retried once) and fails; TVM's servers stop serving after
    that, the launcher restarts them, and every other candidate is measured. (The bounds leave room
    for a loaded host's restarts: a fresh-clone CI run once took over 100 s.)"""
    cfgs = configs(5)
    cfgs[1]["raster"], cfgs[3]["raster"] = HANG, CRASH
    remote = rpc.Remote(tracker, target="llvm", builder="tests.rpc_kernels:build", timeout_s=3, wait_s=45)
    started = time.monotonic()
    _, results = run_pool(remote, jobs_of(cfgs), timeout_s=150)
    by_raster = {json.loads(k)["raster"]: r for k, r in results.items()}
    assert by_raster[HANG]["error"].startswith("timeout: still running"), by_raster[HANG]
    assert by_raster[CRASH]["error"].startswith("rpc: the session was lost twice"), by_raster[CRASH]
    ok = [r for k, r in results.items() if json.loads(k)["raster"] not in (HANG, CRASH)]
    assert len(ok) == 3 and all("error" not in r for r in ok), ok
    assert time.monotonic() - started < 140  # no candidate waits out a hung one's session (15 s) more than once
    wait_until(lambda: len(launch.tracker.servers()) == 2, 60, "the crashed servers restarted")
    assert any("no longer registered" in line for line in launch.lines), launch.lines


def test_a_server_killed_mid_sweep_costs_nothing(launch, tracker):
    """The server measuring a slow candidate is killed (its whole process group, SIGKILL): the
    candidate is measured again on the other server, the sweep finishes, the launcher restarts
    the dead server."""
    cfgs = configs(6)
    cfgs[0]["raster"] = SLOW
    remote = rpc.Remote(tracker, target="llvm", builder="tests.rpc_kernels:build", timeout_s=30, wait_s=45)
    killed = []

    def kill_the_slow_ones_server(pool):
        def slow_running():
            return [server for server, c in pool.runner.in_flight() if c.result["config"]["raster"] == SLOW]

        wait_until(slow_running, 60, "the slow candidate running")
        port = int(slow_running()[0].rsplit(":", 1)[1])
        server = next(s for s in launch.servers if s.port == port)
        os.killpg(server.proc.pid, signal.SIGKILL)
        killed.append(port)

    pool, results = run_pool(remote, jobs_of(cfgs), timeout_s=100, during=kill_the_slow_ones_server)
    assert killed and pool.runner.retried == 1
    assert all("error" not in r for r in results.values()), results
    wait_until(lambda: len(launch.tracker.servers()) == 2, 60, "the killed server restarted")
    assert any("exited (killed by SIGKILL)" in line for line in launch.lines), launch.lines


def test_a_session_takes_candidates_in_its_window_or_once_after_a_slow_start(monkeypatch):
    """Sessions of 6 s, a window of 3 (one 3 s timeout before the end): a session that opened in
    time takes candidates until 3 s; one whose start alone took longer takes its first candidate
    until 4.5 s (half its last timeout), never later: a candidate started at 5.7 s of a 6 s
    session failed at once as a timeout (the tests, on a loaded host)."""
    now = [0.0]
    monkeypatch.setattr(rpc.time, "monotonic", lambda: now[0])
    quick, slow = rpc._Session(None, "s", started=0.0, ready=0.2), rpc._Session(None, "s", started=0.0, ready=3.5)
    for t, quick_takes, slow_takes in ((1.0, True, True), (3.0, True, True), (3.6, False, True),
                                       (4.4, False, True), (4.6, False, False), (5.7, False, False)):
        now[0] = t
        assert quick.takes_candidates(3.0, 6.0) is quick_takes and slow.takes_candidates(3.0, 6.0) is slow_takes, t
    slow.measured, now[0] = 1, 3.6
    assert not slow.takes_candidates(3.0, 6.0)  # it has measured one: renewed as any other


def test_a_renewed_session_lets_its_old_one_go_first(launch, tracker, monkeypatch):
    """A client renews its session near the session's end; by then nothing may hold the old
    one: a server serves one session at a time, so a session still held keeps its server busy
    until its timeout (seen on the H100: every renewal waited a session's time). Checked at
    each request for a session: the thread's earlier sessions are gone."""
    held, asked = [], []
    request = rpc.Tracker.request

    def watched(self, *args, **kwargs):
        gc.collect()
        mine = [r for thread, r in asked if thread == threading.get_ident()]
        held.extend(r for r in mine if r() is not None)
        session, server = request(self, *args, **kwargs)
        asked.append((threading.get_ident(), weakref.ref(session)))
        return session, server

    monkeypatch.setattr(rpc.Tracker, "request", watched)
    # fast candidates (a fraction of a second each) and sessions of 2 x 3 s: renewed after 3 s
    monkeypatch.setattr(rpc, "SESSION_TIMEOUTS", 2)
    remote = rpc.Remote(tracker, target="llvm", builder="tests.rpc_kernels:build", timeout_s=3, wait_s=45)
    cfgs = configs(24)
    _, results = run_pool(remote, jobs_of(cfgs, repeat=1), timeout_s=100)
    assert all("error" not in r for r in results.values()), [r["error"] for r in results.values() if "error" in r]
    per_thread = collections.Counter(thread for thread, _ in asked)
    assert max(per_thread.values()) >= 2, f"no session was renewed: {per_thread}"
    assert not held, f"{len(held)} sessions still held when their thread asked for another"


# --- the command: resuming, one-line errors -------------------------------------------------------


def sweep_argv(tracker: rpc.Tracker, log: Path, *extra: str) -> list[str]:
    return ["--step", "11", "--shapes", "256x512x128,128x256x128", "--candidates", "3", "--repeat", "2",
            "--workers", "1", "--tracker", str(tracker), "--key", tracker.key, "--rpc-target", "llvm",
            "--log", str(log), *extra]


def test_an_interrupted_sweep_resumes_from_its_log(tracker, tmp_path, capsys):
    log = tmp_path / "sweep.jsonl"
    assert sweep.main(sweep_argv(tracker, log, "--confirm", "0")) == 0
    first = log.read_text().splitlines()
    assert len(first) == 6 and all("error" not in json.loads(line) for line in first)
    # Cut off after two results, the third line half written; a lost candidate is measured again.
    lost = {**json.loads(first[2]), "error": "rpc: no server under key"}
    for k in ("rel_err", "median_ms", "gflops"):
        lost.pop(k)
    log.write_text("\n".join(first[:2] + [json.dumps(lost), first[3][:40]]))
    capsys.readouterr()
    assert sweep.main(sweep_argv(tracker, log, "--resume", "--confirm", "0")) == 0
    out, err = capsys.readouterr()
    assert "2 candidates measured before (--resume)" in err and "4 candidates over 2 shapes" in err
    lines = log.read_text().splitlines()
    assert len(lines) == 4 + 4, "the four candidates not in the log measured, each logged once"
    again = [json.loads(line) for line in lines[4:]]
    assert json.loads(first[2])["config"] in [r["config"] for r in again]  # the lost one, measured again
    logged = [json.loads(line) for line in lines[:2]] + again
    for shape in ("256x512x128", "128x256x128"):  # the best of old and new results together
        M, N, K = map(int, shape.split("x"))
        best = max((r for r in logged if (r["M"], r["N"], r["K"]) == (M, N, K)), key=lambda r: r["gflops"])
        line = next(ln for ln in out.splitlines() if ln.startswith(f"best at {shape}:"))
        assert f"{best['gflops'] / 1e3:.1f} TFLOPS" in line
        assert f"block_m={best['config']['block_m']} block_n={best['config']['block_n']}" in line


def test_the_finalists_are_timed_again_in_turns_on_one_server(tracker, tmp_path, capsys, monkeypatch):
    """Every shape's candidates within reach (FINALIST_WITHIN 100%) are its finalists: each
    shape's are timed again in one session, in turns, 3 rounds; the log keeps each finalist's
    rounds and marks one pick, which the command reports. Resumed from that log, nothing is
    measured again but the finalists, built again for it (their libraries went with the pool)."""
    monkeypatch.setattr(sweep, "FINALIST_WITHIN", 1.0)
    log = tmp_path / "sweep.jsonl"
    assert sweep.main(sweep_argv(tracker, log, "--confirm", "3")) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    first = [r for r in rows if r["stage"] == "shape"]
    again = [r for r in rows if r["stage"] == "confirm"]
    assert len(first) == 6 and all("error" not in r for r in rows), rows
    assert f"confirming: 6 finalists of 2 shapes, 3 rounds of {sweep.CONFIRM_SAMPLES} samples each" in err
    for shape in ((256, 512, 128), (128, 256, 128)):
        mine = [r for r in again if (r["M"], r["N"], r["K"]) == shape]
        assert sorted(json.dumps(r["config"]) for r in mine) == sorted(
            json.dumps(r["config"]) for r in first if (r["M"], r["N"], r["K"]) == shape)
        assert len({r["rpc"]["server"] for r in mine}) == 1  # one session, one server
        assert all(len(r["rounds_ms"]) == 3 and r["gflops"] > 0 and r["first_gflops"] > 0 for r in mine)
        [kept] = [r for r in mine if r["pick"]]
        assert kept is max(mine, key=lambda r: r["gflops"])
        line = next(ln for ln in out.splitlines() if ln.startswith(f"best at {'x'.join(map(str, shape))}:"))
        assert f"{kept['gflops'] / 1e3:.1f} TFLOPS (timed again in 3 rounds" in line
    capsys.readouterr()
    assert sweep.main(sweep_argv(tracker, log, "--confirm", "3", "--resume")) == 0
    err = capsys.readouterr().err
    assert "6 candidates measured before (--resume)" in err and "0 candidates over 2 shapes" in err
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 6 + 6 + 6 and all(r["stage"] == "confirm" and "error" not in r for r in rows[12:]), rows[12:]


def test_the_sweep_and_its_build_processes_leave_torch_unimported(tracker, tmp_path):
    """python -m steps.sweep never uses torch (tvm_ffi imports it wherever it is installed):
    neither it nor its spawned build processes import a stand-in torch put on their path, which
    marks each process that imports it."""
    stand_in = tmp_path / "site" / "torch"
    stand_in.mkdir(parents=True)
    marks = tmp_path / "marks"
    marks.mkdir()
    (stand_in / "__init__.py").write_text(
        f"import os, sys\nopen(os.path.join({str(marks)!r}, str(os.getpid())), 'w').write(' '.join(sys.argv))\n"
        "raise ImportError('a stand-in')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "steps.sweep", "--step", "11", "--shapes", "256x512x128", "--candidates", "2",
           "--repeat", "1", "--workers", "2", "--tracker", str(tracker), "--key", tracker.key, "--rpc-target", "llvm",
           "--confirm", "0"]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "best at 256x512x128" in done.stdout
    assert not [m.read_text() for m in marks.iterdir()]
    subprocess.run([sys.executable, "-c", "import tvm"], env=env, cwd=ROOT, check=True, timeout=120)
    assert len(list(marks.iterdir())) == 1  # the stand-in is found where nothing keeps it out


def test_finalists_whose_session_dies_are_tried_once_more_then_fail(tracker, tmp_path):
    """A confirmation's fault costs its group, as a candidate's costs the candidate: a kernel
    that crashes the session is put back once, then fails; the runner goes on."""
    cfgs = configs(2)
    cfgs[1]["raster"] = CRASH
    paths = [rpc.build_job("tests.rpc_kernels:build", STEP.number, SIZE, c, "sm_90", str(tmp_path))["path"]
             for c in cfgs]
    runner = rpc.RemoteRunner(tracker, "cpu", 30, 45)
    results = []
    try:
        rows = [{"M": SIZE[0], "N": SIZE[1], "K": SIZE[2], "config": c, "gflops": 1.0} for c in cfgs]
        runner.submit(rpc.Finalists((SIZE,), paths, SIZE, rows, repeat=1, rounds=2))
        runner.collect(1, lambda job, res: results.append((job, res)))
    finally:
        runner.close()
    [(job, res)] = results
    assert job == (SIZE,) and res["error"].startswith("rpc: the session was lost twice"), res
    assert runner.retried == 1 and not any(os.path.exists(p) for p in paths)


@pytest.mark.parametrize("argv, words", [
    (["--tracker", "127.0.0.1", "--key", "k"], ["--tracker", "not HOST:PORT"]),
    (["--key", "k"], ["--key", "give --tracker"]),
    (["--tracker", "127.0.0.1:9"], ["--tracker needs --key"]),
    (["--timeout", "5"], ["--timeout", "--tracker"]),
    (["--resume"], ["--resume", "--log"]),
    (["--tracker", "127.0.0.1:9", "--key", "k", "--dry-run"], ["--dry-run", "drop --tracker"]),
])
def test_bad_rpc_options_are_one_line(argv, words, capsys):
    assert sweep.main(["--step", "11", "--shapes", "256x512x128", *argv]) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", *words)


@pytest.mark.parametrize("argv, words", [
    (["--tracker", "h:1", "--key", "k"], ["--tracker", "--tune"]),
    (["--tune", "--tracker", "h:1"], ["--tracker and --key go together"]),
    (["--tune", "--key", "k"], ["--tracker and --key go together"]),
    (["--tune", "--tracker", "h", "--key", "k"], ["--tracker", "not HOST:PORT"]),
])
def test_bad_rpc_options_of_metaschedules_tuning_are_one_line(argv, words, capsys):
    from steps.commands import cublas

    assert cublas.main(argv) == 2
    one_line_error(capsys.readouterr().err, "steps.cublas", *words)


def test_an_unreachable_tracker_is_one_line(capsys):
    port = rpc_pool.free_port("127.0.0.1", 0)  # free: nothing listens there
    started = time.monotonic()
    assert sweep.main(["--step", "11", "--shapes", "256x512x128", "--tracker", f"127.0.0.1:{port}", "--key", "k"]) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", "cannot reach the RPC tracker", str(port))
    assert time.monotonic() - started < rpc.CONNECT_S + 5


def test_no_server_for_the_key_is_one_line_after_the_wait(tracker, capsys):
    started = time.monotonic()
    assert sweep.main(["--step", "11", "--shapes", "256x512x128", "--tracker", str(tracker), "--key", "nobody",
                       "--wait", "1", "--rpc-target", "llvm"]) == 2
    one_line_error(capsys.readouterr().err, "steps.sweep", "no RPC server under key 'nobody'", "after 1 s")
    assert time.monotonic() - started < 10


# --- the launcher's command line, and MetaSchedule's runner -----------------------------------------


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc), for checking that a stop stopped them all."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_launcher_prints_how_to_use_it_and_ctrl_c_stops_everything(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        # Started with SIGINT ignored, as a background job of a shell is (and as it inherited
        # from some test's process in a full CI run): Ctrl-C must stop it all the same.
        proc = subprocess.Popen([sys.executable, "-m", "steps.rpc_pool", "--gpus", "0-1", "--key", "cli",
                                 "--host", "127.0.0.1", "--port", "0", "--server-port", "0"],
                                stdout=stdout, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    started = set()
    try:
        wait_until(lambda: "Ctrl-C stops" in out.read_text() or proc.poll() is not None, 120, "the launcher ready")
        text = out.read_text()
        assert proc.poll() is None, text
        assert "key 'cli': 2 servers, GPUs 0,1" in text and "--tracker 127.0.0.1:" in text and "--key cli" in text
        host, port = rpc.parse_address(text.split("--tracker ")[1].split()[0])
        assert len(rpc.Tracker(host, port, "cli").servers()) == 2
        started = _descendants(proc.pid)
        assert len(started) >= 3  # the tracker and two servers, and the servers' own workers
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert "stopped the tracker and servers started here" in out.read_text()
        assert not [pid for pid in started if _alive(pid)]
    finally:
        for pid in [proc.pid, *started]:
            if _alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("argv, words", [
    (["--key", "k"], ["--gpus"]),
    (["--gpus", "x", "--key", "k"], ["not a GPU list"]),
    (["--gpus", "0", "--key", "k", "--tracker", "h:1", "--port", "9191"], ["--port", "--tracker"]),
    (["--gpus", "0", "--key", "k", "--tracker", "h"], ["not HOST:PORT"]),
])
def test_bad_launcher_options_are_one_line(argv, words, capsys):
    assert rpc_pool.main(argv) == 2
    one_line_error(capsys.readouterr().err, "steps.rpc_pool", *words)


@pytest.mark.parametrize("text, gpus", [("0,1,2,3", ["0", "1", "2", "3"]), ("0-3", ["0", "1", "2", "3"]),
                                        ("4,6-7", ["4", "6", "7"])])
def test_gpu_lists(text, gpus):
    assert rpc_pool.gpu_list(text) == gpus


@pytest.mark.parametrize("text", ["", "a", "0,,1", "1-", "0,0"])
def test_bad_gpu_lists(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        rpc_pool.gpu_list(text)


def test_metaschedule_measures_on_every_server(tracker, monkeypatch):
    """RPCRunner uses one server unless max_workers says otherwise: ours says how many there are."""
    from tvm.s_tir.meta_schedule import runner

    from steps.measure import metaschedule

    made = []
    monkeypatch.setattr(runner, "RPCRunner", lambda config, max_workers: made.append((config, max_workers)))
    metaschedule.rpc_runner(tracker, timeout_s=30)
    [(config, workers)] = made
    assert workers == 2
    assert (config.tracker_host, config.tracker_port, config.tracker_key) == (tracker.host, tracker.port, KEY)
    assert config.session_timeout_sec == 30


# --- the GPU: the same winner as the local sweep ---------------------------------------------------------


@pytest.mark.gpu
def test_a_sweep_through_a_tracker_picks_the_local_sweeps_winner():
    """Step 11's candidates at 2048^3, swept on this GPU locally and through a tracker with one
    server on it: the same winner (or, where two candidates are within 3% of each other, a
    winner within 3% of the local one), and the winners' times within 10%."""
    arch = harness.gpu_arch()
    size = (2048, 2048, 2048)
    sm_count = int(__import__("tvm").cuda(0).multi_processor_count)
    local_log = io.StringIO()
    local = sweep.sweep_shapes(STEP, [size], arch, 10, 6, 4, local_log, sm_count)
    launch = rpc_pool.Launch(["0"], "gpu-test", host="127.0.0.1", port=0, server_port=0, say=print)
    try:
        launch.start()
        remote = rpc.Remote(launch.tracker, timeout_s=120, wait_s=60)
        over_rpc = sweep.sweep_shapes(STEP, [size], arch, 10, 6, 4, None, sm_count, remote)
    finally:
        launch.stop()
    a, b = local[size]["best"], over_rpc[size]["best"]
    # Both confirmed their finalists (the local path in a build worker, under the GPU lock).
    again = [json.loads(line) for line in local_log.getvalue().splitlines() if '"confirm"' in line]
    if len(again) > 1:
        assert [r["config"] for r in again if r["pick"]] == [a["config"]]
        assert len(a["rounds_ms"]) == len(b["rounds_ms"]) == sweep.CONFIRM_ROUNDS, (a, b)
    if a["config"] != b["config"]:
        assert b["gflops"] >= 0.97 * a["gflops"], (a, b)
    assert abs(b["gflops"] / a["gflops"] - 1) < 0.10, (a, b)


# --- handing candidates out by size (rpc._Work): each server draws few sizes' inputs ---------


class _Item:
    def __init__(self, size, name):
        self.size, self.name = size, name


def _names(work, client, n):
    return [work.get(0.01, client).name for _ in range(n)]


def test_a_client_keeps_to_the_sizes_it_took_and_others_take_the_rest():
    work = rpc._Work()
    for size, name in [("s1", "a1"), ("s1", "a2"), ("s2", "b1"), ("s1", "a3"), ("s2", "b2"), ("s3", "c1")]:
        work.put(_Item(size, name))
    assert work.get(0.01, 1).name == "a1"        # the oldest: nobody holds a size yet
    assert work.get(0.01, 2).name == "b1"        # not s1's next: client 1 took s1, s2 is nobody's
    assert _names(work, 1, 2) == ["a2", "a3"]    # client 1 keeps to s1
    assert work.get(0.01, 3).name == "c1"        # a third client: the size nobody took
    assert work.get(0.01, 3).name == "b2"        # then, rather than idle, the oldest of another's
    with pytest.raises(rpc.queue.Empty):
        work.get(0.01, 1)


def test_a_client_whose_session_ended_holds_no_size():
    work = rpc._Work()
    for size, name in [("s1", "a1"), ("s2", "b1"), ("s1", "a2")]:
        work.put(_Item(size, name))
    assert work.get(0.01, 1).name == "a1"
    work.forget(1)
    assert work.get(0.01, 2).name == "b1"
    assert work.get(0.01, 2).name == "a2"        # s1 is nobody's again: the oldest
    work.claim(2, "s9")
    work.put(_Item("s8", "x"))
    work.put(_Item("s9", "y"))
    assert work.get(0.01, 2).name == "y"         # a claimed size first


def test_the_work_queue_waits_for_a_put_and_hands_back_in_order_without_a_client():
    work = rpc._Work()
    t = threading.Timer(0.05, lambda: work.put(_Item("s", "late")))
    t.start()
    started = time.monotonic()
    assert work.get(2.0, 1).name == "late" and time.monotonic() - started < 1.5
    work.put(_Item("s", "p"))
    work.put(_Item("t", "q"))
    assert work.get_nowait().name == "p" and work.get(0.01).name == "q"
    with pytest.raises(rpc.queue.Empty):
        work.get_nowait()
