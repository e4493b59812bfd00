"""The RPC sweep's scaling on one host (issue 33): the same sweep through 1, 2, 4 ... servers.

    python tools/rpc_scaling.py --gpus 0,1,2,3                      # 1, 2 and 4 servers
    python tools/rpc_scaling.py --gpus 0,1 --candidates 6 --save    # results/<gpu>/rpc_scaling.{txt,json}

For each server count n: the project's launcher (``steps.rpc_pool``'s Launch: a tracker of its
own and one server per GPU, the first n of --gpus) is started and every server waited for; then
``python -m steps.sweep --step 11`` over the shape set with ``--candidates`` per shape runs
through it (the same candidates every time: step 11's list per shape is fixed), timed wall
clock from the sweep's start to its end; then the launcher is stopped. The report: wall time
per count, speedup against one server, whether every count picked the same winner per shape,
and where the time went, from the sweep's log: the builds here (summed over candidates, and
the build processes' share of the wall), each server's busy time (upload and load, check and
timing), the slowest server's, and what is left (the tracker, the client, waiting). Issue 33's
bars: at least 1.8x on 2 servers and 3.3x on 4. Winners (tools/winners.py): per shape two runs'
picks are the same config, or within ``--band`` (2.5%: each pick, timed by the other run, within
that of the run's own pick; one kernel reads 1.6-2.2% apart between processes), or DIFFERENT,
printed with both timings. ``--control`` runs the one-server sweep once more at the end: how far
the sweep repeats itself on one GPU, the yardstick for the winners.

Each count's run is also written to ``logs/rpc-scaling-run-<n>.json``. A call to a lent machine
lasts at most 10 minutes, and 50 candidates a shape take ~6-7 on one server (what the 4-server
bar needs: at 25 the ~14 s start alone caps 4 servers near 3.3x), so the counts can be split
over two calls to the same machine: the first ``--servers 1``, the second ``--servers 2 4
--runs-from rpc-scaling-run-1.json`` (the first call's file), which joins that run to its own
and reports and saves all three, against it.

    python tools/rpc_scaling.py --gpus 0,1,2,3 --servers 1 --candidates 50
    python tools/rpc_scaling.py --gpus 0,1,2,3 --servers 2 4 --candidates 50 --runs-from runs/rpc-scaling-run-1.json --save

``--report-only`` runs nothing: it reports (and with ``--save`` saves) the runs of ``--runs-from``,
one per count, on any machine; ``--control-from`` takes a one-server run of another call as the
control (``--control``'s yardstick). So counts from several calls to one lent machine (each call's
``logs/rpc-scaling-run-<n>.json``, their ``gpu`` or ``--gpu-name``) make one table:

    python tools/rpc_scaling.py --report-only --candidates 50 --runs-from a/run-1.json b/run-2.json a/run-4.json \
        --control-from c/run-1.json --save
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import winners  # tools/winners.py, beside this file

BARS = {2: 1.8, 4: 3.3}


def sweep_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def where_time_went(rows: list[dict]) -> dict:
    busy = collections.Counter()
    phases = collections.Counter()
    for r in rows:
        if "rpc" in r:
            busy[r["rpc"]["server"]] += r["rpc"]["load_s"] + r["rpc"]["run_s"]
            for phase in ("load_s", "operands_s", "check_s", "time_s"):
                phases[phase] += r["rpc"].get(phase, 0.0)
    first = [r for r in rows if r.get("stage") != "confirm"]
    again = [r for r in rows if r.get("stage") == "confirm"]
    return {"build_s": round(sum(r.get("build_s", 0.0) for r in rows), 1),
            "server_phases_s": {k: round(v, 1) for k, v in phases.items()},
            "server_busy_s": {k: round(v, 1) for k, v in sorted(busy.items())},
            "slowest_server_s": round(max(busy.values(), default=0.0), 1),
            "candidates": len(first), "failed": sum("error" in r for r in first),
            # the confirmation round (steps.sweep --confirm): finalists timed again, and its server time
            "finalists": len(again), "confirmed_shapes": sum(bool(r.get("pick")) for r in again),
            "confirm_server_s": round(sum(r["rpc"]["load_s"] + r["rpc"]["run_s"] for r in again if "rpc" in r), 1)}


class SweepFailed(RuntimeError):
    pass


def run(n: int, gpus: list[str], args, logs: Path, tag: str = "") -> dict:
    from steps.commands import rpc_pool

    launch = rpc_pool.Launch(gpus[:n], f"scaling-{n}{tag}", host="127.0.0.1", port=0, server_port=0,
                             say=lambda line: print(f"  launcher: {line}", file=sys.stderr, flush=True),
                             spawn=not args.fork)
    log = logs / f"rpc-scaling-{n}{tag}.jsonl"
    log.unlink(missing_ok=True)
    launch.start()
    try:
        while len(launch.tracker.servers()) < n:
            launch.watch()
            time.sleep(0.2)
        cmd = [sys.executable, "-m", "steps.sweep", "--step", "11", "--candidates", str(args.candidates),
               "--tracker", str(launch.tracker), "--key", launch.key, "--log", str(log)]
        cmd += ["--shapes", args.shapes] if args.shapes else ["--shape-file", str(args.shape_file)]
        if args.cpu_test:  # the same machinery on CPU servers (llvm builds), to try the tool without a GPU
            cmd += ["--rpc-target", "llvm", "--repeat", "2", "--workers", "1"]
        elif args.repeat:
            cmd += ["--repeat", str(args.repeat)]
        if args.confirm is not None:
            cmd += ["--confirm", str(args.confirm)]
        launched = time.time()
        started = time.monotonic()
        with open(logs / f"rpc-scaling-{n}{tag}.err", "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
            while proc.poll() is None:
                launch.watch()  # restarts a server a kernel crashed, as the launcher's command does
                time.sleep(0.2)
        wall = time.monotonic() - started
        ended = launched + wall
    finally:
        launch.stop()
    if not log.exists():  # the sweep stopped before its first result (a usage error, say): its own last line
        said = (logs / f"rpc-scaling-{n}{tag}.err").read_text().strip().splitlines()
        raise SweepFailed(f"the sweep on {n} server(s) exited {proc.returncode} with no log: "
                          f"{said[-1] if said else '(nothing on stderr)'}")
    rows = sweep_log(log)
    # the sweep's own time line (steps.sweep prints it): its start, first and last result, close
    lines = [line for line in (logs / f"rpc-scaling-{n}{tag}.err").read_text().splitlines() if line.startswith("time line")]
    return {"servers": n, "wall_s": round(wall, 1), "rc": proc.returncode, **where_time_went(rows),
            "timeline": outside_the_clock(lines[-1], launched, ended) if lines else None, "rows": rows}


def outside_the_clock(line: str, launched: float, ended: float) -> str:
    """The sweep's time line with what its clock does not see: the interpreter's start and the
    imports before it (from the process's launch), and the exit after its pool closed."""
    match = re.search(r"\(epoch ([0-9.]+)\): (.*)", line)
    if not match:
        return line.split(": ", 1)[-1].strip()
    epoch, events = float(match.group(1)), match.group(2).strip()
    closed = re.search(r"pool closed ([0-9.]+)", events)
    text = f"launch and imports {epoch - launched:.1f} before the clock; {events}"
    if closed:
        text += f"; the exit {ended - epoch - float(closed.group(1)):.1f} after the pool closed"
    return text


def report(runs: list[dict], gpu: str, args, control: dict | None = None) -> tuple[str, dict]:
    base = runs[0]["wall_s"]
    # The same winners, or picks within the band (tools/winners.py), against the one-server run.
    band = args.band
    vs_one = {r["servers"]: winners.compare(runs[0]["rows"], r["rows"], band) for r in runs[1:]}
    same = all(row["verdict"] != "DIFFERENT" for rows in vs_one.values() for row in rows)
    lines = [f"The RPC sweep's scaling on {gpu}, {time.strftime('%Y-%m-%d')}: step 11, "
             f"{len({(r['M'], r['N'], r['K']) for r in runs[0]['rows']})} shapes x {args.candidates} candidates"
             f"{f', {args.repeat} samples each' if args.repeat else ''}, one host, "
             f"servers started by steps.rpc_pool",
             f"{'servers':>7}  {'wall s':>7}  {'speedup':>7}  {'bar':>5}  {'builds s':>8}  {'slowest server s':>16}  "
             f"{'failed':>6}  {'confirm s':>9}  server busy s"]
    verdicts = []
    for r in runs:
        speedup = base / r["wall_s"]
        r["speedup"] = round(speedup, 2)
        bar = BARS.get(r["servers"])
        if bar is not None:
            verdicts.append(f"{r['servers']} servers {speedup:.2f}x (bar {bar}x): {'met' if speedup >= bar else 'SHORT'}")
        lines.append(f"{r['servers']:>7}  {r['wall_s']:>7.1f}  {speedup:>6.2f}x  {bar or '':>5}  {r['build_s']:>8.1f}  "
                     f"{r['slowest_server_s']:>16.1f}  {r['failed']:>6}  {r['confirm_server_s']:>9.1f}  "
                     + ", ".join(f"{v:.0f}" for v in r["server_busy_s"].values()))
    for r in runs:
        if r["finalists"]:
            lines.append(f"confirmation, {r['servers']} server(s): {r['finalists']} finalists of "
                         f"{r['confirmed_shapes']} shapes timed again in turns, {r['confirm_server_s']:.1f} s of server time")
    for n, rows in vs_one.items():
        lines.append(f"winners, {n} servers against 1: {winners.summary(rows, band)}")
        lines += [f"  {row['shape']}: {winners.describe(row, '1-server', f'{n}-server')}"
                  for row in rows if row["verdict"] != "same"]
    if control is not None:
        # The same one-server sweep again: how far a run repeats itself, the yardstick for the rest.
        again = winners.compare(runs[0]["rows"], control["rows"], band)
        lines.append(f"control, one server again: {control['wall_s']:.1f} s "
                     f"({control['wall_s'] / base - 1:+.1%} from the first); winners against the first: "
                     f"{winners.summary(again, band)}")
        lines += [f"  {row['shape']}: {winners.describe(row, 'first', 'control')}" for row in again if row["verdict"] != "same"]
        for r in runs[1:]:
            against = winners.compare(control["rows"], r["rows"], band)
            lines.append(f"winners, {r['servers']} servers against the control: {winners.summary(against, band)}")
            other = f"{r['servers']}-server"
            lines += [f"  {row['shape']}: {winners.describe(row, 'control', other)}"
                      for row in against if row["verdict"] != "same"]
            vs_one[f"{r['servers']} vs control"] = against
        vs_one["control vs 1"] = again
    lines += [f"time line of the {r['servers']}-server sweep (s from its clock's start, after its imports): {r['timeline']}"
              for r in runs if r.get("timeline")]
    lines.append("server time by phase (s): " + "; ".join(
        f"{r['servers']}: " + ", ".join(f"{k[:-2]} {v:.0f}" for k, v in r["server_phases_s"].items()) for r in runs))
    lines += winners_table(vs_one)
    lines += verdicts
    doc = {"schema": "rpc-scaling-1", "gpu": gpu, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "candidates_per_shape": args.candidates, "repeat": args.repeat, "confirm_rounds": args.confirm,
           "winner_band": band, "same_winners": same,
           "winners_against_one_server": {str(n): {"summary": winners.summary(rows, band),
                                                   "not_the_same": [r for r in rows if r["verdict"] != "same"]}
                                          for n, rows in vs_one.items()},
           "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs],
           "control": None if control is None else {k: v for k, v in control.items() if k != "rows"}}
    return "\n".join(lines), doc


def earlier_runs(paths: list[Path], candidates: int) -> list[dict]:
    """The runs an earlier call wrote (``rpc-scaling-run-<n>.json``): each a count's run, rows
    included, of the same sweep (the same candidates a shape, or ValueError)."""
    runs = []
    for path in paths:
        r = json.loads(path.read_text())
        if r["candidates"] != candidates:
            raise ValueError(f"{path} ran {r['candidates']} candidates a shape, this call {candidates}")
        runs.append({k: v for k, v in r.items() if k != "candidates"})
    return runs


def winners_table(vs_one: dict) -> list[str]:
    """Every shape's verdict against the one-server run, one column per comparison: "=" the
    same config, "~g%" another config within the band (g: the wider of the two gaps), "DIFF g%"."""
    columns = list(vs_one)
    if not columns:
        return []

    def cell(row: dict) -> str:
        if row["verdict"] == "same":
            return "="
        gap = 1 - min(row["b_pick_in_a"], row["a_pick_in_b"])
        return f"{'~' if row['verdict'] == 'within' else 'DIFF '}{gap:.1%}"

    by_shape: dict = {}
    for column in columns:
        for row in vs_one[column]:
            by_shape.setdefault(row["shape"], {})[column] = cell(row)
    heads = [f"{c} vs 1" if isinstance(c, int) else str(c) for c in columns]
    lines = ["winners per shape (=: the same config; ~g: another config, each pick within the band in the other "
             "run's timing, g the wider gap; DIFF g: beyond the band):",
             f"{'shape':>16}  " + "  ".join(f"{h:>16}" for h in heads)]
    for shape in sorted(by_shape, key=lambda s: tuple(int(x) for x in s.split("x"))):
        lines.append(f"{shape:>16}  " + "  ".join(f"{by_shape[shape].get(c, '-'):>16}" for c in columns))
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/rpc_scaling.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default="", help="the GPUs, e.g. 0,1,2,3 (CUDA_VISIBLE_DEVICES values)")
    p.add_argument("--servers", type=int, nargs="+", default=None, help="server counts (default 1, 2, 4 ... up to the GPUs)")
    p.add_argument("--candidates", type=int, default=10, help="candidates per shape (default 10)")
    p.add_argument("--repeat", type=int, default=None, help="timed samples per candidate (default: the sweep's)")
    p.add_argument("--confirm", type=int, default=None,
                   help="rounds of the finalists' second timing (default: the sweep's; 0: none)")
    p.add_argument("--shapes", default=None, help="MxNxK,... (default: bench/shapes.toml)")
    p.add_argument("--shape-file", type=Path, default=Path("bench/shapes.toml"))
    p.add_argument("--logs", type=Path, default=Path("logs"))
    p.add_argument("--save", action="store_true", help="write results/<gpu>/rpc_scaling.txt and .json")
    p.add_argument("--fork", action="store_true", help="servers fork their sessions (rpc_pool --fork)")
    p.add_argument("--band", type=float, default=winners.BAND,
                   help=f"two picks read within this of each other are equally good (default {winners.BAND})")
    p.add_argument("--control", action="store_true",
                   help="then the one-server sweep again, and every run's winners against it too")
    p.add_argument("--runs-from", type=Path, nargs="+", default=[],
                   help="runs an earlier call wrote (logs/rpc-scaling-run-<n>.json, the same sweep on this "
                        "machine), joined to this call's")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: report the runs of --runs-from (one per count, 1 among them)")
    p.add_argument("--control-from", type=Path, default=None,
                   help="a one-server run an earlier call wrote, as the control (see --control)")
    p.add_argument("--gpu-name", default=None,
                   help="with --report-only, the GPU the runs ran on where their files do not say it")
    p.add_argument("--cpu-test", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    gpus = [g for g in args.gpus.split(",") if g]
    try:
        earlier = earlier_runs(args.runs_from, args.candidates)
        control_from = earlier_runs([args.control_from], args.candidates)[0] if args.control_from else None
    except (OSError, ValueError, KeyError) as exc:
        print(f"rpc_scaling: error: --runs-from / --control-from: {exc}", file=sys.stderr)
        return 2
    if args.report_only and (args.servers or args.control or args.fork):
        print("rpc_scaling: error: --report-only runs nothing: not with --servers, --control or --fork", file=sys.stderr)
        return 2
    counts = [] if args.report_only else args.servers or [n for n in (1, 2, 4, 8) if n <= len(gpus)]
    have = sorted(counts + [r["servers"] for r in earlier])
    if (not args.report_only and not gpus) or any(n < 1 or n > len(gpus) for n in counts) or not have \
            or have[0] != 1 or len(set(have)) != len(have):
        print("rpc_scaling: error: --servers (with --runs-from's) must include 1, once each, and name at most "
              "as many servers as --gpus", file=sys.stderr)
        return 2
    if control_from is not None and (control_from["servers"] != 1 or args.control):
        print("rpc_scaling: error: --control-from takes a one-server run, and not with --control", file=sys.stderr)
        return 2
    from steps import results
    from steps.measure import harness

    if args.report_only:
        named = {r.get("gpu") for r in earlier + ([control_from] if control_from else [])} - {None}
        if args.gpu_name is None and len(named) != 1:
            print(f"rpc_scaling: error: --report-only: the runs name {sorted(named) or 'no GPU'}: say which "
                  f"with --gpu-name", file=sys.stderr)
            return 2
        gpu = args.gpu_name or named.pop()
    elif args.cpu_test:
        gpu = "CPU (llvm, a trial of the tool)"
    elif not harness.gpu_present():
        print("rpc_scaling: error: no CUDA GPU found", file=sys.stderr)
        return 2
    else:
        import tvm

        gpu = tvm.cuda(0).device_name
    if counts:
        args.logs.mkdir(parents=True, exist_ok=True)
    runs = list(earlier)
    for n in counts:
        print(f"{n} server(s) ...", file=sys.stderr, flush=True)
        try:
            runs.append(run(n, gpus, args, args.logs))
        except SweepFailed as exc:
            print(f"rpc_scaling: error: {exc}", file=sys.stderr)
            return 1
        (args.logs / f"rpc-scaling-run-{n}.json").write_text(json.dumps({**runs[-1], "candidates": args.candidates, "gpu": gpu}))
        print(f"  {runs[-1]['wall_s']} s", file=sys.stderr, flush=True)
    runs.sort(key=lambda r: r["servers"])
    control = control_from
    if args.control:
        print("1 server again (the control) ...", file=sys.stderr, flush=True)
        control = run(1, gpus, args, args.logs, tag="-control")
        print(f"  {control['wall_s']} s", file=sys.stderr, flush=True)
    text, doc = report(runs, gpu, args, control)
    print(text)
    if args.save and not args.cpu_test:
        gpu_dir = results.RESULTS_DIR / results.gpu_slug(gpu)
        results.write_json_atomic(gpu_dir / "rpc_scaling.json", doc)
        results.write_text_atomic(gpu_dir / "rpc_scaling.txt", text + "\n")
        print(f"saved {gpu_dir / 'rpc_scaling.txt'}")
    return 0 if all(r["rc"] == 0 for r in runs + ([control] if control else [])) else 1


if __name__ == "__main__":
    sys.exit(main())
