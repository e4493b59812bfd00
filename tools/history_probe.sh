#!/usr/bin/env bash
# Issue 33: does a sweep's history (its screening of a shape's 25 candidates) move the ranking of
# the shape's finalists? tools/load_probe.py `history` on 1x4096x4096 (try 10's ten finalists)
# and 256x256x16384 (four), two passes of one process per GPU. Logs in $OUT/history.tar.
# MODE=workspace: the same shapes by load_probe's `workspace --history` (the workspace moved).
# MODE=placement: load_probe's `placement` (6 file copies of each library, the j-th after j other modules).
# MODE=levels: load_probe's `levels` (each config as 2 module instances on 3 allocations, its best pair).
# COPIES="0 1 4": those finalists of 1x4096x4096 again at the end of its list (the same config
# built again: a byte-identical kernel, loaded as a module of its own).
# LOADING="EAGER LAZY": each pass's processes under each CUDA_MODULE_LOADING in turn (default: unset).
# From the project root, carry [".gpu"].
set -uo pipefail
source .gpu/setup.sh || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
L=${OUT:-.}/history; mkdir -p "$L"
trap 'tar -C "$(dirname "$L")" -cf "$L.tar" "$(basename "$L")" && rm -rf "$L"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$L/gpus.csv"
R=results/nvidia-h200
python3 -c "import json; a = json.load(open('$R/load_probe_finalists_1x4096x4096.json')); \
b = json.load(open('$R/load_probe_configs.json')); \
f = a['1x4096x4096']; f = f + [f[int(i)] for i in '${COPIES:-}'.split()]; \
json.dump({'1x4096x4096': f, '256x256x16384': b['256x256x16384']}, open('/tmp/history.json', 'w'))"
timeout 120 python3 tools/load_probe.py build /tmp/history.json /tmp/history-libs --history > "$L/build.log" 2>&1 || exit 1
for pass in ${PASSES:-1 2}; do
 for loading in ${LOADING:-default}; do
  for g in 0 1; do
    [ "$loading" = default ] || export CUDA_MODULE_LOADING=$loading
    CUDA_VISIBLE_DEVICES=$g timeout 200 python3 tools/load_probe.py ${MODE:-history} /tmp/history.json /tmp/history-libs \
      $([ "${MODE:-history}" = workspace ] && echo --history --places 8 --rounds 3) \
      $([ "${MODE:-history}" = levels ] && echo --loads 2) \
      $([ "${MODE:-history}" = placement ] && echo --loads 6) \
      > "$L/pass$pass-$loading-gpu$g.txt" 2>&1 &
  done
  wait
 done
done
for f in "$L"/pass*.txt; do echo "== $(basename "$f")"; grep -v "^JSON" "$f" | grep -v "^     "; done
