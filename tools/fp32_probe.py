"""Where fp32 semantics are lost or kept, below the steps (issue 28): the flush of subnormals,
and what TF32 mma.sync does with subnormals, inf and NaN.

    python tools/fp32_probe.py OUT_DIR [--size N]

Needs a GPU, CuPy, and cuobjdump on PATH. Three parts, printed and kept in
OUT_DIR/fp32_probe.json:

1. Which compiles flush: a one-line kernel (d = a * b + c) compiled by NVRTC in fresh
   processes, in a given order of option sets, each cubin disassembled (FFMA or FFMA.FTZ)
   and run on operands whose product is subnormal. This is where a compile flag was found to
   leak: with the GPU machine's NVRTC, one ``--use_fast_math`` compile made every later compile
   of the process flush, whatever its own flags.
2. The cubins that TVM actually loads for steps 11 and 14, through the project's own compile
   path (schedules/lowering/nvrtc.py's flags): captured by wrapping TVM's compile callback
   (``tvm_callback_cuda_compile``), and counted for ``.FTZ`` instructions.
3. ``mma.sync.m16n8k8`` TF32 on subnormal operands, products, accumulators and outputs, and on
   inf / NaN, one case per launch (CuPy), beside the exact result rounded to fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import schedules

FTZ = re.compile(r"\b[A-Z0-9]+\.[A-Z0-9.]*FTZ\b")


# --- 1. which compiles flush -----------------------------------------------------------------

KERNEL = b'extern "C" __global__ void k(const float* a, const float* b, const float* c, float* d) ' \
         b'{ int i = threadIdx.x; d[i] = a[i] * b[i] + c[i]; }'
FLAGS = {"fast_math": [b"--use_fast_math"], "fast_math+ftz_false": [b"--use_fast_math", b"--ftz=false"],
         "plain": []}
# Each run is a fresh process; the driver's compute cache (CUDA_CACHE_PATH) is what it shares.
RUNS = (  # (label, flag sets compiled in order in one process, cache: "fresh", "shared" or "off")
    ("fast math, own empty cache", ("fast_math",), "fresh"),
    ("plain, own empty cache", ("plain",), "fresh"),
    ("fast math + --ftz=false, own empty cache", ("fast_math+ftz_false",), "fresh"),
    ("fast math, into a shared cache", ("fast_math",), "shared"),
    ("then plain, same shared cache", ("plain",), "shared"),
    ("then plain, shared cache, CUDA_CACHE_DISABLE=1", ("plain",), "off"),
)
def compile_sequence(names: list[str], workdir: Path) -> list[dict]:
    """In this process: compile KERNEL under each flag set in turn; disassemble and run each."""
    import cupy as cp
    from cuda.bindings import nvrtc

    out = []
    for n, name in enumerate(names):
        _, prog = nvrtc.nvrtcCreateProgram(KERNEL, b"k.cu", 0, None, None)
        opts = [b"--gpu-architecture=sm_90", b"-default-device", b"--device-int128", *FLAGS[name]]
        (rc,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert rc == nvrtc.nvrtcResult.NVRTC_SUCCESS, rc
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = bytearray(size)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        path = workdir / f"k{n}.cubin"
        path.write_bytes(bytes(cubin))
        sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True, check=True).stdout
        k = cp.RawModule(path=str(path)).get_function("k")
        a = cp.asarray(np.array([2.0**-70, 2.0**-64], np.float32))
        d = cp.full(2, cp.nan, cp.float32)
        k((1,), (2,), (a, a, cp.zeros(2, cp.float32), d))
        cp.cuda.runtime.deviceSynchronize()
        out.append({"flags": name, "sass": "FFMA.FTZ" if "FFMA.FTZ" in sass else "FFMA",
                    "2^-70 * 2^-70": float(d.get()[0])})
    return out


# --- 2. the cubins TVM loads ---------------------------------------------------------------------


CAPTURED: list[bytes] = []


def capture_compiles():
    """Wrap TVM's CUDA compile callback: every cubin TVM loads is kept in CAPTURED."""
    import tvm.support.nvcc as tvm_nvcc
    import tvm_ffi

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _capture(code):
        binary = tvm_nvcc.compile_cuda(code, target_format="cubin", compiler="nvrtc")
        CAPTURED.append(bytes(binary))
        return binary


