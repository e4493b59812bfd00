"""python -m steps.step28: build, verify and time step 28 (schedules/step28_3xfp16.py) against step 19.

See `python -m steps.step28 --help`; the idea and its measured outcome are in the docstring of
schedules/step28_3xfp16.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(28))
