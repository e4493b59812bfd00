"""TVM's own schedules for the same matmul: the reference rows the ladder is read against.

- **dlight** (``tvm.s_tir.dlight``): TVM's default GPU schedule rules, ``gpu.Matmul()`` then
  ``gpu.Fallback()``, applied to the unscheduled matmul with no tuning. What a TVM user gets
  from a model compiled with the default pipeline.
- **MetaSchedule** (``tvm.s_tir.meta_schedule``): TVM's auto-scheduler, tuned on the GPU once
  per GPU model and size by ``python -m steps.cublas --tune`` (steps/measure/metaschedule.py). The best
  schedule per size is committed as a small JSON database under
  ``schedules/tuned/metaschedule/<gpu-slug>/``; building replays it, so no run re-tunes.

Pure IR, like the steps: nothing here touches a GPU; the only files read are the committed
databases. Both builders have the signature of a ``harness`` kernel builder,
``(M, N, K, arch, config)``, so the worker process builds them like any step.
"""

from __future__ import annotations

import json
from pathlib import Path

import tvm
from tvm.target import Target

from ..config import DTYPES, ConfigError, check_dtype, check_sizes
from ..matmul import matmul

METASCHEDULE_DIR = Path(__file__).resolve().parents[1] / "tuned" / "metaschedule"


def _target(arch: str) -> Target:
    from .. import target  # the registry's arch check

    return target(arch)


def tuning_target(arch: str = "sm_90") -> Target:
    """The target MetaSchedule tunes for: the arch plus the limits its rules read (TVM's plain
    cuda target has none). 48 KB of shared memory: static shared memory, as dlight uses."""
    _target(arch)
    return Target({"kind": "cuda", "arch": arch, "max_threads_per_block": 1024,
                   "max_shared_memory_per_block": 48 * 1024, "thread_warp_size": 32,
                   "registers_per_block": 65536})


def dlight_module(M: int, N: int, K: int, arch: str = "sm_90", dtype: str = "fp32") -> tvm.IRModule:
    """The matmul scheduled by dlight's default GPU rules for this arch. `dtype` fp16 / bf16: the
    16-bit base matmul (fp32 sum, C stored in the dtype), which dlight's Matmul rule sends to its
    tensor-core (WMMA) schedule for fp16 and keeps on CUDA cores for bf16."""
    from tvm.s_tir import dlight as dl

    check_sizes(M, N, K)
    check_dtype(dtype)
    mod = tvm.IRModule({"main": matmul(M, N, K, DTYPES[dtype])})
    with _target(arch):
        return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.Fallback())(mod)


def build_dlight(M: int, N: int, K: int, arch: str = "sm_90", config=None, dtype: str = "fp32"):
    """Compiled dlight kernel; ``main(A, B, C)`` like a step (in `dtype`). `config` is unused."""
    return tvm.compile(dlight_module(M, N, K, arch, dtype), target=_target(arch))


def database_dir(gpu_slug: str, root: Path = METASCHEDULE_DIR) -> Path:
    return Path(root) / gpu_slug


# A committed database: MetaSchedule's tuning records as its JSONDatabase writes them, one line
# each ([workload index, record]), and the sizes of their workloads in that order. Every
# workload is the base matmul at its size, so it is made again when the database is loaded
# instead of kept as TVM's serialized IR (84 KB for three sizes, twice the records).
RECORDS_FILE, WORKLOADS_FILE = "database_tuning_record.json", "workloads.json"


def workload(M: int, N: int, K: int) -> tvm.IRModule:
    """What MetaSchedule tunes at M x N x K: the base matmul, as its own module."""
    return tvm.IRModule({"main": matmul(M, N, K)})


def _database(directory: Path):
    from tvm.s_tir import meta_schedule as ms

    records, sizes = directory / RECORDS_FILE, directory / WORKLOADS_FILE
    if not (records.exists() and sizes.exists()):
        return None
    db = ms.database.MemoryDatabase()
    workloads = [db.commit_workload(workload(*size)) for size in json.loads(sizes.read_text())["sizes"]]
    for line in records.read_text().splitlines():
        if line.strip():
            index, record = json.loads(line)
            db.commit_tuning_record(ms.database.TuningRecord.from_json(record, workloads[index]))
    return db


def metaschedule_schedule(M: int, N: int, K: int, directory: Path, arch: str = "sm_90"):
    """The committed MetaSchedule schedule for M x N x K in `directory`, or None if not tuned."""
    from tvm.s_tir import meta_schedule as ms

    check_sizes(M, N, K)
    db = _database(Path(directory))
    if db is None:
        return None
    return ms.tir_integration.compile_tir(db, matmul(M, N, K), tuning_target(arch))


def records_by_size(directory: Path) -> dict:
    """{(M, N, K): TuningRecord} of a committed database ({} when there is none)."""
    db = _database(Path(directory))
    if db is None:
        return {}
    out = {}
    for record in db.get_all_tuning_records():
        a, b = record.args_info[:2]  # A (M, K), B (K, N)
        (M, K), N = (int(d) for d in a.shape), int(b.shape[1])
        out[(M, N, K)] = record
    return out


def tuned_sizes(directory: Path) -> list[tuple[int, int, int]]:
    """The (M, N, K) a committed database holds a schedule for."""
    return sorted(records_by_size(directory))


def build_metaschedule(M: int, N: int, K: int, arch: str = "sm_90", config=None):
    """Compiled MetaSchedule kernel replayed from the database folder `config` (a path)."""
    if config is None:
        raise ConfigError("a MetaSchedule build needs the database folder of a GPU model")
    sch = metaschedule_schedule(M, N, K, Path(config), arch)
    if sch is None:
        raise ConfigError(f"no MetaSchedule record for {M}x{N}x{K} in {config}; tune with python -m steps.cublas --tune")
    return tvm.compile(sch.mod, target=_target(arch))
