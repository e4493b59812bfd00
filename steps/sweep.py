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
"""

from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import itertools
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import schedules
from schedules import ConfigError

from . import cli, harness, results

# Searched in three stages, each around the best few of the one before.
STAGES = (
    ("tile", {"block_m": (32, 64, 128, 256), "block_n": (32, 64, 128, 256),
              "thread_m": (4, 8), "thread_n": (4, 8)}),
    ("pipeline", {"block_k": (8, 16, 32, 64), "stages": (2, 3, 4)}),
    ("details", {"pad_a": (0, 4), "warp_m": (2, 4, 8), "raster": (1, 8), "unroll_k": (0, 1)}),
)
THREADS = (64, 128, 256, 512)  # fewer starve the SM of warps; more leave < 64 registers each
MIN_BLOCKS = 64  # fewer thread blocks than half of an H100's 132 SMs: not worth timing
TUNED_DIR = Path(schedules.__file__).resolve().parent / "tuned"


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


def _init_worker(lock) -> None:
    global _gpu_lock
    _gpu_lock = lock


def _evaluate(step_number: int, size, cfg_dict: dict, arch: str, repeat: int) -> dict:
    M, N, K = size
    step = schedules.get_step(step_number)
    cfg = step.Config.from_dict(cfg_dict)
    out = {"M": M, "N": N, "K": K, "config": cfg_dict}
    try:
        lib = schedules.build(step, M, N, K, arch=arch, config=cfg)
        func = lib["main"]  # loading compiles the CUDA (NVRTC) here, outside the lock
    except Exception as exc:
        return {**out, "error": "build: " + harness._one_line(exc)}
    with _gpu_lock:
        try:
            runner = harness.KernelRunner(repeat=repeat)
            err = _check(runner, func, size)
            timing = runner.time(lib, M, N, K)
        except Exception as exc:
            # A CUDA fault poisons this process's context: report, then let the pool replace us.
            out["error"] = "run: " + harness._one_line(exc)
            print(json.dumps(out), file=sys.stderr, flush=True)
            os._exit(3)
    out.update(rel_err=err, median_ms=timing.median_ms, gflops=timing.gflops(M, N, K))
    if not err <= harness.TOLERANCE:
        out["error"] = f"wrong result: relative error {err:.3g}"
    return out


_operands: dict = {}


def _check(runner, func, size) -> float:
    """The harness's check, with this worker's random inputs and float64 reference computed
    once per size (the reference at 2048 costs more host time than the kernel)."""
    import numpy as np

    if size not in _operands:
        a, b = harness.random_operands(*size, np.random.default_rng())
        _operands[size] = (runner._tensor(a), runner._tensor(b), a.astype(np.float64) @ b.astype(np.float64))
    return runner.verify(func, *_operands[size])


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
        self.ctx = multiprocessing.get_context("spawn")
        self._new()

    def _new(self):
        # A fresh lock with each pool: a worker that died holding the old one (os._exit after a
        # fault, a segfault) never released it, and every later job would wait on it forever.
        self.lock = self.ctx.Lock()
        self.pool = futures.ProcessPoolExecutor(self.workers, mp_context=self.ctx,
                                                initializer=_init_worker, initargs=(self.lock,))

    def run(self, jobs: list[tuple], on_result) -> None:
        """Evaluate every job, calling on_result(job, result) as each finishes.

        A dead worker breaks the whole pool and fails every job still in flight, and which
        job killed it is unknown: so those jobs are retried once in a fresh pool, and a job
        that is in flight when the pool breaks a second time is reported as failed."""
        pending, retried = list(range(len(jobs))), set()
        while pending:
            submitted = {self.pool.submit(self.evaluate, *jobs[i]): i for i in pending}
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
            for i in broken:
                if i in retried:
                    on_result(jobs[i], self.died(jobs[i], "worker died (CUDA fault?) twice"))
            pending = [i for i in broken if i not in retried]
            retried.update(pending)

    def close(self):
        self.pool.shutdown()


# --- the search --------------------------------------------------------------------------


def sweep(step, sizes, arch: str, repeat: int, top: int, workers: int, log) -> dict:
    best = {}
    pool = Pool(workers)
    start = time.time()
    try:
        for size in sizes:
            seeds, ranked, done = [step.default_config(*size)], [], set()
            for label, space in STAGES:
                cfgs = []
                for seed in seeds:
                    for c in candidates(step, *size, arch, space, seed):
                        key = json.dumps(c.as_dict(), sort_keys=True)
                        if key not in done:
                            done.add(key)
                            cfgs.append(c)
                ranked = sorted(ranked + _run_stage(pool, step, size, cfgs, arch, repeat, label, log, start),
                                key=lambda r: -r["gflops"])
                seeds = [step.Config.from_dict(r["config"]) for r in ranked[:top]]
            if ranked:
                best[size] = ranked[0]
                print(f"best at {cli._size(size)}: {ranked[0]['gflops'] / 1e3:.1f} TFLOPS "
                      f"{cli._config_text(step.Config.from_dict(ranked[0]['config']))}", flush=True)
            else:
                print(f"no valid candidate ran at {cli._size(size)}", flush=True)
    finally:
        pool.close()
    return best


def _run_stage(pool, step, size, cfgs, arch, repeat, label, log, start) -> list[dict]:
    ok = []
    total = len(cfgs)
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
        print(f"[{label} {count[0]}/{total} {cli._size(size)} {time.time() - start:5.0f}s] {note:<28} "
              f"best {best / 1e3:5.1f}  {cfg_text}", file=sys.stderr, flush=True)

    pool.run([(step.number, size, c.as_dict(), arch, repeat) for c in cfgs], on_result)
    return sorted(ok, key=lambda r: -r["gflops"])


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


def default_workers() -> int:
    """One build process per CPU, at most MAX_WORKERS: each also holds a CUDA context on the
    one GPU (hundreds of MB), and the timings take turns anyway."""
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def parser(prog: str):
    # The options a sweep honours: no --seed (each worker draws its own inputs), no --save.
    p = cli.new_parser(prog, "search a step's configs on the GPU; keep the best per size")
    cli.add_problem_options(p)
    cli.add_repeat_option(p, REPEAT)
    cli.add_arch_option(p)
    p.add_argument("--step", type=int, required=True, help="the step whose config space to search")
    p.add_argument("--top", type=cli._positive, default=4, help="configs carried into each next stage (default: 4)")
    p.add_argument("--workers", type=cli._positive, default=default_workers(),
                   help=f"build processes (default: the CPU count, at most {MAX_WORKERS}; "
                        f"{default_workers()} here)")
    p.add_argument("--write", action="store_true", help="write schedules/tuned/stepN.json")
    p.add_argument("--dry-run", action="store_true", help="list the valid stage-1 candidates and stop")
    p.add_argument("--log", type=Path, default=None, help="append every candidate's result (JSON lines)")
    return p


@cli.quiet_broken_pipe
def main(argv=None) -> int:
    prog = "python -m steps.sweep"
    try:
        args = parser(prog).parse_args(argv)
        step = schedules.get_step(args.step)
        if step.number < 4:
            raise cli.UsageError("steps 1-3 have nothing worth sweeping; give --step 4 or later")
        arch = cli.pick_arch(prog, args.arch, timing=not args.dry_run)
        sizes = cli.requested_shapes(args)
        for size in sizes:  # here, not as a candidate rejected by validate: the size is wrong
            try:
                schedules.config.check_sizes(*size)
            except ConfigError as exc:
                raise ConfigError(f"{cli._size(size)}: {exc}") from None
        if args.dry_run:
            for size in sizes:
                cfgs = candidates(step, *size, arch, STAGES[0][1], step.default_config(*size))
                print(f"{cli._size(size)}: {len(cfgs)} valid stage-1 (tile) candidates")
                for c in cfgs:
                    print("  " + cli._config_text(c))
            return 0
        if not harness.gpu_present():
            raise cli.UsageError("a sweep times kernels and needs a CUDA GPU; none was found (try --dry-run)")
    except (cli.UsageError, ConfigError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return cli.EXIT_USAGE
    log = open(args.log, "a") if args.log else None
    try:
        best = sweep(step, sizes, arch, args.repeat, args.top, args.workers, log)
    finally:
        if log:
            log.close()
    if args.write and best:
        path = TUNED_DIR / f"step{step.number}.json"
        write_tuned(step, best, harness.environment(), path)
        print(f"wrote {path}")
    return 0 if len(best) == len(sizes) else cli.EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
