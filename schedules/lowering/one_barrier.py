"""One barrier per slice of a cp.async pipeline: a lowering pass TVM 0.27 lacks.

InjectSoftwarePipeline lowers a cp.async pipeline of `S` stages to this loop body (slice k):

    __syncthreads();             // ThreadSync: the copy below overwrites a stage others read
    cp.async ... slice k + S - 1 // into stage (k + S - 1) % S
    commit_group;
    wait_group N;                // slice k (and, with double-buffered fragments, k + 1) landed
    __syncthreads();             // ThreadSync: every thread's copies of it are visible
    compute slice k

ThreadSync needs both barriers because it cannot tell that the copy and the compute touch
different stages of the same shared buffer. CUTLASS's multistage mainloop orders the same work
so that one barrier serves both purposes:

    wait_group N - 1;            // the same groups complete: this slice's copy is not yet issued
    __syncthreads();             // slice k visible, and every thread is done with slice k - 1
    cp.async ... slice k + S - 1 // overwrites the stage of slice k - 1, now safe
    commit_group;
    compute slice k

`single_barrier_pass` rewrites every loop whose body has that shape, after ThreadSync (it runs
first among the device finalization passes). It is safe because the stage the copy writes,
(k + S - 1) % S, is neither stage k nor, with fragments double-buffered (S >= 3), stage k + 1,
the only stages this iteration's compute reads. Used by step 13 when ``barriers`` is 1
(``schedules.build`` puts it in the pipeline, schedules/lowering/pipelines.py).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from . import pipelines

_COMMIT = "async_commit_queue_scope"
_WAIT = "async_wait_queue_scope"
_INFLIGHT = "async_wait_inflight_count"


def _is_sync(stmt) -> bool:
    return (isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call)
            and getattr(stmt.value.op, "name", "") == "tirx.tvm_storage_sync")


def _single_barrier_body(body):
    """The rewritten loop body, or None when it is not a pipelined cp.async body."""
    seq = pipelines.statements(body)
    if len(seq) < 2:
        return None
    commit, wait = seq[0], seq[1]
    if not (isinstance(commit, tirx.AttrStmt) and commit.attr_key == _COMMIT
            and isinstance(wait, tirx.AttrStmt) and wait.attr_key == _WAIT
            and isinstance(wait.body, tirx.AttrStmt) and wait.body.attr_key == _INFLIGHT
            and isinstance(wait.body.value, tvm.tirx.IntImm) and wait.body.value.value >= 1):
        return None
    copies = pipelines.statements(commit.body)
    syncs = [i for i, s in enumerate(copies) if _is_sync(s)]
    computes = pipelines.statements(wait.body.body)
    if len(syncs) != 1 or not computes or not _is_sync(computes[0]):
        return None
    del copies[syncs[0]]
    inflight = wait.body
    new_commit = tirx.AttrStmt(commit.node, commit.attr_key, commit.value, tirx.SeqStmt(copies))
    new_wait = tirx.AttrStmt(
        wait.node, wait.attr_key, wait.value,
        tirx.AttrStmt(inflight.node, inflight.attr_key, tvm.tirx.IntImm("int32", inflight.value.value - 1),
                      tirx.SeqStmt([computes[0], new_commit, *computes[1:]])))
    return new_wait if len(seq) == 2 else tirx.SeqStmt([new_wait, *seq[2:]])


def _rewrite_loop(node):
    """A loop whose body is a pipelined cp.async body, with that body rewritten; else None."""
    if isinstance(node, tirx.For):
        body = _single_barrier_body(node.body)
        return None if body is None else pipelines.with_body(node, body)
    return None


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="SingleBarrierPerSlice")
def single_barrier_pass(func, mod, ctx):
    return func.with_body(pipelines.rewrite(func.body, _rewrite_loop))
