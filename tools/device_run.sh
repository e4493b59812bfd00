#!/usr/bin/env bash
# Runs ON the lent GPU machine (device tool), from the project root, after
# ../shared/gpu/prepare here and with carry [".gpu"]:
#   bash tools/device_run.sh [STEP ...]      (default: every step)
# Saves each step's results (results/<gpu>/stepN.json), then runs the GPU tests against them,
# and copies results + logs under $OUT for the caller to commit.
set -uo pipefail
source .gpu/setup.sh || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/nvidia-smi.csv"
steps=${*:-$(python3 -c 'import schedules; print(*(s.number for s in schedules.STEPS))')}
status=0
for n in $steps; do
  python3 -m steps.step$n --save 2>&1 | tee -a "$out/steps.log" || status=1
done
python3 -m pytest -m gpu -q -p no:cacheprovider ${PYTEST_PATHS:-} 2>&1 | tee "$out/pytest-gpu.log" | tail -n 25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
tar -cf "$out/results.tar" results
exit $status
