"""python -m steps.step26: build, verify and time step 26 (schedules/step26_cluster_split_k.py) against step 23.

See `python -m steps.step26 --help`; the idea and its measured outcome are in the docstring of
schedules/step26_cluster_split_k.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(26))
