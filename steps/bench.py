"""python -m steps.bench: the final CUDA-core step against cuBLAS over the published shape set.

The command is steps/commands/bench.py; see `python -m steps.bench --help`.
"""

from .commands.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
