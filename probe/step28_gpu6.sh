source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,driver_version --format=csv > $OUT/gpu.txt
t0=$SECONDS
timeout 230 python3 -m steps.model --save > $OUT/model_fp32.txt 2> $OUT/model_fp32.err
echo "model rc=$? $((SECONDS-t0))s"; cat $OUT/model_fp32.txt | tail -25; tail -3 $OUT/model_fp32.err
t0=$SECONDS
timeout 200 python3 -m steps.model --cuda-graph --save > $OUT/model_fp32_graph.txt 2> $OUT/model_fp32_graph.err
echo "model graph rc=$? $((SECONDS-t0))s"; cat $OUT/model_fp32_graph.txt | tail -25; tail -3 $OUT/model_fp32_graph.err
t0=$SECONDS
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_model.py > $OUT/gpu_model_tests.txt 2>&1
echo "tests $((SECONDS-t0))s"; tail -4 $OUT/gpu_model_tests.txt
cd $OUT && mkdir -p r && cp -r "$OLDPWD/results/nvidia-h200" r/ 2>/dev/null; tar czf back.tgz r *.txt *.err 2>/dev/null; rm -rf r
