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

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-29, the shape benchmark: python -m
steps.bench --steps 13,18,20,23,24,26,27,29,30,31 --fastest --save, in bf16, fp16 and TF32 (no 24),
each step at its default config, kernel time back to back, cuBLAS in the precision in the same
run; results/nvidia-h200/{bf16,fp16,tf32}/shapes.csv):
- As predicted: step 26's time divided by step 30's, over the shapes where neither reading is
  flagged host-bound, 1.06x bf16 and fp16 (25 shapes; 0.99-1.12x and 0.99-1.15x) and 1.05x TF32
  (31; 0.99-1.15x); over all 43, 1.07-1.09x. The least: the longest kernels (3072^3, 4096^3).
- 1024 x 64 x 8192: 8.33 us bf16 against step 26's 9.33 (cuBLAS 8.53), 8.37 fp16 (9.52; 8.18),
  13.24 TF32 (14.27; 12.74). 2048 x 64 x 2048: 6.26 / 6.36 / 8.10 against 6.99 / 7.54 / 9.04
  (cuBLAS 5.65 / 5.52 / 9.41). The 16-bit readings at these shapes are flagged host-bound.
- The pick at 5 (bf16), 4 (fp16) and 15 (TF32) of the 43 shapes: the short-wide and tall-skinny
  shapes whose K wants parts, 513 x 257 x 1025, 997 x 1009 x 1013, and in TF32 the squares to 1024
  and 16 x 4096 x 4096 to 128 x 8192 x 1024, where step 29 was the pick before.
- Every shape passed its check (bf16 1.7e-3, fp16 2.1e-4, TF32 7.0e-4 at most); a chain of 101
  dependent launches was exact (tests/test_gpu_dependent_launch.py, 66 passed with steps 29 and 31).

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
