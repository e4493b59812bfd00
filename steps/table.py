"""python -m steps.table: the README's tables, generated from results/, never typed by hand.

The command is steps/report/table.py; see `python -m steps.table --help`.
"""

from .report.table import main

if __name__ == "__main__":
    raise SystemExit(main())
