"""Tune the MetaSchedule reference row on this GPU: ``python -m steps.cublas --tune``.

MetaSchedule (``tvm.s_tir.meta_schedule.tune_tir``) searches TVM's own schedule space for the
matmul: it generates candidates from its rules, builds them on the CPU cores, times them on
the GPU, and steers an evolutionary search with a learned cost model (XGBoost where installed,
else random; the summary records which). The budget is ``--trials`` measured candidates per
size. Only the best schedule per size is kept: a fresh database holding one workload and one
record per size is written to ``schedules/tuned/metaschedule/<gpu-slug>/`` (about 4 KB per
size: the record, and the workload's size, from which the loader makes the matmul again), with
``tuning.json`` beside it (trials, cost model, time,
the best latency MetaSchedule measured). Sizes already there and not re-tuned are kept.
``schedules.integration.references`` replays the database, so later runs never tune.

Needs a GPU, and ``cloudpickle`` for MetaSchedule's builder and runner processes
(``pip install -e ".[tune]"``).

With a tracker (``python -m steps.cublas --tune --tracker HOST:PORT --key KEY``) the
candidates still build here and are measured on every server under the key: MetaSchedule's
``RPCRunner`` with one worker per server (its default of one worker would measure all of them
on one server), each candidate in a session of its own, exported as a shared library (the
builder's default .tar would be linked by a compiler on the server).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from schedules.integration import references as tvm_refs

from .. import results

DEFAULT_TRIALS = 128
# A candidate's build (tvm.compile, then export_library's host link) in MetaSchedule's builder
# processes; its default of 30 s timed out every build on a 16-core H100 machine with all cores
# building at once.
BUILD_TIMEOUT_S = 300


def missing_packages() -> list[str]:
    """What MetaSchedule's builder and runner processes import and this Python lacks."""
    import importlib.util

    return [name for name in ("cloudpickle", "psutil") if importlib.util.find_spec(name) is None]


def cost_model_name() -> str:
    try:
        import xgboost  # noqa: F401

        return "xgb"
    except Exception:  # no XGBoost (it is optional): an evolutionary search with random scores
        return "random"


def rpc_runner(tracker, timeout_s: float):
    """MetaSchedule's runner over every server under `tracker`'s key (an rpc.Tracker): one
    worker per server, each candidate's session limited to `timeout_s` (its load, where the
    server compiles CUDA source, included)."""
    from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner

    config = RPCConfig(tracker_host=tracker.host, tracker_port=tracker.port, tracker_key=tracker.key,
                       session_priority=1, session_timeout_sec=timeout_s)
    return RPCRunner(config, max_workers=config.count_num_servers(allow_missing=False))


def export_library(mod) -> str:
    """MetaSchedule's builder export for an RPC runner: a shared library, which a server loads as
    it is (the default .tar needs a compiler on the server to link it)."""
    path = os.path.join(tempfile.mkdtemp(prefix="metaschedule-"), "tvm_tmp_mod.so")
    mod.export_library(path)
    return path


def tune_size(size, arch: str, trials: int, work_dir: Path, cost_model: str, runner=None):
    """Tune one size (measured by `runner`, MetaSchedule's local one by default); returns
    (best TuningRecord, seconds)."""
    from tvm.s_tir import meta_schedule as ms

    M, N, K = size
    mod = tvm_refs.workload(M, N, K)
    cores = max(1, os.cpu_count() or 1)
    started = time.monotonic()
    remote = {} if runner is None else {"runner": runner}
    builder = ms.builder.LocalBuilder(max_workers=cores, timeout_sec=BUILD_TIMEOUT_S,
                                      **({} if runner is None else {"f_export": export_library}))
    db = ms.tune_tir(mod, tvm_refs.tuning_target(arch), str(work_dir), max_trials_global=trials,
                     num_trials_per_iter=min(64, trials), cost_model=cost_model, builder=builder,
                     num_tuning_cores=cores, **remote)
    seconds = time.monotonic() - started
    best = db.get_top_k(db.commit_workload(mod), 1)
    if not best:
        raise RuntimeError(f"MetaSchedule found no valid schedule for {M}x{N}x{K} in {trials} trials; "
                           f"first error in its log: {first_error(work_dir)}")
    return best[0], seconds


