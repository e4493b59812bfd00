# Where does `python -m steps.model --cuda-graph` (fp32) fault at its second token count?
# A: the failing sequence, blocking launches (where in Python); B: the same under memcheck (which
# kernel, which address); D: 16 tokens twice (a second count, same shape); C: 16 alone, memcheck.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
which compute-sanitizer; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
M="python -m steps.model --rounds 1 --repeat 3 --seed 1 --cuda-graph"
echo "=== A"; CUDA_LAUNCH_BLOCKING=1 timeout 100 $M --tokens 1 16 > $OUT/a.txt 2>&1; echo "rc $?"; tail -5 $OUT/a.txt
echo "=== B"; timeout 220 compute-sanitizer --tool memcheck --print-limit 12 $M --tokens 1 16 > $OUT/b.txt 2>&1; echo "rc $?"; tail -40 $OUT/b.txt | cut -c1-300
echo "=== D"; timeout 90 $M --tokens 16 16 > $OUT/d.txt 2>&1; echo "rc $?"; tail -5 $OUT/d.txt
echo "=== C"; timeout 130 compute-sanitizer --tool memcheck --print-limit 12 $M --tokens 16 > $OUT/c.txt 2>&1; echo "rc $?"; tail -30 $OUT/c.txt | cut -c1-300
