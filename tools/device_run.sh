#!/usr/bin/env bash
# Runs ON the lent GPU machine (device tool), from the project root, after
# ../shared/gpu/prepare here and with carry [".gpu"]:
#   bash tools/device_run.sh            # ladder --save, ncu counts for steps 7-10, GPU tests
#   TUNE=1 bash tools/device_run.sh     # first re-tune step 10 (schedules/tuned/step10.json)
#   NCU_STEPS="10" NCU_SIZES="2048" ...  # fewer ncu runs
# Everything comes back in one tar, $OUT/all.tar: results/, schedules/tuned, README.md, logs/.
set -uo pipefail
source .gpu/setup.sh || exit 1
mkdir -p logs; out=${OUT:-/tmp/out}; mkdir -p "$out"
finish() { tar -cf "$out/all.tar" results schedules/tuned README.md logs; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > logs/nvidia-smi.csv
if [ "${TUNE:-0}" = 1 ]; then
  t0=$SECONDS
  timeout 240 python3 -m steps.sweep --step 10 --sizes 512 1024 2048 --top 4 --write --log logs/sweep10.jsonl > logs/sweep10.out 2> logs/sweep10.err
  echo "sweep10 rc=$? $((SECONDS-t0))s"; cat logs/sweep10.out
fi
t0=$SECONDS
timeout 200 python3 -m steps --save > logs/ladder.out 2> logs/ladder.err
echo "ladder rc=$? $((SECONDS-t0))s"; tail -n 25 logs/ladder.out
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,gpu__time_duration.sum
for s in ${NCU_STEPS:-7 8 9 10}; do for n in ${NCU_SIZES:-512 1024 2048}; do
  timeout 40 "$NCU" --clock-control none --launch-skip 1 --launch-count 1 --metrics $M --csv python3 tools/ncu_probe.py $s $n > logs/ncu_step${s}_${n}.csv 2>&1
done; done
t0=$SECONDS
timeout $(( 560 - SECONDS > 30 ? 560 - SECONDS : 30 )) python3 -m pytest -m gpu -q -p no:cacheprovider > logs/pytest-gpu.log 2>&1 || true
echo "pytest $((SECONDS-t0))s"; tail -n 30 logs/pytest-gpu.log
