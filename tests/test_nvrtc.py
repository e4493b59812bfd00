"""NVRTC compiles the generated kernels with what ``pip install -e .`` installs: no GPU, no
CUDA toolkit. It is what a GPU machine with only a driver does when it loads a step."""

import json
import os
import subprocess
import sys
from pathlib import Path

import schedules
from schedules.lowering import nvrtc

# The plainest, cp.async's helpers, the last mma.sync step (mma.h), the last Hopper rung (sm_90a:
# wgmma, TMA, mbarriers; what the driver compiles when a Hopper GPU loads it).
LAST_HOPPER = [s for s in schedules.STEPS if s.arch is not None][-1].number
STEPS = sorted({1, 7, [s for s in schedules.STEPS if s.tensor_cores and s.arch is None][-1].number, LAST_HOPPER})

COMPILE = r"""
import json, sys
import schedules
from cuda import bindings
from cuda.bindings import nvrtc
from cuda.pathfinder import load_nvidia_dynamic_lib
from tvm.support import nvcc

magic = {}
for number in json.loads(sys.argv[1]):
    step = schedules.get_step(number)
    source = schedules.cuda_source(schedules.build(number, 256, 256, 256, arch="sm_90"))
    cubin = nvcc.compile_cuda(source, "cubin", step.build_arch("sm_90"), compiler="nvrtc")
    magic[number] = [len(cubin), bytes(cubin[:4]).hex()]
lib = load_nvidia_dynamic_lib("nvrtc")
_, major, minor = nvrtc.nvrtcVersion()
print(json.dumps({"magic": magic, "nvrtc": lib.abs_path, "found_via": lib.found_via,
                  "nvrtc_version": [major, minor], "bindings": bindings.__version__,
                  "headers": nvcc.find_cuda_path()}))
"""


def without_toolkit() -> dict:
    """This environment as on a machine with no CUDA toolkit: no CUDA_PATH or CUDA_HOME, no
    library path, no nvcc on PATH (TVM would take its directory for the headers)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_PATH", "CUDA_HOME", "LD_LIBRARY_PATH", nvrtc.EXTRA_OPTS)}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not (Path(d) / "nvcc").exists())
    return env


def test_nvrtc_from_the_wheels_compiles_steps_to_cubins():
    proc = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(STEPS)], env=without_toolkit(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for number in STEPS:
        size, magic = out["magic"][str(number)]
        assert magic == "7f454c46", f"step {number}: not an ELF cubin ({magic})"
        assert size > 1000, f"step {number}: a {size}-byte cubin"
    # The library and the headers are the wheels' (site-packages/nvidia/cu13), one release.
    # The headers' root is what TVM's compile_cuda searches: without schedules/lowering/nvrtc.py it is
    # a toolkit's (/usr/local/cuda where one is installed, hiding the failure of a machine
    # without one) or none at all ("Cannot find CUDA path").
    assert out["found_via"] == "site-packages", out
    assert "nvidia" in Path(out["nvrtc"]).parts, out["nvrtc"]
    assert Path(out["headers"]) == Path(out["nvrtc"]).parent.parent, out
    assert out["nvrtc_version"][0] == 13 == int(out["bindings"].split(".")[0]), out


def test_wheel_headers_are_used_unless_cuda_path_is_set():
    env = {nvrtc.EXTRA_OPTS: "--ftz=false"}
    root = nvrtc.use_wheel_headers(env)
    assert root is not None, "the cuda-toolkit[cudart,cccl] wheels are not installed"
    assert env["CUDA_PATH"] == str(root)
    assert (root / "include" / "cuda_runtime.h").is_file()
    # The tensor-core steps' kernels include mma.h, which includes crt/mma.h: the crt wheel's,
    # in the same include directory (without it NVRTC stops with "cannot open source file").
    assert (root / "include" / "crt" / "mma.h").is_file(), "the cuda-toolkit[crt] wheel is not installed"
    cccl, rest = env[nvrtc.EXTRA_OPTS].split(" ", 1)
    assert cccl.startswith("-I") and (Path(cccl[2:]) / "cuda" / "std" / "cstdint").is_file()
    assert rest == "--ftz=false"  # the user's own NVRTC flags are kept

    mine = {"CUDA_PATH": "/opt/my-cuda"}
    assert nvrtc.use_wheel_headers(mine) is None and mine == {"CUDA_PATH": "/opt/my-cuda"}


# --- fp32 keeps its subnormals (issue 28) -------------------------------------------------------


def test_keep_subnormals_appends_ftz_false_once_and_keeps_the_users_settings():
    env = {nvrtc.EXTRA_OPTS: "-I/x --my-flag"}
    nvrtc.keep_subnormals(env)
    nvrtc.keep_subnormals(env)  # idempotent
    assert env[nvrtc.EXTRA_OPTS] == "-I/x --my-flag --ftz=false"  # after TVM's --use_fast_math, after the user's
    assert env[nvrtc.NVCC_NO_FAST_MATH] == "1"
    assert env[nvrtc.CACHE_PATH] == str(nvrtc.OWN_CACHE) and "ftz-false" in nvrtc.OWN_CACHE.name
    mine = {nvrtc.CACHE_PATH: "/my/cache", nvrtc.NVCC_NO_FAST_MATH: "0"}
    nvrtc.keep_subnormals(mine)
    assert mine[nvrtc.CACHE_PATH] == "/my/cache" and mine[nvrtc.NVCC_NO_FAST_MATH] == "0"
    assert mine[nvrtc.EXTRA_OPTS] == "--ftz=false"


PTX = r"""
import json, os, re, sys
import schedules
from tvm.support import nvcc

