"""python -m steps.step18: build, verify and time step 18 (schedules/step18_register_a.py) against step 17.

See `python -m steps.step18 --help`; the idea and its measured outcome are in the docstring of
schedules/step18_register_a.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(18))
