#!/usr/bin/env bash
# Issue 33 on a lent machine with several GPUs (nvidia-h100-x2 / x4 kinds), from the project root:
#   GPUS=0,1 [CANDIDATES=10] [LIMIT_S=480] [TESTS=0] [FORK=1] [REPEAT=n] bash tools/scaling_run.sh
#   (carry [".gpu", ".rpcdeps"]; bash tools/rpcdeps.sh first). TESTS=1, the default, first runs
#   tests/test_device_check.py and tests/test_rpc.py -m gpu (~1-2 min). CONFIRM=n: the sweep's
#   --confirm rounds. CONTROL=1: the one-server sweep again at the end. One server runs ~0.15 s of GPU per step-11 candidate.
#   CLOCKS=1: each GPU's clocks, power, temperature and throttle reasons every 0.5 s (logs/clocks.csv).
#   SERVERS="1" / SERVERS="2 4" RUNS_FROM=runs/rpc-scaling-run-1.json: a run split over two calls to one
#   machine (tools/rpc_scaling.py's header): the first call's logs/rpc-scaling-run-1.json copied into
#   runs/ (untracked, so the next call carries it), the second call joins it and saves all counts.
# The same step-11 sweep through 1, 2 (and 4) servers (tools/rpc_scaling.py --save). logs/ come
# back in $OUT/logs.tar (in $OUT/logs if cut off), results/ in $OUT/scaling-results.tar.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
if [ -d .rpcdeps ]; then export PYTHONPATH="$PWD/.rpcdeps${PYTHONPATH:+:$PYTHONPATH}"; fi
export PYTHONUNBUFFERED=1
# With $OUT set, logs/ is a link into it: what ran comes back even if the call is cut off.
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/logs" && rm -rf logs && ln -s "$OUT/logs" logs; else mkdir -p logs; fi
# Only a few files come back from $OUT: on a normal exit the logs go back as one tar.
finish() {
  if [ -n "${CLOCKS_PID:-}" ]; then kill "$CLOCKS_PID" 2>/dev/null; fi
  if [ -n "${OUT:-}" ]; then
    tar -cf "$OUT/scaling-results.tar" results
    tar -C "$OUT" -cf "$OUT/logs.tar" logs && rm -rf "$OUT/logs" logs
  fi
}
trap finish EXIT
if [ "${CLOCKS:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 500 > logs/clocks.csv 2>&1 &
  CLOCKS_PID=$!
fi
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv > logs/scaling-nvidia-smi.csv
cat logs/scaling-nvidia-smi.csv
GPUS=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}
if [ "${TESTS:-1}" = 1 ]; then  # the device check against the host's, and a local and an RPC sweep, on the GPU (~1-2 min)
  timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_device_check.py tests/test_rpc.py \
    > logs/pytest-gpu-check.log 2>&1
  echo "pytest rc=$?"; tail -n 3 logs/pytest-gpu-check.log
fi
# What the sweep's imports cost here, before its clock starts (Python's own account).
( time python3 -X importtime -c "import steps.commands.sweep" ) > logs/importtime.txt 2>&1
tail -n 3 logs/importtime.txt
timeout $(( ${LIMIT_S:-480} )) python3 tools/rpc_scaling.py --gpus "$GPUS" --candidates "${CANDIDATES:-10}" \
  ${SERVERS:+--servers $SERVERS} ${RUNS_FROM:+--runs-from $RUNS_FROM} ${FORK:+--fork} ${REPEAT:+--repeat "$REPEAT"} ${CONFIRM:+--confirm "$CONFIRM"} ${CONTROL:+--control} --save > logs/rpc-scaling.out 2> logs/rpc-scaling.err
echo "rpc_scaling rc=$?"; cat logs/rpc-scaling.out; tail -n 8 logs/rpc-scaling.err
