"""python -m steps.plot: the ladder's plots, rendered headless from saved results.

The command is steps/report/plot.py; see `python -m steps.plot --help`.
"""

from .report.plot import main

if __name__ == "__main__":
    raise SystemExit(main())
