#!/usr/bin/env bash
# Device call 1 (2026-11-28 session 6): SwiGLU GPU tests + model, and the in-flight probe.
set -uo pipefail
source .gpu/setup.sh || exit 1
mkdir -p logs "$OUT/inflight"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/nvidia-smi.csv
t0=$SECONDS
PYTHONPATH=$PWD:$PYTHONPATH timeout 170 python probe/inflight.py "$OUT/inflight" > logs/inflight.out 2>&1
echo "inflight rc=$? $((SECONDS-t0))s"; tail -n 60 logs/inflight.out | cut -c1-400
t0=$SECONDS
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_epilogue.py tests/test_gpu_model.py -k "gated or swiglu" > logs/pytest-swiglu.log 2>&1
echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 15 logs/pytest-swiglu.log
t0=$SECONDS
timeout 200 python -m steps.model --dtype bf16 --mlp swiglu --tokens 16 128 1024 > logs/model-swiglu.out 2> logs/model-swiglu.err
echo "model rc=$? $((SECONDS-t0))s"; tail -n 30 logs/model-swiglu.out; tail -n 5 logs/model-swiglu.err
tar -cf "$OUT/call1.tar" logs results "$OUT/inflight" 2>/dev/null
