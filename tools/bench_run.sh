#!/usr/bin/env bash
# The shape benchmark on a GPU machine (issue 13), from the project root:
#   bash tools/bench_run.sh                 # 1. every step checked on every shape of bench/shapes.toml
#                                           # 2. the dispatch rule's candidates (11, 14, 19, 24, 25), its pick
#                                           #    ("fastest") and cuBLAS timed, saved with the dispatch table
#                                           # 3. the audit: the same rows on shapes outside the set
#                                           # 4. the shape benchmark's GPU tests
#   CHECK=0 / BENCH=0 / SAVE=0 / AUDIT=0 / TESTS=0 bash tools/bench_run.sh    # skip a part (SAVE=0 still times)
#   STEPS=10,11 bash tools/bench_run.sh     # time these steps (default: the dispatch rule's candidates)
#   CHECK=0 BENCH=0 AUDIT=0 TESTS=0 TF32=1 bash tools/bench_run.sh   # only the dispatch table's TF32 rows
#   CHECK=0 BENCH=0 TESTS=0 ROWS16=bf16 bash tools/bench_run.sh   # the bf16 rows (or fp16), then the audit in bf16:
#                                           # ~5 + 3 min on 16 cores, a 10-minute call of its own per dtype
#   GRAPH=1 ...                             # the rows and the audit timed from CUDA graphs (steps.bench --graph):
#                                           # kernel times in the table, its rows marked "timer": "cuda graph"
# Each part has its own timeout, so the whole fits one 10-minute call on 16 cores (estimated:
# check 3-5 min, timed run 1-3 min, tests 1-2 min). Everything it writes lands in results/,
# README.md and logs/; with $OUT set (a lent machine), one tar of those goes to $OUT/bench.tar.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
export PYTHONUNBUFFERED=1
mkdir -p logs
# (only the paths there: docs/ is away where tools/device_hold.sh moved it out for the call)
finish() { if [ -n "${OUT:-}" ]; then
  paths=(); for p in results schedules/tuned README.md docs/measured.md logs; do [ -e "$p" ] && paths+=("$p"); done
  tar -cf "$OUT/bench.tar" "${paths[@]}"; fi; }
trap finish EXIT
nproc > logs/bench-nproc.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/bench-nvidia-smi.csv
if [ "${CHECK:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 330 python3 -m steps.bench --steps all --check-only --seed 13 > logs/bench-check.out 2> logs/bench-check.err
  echo "check-only rc=$? $((SECONDS-t0))s"; grep -E "every shape passed|FAILED" logs/bench-check.out | head -n 20
  grep FAILED logs/bench-check.err | head -n 20
fi
save=$([ "${SAVE:-1}" = 1 ] && echo --save)
steps=$([ -n "${STEPS:-}" ] && echo "--steps $STEPS")
graph=$([ "${GRAPH:-0}" = 1 ] && echo --graph)
if [ "${BENCH:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 420 python3 -m steps.bench $steps $save $graph > logs/bench.out 2> logs/bench.err
  echo "bench rc=$? $((SECONDS-t0))s"; tail -n 40 logs/bench.out; tail -n 3 logs/bench.err
fi
# The audit's shapes: outside the set, of every class (results/<gpu>/evidence/audit.txt has step 11's run).
AUDIT_SHAPES=640x640x640,1280x1280x1280,2560x2560x2560,3584x3584x3584,3072x48x3072,6144x96x2048,2048x24x8192,\
48x3072x3072,96x6144x2048,8x8192x4096,192x192x24576,320x320x10240,96x96x49152,6144x6144x32,3072x3072x96,\
16384x2048x128,1777x1333x911,3001x2999x1499,769x1543x2049,129x4097x515,7x300x5003,1x2048x2048,1x16384x512,\
2048x1x2048,1x1024x8192,3000x3000x1,12345x1x777,2x4096x4096
# The TF32 and 16-bit candidates name step 27, not 22: where 27 does not stream (every shape of the
# set but 3072^3; 3584^3 of the audit streams) it is step 22's kernel byte for byte, and where it
# streams (8192^3: 1.02-1.05x cuBLAS bf16 against step 22's 1.01x; 3072^3 1.18x step 22, H200) the
# table then holds the faster one.
TF32_STEPS=13,18,20,23,26,27,29,30,31 SIXTEEN_BIT_STEPS=13,18,20,23,24,26,27,29,30,31  # the rows' candidates, and the audit's
if [ "${TF32:-0}" = 1 ]; then  # the TF32 rows and results/<gpu>/tf32/
  t0=$SECONDS
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m steps.bench --steps $TF32_STEPS --fastest --save $graph \
    > logs/bench-tf32.out 2> logs/bench-tf32.err
  echo "tf32 rows rc=$? $((SECONDS-t0))s"; tail -n 12 logs/bench-tf32.out; tail -n 3 logs/bench-tf32.err
fi
if [ -n "${ROWS16:-}" ]; then  # one 16-bit dtype's rows (the Hopper rungs, step 13, step 24) and results/<gpu>/<dtype>/
  t0=$SECONDS
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m steps.bench --dtype "$ROWS16" \
    --steps $SIXTEEN_BIT_STEPS --fastest --save $graph > "logs/bench-$ROWS16.out" 2> "logs/bench-$ROWS16.err"
  echo "$ROWS16 rows rc=$? $((SECONDS-t0))s"; tail -n 12 "logs/bench-$ROWS16.out"; tail -n 3 "logs/bench-$ROWS16.err"
fi
# The audit runs after the rows it judges: the precision's own steps where TF32=1 or ROWS16 is given.
if [ -n "${ROWS16:-}" ]; then audit_args="--dtype $ROWS16 --steps $SIXTEEN_BIT_STEPS"; audit_log=bench-audit-$ROWS16
elif [ "${TF32:-0}" = 1 ]; then audit_args="--steps $TF32_STEPS"; audit_log=bench-audit-tf32
else audit_args="$steps"; audit_log=bench-audit; fi
if [ "${AUDIT:-1}" = 1 ]; then
  t0=$SECONDS
  timeout $(( 590 - SECONDS > 60 ? 590 - SECONDS : 60 )) python3 -m steps.bench $audit_args --fastest --seed 8 $graph \
    --shapes "$AUDIT_SHAPES" > "logs/$audit_log.out" 2> "logs/$audit_log.err"
  echo "audit rc=$? $((SECONDS-t0))s"; tail -n 45 "logs/$audit_log.out"; tail -n 3 "logs/$audit_log.err"
fi
if [ "${TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_bench.py > logs/pytest-gpu-bench.log 2>&1
  echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 8 logs/pytest-gpu-bench.log
fi
