"""python -m steps.step23: build, verify and time step 23 (schedules/step23_split_k_wgmma.py) against step 20.

See `python -m steps.step23 --help`; the idea and its measured outcome are in the docstring of
schedules/step23_split_k_wgmma.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(23))
