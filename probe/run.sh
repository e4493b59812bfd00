#!/usr/bin/env bash
# Nsight Compute's full set, warm L2 (--cache-control none, as in the timing loop), the 5th launch
# of 6: step 29 at its default (128 x 64 tiles, 64 blocks), at 64 x 64 (128 blocks), and cuBLAS.
source .gpu/setup.sh; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/ncu
run() {  # name, kernel regex, target args...
  local name=$1 rx=$2; shift 2
  timeout 70 ncu --clock-control none --cache-control none --set full -k regex:"$rx" --launch-skip 4 --launch-count 1 \
    python3 probe/ncu_skinny.py "$@" > $OUT/ncu/$name.txt 2>&1
  echo "$name rc=$? $(grep -E 'Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput' $OUT/ncu/$name.txt | tr -s ' ' | tr '\n' ';')"
}
run s29_128x64 main_kernel 29 8192 32 2048
run s29_64x64 main_kernel 29 8192 32 2048 '{"block_m":64,"block_n":64,"stages":12,"ctas":128,"split_k":1}'
run cublas 'nvjet|gemm|sm90' cublas 8192 32 2048
cd $OUT && tar czf ncu.tgz ncu && rm -rf ncu
