#!/usr/bin/env bash
# Device call 3: A/B rounds where new was level or slower; the SwiGLU model; the 16-bit GPU tests.
set -uo pipefail
source .gpu/setup.sh || exit 1
mkdir -p logs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/nvidia-smi.csv
t0=$SECONDS
PYTHONPATH=$PWD:$PYTHONPATH timeout 200 python probe/inflight3.py logs/inflight3.jsonl > logs/inflight3.out 2>&1
echo "inflight3 rc=$? $((SECONDS-t0))s"
python - <<'P'
import json, statistics as st
rows = [json.loads(l) for l in open("logs/inflight3.jsonl")]
keys = sorted({(r["step"], tuple(r["shape"])) for r in rows})
for k in keys:
    o = [r["us"] for r in rows if (r["step"], tuple(r["shape"])) == k and r["var"] == "old" and r["us"]]
    n = [r["us"] for r in rows if (r["step"], tuple(r["shape"])) == k and r["var"] == "new" and r["us"]]
    errs = {f'{r["err"]:.2e}' for r in rows if (r["step"], tuple(r["shape"])) == k}
    print(k, "old", [round(x, 2) for x in o], "new", [round(x, 2) for x in n],
          "old/new %.3f" % (st.median(o) / st.median(n)) if o and n else "", errs)
P
t0=$SECONDS
timeout 120 python -m steps.model --dtype bf16 --mlp swiglu --tokens 16 128 1024 > logs/model-swiglu.out 2> logs/model-swiglu.err
echo "model rc=$? $((SECONDS-t0))s"; head -n 8 logs/model-swiglu.out; tail -n 3 logs/model-swiglu.err
t0=$SECONDS
timeout $(( 585 - SECONDS > 60 ? 585 - SECONDS : 60 )) python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_sixteen_bit_shapes.py tests/test_gpu_sixteen_bit.py tests/test_gpu_epilogue.py > logs/pytest-16.log 2>&1
echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 15 logs/pytest-16.log
tar -cf "$OUT/call3.tar" logs results
