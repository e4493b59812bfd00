#!/usr/bin/env bash
# Step 21's kernel with its pair of blocks along M sharing B (probe/m_pairs.py) against step 29 and cuBLAS.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
timeout 100 python probe/m_pairs.py $OUT/m_pairs.jsonl > $OUT/m_pairs_log.txt 2>&1; echo "probe rc=$?"
cat $OUT/m_pairs.jsonl; tail -3 $OUT/m_pairs_log.txt
