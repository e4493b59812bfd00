source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,driver_version --format=csv > $OUT/gpu.txt
timeout 150 bash probe/ncu28.sh 8192
timeout 320 python probe/rounds28.py 8192,4096 6 25,28,28p2,28p4 > $OUT/rounds.txt 2>&1
grep -E "medians|x step 25|err" $OUT/rounds.txt
