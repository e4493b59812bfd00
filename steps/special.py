"""python -m steps.special: fp32's special values, every fp32-accurate step against cuBLAS SGEMM.

The command is steps/commands/special.py; see `python -m steps.special --help`.
"""

from .commands.special import main

if __name__ == "__main__":
    raise SystemExit(main())
