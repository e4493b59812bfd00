#!/usr/bin/env bash
# The host-bound shapes on kernel time: the pick replayed from a CUDA graph (probe/graph_hostbound.py), bf16 then TF32.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/logs/gpu.txt 2>&1
timeout 320 python probe/graph_hostbound.py $OUT/logs/graph.txt bf16 > $OUT/logs/graph_bf16_stdout.txt 2>&1; echo "bf16 rc=$?"
timeout 200 python probe/graph_hostbound.py $OUT/logs/graph.txt tf32 > $OUT/logs/graph_tf32_stdout.txt 2>&1; echo "tf32 rc=$?"
tail -3 $OUT/logs/graph_bf16_stdout.txt $OUT/logs/graph_tf32_stdout.txt; cut -c1-260 $OUT/logs/graph.txt
