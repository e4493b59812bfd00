"""python -m steps.step7: build, verify and time step 7 (schedules/step7_async_copy.py) against step 6.

See `python -m steps.step7 --help`; the idea and its measured outcome are in the docstring of
schedules/step7_async_copy.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(7))
