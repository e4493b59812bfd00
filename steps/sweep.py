"""python -m steps.sweep: search a step's config space on the GPU, keep the best per size.

The command is steps/commands/sweep.py; see `python -m steps.sweep --help`.
"""

from .commands.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
