"""python -m steps.step10: build, verify and time step 10 (schedules/step10_tuned.py) against step 9.

See `python -m steps.step10 --help`; the idea and its measured outcome are in the docstring of
schedules/step10_tuned.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(10))
