#!/usr/bin/env bash
# The shape benchmark on a GPU machine (issue 13), from the project root:
#   bash tools/bench_run.sh                 # 1. every step checked on every shape of bench/shapes.toml
#                                           # 2. the final CUDA-core step and cuBLAS timed, saved
#                                           # 3. the shape benchmark's GPU tests
#   CHECK=0 / SAVE=0 / TESTS=0 bash tools/bench_run.sh    # skip a part (SAVE=0 still times)
#   STEPS=10,11 bash tools/bench_run.sh     # time these steps (default: the final fp32 CUDA-core step)
# Each part has its own timeout, so the whole fits one 10-minute call on 16 cores (estimated:
# check 3-5 min, timed run 1-3 min, tests 1-2 min). Everything it writes lands in results/,
# README.md and logs/; with $OUT set (a lent machine), one tar of those goes to $OUT/bench.tar.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
export PYTHONUNBUFFERED=1
mkdir -p logs
finish() { if [ -n "${OUT:-}" ]; then tar -cf "$OUT/bench.tar" results README.md logs; fi; }
trap finish EXIT
nproc > logs/bench-nproc.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/bench-nvidia-smi.csv
if [ "${CHECK:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 330 python3 -m steps.bench --steps all --check-only --seed 13 > logs/bench-check.out 2> logs/bench-check.err
  echo "check-only rc=$? $((SECONDS-t0))s"; grep -E "every shape passed|FAILED" logs/bench-check.out | head -n 20
  grep FAILED logs/bench-check.err | head -n 20
fi
t0=$SECONDS
save=$([ "${SAVE:-1}" = 1 ] && echo --save)
steps=$([ -n "${STEPS:-}" ] && echo "--steps $STEPS")
timeout 240 python3 -m steps.bench $steps $save > logs/bench.out 2> logs/bench.err
echo "bench rc=$? $((SECONDS-t0))s"; tail -n 30 logs/bench.out; tail -n 3 logs/bench.err
if [ "${TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_bench.py > logs/pytest-gpu-bench.log 2>&1
  echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 8 logs/pytest-gpu-bench.log
fi
