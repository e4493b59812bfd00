source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,driver_version --format=csv > $OUT/gpu.txt
timeout 200 python -m steps.step28 --sizes 512 1024 2048 4096 8192 --save > $OUT/ladder28.txt 2>&1; tail -14 $OUT/ladder28.txt
mkdir -p $OUT/res && cp results/nvidia-h200/step28.json $OUT/res/ 2>/dev/null
timeout 60 ncu --clock-control none -k regex:'main_kernel' --launch-skip 8 --launch-count 8 --metrics gpu__time_duration.sum \
    python3 tools/ncu_probe.py 28 1024 > $OUT/ncu28_times_1024.txt 2>&1; grep -E "main_kernel|gpu__time_duration" $OUT/ncu28_times_1024.txt
timeout 280 python -m pytest -q -m gpu -p no:cacheprovider -k "step28 or 3xfp16" tests/test_gpu.py tests/test_gpu_shapes.py tests/test_gpu_special.py tests/test_3xfp16.py tests/test_hopper.py > $OUT/gpu_tests.txt 2>&1; tail -15 $OUT/gpu_tests.txt
cd $OUT && tar czf logs.tgz *.txt res && rm -rf res
