"""python -m steps.step1: build, verify and time step 1 (schedules/step1_grid.py) against numpy on the CPU.

See `python -m steps.step1 --help`; the idea and its measured outcome are in the docstring of
schedules/step1_grid.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(1))
