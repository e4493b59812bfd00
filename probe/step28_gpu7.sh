source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,power.draw,driver_version --format=csv > $OUT/gpu.txt
run() { t0=$SECONDS; timeout 70 python3 probe/graph_probe.py "$@" > $OUT/g_$1_$2_$3.txt 2>&1; rc=$?;
  echo "== $* rc=$rc $((SECONDS-t0))s"; grep -a -E "tokens|Error|error|illegal|ladder|torch" $OUT/g_$1_$2_$3.txt | grep -av "warning\|Warning\|deprecated\|cls.__new__" | tail -6 | cut -c1-220; }
run 16 1 none
run 16 1 25to19
run 16 1 rows100
run 16 0 none
run 1024 0 none
run 1024 1 none
