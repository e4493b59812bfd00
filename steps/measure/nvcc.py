"""Compile generated CUDA with nvcc/ptxas, where installed, for its resource report.

ptxas catches what TVM's build does not: spills, stack frames, register counts and static
shared memory over the 48 KB limit. Nothing here needs a GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class PtxasReport:
    ok: bool
    registers: int | None = None
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    log: str = ""

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def available() -> bool:
    return shutil.which("nvcc") is not None


def arch_flags(arch: str) -> list[str]:
    """nvcc's flags for `arch`. An arch-specific target (sm_90a: wgmma, setmaxnreg) needs the
    -gencode form: nvcc 13.0's -arch=sm_90a also runs a plain sm_90 pass that rejects them."""
    if arch.endswith("a"):
        number = arch.removeprefix("sm_")
        return [f"-gencode=arch=compute_{number},code=sm_{number}"]
    return [f"-arch={arch}"]


def compile_report(source: str, arch: str = "sm_90") -> PtxasReport | None:
    """Compile `source` to a cubin with `-Xptxas -v`; None when nvcc is not installed."""
    if not available():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "kernel.cu"
        cu.write_text(source)
        proc = subprocess.run(
            ["nvcc", "--cubin", *arch_flags(arch), "-Xptxas", "-v", "-diag-suppress", "177",
             str(cu), "-o", str(Path(tmp) / "kernel.cubin")],
            capture_output=True, text=True, timeout=300,
        )
    return parse(proc.stderr + proc.stdout, ok=proc.returncode == 0)


def parse(log: str, ok: bool = True) -> PtxasReport:
    def total(pattern: str) -> int:
        return sum(int(m) for m in re.findall(pattern, log))

    regs = [int(m) for m in re.findall(r"Used (\d+) registers", log)]
    return PtxasReport(
        ok=ok,
        registers=max(regs) if regs else None,
        shared_bytes=total(r"(\d+) bytes smem"),
        stack_bytes=total(r"(\d+) bytes stack frame"),
        spill_stores=total(r"(\d+) bytes spill stores"),
        spill_loads=total(r"(\d+) bytes spill loads"),
        log=log,
    )
