#!/usr/bin/env bash
# A lent machine takes the working tree and .gpu/ (61 MiB) under a 64 MiB limit, and the tracked
# tree is 3.4 MB (issue 46): a tree of 2.77 MB went, one of 3.02 MB was refused (2026-11-28).
# So before a call, move out what no command on the GPU reads (the plots, the CSVs, results/*/
# evidence: about 0.8 MB), and put it back after:
#   bash tools/device_hold.sh out      # moved to $HOLD (default /tmp/device-hold), outside the tree
#   bash tools/device_hold.sh back     # restored (a file the call wrote anew keeps the call's version)
# ALSO="docs tests results" moves those folders' tracked files too, for a call that reads none of them
# and carries more than .gpu (issue 51's scaling run with .rpcdeps and a 1.4 MB runs/ file: 2026-11-28).
# ALSO may name one GPU's results folder too: ALSO="docs results/nvidia-h100-80gb-hbm3" is what a
# call on an H200 with .gpu needs at a 4.2 MB tree (2026-11-29), and keeps the H200's own results for
# --save. (A --save there regenerates README.md and docs/measured.md without the folder: bring back
# only the GPU's own result files, then python -c "from steps.report import table; table.update_readme()".)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
HOLD=${HOLD:-/tmp/device-hold}
case "${1:-}" in
  out)
    if [ -d "$HOLD" ] && [ -n "$(ls -A "$HOLD")" ]; then echo "device_hold.sh: $HOLD is not empty: run 'back' first" >&2; exit 2; fi
    also=()
    for d in ${ALSO:-}; do
      case "$d" in
        docs|tests|results) also+=("$d/") ;;
        results/*/*) echo "device_hold.sh: ALSO takes docs, tests, results or results/<gpu>, not $d" >&2; exit 2 ;;
        results/?*) [ -d "${d%/}" ] || { echo "device_hold.sh: no folder ${d%/}" >&2; exit 2; }; also+=("${d%/}/") ;;
        *) echo "device_hold.sh: ALSO takes docs, tests, results or results/<gpu>, not $d" >&2; exit 2 ;;
      esac
    done
    git ls-files '*.png' '*.csv' 'results/*/evidence/*' "${also[@]}" | while read -r f; do
      [ -f "$f" ] || continue
      mkdir -p "$HOLD/$(dirname "$f")" && mv "$f" "$HOLD/$f"
    done
    echo "moved $(find "$HOLD" -type f | wc -l) files to $HOLD" ;;
  back)
    [ -d "$HOLD" ] || { echo "device_hold.sh: nothing held in $HOLD" >&2; exit 2; }
    (cd "$HOLD" && find . -type f) | while read -r f; do
      if [ -e "$f" ]; then rm "$HOLD/$f"; else mkdir -p "$(dirname "$f")" && mv "$HOLD/$f" "$f"; fi
    done
    rm -rf "$HOLD"; echo "restored" ;;
  *) echo "usage: bash tools/device_hold.sh out|back" >&2; exit 2 ;;
esac