if sys.argv[2] == "fast-math":  # TVM's flags alone: what every kernel got before the fix
    os.environ[schedules.lowering.nvrtc.EXTRA_OPTS] = os.environ[schedules.lowering.nvrtc.EXTRA_OPTS].replace("--ftz=false", "")
out = {}
for number in json.loads(sys.argv[1]):
    source = schedules.cuda_source(schedules.build(number, 256, 256, 256, arch="sm_90"))
    ptx = bytes(nvcc.compile_cuda(source, "ptx", "sm_90", compiler="nvrtc")).decode()
    out[number] = {"ftz": len(re.findall(r"\.ftz\.f32", ptx)), "fp32": len(re.findall(r"\b(?:fma|add|sub)(?:\.rn)?\.f32", ptx))}
print(json.dumps(out))
"""


def _ptx_counts(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PTX, json.dumps([11, 14]), mode], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_steps_compile_without_flushing_subnormals():
    """Through TVM's own NVRTC call, as on a GPU: no .ftz in the PTX of step 11 (FFMA) or step 14
    (the split's and the promote's FADD); with TVM's flags alone, every one of them flushes.
    (On the GPU machine the SASS was checked too: docs/fp32-contract.md.)"""
    ours, before = _ptx_counts("ours"), _ptx_counts("fast-math")
    for number in ("11", "14"):
        assert ours[number]["ftz"] == 0 and ours[number]["fp32"] > 50, ours
        assert before[number]["ftz"] >= ours[number]["fp32"] > 0, before


PCH = r"""
import hashlib, json, os, sys, tempfile
import schedules
from cuda.bindings import nvrtc
from tvm.support import nvcc

os.environ["TMPDIR"] = tempfile.mkdtemp()  # NVRTC's header goes here, away from other runs'
tempfile.tempdir = None
if sys.argv[2] == "pch":
    schedules.lowering.nvrtc.precompile_headers()
made, programs = [], []
create_program, compile_program = nvrtc.nvrtcCreateProgram, nvrtc.nvrtcCompileProgram

def create_and_keep(code, name, *rest):  # the source TVM hands NVRTC, kept for the IR below
    programs.append([code, name])
    return create_program(code, name, *rest)

