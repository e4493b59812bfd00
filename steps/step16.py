"""python -m steps.step16: build, verify and time step 16 (schedules/step16_warp_specialized.py) against step 15.

See `python -m steps.step16 --help`; the idea and its measured outcome are in the docstring of
schedules/step16_warp_specialized.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(16))
