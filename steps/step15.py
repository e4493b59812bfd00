"""python -m steps.step15: build, verify and time step 15 (schedules/step15_wgmma.py) against step 14.

See `python -m steps.step15 --help`; the idea and its measured outcome are in the docstring of
schedules/step15_wgmma.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(15))
