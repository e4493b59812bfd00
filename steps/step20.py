"""python -m steps.step20: build, verify and time step 20 (schedules/step20_persistent.py) against step 18.

See `python -m steps.step20 --help`; the idea and its measured outcome are in the docstring of
schedules/step20_persistent.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(20))
