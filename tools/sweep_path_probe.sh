#!/usr/bin/env bash
# Issue 33: do a sweep's confirmations rank the same finalists as standalone processes do?
# Four shapes' step-11 sweeps (25 candidates each, the default confirmation), at once: the local
# path on GPU 0 and the RPC path (steps.rpc_pool, one server) on GPU 1; then tools/load_probe.py's
# standalone ranking of the same shapes' finalists on both GPUs. Logs in $OUT/sweep-path.tar.
# From the project root, carry [".gpu", ".rpcdeps"] (bash tools/rpcdeps.sh first).
set -uo pipefail
source .gpu/setup.sh || exit 1
export PYTHONPATH="$PWD/.rpcdeps:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
L=${OUT:-.}/sweep-path; mkdir -p "$L"
trap 'tar -C "$(dirname "$L")" -cf "$L.tar" "$(basename "$L")" && rm -rf "$L"' EXIT
S=${SHAPES:-1x4096x4096,256x256x16384,2048x2048x1,16x4096x4096}  # LOCAL_SHAPES: the local sweep's, if others
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m steps.sweep --step 11 --shapes "${LOCAL_SHAPES:-$S}" --candidates 25 \
  --log "$L/local.jsonl" > "$L/local.out" 2> "$L/local.err" &
LOCAL=$!
timeout 260 python3 -m steps.rpc_pool --gpus 1 --key probe --port 9391 --server-port 9400 \
  > "$L/pool.out" 2>&1 &
POOL=$!
for _ in $(seq 60); do  # the tracker listening (a sweep fails at once where it is not)
  python3 -c "import socket; socket.create_connection(('127.0.0.1', 9391), 1)" 2> /dev/null && break
  sleep 1
done
CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m steps.sweep --step 11 --shapes "$S" --candidates 25 --tracker 127.0.0.1:9391 --key probe \
  --log "$L/rpc.jsonl" > "$L/rpc.out" 2> "$L/rpc.err"
echo "rpc sweep rc=$?"
wait $LOCAL; echo "local sweep rc=$?"
kill -INT $POOL; wait $POOL
if [ "${RANKS:-1}" = 1 ]; then  # RANKS=0: no standalone ranking
  cfg=results/nvidia-h200/load_probe_configs.json
  timeout 120 python3 tools/load_probe.py build $cfg /tmp/path-libs > "$L/ranks-build.log" 2>&1
  for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g timeout 120 python3 tools/load_probe.py places $cfg /tmp/path-libs --rounds 3 > "$L/ranks-gpu$g.txt" 2>&1 &
  done
  wait
  grep -h "median over" "$L"/ranks-gpu*.txt
fi
tail -n 6 "$L/local.out" "$L/rpc.out"
