#!/usr/bin/env bash
# Call 3: programmatic dependent launch (probe/pdl.py): a back-to-back chain's exactness, then timing.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
timeout 400 python probe/pdl.py $OUT/pdl.jsonl > $OUT/pdl_log.txt 2>&1; echo "probe rc=$?"
grep -c us $OUT/pdl.jsonl; grep chain $OUT/pdl.jsonl
