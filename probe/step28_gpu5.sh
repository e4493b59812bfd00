source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,driver_version --format=csv > $OUT/gpu.txt
t0=$SECONDS
timeout 170 python -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_epilogue.py -k "28" > $OUT/gpu_epilogue_tests.txt 2>&1
echo "epilogue tests $((SECONDS-t0))s"; tail -4 $OUT/gpu_epilogue_tests.txt
t0=$SECONDS
timeout 90 python -m steps.epilogue --step 28 --sizes 4096 --rounds 3 > $OUT/epilogue28.txt 2>&1
echo "epilogue $((SECONDS-t0))s"; tail -8 $OUT/epilogue28.txt
t0=$SECONDS
timeout 300 python3 -m steps.bench --save > $OUT/bench_fp32.txt 2> $OUT/bench_fp32.err
echo "bench rc=$? $((SECONDS-t0))s"; tail -n 30 $OUT/bench_fp32.txt; tail -n 3 $OUT/bench_fp32.err
cd $OUT && mkdir -p r && cp -r "$OLDPWD/results/nvidia-h200" r/ 2>/dev/null; cp "$OLDPWD/schedules/tuned/dispatch.json" r/ 2>/dev/null
tar czf back.tgz r *.txt *.err 2>/dev/null; rm -rf r
