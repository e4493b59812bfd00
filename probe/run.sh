#!/usr/bin/env bash
# Call 2: Nsight Compute with warm caches (--cache-control none: L2 keeps A between the launches,
# as in the timing loop) on the skinny 16-bit shapes, the pick and cuBLAS; launch 5 of 6.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/ncu
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg"
run() {  # name, kernel regex, cache control, target args...
  local name=$1 rx=$2 cc=$3; shift 3
  timeout 60 ncu --clock-control none --cache-control $cc -k regex:"$rx" --launch-skip 4 --launch-count 1 --metrics "$M" python3 probe/ncu_shape.py "$@" > $OUT/ncu/$name.txt 2>&1
  echo "$name: $(grep -E 'gpu__time_duration|dram__bytes_read|hit_rate' $OUT/ncu/$name.txt | tr -s ' ' | tr '\n' ';')"
}
P1='{"block_m":128,"block_n":64,"stages":8,"ctas":64,"split_k":1}'
P2='{"block_m":64,"block_n":64,"stages":8,"ctas":128,"split_k":1}'
P3='{"block_m":64,"block_n":128,"stages":7,"ctas":132,"split_k":8}'
for cc in none all; do
  run s23_8192x32_$cc main_kernel $cc 23 8192 32 2048 "$P1"
  run cublas_8192x32_$cc 'nvjet|gemm|sm90' $cc cublas 8192 32 2048
  run s23_4096x128_$cc main_kernel $cc 23 4096 128 4096 "$P2"
  run cublas_4096x128_$cc 'nvjet|gemm|sm90' $cc cublas 4096 128 4096
  run s26_64x1024_$cc 'main_kernel' $cc 26 64 1024 8192 "$P3"
  run cublas_64x1024_$cc 'nvjet|gemm|sm90' $cc cublas 64 1024 8192
done
cd $OUT && tar czf ncu.tgz ncu && rm -rf ncu
