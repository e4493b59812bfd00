"""Step 29 — programmatic dependent launch: the next kernel launches while this one drains.

Idea: a GEMM of a few microseconds pays, besides its math, a launch and a ramp: the grid is
set up, its blocks start, initialise their barriers, and only then does the first load leave.
Back to back on a stream, each kernel waits for the one before to finish entirely, so all of
that is serial. Hopper lets a kernel be launched *before* its predecessor ends (programmatic
dependent launch): launched with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``, its
blocks may start as soon as every block of the predecessor has said so
(``griddepcontrol.launch_dependents``) or exited; it must then wait (``griddepcontrol.wait``)
before it reads or writes global memory, until the predecessor has finished and its writes are
visible. So: step 23's kernels, every one of them (the copies an operand needs, the GEMM, the
sum of K's parts), launched so (TVM 0.27 does it for a function whose
``tirx.kernel_launch_params`` name ``tirx.use_programtic_dependent_launch``: ``mark``), each
waiting at its very top and then letting its successor launch at once (``wait_at_top``; with
TRIGGER "exit" it lets it launch only as its blocks exit). Waiting first, before any load or store, keeps every hazard out: whatever
the predecessor wrote (this kernel's inputs) or reads (this kernel's outputs) is done with
before this kernel touches it. Nothing here is a schedule: the launch attribute is decided where
TVM splits host from kernels, so ``mark`` runs before all of TVM's passes and ``wait_at_top``
on each lowered kernel (schedules/lowering/pipelines.py, ``first``). The two travel together
in ``schedules.build``'s pipeline: a kernel is never marked without its wait. A model (one TIR
pipeline for all its functions) does not take this step (``Step.builds_in_model``).

Why it was tried (H200, 2026-11-29, this session's probes; the log is cited below): Nsight
Compute timed cuBLAS's kernel alone at 10.6 us at 8192 x 32 x 2048 bf16 (warm L2), yet back to
back in the harness it takes 7.4; ours 12.4 alone and 11.0 back to back. docs/method.md had seen
cuBLAS gain at its kernels' boundaries (512^3 fp32) and named programmatic dependent launch as
the likely cause, not isolated. The tensor maps' L2 promotion (256 B against 128 B) and tiles
that read B fewer times changed nothing there.

Prediction: where a kernel runs 5-15 us, most of the 1.5-3 us by which cuBLAS gains more than we
do back to back: 8192 x 32 x 2048 bf16 11.0 -> ~9 us. Long kernels: nothing (a few us of 200).

Measured: see ``docs/hopper.md`` (step 29) for the timing, with both triggers.

Run: python -m steps.step29
"""

from __future__ import annotations

from dataclasses import asdict

import tvm
from tvm import tirx
from tvm.script import tirx as T

from .config import WgmmaDependentLaunchConfig, WgmmaSplitKConfig
from .step23_split_k_wgmma import default_config as step23_default
from .step23_split_k_wgmma import kernel as step23_kernel

NUMBER = 29
TENSOR_CORES = True
NAME = "dependent launch"
IDEA = "every kernel launched while the one before it drains; it waits for it at its top, then lets the next launch"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 23
Config = WgmmaDependentLaunchConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # step 23's store, fused epilogue and all
PIECES = ("DEPENDENT_LAUNCH", "mark", "wait_at_top", "launch_passes")

# TVM's launch parameter for a kernel launched with programmatic stream serialization (its spelling).
DEPENDENT_LAUNCH = "tirx.use_programtic_dependent_launch"
LAUNCH_PARAMS = "tirx.kernel_launch_params"


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaDependentLaunchConfig:
    """Step 23's config for the shape, launched so, letting the next kernel launch at once."""
    return WgmmaDependentLaunchConfig(**asdict(step23_default(M, N, K, dtype)))


def kernel(M: int, N: int, K: int, cfg: WgmmaDependentLaunchConfig, dtype: str = "fp32", epilogue=None, fused=True):
    """Step 23's function, kernels and all; ``launch_passes`` make it this step."""
    return step23_kernel(M, N, K, WgmmaSplitKConfig(**asdict(cfg)), dtype, epilogue, fused)


@tvm.transform.module_pass(opt_level=0, name="dependent_launch_mark")
def mark(mod, ctx):
    """Every function's kernels launched with programmatic stream serialization."""
    return tvm.IRModule({gv: f.with_attr(LAUNCH_PARAMS, [DEPENDENT_LAUNCH]) if isinstance(f, tirx.PrimFunc) else f
                         for gv, f in mod.functions.items()}, attrs=mod.attrs)


# Where a kernel lets the next one launch (griddepcontrol.launch_dependents). "top": at once, so the
# next grid's launch and its blocks' start overlap this one's whole run; "exit": as each block exits
# (the implicit trigger), so only the launch overlaps the last blocks' end.
TRIGGER = "exit"


def wait_at_top(trigger: str):
    """The device pass: each kernel's first statements wait for its predecessor to finish (and
    its writes to be visible), then, with trigger "top", let its successor launch."""
    first = [tirx.Evaluate(T.ptx.griddepcontrol.wait())]
    if trigger == "top":
        first.append(tirx.Evaluate(T.ptx.griddepcontrol.launch_dependents()))

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name=f"dependent_launch_wait_{trigger}")
    def wait(func, mod, ctx):
        return func.with_body(tirx.SeqStmt([*first, func.body]))

    return wait


_WAITS = {t: wait_at_top(t) for t in ("top", "exit")}


def launch_passes(cfg: WgmmaDependentLaunchConfig) -> tuple:
    """(the pass before TVM's that marks the functions, the device pass that makes each kernel
    wait): schedules.build puts both in one pipeline."""
    return mark, _WAITS[TRIGGER]