def sass_counts(cubin: bytes, workdir: Path) -> dict:
    path = workdir / "probe.cubin"
    path.write_bytes(cubin)
    sass = subprocess.run(["cuobjdump", "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    ops = {}
    for m in FTZ.finditer(sass):
        ops[m.group(0)] = ops.get(m.group(0), 0) + 1
    ffma = len(re.findall(r"\bFFMA\b", sass))
    return {"ftz_ops": ops, "ftz_total": sum(ops.values()), "plain_ffma": ffma}


# --- 2. TF32 mma on special values -------------------------------------------------------------

MMA_SOURCE = r"""
extern "C" __global__ void mma_tf32(const float* A, const float* B, const float* C, float* D, float* T) {
  // One m16n8k8 TF32 mma by one warp; A 16x8 and C/D 16x8 row-major, B 8x8 as B[k][n].
  int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  unsigned a0 = __float_as_uint(A[g * 8 + t]), a1 = __float_as_uint(A[(g + 8) * 8 + t]);
  unsigned a2 = __float_as_uint(A[g * 8 + t + 4]), a3 = __float_as_uint(A[(g + 8) * 8 + t + 4]);
  unsigned b0 = __float_as_uint(B[t * 8 + g]), b1 = __float_as_uint(B[(t + 4) * 8 + g]);
  float c0 = C[g * 8 + 2 * t], c1 = C[g * 8 + 2 * t + 1], c2 = C[(g + 8) * 8 + 2 * t], c3 = C[(g + 8) * 8 + 2 * t + 1];
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  D[g * 8 + 2 * t] = c0; D[g * 8 + 2 * t + 1] = c1; D[(g + 8) * 8 + 2 * t] = c2; D[(g + 8) * 8 + 2 * t + 1] = c3;
  // cvt.rna.tf32.f32 of A's first row, for the rounding of subnormals
  if (lane < 8) {
    unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(A[lane])); T[lane] = __uint_as_float(r);
  }
}
"""


def mma_cases() -> dict[str, tuple[list, list, float]]:
    """Row 0 of A (8 values), column 0 of B (8 values), C[0, 0]."""
    s = 2.0**-130
    return {
        "subnormal a (1.5*2^-130) x 1": ([1.5 * s] + [0] * 7, [1] + [0] * 7, 0.0),
        "subnormal a with low bits (2^-149*(2^13+1)) x 1": ([2.0**-149 * (2**13 + 1)] + [0] * 7, [1] + [0] * 7, 0.0),
        "subnormal a x 2^20 (normal product)": ([1.5 * s] + [0] * 7, [2.0**20] + [0] * 7, 0.0),
        "normal 2^-70 x 2^-70 (product 2^-140)": ([2.0**-70] + [0] * 7, [2.0**-70] + [0] * 7, 0.0),
        "8 products of 2^-129 (sum 2^-126)": ([2.0**-65] * 8, [2.0**-64] * 8, 0.0),
        "8 products of 2^-128 (sum 2^-125)": ([2.0**-64] * 8, [2.0**-64] * 8, 0.0),
        "subnormal C 2^-140 + 0": ([0] * 8, [0] * 8, 2.0**-140),
        "subnormal C 2^-140 + product 2^-140": ([2.0**-70] + [0] * 7, [2.0**-70] + [0] * 7, 2.0**-140),
        "C 2^-120 + products 2^-130 x 8": ([2.0**-65] * 8, [2.0**-65] * 8, 2.0**-120),
        "normal C 1 + product 2^-140": ([2.0**-70] + [0] * 7, [2.0**-70] + [0] * 7, 1.0),
        "2^64 x 2^64 (overflow)": ([2.0**64] + [0] * 7, [2.0**64] + [0] * 7, 0.0),
        "inf x 0.5": ([np.inf] + [0] * 7, [0.5] + [0] * 7, 0.0),
        "inf x 0": ([np.inf] + [0] * 7, [0.0] + [0] * 7, 0.0),
        "inf x 1 + -inf x 1": ([np.inf, -np.inf] + [0] * 6, [1, 1] + [0] * 6, 0.0),
        "NaN x 1": ([np.nan] + [0] * 7, [1] + [0] * 7, 0.0),
    }


def run_mma_cases() -> list[dict]:
    import cupy as cp

    kernel = cp.RawKernel(MMA_SOURCE, "mma_tf32", options=("-arch=sm_90", "--ftz=false"))
    out = []
    for name, (arow, bcol, c00) in mma_cases().items():
        A = np.zeros((16, 8), np.float32)
        B = np.zeros((8, 8), np.float32)
        C = np.zeros((16, 8), np.float32)
        A[0, :] = np.array(arow, dtype=np.float64).astype(np.float32)
        B[:, 0] = np.array(bcol, dtype=np.float64).astype(np.float32)
        C[0, 0] = np.float32(c00)
        dA, dB, dC = cp.asarray(A), cp.asarray(B), cp.asarray(C)
        dD, dT = cp.full((16, 8), cp.nan, cp.float32), cp.zeros(8, cp.float32)
        kernel((1,), (32,), (dA, dB, dC, dD, dT))
        cp.cuda.runtime.deviceSynchronize()
        d = float(dD.get()[0, 0])
        with np.errstate(invalid="ignore", over="ignore"):
            # the tensor core reads its inputs as TF32: their low 13 mantissa bits dropped
            at, bt = ((x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (A[0, :], B[:, 0]))
            exact = float(np.dot(at.astype(np.float64), bt.astype(np.float64)) + np.float64(C[0, 0]))
        out.append({"case": name, "mma": d, "mma_hex": np.float32(d).view(np.uint32).item(),
                    "exact_f64": exact, "fp32_of_exact": float(np.float64(exact).astype(np.float32)),
                    "cvt_rna_tf32_a0": float(dT.get()[0]), "a0": float(A[0, 0])})
    return out


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--_sequence", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args._sequence:  # a child: one sequence of compiles in a fresh process
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(compile_sequence(args._sequence.split(","), Path(tmp))))
        return 0

    import tvm
    from cuda.bindings import nvrtc

    from steps.measure import harness

    report = {"environment": harness.environment(), "nvrtc_version": list(nvrtc.nvrtcVersion()[1:]),
              "extra_opts": os.environ.get("TVM_CUDA_NVRTC_EXTRA_OPTS"), "tvm": tvm.__version__}
    print("environment:", json.dumps(report["environment"]), "| NVRTC", report["nvrtc_version"], flush=True)

    report["runs"] = []
    print("\n1. one kernel, d = a * b + c, compiled by NVRTC with TVM's flags, a fresh process each:")
    with tempfile.TemporaryDirectory() as caches:
        for label, seq, cache in RUNS:
            env = dict(os.environ, CUDA_CACHE_PATH=str(Path(caches) / (label if cache == "fresh" else "shared")))
            if cache == "off":
                env["CUDA_CACHE_DISABLE"] = "1"
            proc = subprocess.run([sys.executable, __file__, str(args.out), "--_sequence", ",".join(seq)],
                                  capture_output=True, text=True, check=True, env=env)
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            report["runs"].append({"run": label, "compiles": got})
            print(f"   {label:<48} " + "; ".join(
                f"{g['flags']}: {g['sass']} ({'keeps' if g['2^-70 * 2^-70'] else 'flushes'} 2^-140)" for g in got),
                flush=True)
        shared = sorted(str(p.relative_to(caches)) for p in Path(caches, "shared").rglob("*") if p.is_file())
        report["shared_cache_files"] = shared
        print(f"   the shared cache holds {len(shared)} files", flush=True)

    capture_compiles()
    n = args.size
    dev = tvm.cuda(0)
    report["kernels"] = []
    print(f"\n2. the cubins TVM loads, through schedules/lowering/nvrtc.py's flags ({report['extra_opts']!r}):")
    with tempfile.TemporaryDirectory() as tmp:
        for step in (11, 14):
            before = len(CAPTURED)
            lib = schedules.build(step, n, n, n, arch="sm_90")
            a = tvm.runtime.tensor(np.ones((n, n), np.float32), dev)
            c = tvm.runtime.tensor(np.zeros((n, n), np.float32), dev)
            lib["main"](a, a, c)
            dev.sync()
            counts = [sass_counts(cb, Path(tmp)) for cb in CAPTURED[before:]]
            report["kernels"].append({"step": step, "sass": counts})
            print(f"   step {step} at {n}^3: " + "; ".join(
                f"{c['ftz_total']} FTZ instructions {c['ftz_ops']}, {c['plain_ffma']} FFMA" for c in counts), flush=True)

    report["mma"] = run_mma_cases()
    print("\n3. TF32 mma.sync m16n8k8 (row 0 of A . column 0 of B + C[0,0]) against the exact result of its\n"
          "   TF32-truncated inputs, rounded to fp32:")
    for r in report["mma"]:
        same = "same" if (r["mma"] == r["fp32_of_exact"] or (r["mma"] != r["mma"] and r["fp32_of_exact"] != r["fp32_of_exact"])) else "DIFFERS"
        print(f"   {r['case']:<48} mma {r['mma']:<12.6g} exact {r['fp32_of_exact']:<12.6g} {same}", flush=True)
    (args.out / "fp32_probe.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
