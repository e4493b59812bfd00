source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,driver_version --format=csv > $OUT/gpu.txt
timeout 120 python probe/step28_diag.py > $OUT/diag.txt 2>&1
tail -3 $OUT/diag.txt
timeout 240 python -m steps.step28 --sizes 1024 4096 8192 --shape 1 300 77 --shape 4097 33 1001 --shape 64 64 70000 --repeat 20 > $OUT/step28.txt 2>&1
tail -25 $OUT/step28.txt
timeout 200 python -m steps.special --steps 25,28 > $OUT/special.txt 2>&1
tail -30 $OUT/special.txt
