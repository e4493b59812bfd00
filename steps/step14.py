"""python -m steps.step14: build, verify and time step 14 (schedules/step14_3xtf32.py) against step 13.

See `python -m steps.step14 --help`; the idea and its measured outcome are in the docstring of
schedules/step14_3xtf32.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(14))