def compile_and_ask(prog, count, options):  # whether NVRTC made its precompiled header
    out = compile_program(prog, count, options)
    made.append(nvrtc.nvrtcGetPCHCreateStatus(prog)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS)
    programs[-1].append(list(options))
    return out

def front_end_ir(code, name, options):  # NVVM IR before NVVM's optimizer: -dlto's output
    options = [o for o in options if not o.startswith(b"--ptxas-options")] + [b"-dlto"]
    prog = create_program(code, name, 0, [], [])[1]
    assert compile_program(prog, len(options), options)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    ir = b" " * nvrtc.nvrtcGetLTOIRSize(prog)[1]
    nvrtc.nvrtcGetLTOIR(prog, ir)
    return hashlib.sha256(ir).hexdigest()

nvrtc.nvrtcCreateProgram, nvrtc.nvrtcCompileProgram = create_and_keep, compile_and_ask
out = {}
for number, arch in json.loads(sys.argv[1]):
    source = schedules.cuda_source(schedules.build(number, 192, 160, 96, arch=arch))
    out[f"{number}/{arch}"] = bytes(nvcc.compile_cuda(source, "cubin", schedules.get_step(number).build_arch(arch),
                                                      compiler="nvrtc")).hex()
ir = {key: front_end_ir(*program) for key, program in zip(out, programs)}  # after: made counts the above only
print(json.dumps({"cubins": out, "ir": ir, "made": made}))
"""


def _cubins(mode: str, builds: list) -> dict:
    proc = subprocess.run([sys.executable, "-c", PCH, json.dumps(builds), mode], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_precompiled_headers_change_no_byte_of_the_front_ends_output():
    """The sweep's build processes compile with NVRTC's precompiled header (precompile_headers):
    in one process, kernels of several steps and two archs (sm_90, then sm_90a for a Hopper
    rung, then sm_90 again: the header is made again for other flags, not misused) give the
    NVVM IR of a process without it byte for byte; and the header was made, so the flags do take
    effect (NVRTC makes none when the program does not open with the headers).

    The header is the front end's (the parse of the headers the program opens with), so its IR
    is what it could change. Not the cubin: NVRTC's optimizer does not always give the same
    cubin for the same IR, header or not. One step-11 kernel (1x4096x4096, split 4) compiled 8
    times in one process gave 3 cubins from one IR, with NVRTC 13.5.37 and 13.0.88 on a 2-core
    CPU box (2026-11-26); this test compared cubins until it failed so in CI. On the H200 host
    (its NVRTC, 2026-11-26) 12 compiles of each of 4 step-11 kernels gave one cubin each."""
    hopper = LAST_HOPPER
    builds = [(4, "sm_90"), (11, "sm_90"), (hopper, "sm_90"), (14, "sm_90")]
    plain, pch = _cubins("plain", builds), _cubins("pch", builds)
    assert not any(plain["made"]), plain["made"]
    assert pch["made"][0] and pch["made"][2], pch["made"]  # the first compile; the first for sm_90a
    assert not pch["made"][1] and not pch["made"][3], pch["made"]  # the others use one already made
    assert set(pch["ir"]) == set(plain["cubins"]) == {f"{n}/{a}" for n, a in builds}
    for key, ir in plain["ir"].items():
        assert pch["ir"][key] == ir, f"{key}: the front end's IR differs with the precompiled header"
    assert all(bytes.fromhex(c)[:4] == b"\x7fELF" for c in pch["cubins"].values())  # and each still builds


def test_precompile_headers_appends_its_flags_once_after_the_users():
    env = {nvrtc.EXTRA_OPTS: "-I/my/include --ftz=false"}
    nvrtc.precompile_headers(env)
    nvrtc.precompile_headers(env)  # idempotent
    flags = env[nvrtc.EXTRA_OPTS].split()
    assert flags[:2] == ["-I/my/include", "--ftz=false"]
    assert flags[2:] == [f"--pre-include={h}" for h in nvrtc.PRECOMPILED] + ["--pch"]
