"""Step 31 — step 27's kernel, launched while the one before it drains (step 29's launch).

Idea: step 29 gave step 23's kernels programmatic dependent launch: each grid launches while
its predecessor's blocks exit and waits for it (``griddepcontrol.wait``) before its first load.
It took 4-13% off kernels of 5-15 us. Step 27 (stream-K, and step 22's TMA store where it does
not stream) is the H200's pick at the shapes whose output is large beside their K: 4096 x 4096 x
16 and x 64, 8192 x 8192 x 64, 8192 x 1024 x 256 (12-48 us), and at 4096^3. Step 23's kernel is
20-80% slower there, so step 29 does not reach them. Give step 27's kernel the same launch. The
kernel is step 27's, config and CUDA, plus one wait at its top. Its fix-up flags and partial sums
are the module's own memory, read and lowered within one launch; the wait orders one launch after
the whole of the last, so a dependent launch sees them as a plain one does. The pieces are step
29's (``launch_passes``, found on this module by ``schedules.build``); a model does not take it.

Prediction (before this rung's own run): step 27's kernel with the wait and the launch at the top
of it, probed on 2026-11-29 (git show 37b0561:results/nvidia-h200/evidence/dependent_launch_probe.txt,
call 3), ran 8192 x 1024 x 256 bf16 in 11.50 us against 12.53 (0.92x). With the exit trigger
about the same at the 12-15 us shapes, which would take 8192 x 1024 x 256 from 0.85x cuBLAS to
~0.92x; 2-4% at 48 us; 0-3% at 4096^3 (step 29 at 4096^3: 201 us against step 23's 208).

Measured (H200, driver 580.159.04, TVM 0.27.0.post1, 2026-11-29, the shape benchmark in bf16, fp16
and TF32 with steps 29-31 among the candidates, as in step 30's docstring;
results/nvidia-h200/{bf16,fp16,tf32}/shapes.csv):
- As predicted: step 27's time divided by step 31's, over the shapes neither reading is flagged
  host-bound, 1.04x bf16 (32 shapes; 1.00-1.16x), 1.04x fp16 (34; 1.00-1.13x), 1.04x TF32 (39;
  0.99-1.10x).
- 8192 x 1024 x 256: 11.29 us bf16 against step 27's 12.40 (cuBLAS 10.57: 0.85x -> 0.94x),
  11.26 fp16 (12.46; 10.65: 0.94x), 20.02 TF32 (21.45; 32.08). 4096 x 4096 x 64: 12.03 / 12.05 /
  23.28 against 13.20 / 13.15 / 24.86 (1.05x cuBLAS in 16 bits). 8192 x 8192 x 64: 46.7 / 47.0
  against 47.8 / 48.4 (0.95x cuBLAS). 4096^3: 207.8 bf16 against 208.1, 209.7 fp16 against 215.9.
- The pick at 5 (bf16), 6 (fp16) and 2 (TF32) of the 43 shapes: the k-light ones (output large
  beside K: 4096 x 4096 x 16 and x 64, 8192 x 8192 x 64, 2048 x 2048 x 128, 8192 x 1024 x 256), and
  4096^3 in fp16; in TF32 3072^3 and 2053 x 3001 x 1021.
- Every shape passed its check; a chain of 101 dependent launches streaming 72 pairs of tiles on
  66 clusters (4608 x 1024 x 1024: the fix-up's workspace and flags between launches) was exact in
  bf16, fp16 and TF32 (tests/test_gpu_dependent_launch.py).

Run: python -m steps.step31
"""

from __future__ import annotations

from dataclasses import asdict

from .config import WgmmaDependentStreamKConfig
from .step27_stream_k import default_config as step27_default
from .step27_stream_k import kernel as step27_kernel
from .step29_dependent_launch import launch_passes  # noqa: F401  (schedules.build takes the launch from here)

NUMBER = 31
TENSOR_CORES = True
NAME = "stream-K, launched dependent"
IDEA = "step 27's kernel launched while the one before it drains, waiting for it at its top (step 29's launch)"
PRECISION = "tf32"  # for fp32 inputs; fp16 and bf16 inputs are their own precision
DTYPES = ("fp32", "fp16", "bf16")
ARCH = "sm_90a"
PRIOR = 27
Config = WgmmaDependentStreamKConfig
PASS_CONFIG: dict = {}
EPILOGUE = True  # step 27's, applied by the owner as it stages the tile
PIECES = ("launch_passes",)


def default_config(M: int, N: int, K: int, dtype: str = "fp32") -> WgmmaDependentStreamKConfig:
    """Step 27's config for the shape: the kernel is its, only its launch differs."""
    return WgmmaDependentStreamKConfig(**asdict(step27_default(M, N, K, dtype)))


def kernel(M: int, N: int, K: int, cfg: WgmmaDependentStreamKConfig, dtype: str = "fp32", epilogue=None, fused=True):
    """Step 27's function; step 29's ``launch_passes`` make it this step."""
    return step27_kernel(M, N, K, cfg, dtype, epilogue, fused)
