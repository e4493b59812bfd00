"""python -m steps.step12: build, verify and time step 12 (schedules/step12_tensorize.py) against step 11.

See `python -m steps.step12 --help`; the idea and its measured outcome are in the docstring of
schedules/step12_tensorize.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(12))
