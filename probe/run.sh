#!/usr/bin/env bash
# Paired consumers and K-rotated tiles (probe/paired.py) at the tall-skinny 16-bit shapes, 4096^3 the control.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/logs/gpu.txt 2>&1
timeout 400 python probe/paired.py $OUT/logs/rotated_bf16.txt bf16 > $OUT/logs/rotated_stdout.txt 2>&1; echo "probe rc=$?"
tail -3 $OUT/logs/rotated_stdout.txt; cat $OUT/logs/rotated_bf16.txt
