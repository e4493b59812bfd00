"""python -m steps.step30: build, verify and time step 30 (schedules/step30_dependent_cluster_split_k.py) against step 26.

See `python -m steps.step30 --help`; the idea and its measured outcome are in the docstring of
schedules/step30_dependent_cluster_split_k.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(30))
