#!/usr/bin/env bash
# Device call 4: the 16-bit GPU tests call 3 did not reach, on the final rule (Plan.in_flight).
set -uo pipefail
source .gpu/setup.sh || exit 1
mkdir -p logs
timeout 215 python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_sixteen_bit_shapes.py -k "deep or step23 or step26 or step22-bf16 or step20-bf16" > logs/pytest-16b.log 2>&1
echo "pytest rc=$?"; tail -n 8 logs/pytest-16b.log
tar -cf "$OUT/call4.tar" logs
