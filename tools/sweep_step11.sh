#!/usr/bin/env bash
# Sweep step 11 (split-K + the shape rule) over the benchmark shape set on a GPU, write its
# table schedules/tuned/step11.json, check split-K's correctness, and time the predictions of
# step 11's docstring against step 10. Run from the project root:
#   bash tools/sweep_step11.sh                       # bench/shapes.toml, else the list below
#   SHAPES=256x256x16384,2048x64x2048 bash tools/sweep_step11.sh
#   CANDIDATES=12 bash tools/sweep_step11.sh         # configs per shape (default here 16, max 25)
# Expected: about 4-5 minutes on an H100 for the 43 shapes x 16 candidates (~690; 12 workers),
# then ~1 minute of GPU tests and timings; the whole script stays inside a 10-minute call (a
# sweep cut off at 400 s still writes the table of the shapes it finished, from its log).
# Writes, in the working tree and (with $OUT set, a lent machine) under $OUT/:
#   step11.json      the table (best config per shape, its GFLOPS, the rule's pick's GFLOPS)
#   logs/sweep11.jsonl   every candidate's result; logs/sweep11.{out,err}; logs/pytest-splitk.log;
#   logs/step11.out  step 11 vs step 10 at the docstring's shapes, with the new table
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
export PYTHONUNBUFFERED=1
mkdir -p logs
finish() {
  if [ -n "${OUT:-}" ]; then
    cp -r logs "$OUT/" 2>/dev/null
    [ -f schedules/tuned/step11.json ] && cp schedules/tuned/step11.json "$OUT/"
  fi
}
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > logs/nvidia-smi.csv
if ! python3 -c "import schedules; schedules.build(1, 64, 64, 64)['main']" > logs/preflight.log 2>&1; then
  echo "preflight failed ($(tail -n1 logs/preflight.log)); retrying with CUDA_PATH=/usr/local/cuda"
  export CUDA_PATH=/usr/local/cuda
  python3 -c "import schedules; schedules.build(1, 64, 64, 64)['main']" || exit 1
fi
# The set: bench/shapes.toml where it is committed; else one of each class of issue 13.
FALLBACK="256x256x256,512x512x512,768x768x768,1024x1024x1024,1536x1536x1536,2048x2048x2048,3072x3072x3072,4096x4096x4096"
FALLBACK+=",2048x64x2048,64x2048x2048,4096x16x4096,16x4096x4096,8192x128x1024,128x8192x1024,1024x32x8192,32x1024x8192"
FALLBACK+=",256x256x16384,128x128x32768,512x512x8192,64x64x65536,4096x4096x64,2048x2048x32,8192x1024x128"
FALLBACK+=",1000x1500x700,2047x2047x2047,1009x997x1013,127x131x4099,33x65x129,513x257x1025"
FALLBACK+=",1x2048x2048,2048x1x2048,1x4096x4096,7x4096x13"
if [ -n "${SHAPES:-}" ]; then
  SHAPE_ARGS=(--shapes "$SHAPES")
elif [ -f bench/shapes.toml ]; then
  SHAPE_ARGS=(--shape-file bench/shapes.toml)
else
  SHAPE_ARGS=(--shapes "$FALLBACK")
fi
t0=$SECONDS
timeout 400 python3 -m steps.sweep --step 11 "${SHAPE_ARGS[@]}" --candidates "${CANDIDATES:-16}" --write \
  --log logs/sweep11.jsonl > logs/sweep11.out 2> logs/sweep11.err
rc=$?
echo "sweep11 rc=$rc $((SECONDS-t0))s"; tail -n 45 logs/sweep11.out
if [ $rc = 124 ]; then  # cut off: the table from the shapes the log has (every result is logged)
  python3 -m steps.sweep --step 11 --from-log logs/sweep11.jsonl --write | tail -n 3
fi
t0=$SECONDS
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_split_k.py > logs/pytest-splitk.log 2>&1
echo "pytest split-k rc=$? $((SECONDS-t0))s"; tail -n 5 logs/pytest-splitk.log
# Step 11 (now with its table) against step 10 at the docstring's shapes.
timeout 70 python3 -m steps.step11 --sizes 512 --shape 256 256 16384 --shape 2048 64 2048 --shape 768 768 768 \
  --repeat 20 > logs/step11.out 2>&1
echo "step11 rc=$?"; tail -n 8 logs/step11.out
