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
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

EXTRA_OPTS = "TVM_CUDA_NVRTC_EXTRA_OPTS"


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
