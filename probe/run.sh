#!/usr/bin/env bash
# The device call of probe/cluster_tiles.py's second round: the GPU tests of StorePlan.rows' fix,
# step 22's 192-row tiles timed again, Nsight Compute at 1536^3 bf16 (step 22, step 23's pick, cuBLAS).
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/smi.txt
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_sixteen_bit_shapes.py -k "tma_stored or step22 or step27" > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"
tail -3 $OUT/pytest.txt
timeout 120 python probe/cluster_tiles.py $OUT/fixed.jsonl fixed > $OUT/fixed_log.txt 2>&1; echo "probe rc=$?"
mkdir -p $OUT/ncu
DTYPE=bf16 TAG=s22_192 OUT=$OUT/ncu timeout 100 bash tools/ncu_hopper.sh 22 1536 '{"block_m":192,"block_n":128,"stages":4,"ctas":96,"chunk":16384}' > /dev/null
DTYPE=bf16 TAG=s23_pick OUT=$OUT/ncu timeout 100 bash tools/ncu_hopper.sh 23 1536 '{"block_m":192,"block_n":128,"stages":4,"ctas":96,"split_k":1}' > /dev/null
timeout 100 ncu --clock-control none -k regex:'nvjet|gemm|sm90' --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --print-details all python3 probe/cublas_1536.py > $OUT/ncu/ncu_cublas_1536_bf16.txt 2>&1
cd $OUT && tar czf ncu.tgz ncu && rm -rf ncu
