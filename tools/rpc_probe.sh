#!/usr/bin/env bash
# Why a session on the H100's rpc_server failed its device query (CUDA_ERROR_NOT_INITIALIZED,
# 2026-11-25): name first vs an allocation first, on a forking and on a spawning server (--spawn);
# then the GPU test.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
if [ -d .rpcdeps ]; then export PYTHONPATH="$PWD/.rpcdeps${PYTHONPATH:+:$PYTHONPATH}"; fi
export PYTHONUNBUFFERED=1
mkdir -p logs
pool=""
finish() { kill -- -"$pool" 2>/dev/null; wait 2>/dev/null; if [ -n "${OUT:-}" ]; then tar -cf "$OUT/rpcprobe.tar" logs; fi; }
trap finish EXIT
for mode in fork spawn; do
  extra=""; [ "$mode" = spawn ] && extra="--spawn"
  setsid python3 -m steps.rpc_pool --gpus 0 --key h100 --host 127.0.0.1 --port 9190 $extra > "logs/rpc-probe-pool-$mode.log" 2>&1 &
  pool=$!
  sleep 6
  echo "== sessions forked from the server: $mode"
  timeout 60 python3 - <<'PY' 2>&1 | tail -n 6
import tvm
from tvm import rpc
t = rpc.connect_tracker("127.0.0.1", 9190)
for order in ("name first", "allocation first"):
    s = t.request("h100", session_timeout=30)
    dev = s.cuda(0)
    try:
        if order == "allocation first":
            tvm.runtime.empty((1,), "float32", dev); dev.sync()
        print(order, ": exist", dev.exist, "name", dev.device_name)
    except Exception as e:
        print(order, ": FAILED", str(e).splitlines()[-1][:160])
    del s
PY
  kill -- -"$pool" 2>/dev/null; wait "$pool" 2>/dev/null
done
t0=$SECONDS
timeout 110 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_rpc.py > logs/pytest-gpu-rpc.log 2>&1
echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 12 logs/pytest-gpu-rpc.log
