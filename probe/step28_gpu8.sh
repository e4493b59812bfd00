source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
run() { t0=$SECONDS; timeout 75 python3 probe/graph_probe.py "$@" > $OUT/s_$2_$3.txt 2>&1; rc=$?;
  echo "== $* rc=$rc $((SECONDS-t0))s"; grep -a -E "^ +[0-9]+ +[0-9.]+|illegal|Error" $OUT/s_$2_$3.txt | grep -av "warning" | tail -4 | cut -c1-200; }
run 1,16 1 rows100
run 1,16 1 none
