# After LiftScratch and keep_whole: compute-sanitizer memcheck on the 16-bit blocks from CUDA
# graphs (bf16 failed on step 26's launch size), and on Hopper rungs run alone at an odd shape.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv
S="compute-sanitizer --tool memcheck --print-limit 3"
M="python -m steps.model --rounds 1 --repeat 3 --seed 1 --cuda-graph"
run() { name=$1; shift; timeout $1 $S "${@:2}" > $OUT/$name.txt 2>&1; echo "--- $name rc $?"; grep -v "Host Frame" $OUT/$name.txt | grep -v Warning | tail -${TAIL:-4} | cut -c1-220; }
TAIL=6 run bf16_16 100 $M --dtype bf16 --tokens 16
run fp16_16 100 $M --dtype fp16 --tokens 16
run bf16_1024 100 $M --dtype bf16 --tokens 1024
for s in "26 bf16" "27 bf16" "21 bf16" "22 fp16" "20 fp16" "16 bf16" "15 fp32" "28 fp32" "19 fp32" "25 fp32"; do
  set -- $s; run step$1_$2 60 python -m steps.step$1 --dtype $2 --shape 1000 1500 700 --repeat 2 --seed 1
done
echo "=== GPU tests"; timeout 200 python -m pytest -q -p no:cacheprovider tests/test_gpu_model.py -k "own_memory or several" 2>&1 | tail -4
cd $OUT && tar czf memcheck.tgz *.txt && rm *.txt
