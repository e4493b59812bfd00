"""python -m steps.step21: build, verify and time step 21 (schedules/step21_cluster.py) against step 20.

See `python -m steps.step21 --help`; the idea and its measured outcome are in the docstring of
schedules/step21_cluster.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(21))