def first_error(work_dir: Path) -> str:
    """The first build or run error MetaSchedule logged for its task, as one line."""
    for log in sorted(Path(work_dir).glob("logs/*task_0*.log")):
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if "Error in building" in line or "Error in running" in line:
                detail = [x.strip() for x in lines[i + 1:i + 40] if x.strip()]
                last = next((x for x in reversed(detail) if "Error" in x), detail[-1] if detail else "")
                return f"{line.split(']')[-1].strip()} {last}"[:400]
    return "(no error logged)"


def write_database(directory: Path, records: dict, arch: str) -> None:
    """A database of exactly one record per size ({size: TuningRecord}), replacing `directory`'s
    files whole: written in a temporary folder beside it, then moved into place."""
    from tvm.s_tir import meta_schedule as ms

    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        db = ms.database.JSONDatabase(work_dir=str(tmp))
        sizes = sorted(records)
        for (M, N, K) in sizes:
            rec = records[(M, N, K)]
            workload = db.commit_workload(tvm_refs.workload(M, N, K))
            db.commit_tuning_record(ms.database.TuningRecord(rec.trace, workload, rec.run_secs,
                                                             tvm_refs.tuning_target(arch), rec.args_info))
        # The workloads are kept as their sizes (the loader makes each matmul again), not as
        # the serialized IR JSONDatabase wrote beside the records.
        (tmp / tvm_refs.WORKLOADS_FILE).write_text(json.dumps({"sizes": [list(s) for s in sizes]}) + "\n")
        directory.mkdir(parents=True, exist_ok=True)
        for name in (tvm_refs.RECORDS_FILE, tvm_refs.WORKLOADS_FILE):
            os.replace(tmp / name, directory / name)
        stale = directory / "database_workload.json"  # the format before workloads.json
        if stale.exists():
            stale.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def existing_records(directory: Path) -> dict:
    """{size: TuningRecord} already committed in `directory`."""
    return tvm_refs.records_by_size(directory)


def tune(sizes, arch: str, trials: int, env: dict, log=print, tracker=None, timeout_s: float = 60) -> Path:
    """Tune every size, then write the GPU model's database and tuning.json. Returns the folder.
    With `tracker` (an rpc.Tracker), the candidates are measured on its servers (rpc_runner)."""
    directory = tvm_refs.database_dir(results.gpu_slug(env["gpu"]))
    cost_model = cost_model_name()
    runner = None if tracker is None else rpc_runner(tracker, timeout_s)
    records = existing_records(directory)
    summary_path = directory / "tuning.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        summary = {}
    per_size = {s["size"]: s for s in summary.get("sizes", [])}
    with tempfile.TemporaryDirectory(prefix="metaschedule-") as work:
        for size in sizes:
            name = "x".join(map(str, size))
            log(f"MetaSchedule: tuning {name}, {trials} trials, cost model {cost_model}")
            rec, seconds = tune_size(size, arch, trials, Path(work) / name, cost_model, runner)
            records[tuple(size)] = rec
            best_us = float(sum(float(t) for t in rec.run_secs) / len(rec.run_secs)) * 1e6
            per_size[name] = {"size": name, "trials": trials, "cost_model": cost_model,
                              "tuning_seconds": round(seconds, 1), "best_us_by_metaschedule": best_us}
            if tracker is not None:
                per_size[name]["runner"] = f"rpc: tracker {tracker}, key {tracker.key}"
            log(f"MetaSchedule: {name} done in {seconds:.0f} s; best {best_us:.1f} us (MetaSchedule's own runner)")
    write_database(directory, records, arch)
    summary = {
        "generated_by": "python -m steps.cublas --tune",
        "trials": trials,  # of the latest tuning; each size says its own
        "cost_model": cost_model,
        "target": str(tvm_refs.tuning_target(arch)),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": env.get("gpu"),
        "tvm_version": env.get("tvm_version"),
        "sizes": [per_size[k] for k in sorted(per_size, key=lambda k: [int(x) for x in k.split("x")])],
    }
    results.write_json_atomic(summary_path, summary)
    return directory
