#!/usr/bin/env bash
# Issue 31's open measurements on a GPU machine, from the project root (one 10-minute call):
#   1. the GPU tests of what was built without a GPU: batched products through the dlight rule
#      and ladder_rule.build, the model replayed from CUDA graphs (tests/test_gpu_ladder_rule.py,
#      tests/test_gpu_model.py)
#   2. the model with both TVM ways replayed from CUDA graphs, saved as results/<gpu>/model_cuda_graph.*
#   TESTS=0 / MODEL=0 bash tools/model_run.sh    # skip a part
#   DTYPE=bf16 bash tools/model_run.sh            # issue 50: the block in bf16 (or fp16), plain and from
#                                                 # CUDA graphs: results/<gpu>/bf16/model.*, model_cuda_graph.*
# (The batched kernel against torch.bmm and the forward pass's CUPTI profile were probes, answered:
# docs/models.md; docs/maintaining.md, "Probes that answered their question", brings them back.)
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
if [ "${MODEL:-1}" = 1 ] && [ -n "${DTYPE:-}" ]; then  # the 16-bit block: plain, then from CUDA graphs
  for graph in "" --cuda-graph; do
    t0=$SECONDS; log=logs/model-$DTYPE${graph:+-cuda-graph}
    limit=$(( 580 - SECONDS )); if [ -z "$graph" ]; then limit=$(( limit / 2 )); fi; [ "$limit" -ge 60 ] || limit=60
    timeout "$limit" python3 -m steps.model --dtype "$DTYPE" $graph --save > "$log.out" 2> "$log.err"
    echo "model --dtype $DTYPE $graph rc=$? $((SECONDS-t0))s"; cat "$log.out"; tail -n 3 "$log.err"
  done
elif [ "${MODEL:-1}" = 1 ]; then
  t0=$SECONDS
  timeout $(( 580 - SECONDS > 60 ? 580 - SECONDS : 60 )) python3 -m steps.model --cuda-graph --save \
    > logs/model-cuda-graph.out 2> logs/model-cuda-graph.err
  echo "model --cuda-graph rc=$? $((SECONDS-t0))s"; cat logs/model-cuda-graph.out; tail -n 3 logs/model-cuda-graph.err
fi
