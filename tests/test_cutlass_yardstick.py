"""tools/cutlass_tf32 (issue 12's yardstick: CUTLASS's mma.sync TF32 GEMMs) without a GPU:
its scripts refuse bad input in one line and write nothing, and its config names say what
they build."""

import re
import subprocess
import sys
from pathlib import Path


TOOL = Path(__file__).resolve().parent.parent / "tools" / "cutlass_tf32"


def one_line_error(err: str, prog: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error:"), lines[0]
    for word in words:
        assert word in lines[0], lines[0]


def build_sh(tmp_path, env):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(TOOL / "build.sh"), str(out)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, timeout=60)
    return proc, out


def test_build_needs_cutlass_dir(tmp_path):
    proc, out = build_sh(tmp_path, {})
    assert proc.returncode == 2
    one_line_error(proc.stderr, "build.sh", "CUTLASS_DIR")
    assert not out.exists()


def test_build_refuses_a_directory_without_cutlass_headers(tmp_path):
    proc, out = build_sh(tmp_path, {"CUTLASS_DIR": str(tmp_path)})
    assert proc.returncode == 2
    # nvcc may be missing here (then that is the one line); either way nothing is written.
    one_line_error(proc.stderr, "build.sh")
    assert "no CUTLASS headers" in proc.stderr or "nvcc not found" in proc.stderr
    assert not out.exists()


def test_yardstick_without_a_build_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL / "yardstick.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    one_line_error(proc.stderr, "yardstick.py", "build.sh")


def test_config_names_match_their_tiles():
    text = (TOOL / "build.sh").read_text()
    configs = re.search(r'CONFIGS="([^"]*)"', text).group(1).split()
    assert len(configs) == 8
    for c in configs:
        name, bm, bn, bk, wm, wn, st = c.split(":")
        assert name == f"c{bm}x{bn}x{bk}_{st}"
        bm, bn, bk, wm, wn, st = map(int, (bm, bn, bk, wm, wn, st))
        # whole warp tiles of whole m16n8k8 mma tiles, at most 8 warps per block
        assert bm % wm == 0 and bn % wn == 0 and wm % 16 == 0 and wn % 8 == 0 and bk % 8 == 0
        assert (bm // wm) * (bn // wn) <= 8
        # fp32 operands: the stages' A and B tiles fit the H100's 227 KB of shared memory
        assert st * (bm * bk + bk * bn) * 4 <= 227 * 1024
    assert "c128x128x32_3" in [c.split(":")[0] for c in configs]  # step 13's default tile
