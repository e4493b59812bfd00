#!/usr/bin/env bash
# Paired consumers (probe/paired.py) at the tall-skinny 16-bit shapes; step 24's new 16-bit default at 1x16384x512.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/logs/gpu.txt 2>&1
timeout 300 python probe/paired.py $OUT/logs/paired_bf16.txt bf16 > $OUT/logs/paired_stdout.txt 2>&1; echo "probe rc=$?"
for d in bf16 fp16; do
  timeout 80 python -m steps.bench --dtype $d --steps 24 --shapes 1x16384x512 --in-turns > $OUT/logs/matvec_$d.txt 2>&1; echo "matvec $d rc=$?"
done
tail -5 $OUT/logs/paired_stdout.txt
cat $OUT/logs/paired_bf16.txt; tail -15 $OUT/logs/matvec_bf16.txt
