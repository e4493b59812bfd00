#!/usr/bin/env bash
# Nsight Compute on one Hopper rung's GEMM kernel (default: step 18 at 4096^3): speed of light,
# warp stall reasons, the tensor pipe. Run from the project root on the GPU machine:
#   [DTYPE=bf16] bash tools/ncu_hopper.sh [STEP] [SIZE] [CONFIG_JSON]   # logs to ${OUT:-logs}/ncu_stepSTEP_SIZE[_DTYPE][_TAG].txt
# (CONFIG_JSON replaces the step's default config; TAG, if set in the environment, names that log.)
set -uo pipefail
if [ -f .gpu/setup.sh ]; then source .gpu/setup.sh >/dev/null || exit 1; fi
step=${1:-18}; size=${2:-4096}; cfg=${3:-}; dir=${OUT:-logs}; mkdir -p "$dir"
log="$dir/ncu_step${step}_${size}${DTYPE:+_$DTYPE}${TAG:+_$TAG}.txt"
# The GEMM is the last kernel of a call (steps 15-17 run B's transposed copy first).
ncu --clock-control none -k regex:'main_kernel(_1|_2)?$' --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --print-details all python3 tools/ncu_probe.py "$step" "$size" ${cfg:+"$cfg"} > "$log" 2>&1
echo "ncu rc=$? -> $log"
# The tensor pipe's own counters, by whichever names this ncu has for Hopper's wgmma pipe.
names=$(ncu --query-metrics --chip gh100 2>/dev/null | awk '{print $1}' | grep -E '^sm__(pipe_tensor_op_gmma|inst_executed_pipe_tensor_op_gmma|pipe_tensor_op_hmma)' | sort -u | head -6)
metrics=$(for n in $names; do case $n in *inst_executed*) echo -n "$n.sum,";; *) echo -n "$n.avg.pct_of_peak_sustained_active,";; esac; done)
echo "tensor-pipe metrics: ${metrics%,}" >> "$log"
if [ -n "$metrics" ]; then
  ncu --clock-control none -k regex:'main_kernel(_1|_2)?$' --launch-skip 2 --launch-count 1 \
      --metrics "${metrics%,}" python3 tools/ncu_probe.py "$step" "$size" ${cfg:+"$cfg"} >> "$log" 2>&1
  echo "ncu metrics rc=$?"
fi
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Stall|stalled|pipe_tensor|Issue Slots|SM Busy|Executed Ipc" "$log" | head -60
