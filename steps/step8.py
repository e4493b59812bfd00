"""python -m steps.step8: build, verify and time step 8 (schedules/step8_conflict_free.py) against step 7.

See `python -m steps.step8 --help`; the idea and its measured outcome are in the docstring of
schedules/step8_conflict_free.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(8))
