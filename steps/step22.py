"""python -m steps.step22: build, verify and time step 22 (schedules/step22_tma_store.py) against step 21.

See `python -m steps.step22 --help`; the idea and its measured outcome are in the docstring of
schedules/step22_tma_store.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(22))
