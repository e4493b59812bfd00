# Step 28's kernels one by one (Nsight Compute, clocks as the board sets them): each kernel's time
# at SIZE^3 in the second call (8 kernels: no paddings at these sizes), then the GEMM's stalls and tensor pipe.
size=${1:-8192}
ncu --clock-control none -k regex:'main_kernel' --launch-skip 8 --launch-count 8 --metrics gpu__time_duration.sum \
    python3 tools/ncu_probe.py 28 $size > $OUT/ncu28_times_$size.txt 2>&1
grep -E "main_kernel|gpu__time_duration" $OUT/ncu28_times_$size.txt
