"""TVM's default TIR pipeline with the ladder's own device passes run first: one name per set.

Two steps need a pass no schedule primitive can express, run on the lowered kernel:
schedules/one_barrier.py (one barrier per cp.async slice, step 13 at ``barriers`` 1) and
schedules/nan_fallback.py (an fp32 fallback for the outputs 3xTF32 makes NaN, step 14). They run
first among the device finalization passes, after ThreadSync, in the order given.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import pipeline as s_tir_pipeline
from tvm.tirx import compilation_pipeline

PREFIX = "matmul_ladder:"


def with_device_passes(*passes) -> str:
    """The name ``tvm.compile(..., tir_pipeline=name)`` takes: "default" without passes, else a
    pipeline registered here once per set of passes."""
    if not passes:
        return "default"
    name = PREFIX + "+".join(p.info.name for p in passes)
    if name not in compilation_pipeline.PIPELINE_MAP:
        def pipeline():
            lower, finalize_host, finalize_device = s_tir_pipeline.default_s_tir_pipeline()
            return lower, finalize_host, lambda: tvm.transform.Sequential([*passes, finalize_device()])

        compilation_pipeline.PIPELINE_MAP[name] = pipeline
    return name
