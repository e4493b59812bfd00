"""python -m steps.step29: build, verify and time step 29 (schedules/step29_dependent_launch.py) against step 23.

See `python -m steps.step29 --help`; the idea and its measured outcome are in the docstring of
schedules/step29_dependent_launch.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(29))
