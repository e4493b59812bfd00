#!/usr/bin/env bash
# Build CUTLASS's TF32 mma.sync GEMMs (gemm_tf32.cu) for sm_90 into one shared library, one
# exported prepare_/launch_/smem_ function set per tile config, and list the configs beside it.
#   CUTLASS_DIR=/path/to/cutlass bash tools/cutlass_tf32/build.sh [OUT_DIR]
# Needs nvcc and a CUTLASS checkout (only its include/ is read). Tested with nvcc 13.0 and
# CUTLASS 4.7, whose 2.x device API these kernels use. No GPU needed: it can run on a laptop,
# and the library (about 0.5 MB, linked to the shared cudart) travels to the GPU machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${CUTLASS_DIR:-}" ]; then echo "build.sh: error: set CUTLASS_DIR to a CUTLASS checkout (git clone https://github.com/NVIDIA/cutlass)" >&2; exit 2; fi
command -v nvcc > /dev/null || { echo "build.sh: error: nvcc not found on PATH" >&2; exit 2; }
inc=$CUTLASS_DIR/include
[ -f "$inc/cutlass/gemm/device/gemm.h" ] || { echo "build.sh: error: no CUTLASS headers under $inc" >&2; exit 2; }
out=$(mkdir -p "${1:-$here/build}" && cd "${1:-$here/build}" && pwd)
# name:block_m:block_n:block_k:warp_m:warp_n:stages. CUTLASS's own SM80 TF32 tile list
# (python/cutlass_library/generator.py) includes these; 128x128x32_3 is step 13's default tile.
CONFIGS="c128x128x32_3:128:128:32:64:64:3 c128x128x32_4:128:128:32:64:64:4
c128x128x16_4:128:128:16:64:64:4 c128x128x16_5:128:128:16:64:64:5
c128x256x32_3:128:256:32:64:64:3 c256x128x32_3:256:128:32:64:64:3
c128x256x16_3:128:256:16:64:64:3 c256x128x16_3:256:128:16:64:64:3"
obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT
for c in $CONFIGS; do
  IFS=: read -r name bm bn bk wm wn st <<<"$c"
  nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I "$inc" -DNAME="$name" -DBM="$bm" -DBN="$bn" \
    -DBK="$bk" -DWM="$wm" -DWN="$wn" -DST="$st" -Xcompiler -fPIC -Xptxas -v \
    -c "$here/gemm_tf32.cu" -o "$obj/$name.o" 2> "$obj/$name.log" &
done
wait
: > "$out/cutlass_tf32.configs"
for c in $CONFIGS; do
  name=${c%%:*}
  [ -f "$obj/$name.o" ] || { echo "build.sh: error: $name failed to compile:" >&2; tail -5 "$obj/$name.log" >&2; exit 1; }
  echo "$name $(grep -o 'Used [0-9]* registers' "$obj/$name.log"), $(grep -o '[0-9]* bytes spill stores' "$obj/$name.log")"
  echo "$name" >> "$out/cutlass_tf32.configs"
done
nvcc -shared -cudart shared -o "$out/cutlass_tf32.so" "$obj"/*.o
strip "$out/cutlass_tf32.so"
echo "built $out/cutlass_tf32.so"
