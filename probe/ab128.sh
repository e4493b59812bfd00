# bf16 block at 128 tokens: the new rows' picks, the old rows' (git show 00f1cdd:schedules/tuned/dispatch.json > probe/old_dispatch.json), in turns, one process each
run() { python -c "import sys, pathlib; from schedules import dispatch; dispatch.TABLE_PATH = pathlib.Path('$1'); dispatch._load.cache_clear(); from steps.commands.model import main; sys.exit(main(['--dtype', 'bf16', '--tokens', '128']))" 2>&1 | grep -E "^ +128 "; }
for t in schedules/tuned/dispatch.json probe/old_dispatch.json schedules/tuned/dispatch.json probe/old_dispatch.json; do echo "$t: $(run $t)"; done
