"""python -m steps.crosscheck: the harness's kernel times against Nsight Compute's.

The command is steps/commands/crosscheck.py; see `python -m steps.crosscheck --help`.
"""

from .commands.crosscheck import main

if __name__ == "__main__":
    raise SystemExit(main())
