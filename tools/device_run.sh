#!/usr/bin/env bash
# The maintainer's one command on a GPU machine: re-measure and save everything the README
# shows, then run the GPU tests against it. Run from the project root:
#   bash tools/device_run.sh                 # ladder --save, the ncu cross-check, GPU tests
#   TUNE=1 bash tools/device_run.sh          # first re-tune step 10 (schedules/tuned/step10.json)
#   MS_TUNE=1 bash tools/device_run.sh       # first re-tune MetaSchedule (minutes per size)
#   SKIP_TESTS=1 ...                         # measurements only
#   ONLY_TESTS=1 ...                         # the GPU tests only (a second 10-minute call)
#   SIZES="512 1024 2048 4096" ...           # the ladder's sizes (default: 512 1024 2048 4096)
#   CROSSCHECK_STEPS=11,14,18 ...            # steps the ncu cross-check times (default: those)
#   SPECIAL=1 ...                            # also fp32's special values (python -m steps.special --save,
#                                            # about 4 minutes: best in a call of its own with SKIP_TESTS=1)
#   SIXTEEN=1 ONLY_SIXTEEN=1 SKIP_TESTS=1 ... # the fp16 and bf16 ladders (512-8192, --save) and their
#                                            # special values instead: about 7 minutes, a call of its own
#   NCU="20 21 22" [NCU_DTYPES="fp32 bf16"] [NCU_SIZE=4096] ONLY_TESTS=1 SKIP_TESTS=1 ...
#                                            # Nsight Compute of those Hopper rungs (tools/ncu_hopper.sh),
#                                            # logs/ncu_stepN_SIZE[_DTYPE].txt: about 40 s a kernel
# It needs the project installed (pip install -e ".[test,cublas]"; MS_TUNE also ".[tune]"), or,
# on a machine without a package index, TVM from a bundle in .gpu/ (see .gpu/setup.sh).
# Everything it writes lands in the working tree (results/, schedules/tuned/, README.md) and
# in logs/; with $OUT set (a lent machine), one tar of those goes to $OUT/all.tar.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
export PYTHONUNBUFFERED=1
mkdir -p logs
finish() { if [ -n "${OUT:-}" ]; then tar -cf "$OUT/all.tar" results schedules/tuned README.md logs; fi; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/nvidia-smi.csv
# Preflight: one kernel built and loaded (NVRTC). If the CUDA headers found by default do not
# compile, fall back to a toolkit's and say so.
if ! python3 -c "import schedules; schedules.build(1, 64, 64, 64)['main']" > logs/preflight.log 2>&1; then
  echo "preflight failed ($(tail -n1 logs/preflight.log)); retrying with CUDA_PATH=/usr/local/cuda"
  export CUDA_PATH=/usr/local/cuda
  python3 -c "import schedules; schedules.build(1, 64, 64, 64)['main']" || exit 1
fi
if [ "${TUNE:-0}" = 1 ]; then
  timeout 300 python3 -m steps.sweep --step 10 --sizes 512 1024 2048 --top 4 --write --log logs/sweep10.jsonl > logs/sweep10.out 2> logs/sweep10.err
  echo "sweep10 rc=$?"; tail -n 4 logs/sweep10.out
fi
if [ "${MS_TUNE:-0}" = 1 ]; then
  for n in 512 1024 2048; do
    timeout 590 python3 -m steps.cublas --tune --sizes $n --only metaschedule > logs/metaschedule$n.out 2> logs/metaschedule$n.err
    echo "metaschedule $n rc=$?"; tail -n 3 logs/metaschedule$n.out
  done
fi
if [ "${SIXTEEN:-0}" = 1 ]; then
  for dt in bf16 fp16; do
    t0=$SECONDS
    timeout 280 python3 -m steps --dtype $dt --save --sizes ${SIZES16:-512 1024 2048 4096 8192} > logs/ladder_$dt.out 2> logs/ladder_$dt.err
    echo "ladder $dt rc=$? $((SECONDS-t0))s"; tail -n 12 logs/ladder_$dt.out
    timeout 100 python3 -m steps.special --dtype $dt --save > logs/special_$dt.out 2> logs/special_$dt.err
    echo "special $dt rc=$?"; tail -n 2 logs/special_$dt.out
  done
fi
if [ "${ONLY_TESTS:-0}" != 1 ] && [ "${ONLY_SIXTEEN:-0}" != 1 ]; then
  t0=$SECONDS
  timeout 480 python3 -m steps --save --sizes ${SIZES:-512 1024 2048 4096} > logs/ladder.out 2> logs/ladder.err
  echo "ladder rc=$? $((SECONDS-t0))s"; tail -n 26 logs/ladder.out
  t0=$SECONDS
  timeout 420 python3 -m steps.crosscheck --save --steps "${CROSSCHECK_STEPS:-11,14,18}" > logs/crosscheck.out 2> logs/crosscheck.err
  echo "crosscheck rc=$? $((SECONDS-t0))s"; tail -n 14 logs/crosscheck.out
fi
if [ "${SPECIAL:-0}" = 1 ]; then
  t0=$SECONDS
  timeout 400 python3 -m steps.special --save > logs/special.out 2> logs/special.err
  echo "special rc=$? $((SECONDS-t0))s"; tail -n 4 logs/special.out
fi
if [ -n "${NCU:-}" ]; then
  for dt in ${NCU_DTYPES:-fp32 bf16}; do
    for s in $NCU; do
      t0=$SECONDS
      if [ "$dt" = fp32 ]; then OUT=logs bash tools/ncu_hopper.sh "$s" "${NCU_SIZE:-4096}" > /dev/null
      else OUT=logs DTYPE=$dt bash tools/ncu_hopper.sh "$s" "${NCU_SIZE:-4096}" > /dev/null; fi
      echo "ncu step $s $dt rc=$? $((SECONDS-t0))s"
    done
  done
fi
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t0=$SECONDS
  # Whatever time is left of a 10-minute device call (the lent machines' limit), at least 60 s.
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m pytest -m gpu -q -p no:cacheprovider > logs/pytest-gpu.log 2>&1
  echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 15 logs/pytest-gpu.log
fi
