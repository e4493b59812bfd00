#!/usr/bin/env bash
# Call 4: step 29's GPU tests, then probe/pdl_rounds.py.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/smi.txt
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_dependent_launch.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"
tail -3 $OUT/pytest.txt
timeout 300 python probe/pdl_rounds.py $OUT/rounds.jsonl > $OUT/rounds_log.txt 2>&1; echo "probe rc=$?"
