"""python -m steps.step3: build, verify and time step 3 (schedules/step3_shared.py) against step 2.

See `python -m steps.step3 --help`; the idea and its measured outcome are in the docstring of
schedules/step3_shared.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(3))
