#!/usr/bin/env bash
# Issue 32's measurement on a GPU machine, from the project root (one 10-minute call):
#   1. where the CUDA is compiled: a cubin in the build (the build processes run NVRTC) or not
#   2. the GPU tests: the tracker's winner is the local sweep's (tests/test_rpc.py -m gpu), the
#      check on the device is the host's (tests/test_device_check.py -m gpu)
#   3. wall time, the same step-11 candidates (SHAPES x CANDIDATES), alternating local, tracker,
#      local, tracker: the tracker with one server must be at most 1.10x the local path, with the
#      same winners or ties within noise (tools/winners.py on each pair of logs)
#   SHAPES=... CANDIDATES=8 TESTS=0 FORK=1 ROUNDS=2 SWEEP_S=105 bash tools/rpc_run.sh
# Logs go to logs/ (with $OUT set, a link to $OUT/logs, tarred into $OUT/logs.tar on exit: only a
# few files come back from a device call). ROUNDS=2 SWEEP_S=105 are the defaults.
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh || exit 1; fi
# The lent machine has no network and no tornado (TVM's tracker needs it): carry a copy unpacked
# from its wheel into the git-ignored .rpcdeps/ (bash tools/rpcdeps.sh); carry [".gpu", ".rpcdeps"].
if [ -d .rpcdeps ]; then export PYTHONPATH="$PWD/.rpcdeps${PYTHONPATH:+:$PYTHONPATH}"; fi
export PYTHONUNBUFFERED=1
# With $OUT set, logs/ is a link into it: what ran comes back even if the call is cut off.
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/logs" && rm -rf logs && ln -s "$OUT/logs" logs; else mkdir -p logs; fi
pool=""
# Only a few files come back from $OUT: on a normal exit the logs go back as one tar.
finish() {
  [ -n "$pool" ] && kill -- -"$pool" 2>/dev/null; wait 2>/dev/null
  if [ -n "${OUT:-}" ]; then tar -C "$OUT" -cf "$OUT/logs.tar" logs && rm -rf "$OUT/logs" logs; fi
}
trap finish EXIT
SHAPES=${SHAPES:-1024x1024x1024,2048x2048x2048,4096x4096x4096,2048x64x2048,128x4096x4096,256x256x16384,1000x1500x700,2047x2047x2047,4096x4096x64,513x257x1025}
CANDIDATES=${CANDIDATES:-8}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee logs/nvidia-smi.csv
python3 - <<'PY' 2>&1 | tail -n 1
import schedules
lib = schedules.build(10, 2048, 2048, 2048)
try:
    print("cubin in the build: text?", len(lib.mod.imports[0].inspect_source("cubin")))
except UnicodeDecodeError:  # binary: the build processes ran NVRTC, the servers only load it
    print("cubin in the build: yes (binary, compiled here)")
except Exception as e:
    print("cubin in the build: no:", type(e).__name__, str(e).splitlines()[0][:120])
PY
if [ "${TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 150 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_rpc.py tests/test_device_check.py > logs/pytest-gpu-rpc.log 2>&1
  echo "pytest rc=$? $((SECONDS-t0))s"; tail -n 5 logs/pytest-gpu-rpc.log
fi
# FORK=1: sessions forked from their server (TVM's default) instead of spawned (the launcher's
# default since forked sessions failed on the H100: results/nvidia-h100-80gb-hbm3/evidence/rpc_tries.txt)
setsid python3 -m steps.rpc_pool --gpus 0 --key h100 --host 127.0.0.1 --port 9190 ${FORK:+--fork} > logs/rpc-pool.log 2>&1 &
pool=$!
sleep 8
sweep() {  # $1: local or rpc, $2: round
  local extra=""; [ "$1" = rpc ] && extra="--tracker 127.0.0.1:9190 --key h100"
  rm -f "logs/rpc-wall-$1-$2.jsonl"
  local t0; t0=$(date +%s.%N)
  timeout "${SWEEP_S:-105}" python3 -m steps.sweep --step 11 --shapes "$SHAPES" --candidates "$CANDIDATES" $extra \
    --log "logs/rpc-wall-$1-$2.jsonl" > "logs/rpc-wall-$1-$2.out" 2> "logs/rpc-wall-$1-$2.err"
  local rc=$?
  echo "$1 round $2: rc=$rc wall $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s" | tee -a logs/rpc-wall.txt
}
ROUNDS=${ROUNDS:-2}
for round in $(seq "$ROUNDS"); do sweep local $round; sweep rpc $round; done
# The same winners, or ties within noise (tools/winners.py); two local rounds give the noise floor.
for round in $(seq "$ROUNDS"); do
  python3 tools/winners.py logs/rpc-wall-local-$round.jsonl logs/rpc-wall-rpc-$round.jsonl > logs/winners-$round.txt
  echo "round $round winners, local against tracker: $(tail -n 1 logs/winners-$round.txt)" | tee -a logs/rpc-wall.txt
  grep -v " same$" logs/winners-$round.txt | head -n 12
done
if [ "$ROUNDS" -ge 2 ]; then
  echo "noise floor, local round 1 against local round 2: $(python3 tools/winners.py logs/rpc-wall-local-1.jsonl logs/rpc-wall-local-2.jsonl | tail -n 1)" | tee -a logs/rpc-wall.txt
fi
# Where each sweep's time went: the GPU side (local: check and timing under the GPU lock; over
# rpc: the server's upload and load, inputs and float64 product, check and timing) and the builds.
python3 - <<'PY' | tee -a logs/rpc-wall.txt
import collections, glob, json
for f in sorted(glob.glob("logs/rpc-wall-*.jsonl")):
    rows = [json.loads(line) for line in open(f) if line.strip()]
    phases = collections.Counter()
    for r in rows:
        phases["measure"] += r.get("measure_s", 0)
        for k in ("load_s", "operands_s", "check_s", "time_s"):
            phases[k[:-2]] += r.get("rpc", {}).get(k, 0)
    gpu = phases["measure"] + phases["load"] + phases["operands"] + phases["check"] + phases["time"]
    split = ", ".join(f"{k} {v:.1f}" for k, v in phases.items() if v and k != "measure")
    print(f"{f}: {len(rows)} results, {sum('error' in r for r in rows)} failed; GPU side {gpu:.1f} s"
          + (f" ({split})" if split else "") + f", builds {sum(r.get('build_s', 0) for r in rows):.1f} s")
PY
