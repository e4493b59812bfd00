# After schedules/integration/scratch.py: the fp32 block from CUDA graphs at several token counts
# in one process, memcheck on fp32 (16, 1024 tokens) and bf16 (16), the GPU model tests, and the
# fp32 block's full CUDA-graph run saved under $OUT/results.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv
M="python -m steps.model --rounds 1 --repeat 3 --seed 1 --cuda-graph"
S="compute-sanitizer --tool memcheck --print-limit 5"
echo "=== 1: $M --tokens 1 16 128"; timeout 120 $M --tokens 1 16 128 2>&1 | grep -v Warning; echo "rc ${PIPESTATUS[0]}"
echo "=== 2: memcheck, fp32, 16 tokens"; timeout 120 $S $M --tokens 16 > $OUT/m16.txt 2>&1; echo "rc $?"; grep -v "Host Frame" $OUT/m16.txt | tail -8
echo "=== 3: memcheck, fp32, 1024 tokens"; timeout 150 $S $M --tokens 1024 > $OUT/m1024.txt 2>&1; echo "rc $?"; grep -v "Host Frame" $OUT/m1024.txt | tail -8
echo "=== 4: memcheck, bf16, 16 tokens"; timeout 120 $S $M --dtype bf16 --tokens 16 > $OUT/mbf16.txt 2>&1; echo "rc $?"; grep -v "Host Frame" $OUT/mbf16.txt | tail -8
echo "=== 5: tests/test_gpu_model.py"; timeout 230 python -m pytest -q -p no:cacheprovider tests/test_gpu_model.py 2>&1 | tail -8
echo "=== 6: python -m steps.model --cuda-graph --save (fp32, all token counts)"; mkdir -p $OUT/results
timeout 140 python -m steps.model --cuda-graph --save --results-dir $OUT/results 2>&1 | grep -v Warning | tail -14
cd $OUT && tar czf results.tgz results && rm -rf results
