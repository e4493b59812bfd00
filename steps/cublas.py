"""python -m steps.cublas: the cuBLAS reference, timed as the ladder is timed.

    python -m steps.cublas                      # strict fp32 SGEMM at 512, 1024, 2048
    python -m steps.cublas --tf32 --shape 1000 1500 700

cuBLAS SGEMM through CuPy with TF32 off (strict fp32, the baseline of every "% cuBLAS"
column), checked against float64 like the steps and timed with CUDA events: a warm-up, then
`--repeat` samples of ~1 ms of back-to-back launches, median reported. ``--tf32`` adds a
separately labelled TF32 row (measured in a child process with CUPY_TF32=1, so the strict
row is never affected); it is never the baseline.
"""

from __future__ import annotations

import os
import subprocess
import sys

from . import cli, harness


def measure(sizes, repeat: int, seed, tf32: bool = False) -> list[tuple]:
    rows = []
    for size in sizes:
        timing, err = harness.time_cublas(*size, repeat=repeat, seed=seed, tf32=tf32)
        rows.append((size, timing, err))
    return rows


def format_rows(label: str, rows, tf32: bool = False) -> str:
    lines = []
    for size, timing, err in rows:
        # TF32 is expected to miss the fp32 tolerance; say so rather than call it wrong.
        ok = "" if err <= harness.TOLERANCE else ("  (TF32 precision)" if tf32 else "  WRONG")
        lines.append(f"{label:<18} {cli._size(size):>16}  {timing.median_ms:>9.4f}  "
                     f"{timing.gflops(*size):>8.0f}  {err:>8.1e}{ok}")
    return "\n".join(lines)


@cli.quiet_broken_pipe
def main(argv=None) -> int:
    prog = "python -m steps.cublas"
    try:
        # Only what cuBLAS timing honours: no --arch, --save, --build-only, --explain, --compare.
        p = cli.new_parser(prog, "cuBLAS SGEMM (TF32 off) timed like the ladder")
        cli.add_problem_options(p)
        cli.add_repeat_option(p)
        cli.add_seed_option(p)
        p.add_argument("--tf32", action="store_true", help="add a labelled TF32 row (never the baseline)")
        p.add_argument("--_tf32-child", dest="tf32_child", action="store_true", help=cli.argparse.SUPPRESS)
        args = p.parse_args(argv)
        if not harness.gpu_present():
            raise cli.UsageError("cuBLAS timing needs a CUDA GPU and none was found")
        if not harness.cublas_available():
            raise cli.UsageError("CuPy is not installed: pip install -e \".[cublas]\"")
    except cli.UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return cli.EXIT_USAGE
    sizes = cli.requested_shapes(args)
    if args.tf32_child:
        print(format_rows("cuBLAS TF32", measure(sizes, args.repeat, args.seed, tf32=True), tf32=True))
        return 0
    env = harness.environment()
    print(f"{env.get('gpu')} (SM clock {env.get('sm_clock_mhz')} MHz, driver {env.get('driver')}), "
          f"CuPy {env.get('cupy_version')}; median of {args.repeat} CUDA-event samples")
    print(f"{'':<18} {'size':>16}  {'median ms':>9}  {'GFLOPS':>8}  {'rel err':>8}")
    print(format_rows("cuBLAS fp32", measure(sizes, args.repeat, args.seed)), flush=True)
    if args.tf32:
        child = [sys.executable, "-m", "steps.cublas", "--_tf32-child", "--repeat", str(args.repeat)]
        for M, N, K in sizes:
            child += ["--shape", str(M), str(N), str(K)]
        proc = subprocess.run(child, env={**os.environ, "CUPY_TF32": "1"}, capture_output=True, text=True)
        print(proc.stdout.rstrip() if proc.returncode == 0 else f"TF32 row failed: {proc.stderr.strip()[-200:]}")
        print("TF32 rounds the inputs to 10-bit mantissas: its error is shown, and it is not the baseline.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
