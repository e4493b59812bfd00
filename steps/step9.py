"""python -m steps.step9: build, verify and time step 9 (schedules/step9_warp_tile.py) against step 8.

See `python -m steps.step9 --help`; the idea and its measured outcome are in the docstring of
schedules/step9_warp_tile.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(9))
