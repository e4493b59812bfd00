#!/usr/bin/env bash
# This session's GPU check (2026-11-25): the NT copy fix through the rule's GPU tests, the
# batched probe, and where the model's 1-token forward pass spends its time.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
export PYTHONUNBUFFERED=1
mkdir -p logs logs/trace
finish() { if [ -n "${OUT:-}" ]; then tar -cf "$OUT/diag.tar" logs; fi; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/diag-nvidia-smi.csv
t0=$SECONDS
timeout 150 python3 tools/model_profile.py --trace logs/trace > logs/model-profile.out 2> logs/model-profile.err
echo "profile rc=$? $((SECONDS-t0))s"; grep -v '^{' logs/model-profile.out; tail -n 5 logs/model-profile.err
t0=$SECONDS
timeout 240 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_gpu_ladder_rule.py tests/test_gpu_model.py > logs/pytest-gpu-model.log 2>&1
echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 15 logs/pytest-gpu-model.log
t0=$SECONDS
timeout 150 python3 tools/batched_probe.py > logs/batched-probe.out 2> logs/batched-probe.err
echo "batched probe rc=$? $((SECONDS-t0))s"; grep -v '^{' logs/batched-probe.out; tail -n 3 logs/batched-probe.err
