"""python -m steps.step17: build, verify and time step 17 (schedules/step17_wide_tile.py) against step 16.

See `python -m steps.step17 --help`; the idea and its measured outcome are in the docstring of
schedules/step17_wide_tile.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(17))
