#!/usr/bin/env bash
# Issue 31's open measurements on a GPU machine, from the project root (one 10-minute call):
#   1. the GPU tests of what was built without a GPU: batched products through the dlight rule
#      and ladder_rule.build, the model replayed from CUDA graphs (tests/test_gpu_ladder_rule.py,
#      tests/test_gpu_model.py)
#   2. the batched probe: the ladder's batched kernel against torch.bmm fp32 (tools/batched_probe.py)
#   3. the model with both TVM ways replayed from CUDA graphs, saved as results/<gpu>/model_cuda_graph.*
#   4. PROFILE=1: where a small forward pass's time goes (tools/model_profile.py, a CUPTI trace;
#      what results/<gpu>/model_profile.txt holds, from PROFILE=1 MODEL=0)
#   TESTS=0 / PROBE=0 / MODEL=0 / PROFILE=1 bash tools/model_run.sh    # skip or add a part
# Logs go to logs/; with $OUT set (a lent machine), one tar of results/, README.md and logs/ goes to
# $OUT/model.tar.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
export PYTHONUNBUFFERED=1
mkdir -p logs
finish() { if [ -n "${OUT:-}" ]; then tar -cf "$OUT/model.tar" results README.md logs; fi; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/model-nvidia-smi.csv
if [ "${TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_ladder_rule.py tests/test_gpu_model.py \
    > logs/pytest-gpu-model.log 2>&1
  echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 8 logs/pytest-gpu-model.log
fi
if [ "${PROBE:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 120 python3 tools/batched_probe.py > logs/batched-probe.out 2> logs/batched-probe.err
  echo "batched probe rc=$? $((SECONDS-t0))s"; grep -v '^{' logs/batched-probe.out; tail -n 3 logs/batched-probe.err
fi
if [ "${MODEL:-1}" = 1 ]; then
  t0=$SECONDS
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m steps.model --cuda-graph --save \
    > logs/model-cuda-graph.out 2> logs/model-cuda-graph.err
  echo "model --cuda-graph rc=$? $((SECONDS-t0))s"; cat logs/model-cuda-graph.out; tail -n 3 logs/model-cuda-graph.err
fi
if [ "${PROFILE:-0}" = 1 ]; then
  t0=$SECONDS
  mkdir -p logs/trace
  timeout 150 python3 tools/model_profile.py --trace logs/trace > logs/model-profile.out 2> logs/model-profile.err
  echo "profile rc=$? $((SECONDS-t0))s"; grep -v '^{' logs/model-profile.out; tail -n 3 logs/model-profile.err
fi
