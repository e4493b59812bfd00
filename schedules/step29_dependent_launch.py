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
``tirx.kernel_launch_params`` name ``tirx.use_programtic_dependent_launch``: ``mark_functions``),
each waiting at its very top (``wait_at_top``) and letting its successor launch as its blocks
exit (TRIGGER "exit"; "top" would let it launch right after the wait: measured below). Waiting
first, before any load or store, keeps every hazard out: whatever the predecessor wrote (this
kernel's inputs) or reads (this kernel's outputs) is done with before this kernel touches it.
Nothing here is a schedule: the launch attribute is decided where TVM splits host from kernels,
so ``mark_functions`` runs before all of TVM's passes and ``wait_at_top`` on each lowered kernel
(schedules/lowering/pipelines.py, ``first``). The two travel together in ``schedules.build``'s
pipeline: a kernel is never marked without its wait. A model (one TIR pipeline for all its
functions) does not take this step (``Step.builds_in_model``).

Why it was tried (H200, 2026-11-29, this session's probes; the log is cited below): Nsight
Compute timed cuBLAS's kernel alone at 10.6 us at 8192 x 32 x 2048 bf16 (warm L2), yet back to
back in the harness it takes 7.4; ours 12.4 alone and 11.0 back to back. docs/method.md had seen
cuBLAS gain at its kernels' boundaries (512^3 fp32) and named programmatic dependent launch as
the likely cause, not isolated. The tensor maps' L2 promotion (256 B against 128 B) and tiles
that read B fewer times changed nothing there.

Prediction: where a kernel runs 5-15 us, most of the 1.5-3 us by which cuBLAS gains more than we
do back to back: 8192 x 32 x 2048 bf16 11.0 -> ~9 us. Long kernels: nothing (a few us of 200).

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-29, kernel time back to back as
always, cuBLAS in the dtype in the same process; the probes' logs: git show
37b0561:results/nvidia-h200/evidence/dependent_launch_probe.txt).
- Correct: a chain of 101 dependent launches, each reading what the one before wrote and
  overwriting what it read, exact in bf16, fp16 and TF32, for one kernel, the GEMM and the sum of
  K's parts, and two copies and the GEMM (tests/test_gpu_dependent_launch.py, 24 passed, run
  with the top trigger; the exit trigger waits the same way). Every shape of the benchmark passed
  its check in both 16-bit dtypes with the exit trigger (largest error 1.7e-3 bf16, 2.1e-4 fp16).
- The two triggers against step 23 (same configs, two rounds where run twice), us, bf16:
  8192 x 32 x 2048 23: 11.1 / 11.7, top 9.6 / 9.9, exit 10.0 (cuBLAS 7.5); 4096 x 16 x 4096 13.0
  / 13.6, 11.5 / 11.8, 11.2 (cuBLAS 12.2); 256 x 256 x 16384 9.5 / 9.1, 7.6 / 7.7, 7.3 (8.0);
  1024^3 6.3 / 6.4, 5.3 / 5.3, 5.7 (5.3); 8192 x 1024 x 256 15.1, 15.8, 13.9 (10.6); 4096^3 208.1,
  208.3, 201.4 (197.4); TF32 1024^3 14.3, 14.6, 12.1 (12.9). The top trigger is no better than
  the exit one but at a few shapes, and worse at some: on step 20's persistent 4096^3 kernel in
  the first probe it lost 8-13% to plain launches (212-214 us against 188-197). So TRIGGER is
  "exit": the next grid launches, and its blocks run up to their wait, as this one's last blocks
  end.
- The shape benchmark (python -m steps.bench --dtype bf16 / fp16 --steps 13,18,20,23,24,26,27,29
  --fastest --save): step 29 faster than step 23 at 39 of the 43 shapes in each dtype, geometric
  mean 0.89x step 23's time over all 43 and 0.94x (0.87-1.00) over the 15 (bf16) and 16 (fp16)
  whose readings the guard does not flag host-bound; 0.91-0.96x at 11-15 us (8192 x 32 x 2048,
  4096 x 128 x 4096, 128 x 4096 x 4096, 8192 x 1024 x 256, 1536^3), 0.89-0.93x on the odd shapes
  of 41-56 us (three kernels a call: two copies and the GEMM, so two boundaries more), 1.00x at
  3072^3 and 4096^3. It is the pick at 26 (bf16) and 25 (fp16) of the 43 shapes. The picks against
  cuBLAS: 8192 x 32 x 2048 0.71x bf16 (0.66x before), 4096 x 128 x 4096 0.73x (0.67x), 1536^3
  0.85x (0.80x); geometric mean over the judged shapes 1.10x (1.03x) bf16, 1.11x (1.06x) fp16.
Still below cuBLAS at 8192 x 32 x 2048 (10.4 us against 7.5): under Nsight Compute, one kernel at
a time with warm L2, cuBLAS's kernel (nvjet_sm90_tst_32x64_64x16_1x2: 32 x 64 tiles, 16 stages,
clusters of two) takes 10.6 us and ours 12.4, so per kernel it is 1.17x faster, and it gains
more back to back (10.6 -> 7.5 us; ours 12.4 -> 11.0 as step 23, -> 10.4 as step 29).
Steps 30 and 31 give the same launch to step 26's and step 27's kernels, the picks at the shapes
step 23's kernels lose: 4-6% off them (their docstrings).

Run: python -m steps.step29
"""

from __future__ import annotations

from dataclasses import asdict

import tvm
from tvm import tirx
from tvm.script import tirx as T

from .config import WgmmaDependentLaunchConfig
from .step23_split_k_wgmma import default_config as step23_default
from .step23_split_k_wgmma import kernel as step23_kernel

NUMBER = 29
TENSOR_CORES = True
NAME = "dependent launch"
IDEA = "every kernel launched while the one before it drains, waiting for it at its top"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 23
Config = WgmmaDependentLaunchConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # step 23's store, fused epilogue and all
PIECES = ("mark_functions", "wait_at_top", "launch_passes")

# TVM's launch parameter for a kernel launched with programmatic stream serialization (its spelling).
DEPENDENT_LAUNCH = "tirx.use_programtic_dependent_launch"
LAUNCH_PARAMS = "tirx.kernel_launch_params"


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaDependentLaunchConfig:
    """Step 23's config for the shape: the kernels are its, only their launch differs."""
    return WgmmaDependentLaunchConfig(**asdict(step23_default(M, N, K, dtype)))


def kernel(M: int, N: int, K: int, cfg: WgmmaDependentLaunchConfig, dtype: str = "fp32", epilogue=None, fused=True):
    """Step 23's function, kernels and all; ``launch_passes`` make it this step."""
    return step23_kernel(M, N, K, cfg, dtype, epilogue, fused)


def mark_functions(mod, ctx):
    """Every function's kernels launched with programmatic stream serialization."""
    return tvm.IRModule({gv: f.with_attr(LAUNCH_PARAMS, [DEPENDENT_LAUNCH]) if isinstance(f, tirx.PrimFunc) else f
                         for gv, f in mod.functions.items()}, attrs=mod.attrs)


mark = tvm.transform.module_pass(mark_functions, opt_level=0, name="dependent_launch_mark")


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


def launch_passes() -> tuple:
    """(the pass before TVM's that marks the functions, the device pass that makes each kernel
    wait): schedules.build puts both in one pipeline."""
    return mark, _WAITS[TRIGGER]
