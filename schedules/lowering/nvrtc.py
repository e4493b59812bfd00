"""Let TVM's NVRTC compile use the CUDA wheels this package installs: no CUDA toolkit needed.

A built step is compiled to machine code when it is loaded on a GPU, by TVM through NVRTC
(``tvm.support.nvcc.compile_cuda``). cuda-bindings loads libnvrtc through cuda-pathfinder,
which finds it in the ``nvidia-cuda-nvrtc`` wheel. The headers are TVM's own search: the
directory of ``CUDA_PATH``, else of an nvcc on PATH, else /usr/local/cuda, must hold
``include/cuda_runtime.h``, and CCCL (``cuda/std/cstdint``, included by every generated
kernel) is looked for only in a toolkit's ``targets/<triple>/include/cccl``. So on a machine
with a driver and no toolkit the compile fails ("Cannot find CUDA path"), and with a toolkit
the headers may be another CUDA version than the NVRTC that reads them.

``use_wheel_headers`` therefore points ``CUDA_PATH`` at the ``nvidia-cuda-runtime`` wheel
(its ``include`` holds cuda_runtime.h) and adds the ``nvidia-cuda-cccl`` wheel's directory
to ``TVM_CUDA_NVRTC_EXTRA_OPTS`` (TVM's hook for extra NVRTC flags): headers and NVRTC then
come from the same CUDA release, pinned together in pyproject.toml. It runs when
``schedules`` is imported, so every process that builds or loads a step (the CLIs, their
worker processes, your own scripts) has it, and it changes nothing when ``CUDA_PATH`` is
already set (your toolkit wins) or the wheels are absent.

``keep_subnormals`` runs then too. fp32 here means what SGEMM computes, subnormals included,
and TVM compiles every kernel with ``--use_fast_math``, which implies ``-ftz=true``: every
FFMA and FADD flushes subnormal inputs and results to zero (step 11 returned all zeros where
every product is below 2^-126). Two things make the flush go away, both measured on the H100
machine (2026-11-24, its NVRTC 13.0.88; docs/fp32-contract.md, by a probe since removed):

- ``--ftz=false`` after TVM's flags (TVM appends ``TVM_CUDA_NVRTC_EXTRA_OPTS`` after its own):
  PTX ``fma.rn.f32``, SASS ``FFMA``;
- a compute cache of our own. With a driver present, NVRTC's PTX -> SASS step goes through the
  driver's JIT cache (``CUDA_CACHE_PATH``, by default ~/.nv/ComputeCache), whose key does not
  hold the flush setting: once a kernel was compiled with ``--use_fast_math`` (any run before
  this fix), compiling the same source with ``--ftz=false`` returns the cached, flushing SASS
  (seen: FFMA.FTZ from a plain compile; with a fresh cache or ``CUDA_CACHE_DISABLE=1``: FFMA).
  So ``CUDA_CACHE_PATH`` points at a folder only these flags fill, unless you set it yourself.
  It takes effect when the process first initialises CUDA, which importing ``schedules``
  precedes in every command here; a process that initialised CUDA before importing it keeps
  the driver's default cache.

``precompile_headers`` is for processes that compile many kernels (a sweep's build processes,
steps/commands/sweep.py's Pool), for speed alone. NVRTC parses libcu++'s headers
(``cuda/std/limits`` from TVM's NVRTC preamble, ``cuda/std/type_traits`` from the generated
kernel) for every kernel: ~1.0 s of a step-11 candidate's ~1.7 s compile (its front end; the
NVVM optimiser ~0.5 s, ptxas ~0.3 s), on a 2-core CPU box with NVRTC 13.5, 2026-11-25. NVRTC's
automatic precompiled header (``--pch``) keeps the parse of the headers that open the program
and reuses it while they and the flags stay the same; TVM's program opens with one small header
and then declarations, so ``--pre-include`` puts the three it includes first. Measured there:
a process's first compile 2.3 s (it makes the header), every later one 1.14 s; the front end's
NVVM IR byte for byte the plain compile's (tests/test_nvrtc.py checks it: the IR, not the cubin,
because NVRTC's optimiser there does not always give one cubin for one IR, header or not: 3
cubins in 8 compiles of one step-11 kernel, NVRTC 13.5.37 and 13.0.88, 2026-11-26; on the H200
host, 12 compiles each of 4 step-11 kernels gave one cubin each). Not for every process: the
header is a ~210 MB file in ``$TMPDIR``, which NVRTC removes at a normal exit only, and a command
that compiles two kernels gains nothing. On the H100's host (NVRTC 13.0.88, 32 build processes) a
step-11 candidate then built in 0.42 s instead of 1.96 s, 47.9 a second instead of 9.8, with every
cubin byte for byte the same: before, the builds set the pace of a sweep over two GPUs (issue 33,
results/nvidia-h100-80gb-hbm3/evidence/rpc_scaling_tries.txt).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

EXTRA_OPTS = "TVM_CUDA_NVRTC_EXTRA_OPTS"
KEEP_SUBNORMALS = "--ftz=false"
NVCC_NO_FAST_MATH = "TVM_CUDA_NVCC_NO_FAST_MATH"  # TVM's nvcc path (TVM_CUDA_COMPILE_MODE=nvcc)
CACHE_PATH = "CUDA_CACHE_PATH"
# Named for the flags its SASS was compiled with: a change of flags gets a folder of its own.
OWN_CACHE = Path.home() / ".cache" / "tvm-matmul-ladder" / "cuda-compute-cache-ftz-false"
# The headers TVM's NVRTC program includes (its preamble, the generated kernel's), in that order;
# including one twice is a no-op (each has its include guard).
PRECOMPILED = ("cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits")
PCH_FLAGS = tuple(f"--pre-include={h}" for h in PRECOMPILED) + ("--pch",)


def wheel_header_dirs() -> tuple[Path, Path] | None:
    """(cuda_runtime.h's include directory, CCCL's) from the installed NVIDIA wheels, or None."""
    try:
        from cuda.pathfinder import locate_nvidia_header_directory
    except ImportError:  # cuda-bindings (and its cuda-pathfinder) not installed
        return None
    found = [locate_nvidia_header_directory(name) for name in ("cudart", "cccl")]
    # Only the wheels: a toolkit or conda found here is left to TVM's own search, as before.
    if any(f is None or f.found_via != "site-packages" for f in found):
        return None
    return Path(found[0].abs_path), Path(found[1].abs_path)


def use_wheel_headers(environ=os.environ) -> Path | None:
    """Point TVM's NVRTC compile at the wheels' headers unless CUDA_PATH is set.

    Returns the CUDA_PATH it set, or None when it left the environment alone."""
    if environ.get("CUDA_PATH"):
        return None
    dirs = wheel_header_dirs()
    if dirs is None:
        return None
    include, cccl = dirs
    root = include.parent  # TVM reads CUDA_PATH/include
    environ["CUDA_PATH"] = str(root)
    environ[EXTRA_OPTS] = f"-I{shlex.quote(str(cccl))} {environ.get(EXTRA_OPTS, '')}".strip()
    return root


def keep_subnormals(environ=os.environ) -> None:
    """Compile without flushing subnormals to zero: ``--ftz=false`` after TVM's NVRTC flags, no
    ``--use_fast_math`` on TVM's nvcc path, and a driver compute cache that no flushing compile
    has filled (the module docstring says why). Idempotent; a user's own settings are kept."""
    opts = environ.get(EXTRA_OPTS, "")
    if KEEP_SUBNORMALS not in shlex.split(opts):
        environ[EXTRA_OPTS] = f"{opts} {KEEP_SUBNORMALS}".strip()
    environ.setdefault(NVCC_NO_FAST_MATH, "1")
    environ.setdefault(CACHE_PATH, str(OWN_CACHE))


def precompile_headers(environ=os.environ) -> None:
    """Let NVRTC precompile the headers every generated kernel includes, once per process
    (``--pre-include`` of each, then ``--pch``; the module docstring says why). Idempotent;
    a user's own NVRTC flags are kept, before these."""
    opts = shlex.split(environ.get(EXTRA_OPTS, ""))
    missing = [flag for flag in PCH_FLAGS if flag not in opts]
    if missing:
        environ[EXTRA_OPTS] = " ".join([environ.get(EXTRA_OPTS, "").strip(), *missing]).strip()
