#!/usr/bin/env bash
# Device call 2: in flight + last-slice wait against the committed kernels; then the 16-bit GPU tests.
set -uo pipefail
source .gpu/setup.sh || exit 1
mkdir -p logs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/nvidia-smi.csv
t0=$SECONDS
PYTHONPATH=$PWD:$PYTHONPATH timeout 340 python probe/inflight2.py logs/inflight2.jsonl > logs/inflight2.out 2>&1
echo "inflight2 rc=$? $((SECONDS-t0))s"
python - <<'P'
import json
for l in open("logs/inflight2.jsonl"):
    r = json.loads(l); print(r.get("step"), r["shape"], r["dtype"], r.get("cfg"), r.get("var"), r.get("rnd"), r.get("us") and round(r["us"], 2), r.get("err") and f'{r["err"]:.2e}', r.get("error"))
P
t0=$SECONDS
timeout $(( 585 - SECONDS > 60 ? 585 - SECONDS : 60 )) python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_sixteen_bit_shapes.py tests/test_gpu_sixteen_bit.py tests/test_gpu_epilogue.py > logs/pytest-16.log 2>&1
echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 15 logs/pytest-16.log
tar -cf "$OUT/call2.tar" logs
