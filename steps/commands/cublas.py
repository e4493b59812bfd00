"""python -m steps.cublas: the reference rows, timed as the ladder is timed.

    python -m steps.cublas                          # every reference at 512, 1024, 2048
    python -m steps.cublas --only cublas,dlight --shape 1000 1500 700
    python -m steps.cublas --tune --trials 128      # re-tune MetaSchedule for these sizes first
    python -m steps.cublas --tune --tracker head:9190 --key h100   # ... measuring on every GPU there

The references (steps/measure/references.py): cuBLAS in strict fp32 (TF32 off: the baseline of every
"% cuBLAS" column), cuBLAS TF32 (reduced precision, labelled, held to its own tolerance),
TVM's default dlight schedule, and TVM's MetaSchedule replayed from the database committed for
this GPU model. Each is checked against float64 and timed like the steps: CUDA events around
back-to-back launches, a warm-up, ``--repeat`` samples of ~1 ms, the median, and the host time
to submit one launch; a row whose host time is at least 70% of its GPU time is marked
host-bound. ``--tune`` runs MetaSchedule's search on this GPU (``--trials`` candidates per
size), writes ``schedules/tuned/metaschedule/<gpu>/``, then measures. With ``--tracker`` and
``--key`` its candidates are measured on the RPC servers registered there (``python -m
steps.rpc_pool`` starts them), one runner worker per server (steps/measure/metaschedule.py);
the servers' GPU must be this one's model, whose database the tuning writes.
"""

from __future__ import annotations

import sys

from schedules import ConfigError

from ..measure import harness, references, rpc
from ..report.pipes import quiet_broken_pipe
from . import options

PROG = "python -m steps.cublas"


def format_rows(measured: dict, shapes, refs, gpu_name: str) -> str:
    """One line per reference and size: time, GFLOPS, % of cuBLAS fp32, error, host time."""
    header = (f"{'reference':<34} {'size':>16}  {'median ms':>9}  {'GFLOPS':>8}  {'% cuBLAS':>8}  "
              f"{'rel err':>8}  {'host us':>7}")
    lines = [header, "-" * len(header)]
    for ref in refs:
        for size in shapes:
            m = measured.get((ref.key, size))
            name = references.label(ref, gpu_name)
            if m is None:
                continue
            if not m.ok and m.median_ms is None:
                lines.append(f"{name:<34} {options._size(size):>16}  FAILED: {m.error}")
                continue
            base = measured.get((references.CUBLAS.key, size))
            pct = f"{100 * m.gflops / base.gflops:.0f}%" if base is not None and base.ok and base.gflops else "-"
            flag = options.host_flag(m) + ("" if m.ok else f"  WRONG ({m.error})")
            lines.append(f"{name:<34} {options._size(size):>16}  {m.median_ms:>9.4f}  {m.gflops:>8.0f}  {pct:>8}  "
                         f"{m.rel_err:>8.1e}  {m.host_us:>7.1f}{flag}")
    lines.append(options.HOST_LEGEND)
    lines.append(f"TF32 rounds the inputs to 10-bit mantissas: its tolerance is {harness.TF32_TOLERANCE:g} "
                 f"(fp32 rows: {harness.TOLERANCE:g}); it is never the baseline.")
    return "\n".join(lines)


def measure_all(refs, shapes, arch: str, gpu_name: str, repeat: int, seed=None, progress=None) -> dict:
    """{(key, size): Measurement} for every reference that can run; notes the ones that cannot."""
    measured = {}
    runner = harness.KernelRunner(repeat=repeat, seed=seed)
    try:
        for ref in refs:
            for size in shapes:
                why_not = references.available(ref, size, gpu_name)
                if why_not:
                    print(f"{references.label(ref, gpu_name)}: no row at {options._size(size)}: {why_not}", file=sys.stderr)
                    continue
                m = references.measure(ref, size, runner, arch, gpu_name, repeat, seed)
                measured[(ref.key, size)] = m
                if progress is not None:
                    progress(ref, size, m)
    finally:
        runner.close()
    return measured



