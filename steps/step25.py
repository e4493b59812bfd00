"""python -m steps.step25: build, verify and time step 25 (schedules/step25_3xtf32_persistent.py) against step 19.

See `python -m steps.step25 --help`; the idea and its measured outcome are in the docstring of
schedules/step25_3xtf32_persistent.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(25))
