"""TVM's default TIR pipeline with the ladder's own device passes run first: one name per set,
and the walk over the lowered kernel those passes share.

Some steps need a pass no schedule primitive can express, run on the lowered kernel:
schedules/lowering/one_barrier.py (one barrier per cp.async slice, step 13 at ``barriers`` 1),
schedules/lowering/long_k.py (a second accumulator for sums over a long K, the fp32 steps) and
schedules/lowering/fp32_fallback.py (an fp32 fallback for the outputs 3xTF32 makes NaN or tiny, step 14). They run
first among the device finalization passes, after ThreadSync, in the order given.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.s_tir import pipeline as s_tir_pipeline
from tvm.tirx import compilation_pipeline

PREFIX = "matmul_ladder:"


def with_device_passes(*passes, first: tuple = ()) -> str:
    """The name ``tvm.compile(..., tir_pipeline=name)`` takes: "default" without passes, else a
    pipeline registered here once per set of passes. `first`: passes run before all of TVM's, on
    the whole module before it is split into host and kernels (step 29 marks its functions for
    programmatic dependent launch there: the kernels' launch is decided at the split)."""
    if not passes and not first:
        return "default"
    name = PREFIX + "+".join(p.info.name for p in passes) + "".join(f"<{p.info.name}" for p in first)
    if name not in compilation_pipeline.PIPELINE_MAP:
        def pipeline():
            lower, finalize_host, finalize_device = s_tir_pipeline.default_s_tir_pipeline()
            return (tvm.transform.Sequential([*first, lower]) if first else lower), finalize_host, \
                lambda: tvm.transform.Sequential([*passes, finalize_device()])

        compilation_pipeline.PIPELINE_MAP[name] = pipeline
    return name


def statements(stmt) -> list:
    """A SeqStmt's statements, or the one statement."""
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def rewrite(stmt, visit, enter=None):
    """stmt rebuilt bottom-up through the statements a lowered kernel nests (SeqStmt, AttrStmt,
    IfThenElse, While, For); ``visit(node)``, called on each after its children, may return a
    replacement (None keeps it). ``enter(node)``, if given, is called on each before its
    children: a replacement it returns is kept as it is, its children not visited (the
    outermost match wins, as schedules/lowering/long_k.py needs)."""
    if enter is not None:
        replaced = enter(stmt)
        if replaced is not None:
            return replaced
    if isinstance(stmt, tirx.SeqStmt):
        stmt = tirx.SeqStmt([rewrite(s, visit, enter) for s in stmt.seq])
    elif isinstance(stmt, tirx.AttrStmt):
        stmt = tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, rewrite(stmt.body, visit, enter))
    elif isinstance(stmt, tirx.IfThenElse):
        stmt = tirx.IfThenElse(stmt.condition, rewrite(stmt.then_case, visit, enter),
                               None if stmt.else_case is None else rewrite(stmt.else_case, visit, enter))
    elif isinstance(stmt, tirx.While):
        stmt = tirx.While(stmt.condition, rewrite(stmt.body, visit, enter))
    elif isinstance(stmt, tirx.For):
        stmt = with_body(stmt, rewrite(stmt.body, visit, enter))
    replaced = visit(stmt)
    return stmt if replaced is None else replaced


def with_body(loop, body):
    """The For `loop` with `body` in place of its own."""
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations,
                    loop.step)
