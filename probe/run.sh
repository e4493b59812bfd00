#!/usr/bin/env bash
# One device call: the window probe in both 16-bit dtypes, plain and from CUDA graphs.
source .gpu/setup.sh >/dev/null; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
for dt in bf16 fp16; do for g in "" --cuda-graph; do
  timeout 120 python probe/window_ab.py --dtype $dt $g 2>&1 | grep -v "^\[" | tee -a "$OUT/window_ab.txt"
done; done
