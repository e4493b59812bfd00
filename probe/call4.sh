#!/usr/bin/env bash
cd "$(dirname "$0")/.." || exit 2
T0=$SECONDS
source .gpu/setup.sh > $OUT/setup.txt 2>&1
left() { echo $(( ${1} - (SECONDS - T0) )); }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/smi_trace.csv 2>&1 &
SMI=$!
timeout $(left 200) python probe/rounds48.py 4096 fp16,bf16 8 > $OUT/rounds.txt 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $OUT/rounds.txt
kill $SMI
M='sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,launch__grid_size,launch__block_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__registers_per_thread,launch__shared_mem_per_block_dynamic'
timeout $(left 330) ncu --clock-control none --launch-skip 1 --launch-count 1 --metrics $M python probe/ncu_cublas.py 4096 fp16 > $OUT/ncu_cublas_fp16.txt 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $OUT/ncu_cublas_fp16.txt
timeout $(left 400) ncu --clock-control none --launch-skip 1 --launch-count 1 --metrics $M python probe/ncu_cublas.py 4096 bf16 > $OUT/ncu_cublas_bf16.txt 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $OUT/ncu_cublas_bf16.txt
DTYPE=fp16 timeout $(left 500) ncu --clock-control none -k regex:'main_kernel(_1|_2)?$' --launch-skip 2 --launch-count 1 --metrics $M python tools/ncu_probe.py 22 4096 > $OUT/ncu_step22_fp16.txt 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $OUT/ncu_step22_fp16.txt
DTYPE=fp16 timeout $(left 570) ncu --clock-control none -k regex:'main_kernel(_1|_2)?$' --launch-skip 2 --launch-count 1 --metrics $M python tools/ncu_probe.py 20 4096 > $OUT/ncu_step20_fp16.txt 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $OUT/ncu_step20_fp16.txt
cd $OUT && tar -czf ncu.tgz ncu_*.txt && rm ncu_*.txt