def _check_servers(tracker: rpc.Tracker) -> None:
    """The servers under the key are there (waiting rpc.WAIT_S at most) and have this GPU's
    model: the tuning is written as this GPU's database."""
    import tvm

    info = tracker.probe("cuda", rpc.WAIT_S)
    here = tvm.cuda(0).device_name
    if info["gpu"] != here:
        raise options.UsageError(f"the servers under key {tracker.key!r} have {info['gpu']}, this machine {here}: "
                                 "the tuning is written as this GPU model's database")
    print(f"MetaSchedule: measuring on {info['servers']} servers under key {tracker.key!r} at {tracker}",
          file=sys.stderr, flush=True)


@quiet_broken_pipe
def main(argv=None) -> int:
    try:
        p = options.parser(PROG, __doc__.strip().splitlines()[0])
        p.add_argument("--only", type=references.keys_arg, default=list(references.ALL), metavar="KEYS",
                       help=f"which references: all (default) or a comma list of {', '.join(references.KEYS)}")
        p.add_argument("--tune", action="store_true",
                       help="re-tune MetaSchedule for these sizes on this GPU first (minutes per size)")
        p.add_argument("--trials", type=options._positive, default=None,
                       help="MetaSchedule's measured candidates per size with --tune (default 128)")
        p.add_argument("--tracker", type=options.tracker_address, default=None, metavar="HOST:PORT",
                       help="with --tune: measure MetaSchedule's candidates on the RPC servers registered at this "
                            "tracker (python -m steps.rpc_pool starts them)")
        p.add_argument("--key", default=None, help="with --tracker: the key the servers registered under")
        args = p.parse_args(argv)
        if args.trials is not None and not args.tune:
            raise options.UsageError("--trials is for --tune")
        if (args.tracker is not None or args.key is not None) and not args.tune:
            raise options.UsageError("--tracker and --key measure MetaSchedule's tuning: they go with --tune")
        if (args.tracker is None) != (args.key is None):
            raise options.UsageError("--tracker and --key go together: the tracker, and the key its servers "
                                     "registered under")
        if args.tune:
            from ..measure import metaschedule

            missing = metaschedule.missing_packages()
            if missing:
                raise options.UsageError(f"--tune needs {', '.join(missing)} for MetaSchedule's builder and runner "
                                     "processes: pip install -e \".[tune]\"")
        shapes = options.requested_shapes(args)
        if not harness.gpu_present():
            raise options.UsageError("the references are timed on a CUDA GPU and none was found")
        arch = options.pick_arch(PROG, args.arch, timing=True)
        tracker = None if args.tracker is None else rpc.Tracker(*args.tracker, args.key)
        if tracker is not None:
            _check_servers(tracker)
    except (options.UsageError, ConfigError, rpc.TrackerError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE
    env = harness.environment()
    if args.tune:
        from ..measure import metaschedule

        trials = args.trials or metaschedule.DEFAULT_TRIALS
        directory = metaschedule.tune(shapes, arch, trials, env, log=lambda s: print(s, file=sys.stderr, flush=True),
                                      tracker=tracker, timeout_s=rpc.TIMEOUT_S)
        print(f"wrote {directory}", file=sys.stderr)
    print(f"{env.get('gpu')} (SM clock {env.get('sm_clock_mhz')} MHz, driver {env.get('driver')}), "
          f"TVM {env.get('tvm_version')}, CuPy {env.get('cupy_version')}; median of {args.repeat} CUDA-event samples")

    def progress(ref, size, m):
        print(f"  {references.label(ref, env.get('gpu'))} {options._size(size)}: "
              + (f"{m.gflops:.0f} GFLOPS" if m.ok else f"failed ({m.error})"), file=sys.stderr, flush=True)

    measured = measure_all(args.only, shapes, arch, env.get("gpu"), args.repeat, args.seed, progress)
    print(format_rows(measured, shapes, args.only, env.get("gpu")))
    return 0 if all(m.ok for m in measured.values()) else options.EXIT_FAILED
