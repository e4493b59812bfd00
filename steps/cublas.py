"""python -m steps.cublas: the reference rows (cuBLAS, dlight, MetaSchedule), timed as the ladder is timed.

The command is steps/commands/cublas.py; see `python -m steps.cublas --help`.
"""

from .commands.cublas import main

if __name__ == "__main__":
    raise SystemExit(main())
