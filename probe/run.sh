#!/usr/bin/env bash
# The device call of probe/l2_promotion.py, then Nsight Compute on the skinny shapes (pick, cuBLAS).
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/smi.txt
timeout 330 python probe/l2_promotion.py $OUT/promo.jsonl > $OUT/promo_log.txt 2>&1; echo "probe rc=$?"
mkdir -p $OUT/ncu
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --print-details all"
P23='{"block_m":128,"block_n":64,"stages":8,"ctas":64,"split_k":1}'
timeout 60 ncu --clock-control none -k regex:'main_kernel' --launch-skip 2 --launch-count 1 $S python3 probe/ncu_shape.py 23 8192 32 2048 "$P23" > $OUT/ncu/s23_8192x32.txt 2>&1
PROMO=3 timeout 60 ncu --clock-control none -k regex:'main_kernel' --launch-skip 2 --launch-count 1 $S python3 probe/ncu_shape.py 23 8192 32 2048 "$P23" > $OUT/ncu/s23_8192x32_p3.txt 2>&1
for sh in "8192 32 2048" "4096 128 4096" "64 1024 8192"; do
  timeout 60 ncu --clock-control none -k regex:'nvjet|gemm|sm90' --launch-skip 2 --launch-count 1 $S python3 probe/ncu_shape.py cublas $sh > "$OUT/ncu/cublas_${sh// /x}.txt" 2>&1
done
cd $OUT && tar czf ncu.tgz ncu && rm -rf ncu
