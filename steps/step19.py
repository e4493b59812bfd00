"""python -m steps.step19: build, verify and time step 19 (schedules/step19_3xtf32_wgmma.py) against step 18.

See `python -m steps.step19 --help`; the idea and its measured outcome are in the docstring of
schedules/step19_3xtf32_wgmma.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(19))
