source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,driver_version --format=csv > $OUT/gpu.txt
timeout 150 python probe/step28_diag.py > $OUT/diag.txt 2>&1; cat $OUT/diag.txt | grep -v "^apache"
timeout 60 bash probe/ncu28.sh 8192
timeout 60 bash probe/ncu28.sh 4096
timeout 250 python probe/rounds28.py 8192,4096,2048,1024 4 25,28,28big > $OUT/rounds.txt 2>&1
grep -E "medians|x step 25|err" $OUT/rounds.txt
timeout 100 python -m steps.special --steps 25,28 > $OUT/special.txt 2>&1; tail -4 $OUT/special.txt
