"""python -m steps.step4: build, verify and time step 4 (schedules/step4_cooperative_fetch.py) against step 3.

See `python -m steps.step4 --help`; the idea and its measured outcome are in the docstring of
schedules/step4_cooperative_fetch.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(4))
