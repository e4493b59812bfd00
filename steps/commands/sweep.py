"""python -m steps.sweep --step N: search a step's config space on the GPU, keep the best per size.

    python -m steps.sweep --step 10 --sizes 512 1024 2048 --write   # tune; write schedules/tuned/step10.json
    python -m steps.sweep --step 7 --sizes 1024 --dry-run           # list the valid candidates; no GPU needed

Three stages, so the search stays in minutes, each around the `--top` best of the one
before: (1) the tile — block_m x block_n, thread_m x thread_n — with the step's other fields
at their defaults; (2) block_k and pipeline stages; (3) every combination of the remaining
fields the step has (pad_a, warp_m, raster, unroll_k; step 8's transpose_a stays 0, measured
slower everywhere). Fields a step lacks are skipped. Invalid candidates (threads per block, shared memory per block for the
arch, divisibility, vector alignment) are rejected by the config's own ``validate`` before
anything is built. Candidates are built and loaded in parallel worker processes; only one
worker at a time holds the GPU for the correctness check and the timing (a lock), so timings
do not overlap. A candidate that fails to build, load, run or verify is logged and skipped;
a worker whose CUDA context a fault has poisoned exits and is replaced.

``--write`` writes ``schedules/tuned/stepN.json`` (atomically; step 10 loads its file), and
``--log`` keeps every candidate's result as JSON lines.

Step 11 is swept over a list of shapes instead, one stage per shape: the candidates are its
module's ``sweep_candidates`` (step 10's own config and the shape rule's neighbourhood,
schedules/shape_rule.py; ``--candidates`` per shape), all shapes' jobs in one pool, so the
workers never wait on a stage. Then each shape's finalists (``finalists``: its FINALISTS
fastest within FINALIST_WITHIN of the best) are timed again in turns, ``--confirm`` rounds in
one worker or on one server (harness.alternating_timings), and ``pick`` keeps the fastest:
one pass of 10 samples let a single low reading choose the winner (issue 33).
Its shapes: ``--shapes 256x256x16384,2048x64x2048``, ``--shape-file bench/shapes.toml`` (the
published set; read by default when it exists and no shape is given), ``--shape`` and ``--sizes``.
``--write`` merges the best per shape into ``schedules/tuned/step11.json`` (other shapes'
entries stay), with the measured speed of the rule's own pick beside it, so the table also
says how good the rule is:

    python -m steps.sweep --step 11 --shape-file bench/shapes.toml --write --log logs/sweep11.jsonl

On every GPU, of this host or others: ``--tracker HOST:PORT --key KEY`` measures on the TVM RPC
servers registered under KEY (``python -m steps.rpc_pool`` starts a tracker and one server per
GPU). The candidates still build here, in the same parallel processes, and are exported as
shared libraries; each server loads, checks (against float64, as here) and times the ones
its client thread hands it, one session per batch (steps/measure/rpc.py). The results, the
log and ``--write`` are the local path's; ``--write`` records the servers' GPU. A candidate
lost with its server is measured again once; one still running after
``--timeout`` seconds fails; no server under the key is one line and exit 2 after ``--wait``.

``--resume --log LOG`` runs a sweep that was cut off again: the candidates LOG already holds
are not measured again, and their logged results are ranked with the new ones.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import dataclasses
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path


def _keep_torch_out() -> None:
    """python -m steps.sweep never uses torch, and tvm_ffi imports it wherever it is installed:
    2.6 s of the sweep's 5.2 s of imports on the H100's host, paid again by each spawned build
    process. So where this process is that command, or one of its spawned processes (whose main
    module is the same, run as __mp_main__), a None in sys.modules makes `import torch` an
    ImportError, which tvm_ffi takes as "no torch". Any other importer (the tests, the bench) is
    left alone, and so is a process that has imported torch already."""
    for name in ("__main__", "__mp_main__"):
        if getattr(getattr(sys.modules.get(name), "__spec__", None), "name", None) == "steps.sweep":
            sys.modules.setdefault("torch", None)
            return


_keep_torch_out()  # before TVM's import below

import schedules  # noqa: E402
from schedules import ConfigError  # noqa: E402

from .. import results  # noqa: E402
from ..measure import dtypes, harness, rpc  # noqa: E402
from ..report.pipes import quiet_broken_pipe  # noqa: E402
from . import options  # noqa: E402

# Searched in three stages, each around the best few of the one before.
STAGES = (
    ("tile", {"block_m": (32, 64, 128, 256), "block_n": (32, 64, 128, 256),
              "thread_m": (4, 8), "thread_n": (4, 8)}),
    ("pipeline", {"block_k": (8, 16, 32, 64), "stages": (2, 3, 4)}),
    ("details", {"pad_a": (0, 4), "warp_m": (2, 4, 8), "raster": (1, 8), "unroll_k": (0, 1),
                 "fragment_buffers": (1, 2), "barriers": (1, 2)}),
)
THREADS = (64, 128, 256, 384, 512)  # fewer starve the SM of warps; more leave < 64 registers each
# The Hopper rungs (steps 15 on: schedules/transforms/wgmma.py) have a space of their own: the tile (one or
# two consumer warpgroups, wgmma's n from 64 to 256), the TMA ring's depth, the raster group, and from
# step 20 the blocks a persistent grid launches, (step 22) the TMA store's chunk and (step 27) the share
# of the pairs it may stream. Step 21's clusters are two blocks side by side in N, the one shape written.
HOPPER_STAGES = (
    ("tile", {"block_m": (64, 128, 192, 256), "block_n": (64, 128, 192, 256)}),
    ("pipeline", {"stages": (2, 3, 4, 5, 6), "promote": (1, 2, 4)}),  # promote: step 19's
    ("details", {"raster": (1, 4, 8, 16), "ctas": (128, 132), "chunk": (8192, 16384),
                 "stream_share": (1, 2, 4, 8, 16)}),
)
MIN_BLOCKS = 64  # fewer thread blocks than half of an H100's 132 SMs: not worth timing
TUNED_DIR = Path(schedules.__file__).resolve().parent / "tuned"
SHAPE_FILE = Path(schedules.__file__).resolve().parent.parent / "bench" / "shapes.toml"
TOP = 4  # configs carried from one stage to the next (staged sweeps)
NEIGHBOURHOOD = 20  # candidates per shape for a step with sweep_candidates (step 11)
# ~40 shapes x 25 take about 5 minutes on an H100 (12 build workers); issue 51's scaling run takes 50
# (a fixed ~14 s start would cap 4 servers near 3.3x at 25), and the rule's neighbourhood has ~50.
MAX_NEIGHBOURHOOD = 64
# A shape sweep's confirmation round (sweep_shapes): its FINALISTS fastest within FINALIST_WITHIN
# of the fastest are timed again, CONFIRM_ROUNDS rounds in turns; the fastest of them wins (pick).
CONFIRM_ROUNDS = 10
CONFIRM_SAMPLES = 5  # per finalist and round: 50 in all, against the first pass's 10
FINALISTS = 10
FINALIST_WITHIN = 0.10


def candidates(step, M: int, N: int, K: int, arch: str, space: dict, base) -> list:
    """Every valid config of `step` that varies `space` (fields the step has) around `base`."""
    names = {f.name for f in dataclasses.fields(step.Config)}
    axes = {k: v for k, v in space.items() if k in names}
    out, seen = [], set()
    for values in itertools.product(*axes.values()):
        try:
            cfg = dataclasses.replace(base, **dict(zip(axes, values)))
            cfg.validate(M, N, K)
            cfg.check_shared_memory(arch)
        except (ConfigError, TypeError, ValueError):
            continue
        blocks = -(-M // cfg.block_m) * -(-N // cfg.block_n)
        if cfg.threads not in THREADS or blocks < MIN_BLOCKS or cfg in seen:
            continue
        seen.add(cfg)
        out.append(cfg)
    return out


# --- worker processes: build, load, then check and time under the GPU lock ------------------

_gpu_lock = None


def _init_worker(lock, scratch: str) -> None:
    global _gpu_lock
    _gpu_lock = lock
    # A worker compiles hundreds of kernels: NVRTC's precompiled header saves ~0.55 s of each
    # (schedules/lowering/nvrtc.py). It is a ~210 MB file in $TMPDIR, which NVRTC removes only at a normal
    # exit: here it goes in the pool's own folder, removed when the pool closes.
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = None
    schedules.lowering.nvrtc.precompile_headers()


def job_config(cfg, dtype: str = "fp32") -> dict:
    """A candidate as its job (and log) carries it: its fields, and for 16-bit inputs "dtype"
    (a 16-bit config has it as a field; the job carries it either way, so a worker knows the
    inputs' dtype from the job alone)."""
    d = cfg.as_dict()
    if dtype != "fp32":
        d["dtype"] = dtype
    return d


def config_of(step, cfg_dict: dict):
    """A job's config dict back as `step`'s Config ("dtype" kept where the Config has it)."""
    names = {f.name for f in dataclasses.fields(step.Config)}
    return step.Config.from_dict({k: v for k, v in cfg_dict.items() if k != "dtype" or k in names})


def _dtype_kw(cfg_dict: dict) -> dict:
    dtype = cfg_dict.get("dtype", "fp32")
    return {} if dtype == "fp32" else {"dtype": dtype}


def _evaluate(step_number: int, size, cfg_dict: dict, arch: str, repeat: int) -> dict:
    M, N, K = size
    step = schedules.get_step(step_number)
    cfg = config_of(step, cfg_dict)
    dtype = cfg_dict.get("dtype", "fp32")
    out = {"M": M, "N": N, "K": K, "config": cfg_dict}
    started = time.monotonic()
    try:
        lib = schedules.build(step, M, N, K, arch=arch, config=cfg, **_dtype_kw(cfg_dict))
        func = lib["main"]  # loading compiles the CUDA (NVRTC) here, outside the lock
    except Exception as exc:
        return {**out, "error": "build: " + harness._one_line(exc)}
    built = time.monotonic()
    with _gpu_lock:
        # Where the time went, as an RPC sweep's log says it (build_s; its servers' load and run):
        # the build, the wait for the GPU, and the check and timing on it.
        out.update(build_s=round(built - started, 3), wait_s=round(time.monotonic() - built, 3))
        locked = time.monotonic()
        try:
            runner = harness.KernelRunner(repeat=repeat)
            err = _check(runner, func, size, dtype)
            timing = runner.time(lib, M, N, K, dtype)
        except Exception as exc:
            # A CUDA fault poisons this process's context: report, then let the pool replace us.
            out["error"] = "run: " + harness._one_line(exc)
            print(json.dumps(out), file=sys.stderr, flush=True)
            os._exit(3)
        out["measure_s"] = round(time.monotonic() - locked, 3)
    out.update(rel_err=err, median_ms=timing.median_ms, gflops=timing.gflops(M, N, K))
    if not err <= harness.tolerance(step, dtype):
        out["error"] = f"wrong result: relative error {err:.3g}"
    return out


def _confirm(step_number: int, size, rows: list[dict], arch: str, repeat: int, rounds: int) -> dict:
    """A shape's finalists (their first results, `rows`) built again here, then timed in turns
    under the GPU lock (harness.alternating_timings), on harness.PLACEMENTS allocations of the
    inputs: rpc.Finalists's result. Not checked again: the same configs passed the check when
    first measured."""
    M, N, K = size
    step = schedules.get_step(step_number)
    out = {"M": M, "N": N, "K": K}
    try:
        libs = [schedules.build(step, M, N, K, arch=arch, config=config_of(step, r["config"]), **_dtype_kw(r["config"]))
                for r in rows]
        dtype = rows[0]["config"].get("dtype", "fp32") if rows else "fp32"
        for lib in libs:
            lib["main"]  # loading compiles the CUDA (NVRTC) here, outside the lock
    except Exception as exc:
        return {**out, "error": "build: " + harness._one_line(exc)}
    import numpy as np

    with _gpu_lock:
        try:
            runner = harness.KernelRunner(repeat=repeat)
            rng = np.random.default_rng()
            arg_sets = []
            for _ in range(harness.PLACEMENTS):  # the same inputs drawn again, at addresses of their own
                a, b = harness.random_operands(M, N, K, rng, dtype)
                arg_sets.append([runner._tensor(a, dtype), runner._tensor(b, dtype),
                                 runner._tensor(dtypes.zeros((M, N), dtype), dtype)])
            timings = harness.alternating_timings([lib.mod for lib in libs], runner.dev, arg_sets, repeat, rounds)
        except Exception as exc:
            out["error"] = "run: " + harness._one_line(exc)
            print(json.dumps(out), file=sys.stderr, flush=True)
            os._exit(3)  # a CUDA fault poisons this process's context, as in _evaluate
    return {**out, "finalists": [harness.confirmed(r, t) for r, t in zip(rows, timings)]}


def _confirm_died(job: tuple, why: str) -> dict:
    _, (M, N, K), _, _, _, _ = job
    return {"M": M, "N": N, "K": K, "error": why}


_operands: dict = {}
OPERAND_CACHE = 2  # sizes whose inputs a worker keeps: jobs come shape by shape


def _check(runner, func, size, dtype: str = "fp32") -> float:
    """The harness's check, with this worker's random inputs and float64 reference computed
    once per size (the reference at 2048 costs more host time than the kernel); only the
    last OPERAND_CACHE sizes are kept, so a sweep over dozens of shapes stays in memory."""
    import numpy as np

    key = (size, dtype)
    if key not in _operands:
        while len(_operands) >= OPERAND_CACHE:
            del _operands[next(iter(_operands))]
        a, b = harness.random_operands(*size, np.random.default_rng(), dtype)
        _operands[key] = (runner._tensor(a, dtype), runner._tensor(b, dtype), dtypes.reference(a, b, dtype))
    return runner.verify(func, *_operands[key], dtype)


def _died(job: tuple, why: str) -> dict:
    """The result of a sweep job whose worker died: the candidate, failed."""
    _, (M, N, K), cfg, _, _ = job
    return {"M": M, "N": N, "K": K, "config": cfg, "error": why}


class Pool:
    """A process pool that is rebuilt when a worker dies, so one bad kernel costs one candidate.

    Each job is ``evaluate(*job)`` in a worker, which holds ``_gpu_lock`` while it uses the GPU;
    ``died(job, why)`` is the result of a job whose worker died twice. The defaults are the
    sweep's; steps.bench passes its own."""

    def __init__(self, workers: int, evaluate=None, died=None):
        self.workers = workers
        self.evaluate = evaluate or _evaluate
        self.died = died or _died
        # Spawned, not forked: on a GPU machine TVM's compile asks the CUDA runtime for the
        # device, and CUDA does not survive a fork of a process that used it. Forked from a fork
        # server that had imported TVM, every build failed with cudaErrorInitializationError
        # on the H100's host (2026-11-25); so each worker imports for itself (~1.5 s here).
        self.ctx = multiprocessing.get_context("spawn")
        self.scratch = tempfile.mkdtemp(prefix="sweep-workers-")  # the workers' $TMPDIR
        # SIGTERM (a timeout, a kill) then ends this process as Ctrl-C does, through the finally
        # that closes the pool: otherwise the workers' files (NVRTC's headers) stay behind.
        self._sigterm = _exit_on_sigterm()
        self._new()

    def _new(self):
        # A fresh lock with each pool: a worker that died holding the old one (os._exit after a
        # fault, a segfault) never released it, and every later job would wait on it forever.
        self.lock = self.ctx.Lock()
        self.pool = futures.ProcessPoolExecutor(self.workers, mp_context=self.ctx,
                                                initializer=_init_worker, initargs=(self.lock, self.scratch))

    def submit(self, fn, *args) -> futures.Future:
        """One call in a worker, outside ``run``'s jobs (no retry: a dead worker fails it)."""
        return self.pool.submit(fn, *args)

    def start(self) -> Pool:
        """Start every worker now (its imports, ~3-10 s) rather than at the first job, so that
        they start while the caller does something else (an RPC sweep asks its servers)."""
        for _ in range(self.workers):
            self.pool.submit(_ready)
        return self

    def run(self, jobs: list[tuple], on_result, evaluate=None, died=None) -> None:
        """Evaluate every job, calling on_result(job, result) as each finishes; `evaluate` and
        `died` in place of the pool's own, for these jobs.

        A dead worker breaks the whole pool and fails every job still in flight, and which
        job killed it is unknown: so those jobs are retried together in a fresh pool; the ones
        in flight when that pool breaks too are retried once more, each alone, and only a job
        that breaks a pool by itself is reported as failed. (A kernel that kills its worker
        before it can report, as a misaligned address can, breaks the pool in both shared
        rounds and would otherwise take the jobs running beside it down with it.)"""
        evaluate, died = evaluate or self.evaluate, died or self.died
        broken = self._round(evaluate, jobs, list(range(len(jobs))), on_result)
        if broken:
            broken = self._round(evaluate, jobs, broken, on_result)
        for i in broken:
            if self._round(evaluate, jobs, [i], on_result):
                on_result(jobs[i], died(jobs[i], "worker died (CUDA fault?) twice"))

    def confirm(self, step_number: int, arch: str, repeat: int, rounds: int, groups: list[tuple],
                on_result) -> None:
        """Each (size, finalists' results) of `groups` timed again in turns (_confirm), calling
        on_result((size,), result) as each group finishes (result: rpc.Finalists's)."""
        jobs = [(step_number, size, rows, arch, repeat, rounds) for size, rows in groups]
        self.run(jobs, lambda job, res: on_result((job[1],), res), evaluate=_confirm, died=_confirm_died)

    def _round(self, evaluate, jobs: list[tuple], indices: list[int], on_result) -> list[int]:
        """Run these jobs in the pool; return those lost to a dead worker (the pool is renewed)."""
        submitted = {self.pool.submit(evaluate, *jobs[i]): i for i in indices}
        broken = []
        for fut in futures.as_completed(submitted):
            i = submitted[fut]
            try:
                on_result(jobs[i], fut.result())
            except futures.process.BrokenProcessPool:
                broken.append(i)
        if broken:
            self.pool.shutdown(cancel_futures=True)
            self._new()
        return sorted(broken)

    def stop_workers(self):
        """End the workers and remove their files, from any thread: every job has its result
        by now, so they are ended rather than waited for. (Ending 32 build processes and their
        headers, 6.7 GB, took ~2.5 s on the H100's host: an RPC sweep does it once the last
        candidate is built, while the servers still measure.)"""
        workers = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            process.terminate()
        for process in workers:
            process.join(10)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def close(self):
        """stop_workers, and SIGTERM's handler back as it was (the main thread's to do)."""
        self.stop_workers()
        if self._sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None


def _ready() -> None:
    """A job that only makes its worker exist (Pool.start)."""


def _exit_on_sigterm():
    """Make SIGTERM raise SystemExit (status 143, as the signal's) in the main thread; returns
    the handler it replaced, or None where it changed nothing (not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def _build_died(job: tuple, why: str) -> dict:
    """The result of a build job (rpc.build_job's arguments) whose build process died."""
    _, _, (M, N, K), cfg, _, _ = job
    return {"M": M, "N": N, "K": K, "config": cfg, "error": "build: " + why}


class BuildPool(Pool):
    """The build processes of an RPC sweep (rpc.build_job's), and the check's library
    (rpc.build_checker), built in one of them as soon as the servers' arch is known: a
    sweep asks for it before it lists its candidates, so it is ready before the first one is."""

    def __init__(self, workers: int):
        super().__init__(workers, evaluate=rpc.build_job, died=_build_died)
        self.checker_directory = tempfile.mkdtemp(prefix="rpc-check-")
        self._checker = None

    def checker(self, device: str, arch: str) -> futures.Future:
        """A Future of the check's library's path, the same one every call."""
        if self._checker is None:
            self._checker = self.submit(rpc.build_checker, device, arch, self.checker_directory)
        return self._checker

    def close(self):
        # Not at stop_workers: a session opened after the builds (a renewal, a retry) uploads it.
        super().close()
        shutil.rmtree(self.checker_directory, ignore_errors=True)


class RemotePool:
    """The Pool's ``run``, ``confirm`` and ``close``, measuring on the servers under a tracker's key.

    Candidates build and export here, in parallel build processes (a Pool running
    ``rpc.build_job``, in a thread of its own); each built one goes to the servers
    (``rpc.RemoteRunner``: a client thread per server, a session per batch), and results come
    back to ``on_result`` in the calling thread, as the Pool's do. With `confirm`, the libraries
    stay once measured, for ``confirm`` to send a shape's finalists to one server again; with
    `stop_builds`, the build processes end as soon as the run's last candidate is built (no
    build follows it: the servers go on measuring)."""

    def __init__(self, workers: int, remote: rpc.Remote, arch: str, builds: BuildPool | None = None,
                 stop_builds: bool = False, confirm: bool = False):
        self.remote = remote
        self.stop_builds = stop_builds
        self.keep = confirm
        self.libraries: dict = {}  # log_key -> the library of a candidate built and measured
        self.builds_stopped = False
        self.directory = tempfile.mkdtemp(prefix="sweep-rpc-")
        self.builds = builds or BuildPool(workers)
        self.runner = rpc.RemoteRunner(remote.tracker, remote.device, remote.timeout_s, remote.wait_s, arch,
                                       sessions=remote.take_sessions(), checker=self.builds.checker(remote.device, arch))

    def run(self, jobs: list[tuple], on_result) -> None:
        builder = threading.Thread(target=self._build, args=(jobs,), daemon=True, name="sweep-builds")
        builder.start()
        self.runner.collect(len(jobs), on_result)
        builder.join()

    def _build(self, jobs: list[tuple]) -> None:
        builds = [(self.remote.build_spec, number, size, cfg, arch, self.directory)
                  for number, size, cfg, arch, _ in jobs]
        job_of = {id(b): job for b, job in zip(builds, jobs)}
        reported = set()

        def built(build, res):
            job = job_of[id(build)]
            reported.add(id(build))
            if "path" not in res:
                self.runner.report(job, res)
                return
            number, size, cfg, _, repeat = job
            path = res.pop("path")
            if self.keep:
                self.libraries[log_key(size, cfg)] = path
            self.runner.submit(rpc.Candidate(job, path, size, res, repeat, harness.tolerance(number), keep=self.keep))

        try:
            self.builds.run(builds, built)
            if self.stop_builds:  # every candidate is built: the servers go on measuring
                self.builds.stop_workers()
                self.builds_stopped = True
                MILESTONES["builds stopped"] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - every job must get a result, or run() waits forever
            for build in builds:
                if id(build) not in reported:
                    self.runner.report(job_of[id(build)], _build_died(build, harness._one_line(exc)))

    def confirm(self, step_number: int, arch: str, repeat: int, rounds: int, groups: list[tuple],
                on_result) -> None:
        """Pool.confirm's, on the servers: each group's libraries to one server (rpc.Finalists).
        A finalist without a library (measured by an earlier run, --resume) is built first."""
        missing = [(size, r["config"]) for size, rows in groups for r in rows
                   if log_key(size, r["config"]) not in self.libraries]
        if missing and not self.builds_stopped:
            def built(build, res):
                _, _, size, cfg, _, _ = build
                if "path" in res:
                    self.libraries[log_key(size, cfg)] = res["path"]

            self.builds.run([(self.remote.build_spec, step_number, size, cfg, arch, self.directory)
                             for size, cfg in missing], built)
        count = 0
        for size, rows in groups:
            paths = [self.libraries.get(log_key(size, r["config"])) for r in rows]
            if None in paths:
                M, N, K = size
                self.runner.report((size,), {"M": M, "N": N, "K": K, "error": "build: a finalist failed to build again"})
            else:
                self.runner.submit(rpc.Finalists((size,), paths, size, rows, repeat, rounds))
            count += 1
        self.runner.collect(count, on_result)

    def close(self):
        try:
            self.builds.close()
            self.runner.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _pool(workers: int, remote: rpc.Remote | None, arch: str, builds: BuildPool | None = None,
          stop_builds: bool = False, confirm: bool = False):
    if remote is None:
        return Pool(workers)
    return RemotePool(workers, remote, arch, builds, stop_builds=stop_builds, confirm=confirm)


# --- resuming: the candidates a --log already holds --------------------------------------------


def log_key(size, config: dict) -> tuple:
    """A candidate's identity in a sweep's log: its size and config."""
    return (*size, json.dumps(config, sort_keys=True))


def measured_in_log(step, path: Path) -> dict:
    """{log_key: result} of the step's candidates in a sweep's --log, for --resume: every
    verdict on the kernel counts (timed, wrong, failed to build or run), a candidate lost to
    the measuring machinery ("rpc: ...": a server that died, no server) does not, and is
    measured again. A line an interrupted run cut short is skipped."""
    try:
        lines = path.read_text().splitlines() if path.exists() else []
    except OSError as exc:
        raise options.UsageError(f"{path}: {harness._one_line(exc)}") from None
    found, unreadable = {}, 0
    for line in lines:
        try:
            res = json.loads(line)
            key = log_key((res["M"], res["N"], res["K"]), res["config"])
        except (ValueError, KeyError, TypeError):
            unreadable += 1
            continue
        if (res.get("step") != step.number or res.get("stage") == "confirm"
                or str(res.get("error", "")).startswith("rpc:")):
            continue  # a confirmation's rows too: a resumed sweep times its finalists again
        found[key] = {k: v for k, v in res.items() if k not in ("step", "stage", "rule_pick")}
    if unreadable:
        print(f"{path}: {unreadable} unreadable lines skipped", file=sys.stderr, flush=True)
    return found


def _split_measured(size, cfgs: list[dict], measured: dict | None) -> tuple[list[dict], list[dict]]:
    """(configs still to measure, results the log already holds) of these candidates."""
    if not measured:
        return cfgs, []
    todo, resumed = [], []
    for cfg in cfgs:
        res = measured.get(log_key(size, cfg))
        if res is None:
            todo.append(cfg)
        else:
            resumed.append(res)
    return todo, resumed


# --- the search --------------------------------------------------------------------------


def sweep(step, sizes, arch: str, repeat: int, top: int, workers: int, log, remote: rpc.Remote | None = None,
          measured: dict | None = None, builds: BuildPool | None = None, dtype: str = "fp32") -> dict:
    """The staged search at each size: {size: best result}. `remote`: measure on a tracker's
    servers, building in `builds` (started early) or a new BuildPool; `measured`: results a
    --log already holds (measured_in_log), not measured again."""
    best = {}
    pool = _pool(workers, remote, arch, builds)
    start = time.time()
    try:
        for size in sizes:
            seeds, ranked, done = [_default_config(step, size, dtype)], [], set()
            for label, space in stages_of(step):
                cfgs = []
                for seed in seeds:
                    for c in candidates(step, *size, arch, space, seed):
                        key = json.dumps(c.as_dict(), sort_keys=True)
                        if key not in done:
                            done.add(key)
                            cfgs.append(c)
                ranked = sorted(ranked + _run_stage(pool, step, size, cfgs, arch, repeat, label, log, start, measured,
                                                    dtype), key=lambda r: -r["gflops"])
                seeds = [config_of(step, r["config"]) for r in ranked[:top]]
            if ranked:
                best[size] = ranked[0]
                print(f"best at {options._size(size)}: {ranked[0]['gflops'] / 1e3:.1f} TFLOPS "
                      f"{options._config_text(config_of(step, ranked[0]['config']))}", flush=True)
            else:
                print(f"no valid candidate ran at {options._size(size)}", flush=True)
    finally:
        pool.close()
    return best


def stages_of(step) -> tuple:
    """The staged search of `step`'s config space: the Hopper rungs' own, or the CUDA-core one."""
    return HOPPER_STAGES if step.arch is not None else STAGES


def _default_config(step, size, dtype: str = "fp32"):
    return step.default_config(*size) if dtype == "fp32" else step.default_config(*size, dtype)


def _run_stage(pool, step, size, cfgs, arch, repeat, label, log, start, measured=None, dtype: str = "fp32") -> list[dict]:
    todo, resumed = _split_measured(size, [job_config(c, dtype) for c in cfgs], measured)
    if resumed:
        print(f"[{label} {options._size(size)}] {len(resumed)} of {len(cfgs)} candidates measured before (--resume)",
              file=sys.stderr, flush=True)
    ok = [r for r in resumed if "error" not in r]
    total = len(todo)
    count = [0]

    def on_result(job, res):
        count[0] += 1
        if log:
            log.write(json.dumps({"step": step.number, "stage": label, **res}) + "\n")
            log.flush()
        best = max((r["gflops"] for r in ok), default=0.0)
        if "error" in res:
            note = f"failed: {res['error'][:100]}"
        else:
            ok.append(res)
            best = max(best, res["gflops"])
            note = f"{res['gflops'] / 1e3:5.1f} TFLOPS"
        cfg_text = " ".join(f"{k}={v}" for k, v in res["config"].items() if k != "vector")
        print(f"[{label} {count[0]}/{total} {options._size(size)} {time.time() - start:5.0f}s] {note:<28} "
              f"best {best / 1e3:5.1f}  {cfg_text}", file=sys.stderr, flush=True)

    pool.run([(step.number, size, c, arch, repeat) for c in todo], on_result)
    return sorted(ok, key=lambda r: -r["gflops"])


def sweep_shapes(step, shapes, arch: str, repeat: int, per_shape: int, workers: int, log,
                 sm_count: int, remote: rpc.Remote | None = None, measured: dict | None = None,
                 builds: BuildPool | None = None, rounds: int = CONFIRM_ROUNDS) -> dict:
    """One stage per shape, all in one pool: the step's ``sweep_candidates`` at each shape;
    then, with `rounds`, each shape's finalists timed again in turns (``finalists``), the
    fastest of them kept (``pick``).
    Returns {shape: {"best": result, "rule": result of the rule's own pick or None}}.
    `remote`, `measured` and `builds` as for ``sweep``."""
    from schedules import shape_rule

    jobs, rule_pick = [], {}
    ok: dict = {size: [] for size in shapes}
    resumed = 0
    for size in shapes:
        cfgs = step.module.sweep_candidates(*size, arch, sm_count, per_shape)
        rule_pick[size] = shape_rule.rule_config(*size, sm_count, arch).as_dict()
        todo, before = _split_measured(size, [c.as_dict() for c in cfgs], measured)
        ok[size] += [r for r in before if "error" not in r]
        resumed += len(before)
        jobs += [(step.number, size, c, arch, repeat) for c in todo]
    if resumed:
        print(f"{resumed} candidates measured before (--resume)", file=sys.stderr, flush=True)
    print(f"{len(jobs)} candidates over {len(shapes)} shapes", file=sys.stderr, flush=True)
    count, start = [0], time.time()
    MILESTONES["candidates listed"] = time.monotonic()

    def on_result(job, res):
        count[0] += 1
        MILESTONES.setdefault("first result", time.monotonic())
        MILESTONES["last result"] = time.monotonic()
        size = job[1]
        if log:
            log.write(json.dumps({"step": step.number, "stage": "shape",
                                  "rule_pick": res["config"] == rule_pick[size], **res}) + "\n")
            log.flush()
        if "error" in res:
            note = f"failed: {res['error'][:100]}"
        else:
            ok[size].append(res)
            note = f"{res['gflops'] / 1e3:5.1f} TFLOPS"
        cfg_text = " ".join(f"{k}={v}" for k, v in res["config"].items() if k != "vector")
        print(f"[{count[0]}/{len(jobs)} {options._size(size)} {time.time() - start:5.0f}s] {note:<28} {cfg_text}",
              file=sys.stderr, flush=True)

    confirmed: dict = {}  # size -> its finalists' rows, timed again

    def on_confirmed(job, res):
        (size,) = job
        MILESTONES["last confirmed"] = time.monotonic()
        if "error" in res:
            print(f"[confirm {len(confirmed)}/{len(groups)} {options._size(size)}] failed: {res['error'][:100]}; "
                  "the first timings stand", file=sys.stderr, flush=True)
            return
        rows = res["finalists"]
        kept = pick(rows)
        confirmed[size] = rows
        for r in rows:
            r["pick"] = r is kept
            if log:
                log.write(json.dumps({"step": step.number, "stage": "confirm",
                                      "rule_pick": r["config"] == rule_pick[size], **r}) + "\n")
        if log:
            log.flush()
        print(f"[confirm {len(confirmed)}/{len(groups)} {options._size(size)} {time.time() - start:5.0f}s] "
              f"{len(rows)} finalists, {rounds} rounds: {kept['gflops'] / 1e3:5.1f} TFLOPS (first "
              f"{kept['first_gflops'] / 1e3:5.1f}) {options._config_text(step.Config.from_dict(kept['config']))}",
              file=sys.stderr, flush=True)

    groups: list = []
    # Over RPC, the libraries stay for the finalists' second timing; the build processes stop
    # once all are built, unless a resumed sweep's finalists may need building.
    pool = _pool(workers, remote, arch, builds, stop_builds=not measured, confirm=rounds > 0)
    try:
        pool.run(jobs, on_result)
        if rounds:
            groups = [(size, rows) for size in shapes if len(rows := finalists(ok[size])) > 1]
            # The longest groups first, so that none is left alone at the end while others idle.
            groups.sort(key=lambda g: -len(g[1]) * max(harness.TARGET_SAMPLE_MS, g[1][0]["median_ms"]))
            MILESTONES["finalists listed"] = time.monotonic()
            print(f"confirming: {sum(len(rows) for _, rows in groups)} finalists of {len(groups)} shapes, "
                  f"{rounds} rounds of {CONFIRM_SAMPLES} samples each", file=sys.stderr, flush=True)
            pool.confirm(step.number, arch, CONFIRM_SAMPLES, rounds, groups, on_confirmed)
    finally:
        pool.close()
    MILESTONES["pool closed"] = time.monotonic()
    # Where the wall time went, beside the per-candidate times in --log: the start (imports, the
    # servers' probe, the candidates), the first result (build processes and sessions starting),
    # the stream of results, the confirmation, the close.
    # The clock's start as epoch seconds: tools/rpc_scaling.py adds the imports before it and the
    # exit after it.
    origin = MILESTONES.get("start", MILESTONES["candidates listed"])
    epoch = time.time() - (time.monotonic() - origin)
    print(f"time line, s from the command's start after its imports (epoch {epoch:.2f}): "
          + ", ".join(f"{k} {v - origin:.1f}" for k, v in MILESTONES.items() if k != "start"),
          file=sys.stderr, flush=True)
    best = {}
    for size in shapes:
        if not ok[size]:
            print(f"no valid candidate ran at {options._size(size)}", flush=True)
            continue
        best[size] = ranked_best(ok[size], confirmed.get(size), rule_pick[size])
        top, rule = best[size]["best"], best[size]["rule"]
        rule_text = f"rule's pick {rule['gflops'] / top['gflops']:.0%} of it" if rule else "rule's pick failed"
        how = f"timed again in {rounds} rounds; first {top['first_gflops'] / 1e3:.1f}" if size in confirmed else "one pass"
        print(f"best at {options._size(size)}: {top['gflops'] / 1e3:.1f} TFLOPS ({how}) "
              f"{options._config_text(step.Config.from_dict(top['config']))} ({rule_text})", flush=True)
    return best


def finalists(results: list[dict]) -> list[dict]:
    """A shape's results worth timing again: the FINALISTS fastest, those within FINALIST_WITHIN
    of the fastest. The net is wide because one pass of 10 samples can read a candidate 9% slow:
    in issue 33's runs on two H200s (2026-11-26), the 6 fastest within 5% left out the winner that
    the other runs agreed on in 4 of 294 (run, shape) pairs, twice deciding a winner; the 10
    fastest within 10% (8.4 a shape) would have left it out in none, and in the five runs since
    (~350 finalists a run, 27.5 s of server time) no two picks were more than 2.5% apart."""
    ranked = sorted(results, key=lambda r: -r["gflops"])
    return [r for r in ranked[:FINALISTS] if r["gflops"] >= (1 - FINALIST_WITHIN) * ranked[0]["gflops"]]


def pick(rows: list[dict]) -> dict:
    """The finalist a sweep keeps: the fastest once timed in turns (the median of its rounds).

    No tie-break: on two H200s (issue 33) the finalists' rounds repeated within ~0.2% in a run,
    and two runs' picks were the same or within 0.8% of each other in both runs' timings on all
    43 shapes; a rule giving a finalist within 0.5% of the fastest to the candidate list's order
    made more picks the same (40, not 32) but one pair of picks 1.0% apart, as a pick on the
    band's edge went one way in one run and the other way in the next. Wider bands, tried on five
    later runs' confirmations (420 pairs of a shape's picks): 75 pairs differ without a band, 25
    with 1%, 6 with 3% and still 6 with 8%, one shape's candidate on the edge each time; and a 3%
    band gives away up to 2.8% (results/nvidia-h200/evidence/rpc_scaling_tries.txt, session 6). Why: steady
    in a process, the order is not across processes. One compiled kernel reads ~1.9% faster or
    slower in one process than in another, or than a byte-identical copy of itself in the same
    process, the slower switching with the process's history (session 7; what sets it is not known),
    so finalists within ~2% of each other may trade places from run to run whatever the rule."""
    return max(rows, key=lambda r: r["gflops"])


def ranked_best(results: list[dict], confirmed: list[dict] | None, rule_pick: dict) -> dict:
    """{"best", "rule"} of a shape: the confirmation's pick where its finalists were timed again
    (``confirmed``: their rows, the pick's marked), else the fastest of the one pass; the rule's
    own pick's result as the confirmation timed it where it was a finalist."""
    rule = next((r for r in (confirmed or []) if r["config"] == rule_pick), None)
    rule = rule or next((r for r in results if r["config"] == rule_pick), None)
    if confirmed and any(r.get("pick") for r in confirmed):
        return {"best": next(r for r in confirmed if r.get("pick")), "rule": rule}
    return {"best": max(results, key=lambda r: r["gflops"]), "rule": rule}


def write_tuned_shapes(step, best: dict, env: dict, path: Path) -> None:
    """Merge a shape sweep's winners into the step's table: swept shapes replaced, others kept."""
    entries = {}
    if path.exists():
        for entry in json.loads(path.read_text()).get("configs", []):
            entries[(entry["M"], entry["N"], entry["K"])] = entry
    for (M, N, K), r in best.items():
        entry = {"M": M, "N": N, "K": K, "config": r["best"]["config"], "gflops": r["best"]["gflops"]}
        if r["rule"] is not None:
            entry["rule_gflops"] = r["rule"]["gflops"]
        entries[(M, N, K)] = entry
    doc = {
        "step": step.number,
        "generated_by": f"python -m steps.sweep --step {step.number} --shape-file ... --write",
        "environment": env,
        "configs": [entries[size] for size in sorted(entries)],
    }
    results.write_json_atomic(path, doc)


def best_from_log(step, path: Path) -> dict:
    """A shape sweep's winners from its --log (e.g. of a run cut off by a time limit):
    {shape: {"best": result, "rule": the rule's pick's result or None}}, as the sweep ranked
    them (ranked_best): a shape's confirmation pick where the log has one, else its fastest."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise options.UsageError(f"{path}: {harness._one_line(exc)}") from None
    first: dict = {}
    confirmed: dict = {}
    rule_pick: dict = {}
    # A confirmation's rows are consecutive lines, each config once: a row after another line,
    # or repeating a config, starts another confirmation of its shape.
    previous = None  # the last line's (stage, size)
    for line in lines:
        try:
            res = json.loads(line)
            size = (res["M"], res["N"], res["K"])
        except (ValueError, KeyError, TypeError):
            raise options.UsageError(f"{path}: not a sweep log line: {line[:60]!r}") from None
        if res.get("step") != step.number or "error" in res or res.get("stage") not in ("shape", "confirm"):
            previous = None
            continue
        if res.get("rule_pick"):
            rule_pick[size] = res["config"]
        if res["stage"] == "shape":
            first.setdefault(size, []).append(res)
        else:  # a later confirmation of the shape (a resumed sweep's) replaces an earlier one
            if previous != ("confirm", size) or any(r["config"] == res["config"] for r in confirmed[size]):
                confirmed[size] = []
            confirmed[size].append(res)
        previous = (res["stage"], size)
    return {size: ranked_best(rows, confirmed.get(size), rule_pick.get(size)) for size, rows in first.items()}


def parse_shape_list(text: str) -> list[tuple[int, int, int]]:
    """'256x256x16384,2048x64x2048' -> [(256, 256, 16384), (2048, 64, 2048)]."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            shape = tuple(int(p) for p in parts)
        except ValueError:
            shape = ()
        if len(shape) != 3 or min(shape) < 1:
            raise argparse.ArgumentTypeError(f"not a shape MxNxK of positive integers: {item.strip()!r}")
        shapes.append(shape)
    return shapes


def read_shape_file(path: Path) -> list[tuple[int, int, int]]:
    """The shapes of a TOML shape set, in file order: every table with integer M, N, K, or a
    `shape` / `shapes` entry of [M, N, K] lists or "MxNxK" strings, at any depth."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise options.UsageError(f"{path}: {harness._one_line(exc)}") from None
    shapes: list = []

    def one(value):
        if isinstance(value, str):
            shapes.extend(parse_shape_list(value))
        elif isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value):
            shapes.append(tuple(value))
        elif isinstance(value, list):
            for v in value:
                one(v)
        elif isinstance(value, dict):  # [[shape]] tables
            walk(value)

    def walk(node):
        if isinstance(node, dict):
            if all(isinstance(node.get(k), int) for k in "MNK"):
                shapes.append((node["M"], node["N"], node["K"]))
            for key, value in node.items():
                if key in ("shape", "shapes"):
                    one(value)
                elif isinstance(value, (dict, list)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    try:
        walk(data)
    except argparse.ArgumentTypeError as exc:
        raise options.UsageError(f"{path}: {exc}") from None
    if not shapes:
        raise options.UsageError(f"{path}: no shapes found (tables with M, N, K, or shape = [M, N, K])")
    return list(dict.fromkeys(shapes))


def write_tuned(step, best: dict, env: dict, path: Path) -> None:
    doc = {
        "step": step.number,
        "generated_by": f"python -m steps.sweep --step {step.number}",
        "environment": env,
        "configs": [
            {"M": M, "N": N, "K": K, "config": r["config"], "gflops": r["gflops"]}
            for (M, N, K), r in sorted(best.items())
        ],
    }
    results.write_json_atomic(path, doc)


MAX_WORKERS = 12
REPEAT = 10  # samples per candidate: a ranking needs fewer than a reported measurement


def default_workers(remote: bool = False) -> int:
    """One build process per CPU; at most MAX_WORKERS for the local path, whose processes also
    hold a CUDA context each on the one GPU (hundreds of MB) and take turns timing anyway. Over
    RPC they only build: every CPU (issue 33's first run, 12 processes at ~2 s of NVRTC a
    candidate, fell behind two servers; with the precompiled header, 0.42 s, they do not)."""
    cpus = os.cpu_count() or 1
    return max(1, cpus if remote else min(MAX_WORKERS, cpus))


def parser(prog: str):
    # The options a sweep honours: no --seed (each worker draws its own inputs), no --save.
    p = options.new_parser(prog, "search a step's configs on the GPU; keep the best per size")
    options.add_problem_options(p)
    options.add_repeat_option(p, REPEAT)
    options.add_arch_option(p)
    options.add_dtype_option(p)
    p.add_argument("--shapes", type=parse_shape_list, action="extend", default=[], metavar="MxNxK,...",
                   help="comma-separated shapes, e.g. 256x256x16384,2048x64x2048 (repeatable)")
    p.add_argument("--shape-file", type=Path, default=None, metavar="TOML",
                   help="a shape set (step 11; default: bench/shapes.toml where it exists and no shape is given)")
    p.add_argument("--candidates", type=options._positive, default=NEIGHBOURHOOD,
                   help=f"configs measured per shape, step 11 (default: {NEIGHBOURHOOD}; at most {MAX_NEIGHBOURHOOD})")
    p.add_argument("--confirm", type=options._non_negative, default=CONFIRM_ROUNDS, metavar="ROUNDS",
                   help=f"step 11: time each shape's finalists (up to {FINALISTS}, within {FINALIST_WITHIN:.0%}% of "
                        f"the best) again, in turns, this many rounds (default: {CONFIRM_ROUNDS}; 0: keep the "
                        "first pass's best)")
    p.add_argument("--from-log", type=Path, default=None, metavar="JSONL",
                   help="step 11: no timing; the best per shape from a sweep's --log (with --write: its table)")
    p.add_argument("--step", type=int, required=True, help="the step whose config space to search")
    p.add_argument("--top", type=options._positive, default=TOP,
                   help=f"configs carried into each next stage (default: {TOP}; not for step 11)")
    p.add_argument("--workers", type=options._positive, default=None,
                   help=f"build processes (default: the CPU count, at most {MAX_WORKERS} unless --tracker; "
                        f"{default_workers()} here)")
    p.add_argument("--write", action="store_true", help="write schedules/tuned/stepN.json")
    p.add_argument("--dry-run", action="store_true", help="list the valid stage-1 candidates and stop")
    p.add_argument("--log", type=Path, default=None, help="append every candidate's result (JSON lines)")
    p.add_argument("--resume", action="store_true",
                   help="skip the candidates --log already holds (a sweep cut off, run again), ranking their "
                        "results with the new ones")
    p.add_argument("--tracker", type=options.tracker_address, default=None, metavar="HOST:PORT",
                   help="measure on the RPC servers registered at this tracker (python -m steps.rpc_pool starts "
                        "them); builds stay here")
    p.add_argument("--key", default=None, help="with --tracker: the key the servers registered under")
    p.add_argument("--timeout", type=options._positive, default=rpc.TIMEOUT_S,
                   help=f"with --tracker: seconds each candidate has at least on its server (default: "
                        f"{rpc.TIMEOUT_S}); a hung one is stopped with its session, {rpc.SESSION_TIMEOUTS}x that")
    p.add_argument("--wait", type=options._positive, default=rpc.WAIT_S,
                   help=f"with --tracker: seconds to wait for a server under --key (default: {rpc.WAIT_S})")
    # CPU builds of the same candidates, measured over RPC: the tests' way to drive the distribution.
    p.add_argument("--rpc-target", choices=sorted(rpc.TARGETS), default="cuda", help=argparse.SUPPRESS)
    return p



def _remote(args) -> rpc.Remote | None:
    """The RPC options, checked together (no network yet): a Remote, or None for the local GPU."""
    if args.tracker is None:
        if args.key is not None:
            raise options.UsageError("--key names the servers at a tracker: give --tracker HOST:PORT too")
        if args.timeout != rpc.TIMEOUT_S or args.wait != rpc.WAIT_S or args.rpc_target != "cuda":
            raise options.UsageError("--timeout and --wait are for measuring over RPC: give --tracker and --key")
        return None
    if not args.key:
        raise options.UsageError("--tracker needs --key: the key the servers registered under "
                                 "(python -m steps.rpc_pool --key ...)")
    if args.dry_run or args.from_log is not None:
        raise options.UsageError("--dry-run and --from-log time nothing: drop --tracker")
    return rpc.Remote(rpc.Tracker(*args.tracker, args.key), target=args.rpc_target, timeout_s=args.timeout,
                      wait_s=args.wait)


def _server_arch(prog: str, requested: str | None, remote: rpc.Remote, info: dict) -> str:
    """The arch to build for: --arch, else the servers' GPU's (as one of them reports it)."""
    if remote.device != "cuda":
        return requested or options.DEFAULT_ARCH
    arch, note = options.resolve_arch(requested, info.get("arch"), timing=True)
    if note:
        print(f"{prog}: note: {note}", file=sys.stderr)
    return arch


MILESTONES: dict = {}  # name -> time.monotonic(), for the time line a sweep by shape prints


@quiet_broken_pipe
def main(argv=None) -> int:
    prog = "python -m steps.sweep"
    MILESTONES.clear()
    MILESTONES["start"] = time.monotonic()  # after the imports (5.2 s on the H100's host, 2.6 of them torch's)
    builds = None  # an RPC sweep's build processes, started before its servers are asked
    try:
        args = parser(prog).parse_args(argv)
        step = schedules.get_step(args.step)
        if step.number < 4:
            raise options.UsageError("steps 1-3 have nothing worth sweeping; give --step 4 or later")
        dtype = step.check_dtype(args.dtype)  # a step with no such form: its one line, exit 2
        remote = _remote(args)
        if dtype != "fp32" and remote is not None:
            raise options.UsageError(f"--tracker checks fp32 inputs on its servers; a {dtype} sweep runs on the "
                                     "local GPU (drop --tracker)")
        if dtype != "fp32" and args.write:
            raise options.UsageError(f"--write records fp32 configs in schedules/tuned/; a {dtype} sweep prints "
                                     "and logs its best (--log) instead")
        if args.workers is None:
            args.workers = default_workers(remote is not None)
        if args.resume and args.log is None:
            raise options.UsageError("--resume reads the candidates measured before from --log: give --log")
        if args.resume and (args.dry_run or args.from_log is not None):
            raise options.UsageError("--resume skips candidates of a sweep that times: "
                                     "not with --dry-run or --from-log")
        if remote is None:  # over RPC, the servers' GPU decides, once they are reached (below)
            arch = options.pick_arch(prog, args.arch, timing=not args.dry_run)
            step.build_arch(arch)  # a Hopper rung on another arch: one line
        by_shape = hasattr(step.module, "sweep_candidates")
        # Options of the other kind of sweep: an error, not silently ignored (a value other
        # than the default is what argparse can tell apart).
        if not by_shape and (args.shapes or args.shape_file or args.candidates != NEIGHBOURHOOD
                             or args.confirm != CONFIRM_ROUNDS):
            raise options.UsageError(f"--shapes, --shape-file, --candidates and --confirm are for a step swept by "
                                     f"shape (11), not step {step.number}")
        if by_shape and args.top != TOP:
            raise options.UsageError(f"--top is for the staged sweeps (steps 4-10), not step {step.number}")
        if args.candidates > MAX_NEIGHBOURHOOD:
            raise options.UsageError(f"--candidates must be at most {MAX_NEIGHBOURHOOD}, got {args.candidates}")
        if args.from_log is not None:
            if not by_shape:
                raise options.UsageError(f"--from-log is for a step swept by shape (11), not step {step.number}")
            best = best_from_log(step, args.from_log)
            for size, r in best.items():
                print(f"best at {options._size(size)}: {r['best']['gflops'] / 1e3:.1f} TFLOPS "
                      f"{options._config_text(step.Config.from_dict(r['best']['config']))}")
            if args.write and best:
                path = TUNED_DIR / f"step{step.number}.json"
                write_tuned_shapes(step, best, {"from_log": str(args.from_log)}, path)
                print(f"wrote {path}")
            return 0 if best else options.EXIT_FAILED
        sizes = _sweep_shapes_requested(args, by_shape)
        for size in sizes:  # here, not as a candidate rejected by validate: the size is wrong
            try:
                schedules.config.check_sizes(*size)
            except ConfigError as exc:
                raise ConfigError(f"{options._size(size)}: {exc}") from None
        if args.dry_run and by_shape:
            return _dry_run_shapes(step, sizes, arch, args.candidates)
        if args.dry_run:
            for size in sizes:
                cfgs = candidates(step, *size, arch, stages_of(step)[0][1], _default_config(step, size, dtype))
                print(f"{options._size(size)}: {len(cfgs)} valid stage-1 (tile) candidates")
                for c in cfgs:
                    print("  " + options._config_text(c))
            return 0
        if remote is not None:
            # The build processes start (their imports) while the servers are asked what they are.
            builds = BuildPool(args.workers).start()
            info = remote.connect()  # bounded: an unreachable tracker or no server is one line
            MILESTONES["servers asked"] = time.monotonic()
            print(f"{info['servers']} servers under key {remote.tracker.key!r} at {remote.tracker}"
                  + (f": {info['gpu']} ({info['arch']})" if "gpu" in info else f" ({remote.target} builds)"),
                  file=sys.stderr, flush=True)
            arch = _server_arch(prog, args.arch, remote, info)
            step.build_arch(arch)
            builds.checker(remote.device, arch)  # the check's library builds while candidates are listed
        elif not harness.gpu_present():
            raise options.UsageError("a sweep times kernels and needs a CUDA GPU; none was found (try --dry-run)")
        measured = measured_in_log(step, args.log) if args.resume else None
    except (options.UsageError, ConfigError, rpc.TrackerError) as exc:
        if builds is not None:
            builds.close()
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE
    except BaseException:  # Ctrl-C or SIGTERM while the servers are asked
        if builds is not None:
            builds.close()
        raise
    log = _open_log(args.log) if args.log else None
    try:
        if by_shape:
            sm_count = _sm_count() if remote is None else _server_sm_count(info)
            best = sweep_shapes(step, sizes, arch, args.repeat, args.candidates, args.workers, log, sm_count,
                                remote, measured, builds, rounds=args.confirm)
        else:
            best = sweep(step, sizes, arch, args.repeat, args.top, args.workers, log, remote, measured, builds, dtype)
    finally:
        if builds is not None:
            builds.close()  # closed already with its sweep's pool, unless that was never made
        if log:
            log.close()
    if args.write and best:
        env = harness.environment() if remote is None else rpc.environment(remote, info)
        path = TUNED_DIR / f"step{step.number}.json"
        (write_tuned_shapes if by_shape else write_tuned)(step, best, env, path)
        print(f"wrote {path}")
    return 0 if len(best) == len(sizes) else options.EXIT_FAILED


def _sweep_shapes_requested(args, by_shape: bool) -> list[tuple[int, int, int]]:
    """--sizes, --shape, --shapes and --shape-file together, in that order, without repeats;
    for a step swept by shape with none of them, bench/shapes.toml where it exists."""
    given = args.sizes is not None or args.shape or args.shapes or args.shape_file
    shape_file = args.shape_file
    if by_shape and not given and SHAPE_FILE.exists():
        shape_file = SHAPE_FILE
    sizes = options.requested_shapes(args) if (args.sizes is not None or args.shape or not (args.shapes or shape_file)) else []
    sizes += args.shapes
    if shape_file is not None:
        sizes += read_shape_file(shape_file)
    return list(dict.fromkeys(sizes))


def _sm_count() -> int:
    import tvm

    return int(tvm.cuda(0).multi_processor_count)


def _server_sm_count(info: dict) -> int:
    """The servers' GPU's SM count (the shape rule's), or the rule's own for CPU builds."""
    from schedules import shape_rule

    return int(info.get("sm_count") or shape_rule.SM_COUNT)


def _open_log(path: Path):
    """--log for appending; a last line an interrupted run cut short is ended first, so the
    next result starts a line of its own."""
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            cut_short = f.read(1) != b"\n"
    except OSError:  # no file yet, or an empty one
        cut_short = False
    log = open(path, "a")
    if cut_short:
        log.write("\n")
    return log


def _dry_run_shapes(step, sizes, arch: str, per_shape: int) -> int:
    """The candidates a shape sweep would measure, with the model's prediction; no GPU."""
    from schedules import shape_rule

    total = 0
    for size in sizes:
        cfgs = step.module.sweep_candidates(*size, arch, shape_rule.SM_COUNT, per_shape)
        total += len(cfgs)
        print(f"{options._size(size)}: {len(cfgs)} candidates; rule: "
              f"{shape_rule.describe(shape_rule.rule_config(*size, arch=arch), *size)}")
        for c in cfgs:
            tflops = 2 * size[0] * size[1] * size[2] / shape_rule.predicted_seconds(c, *size) / 1e12
            print(f"  model {tflops:5.1f} TFLOPS  {options._config_text(c)}")
    print(f"{total} candidates over {len(sizes)} shapes")
    return 0
