"""Step 30 — step 26's one kernel, launched while the one before it drains (step 29's launch).

Idea: step 29 gave step 23's kernels programmatic dependent launch: each grid launches while
its predecessor's blocks exit and waits for it (``griddepcontrol.wait``) before its first load.
It took 4-13% off kernels of 5-15 us. Step 26 is the split-K rung of such kernels where
step 23 loses: a tile's parts of K meet in a cluster's shared memory, one kernel a call. In the
H200's rows it is the pick at 4 or 5 of the 43 shapes in each 16-bit dtype, all of them 6-14 us:
2048 x 64 x 2048, 64 x 2048 x 2048, 1024 x 64 x 8192, 513 x 257 x 1025. So give step 26's kernel the
same launch. Nothing else changes: the kernel is step 26's, config and CUDA, plus one wait at
its top. The pieces are step 29's (``launch_passes``: the mark before TVM's passes, the wait after
them; ``schedules.build`` finds them on this module). A model does not take it
(``Step.builds_in_model``, as step 29).

Prediction (before this rung's own run): step 26's kernel with the wait and the launch at the top
of it, probed on 2026-11-29 (git show 37b0561:results/nvidia-h200/evidence/dependent_launch_probe.txt,
call 3), ran 64 x 1024 x 8192 bf16 in 8.99 us against 9.72 (0.92x). With the exit trigger
(step 29's ``TRIGGER``) about the same: 0.90-0.95x step 26's time at its pick shapes, which would
take 1024 x 64 x 8192 bf16 from 0.89x cuBLAS to ~0.95x and 2048 x 64 x 2048 from 0.78x to ~0.85x.

Run: python -m steps.step30
"""

from __future__ import annotations

from dataclasses import asdict

from .config import WgmmaDependentClusterSplitConfig
from .step26_cluster_split_k import default_config as step26_default
from .step26_cluster_split_k import kernel as step26_kernel
from .step29_dependent_launch import launch_passes  # noqa: F401  (schedules.build takes the launch from here)

NUMBER = 30
TENSOR_CORES = True
NAME = "split-K in a cluster, launched dependent"
IDEA = "step 26's kernel launched while the one before it drains, waiting for it at its top (step 29's launch)"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 26
Config = WgmmaDependentClusterSplitConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # step 26's, applied as the parts are added
PIECES = ("launch_passes",)


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaDependentClusterSplitConfig:
    """Step 26's config for the shape: the kernel is its, only its launch differs."""
    return WgmmaDependentClusterSplitConfig(**asdict(step26_default(M, N, K, dtype)))


def kernel(M: int, N: int, K: int, cfg: WgmmaDependentClusterSplitConfig, dtype: str = "fp32", epilogue=None, fused=True):
    """Step 26's function; step 29's ``launch_passes`` make it this step."""
    return step26_kernel(M, N, K, cfg, dtype, epilogue, fused)
