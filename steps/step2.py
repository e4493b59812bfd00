"""python -m steps.step2: build, verify and time step 2 (schedules/step2_register_tile.py) against step 1.

See `python -m steps.step2 --help`; the idea and its measured outcome are in the docstring of
schedules/step2_register_tile.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(2))
