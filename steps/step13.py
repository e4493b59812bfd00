"""python -m steps.step13: build, verify and time step 13 (schedules/step13_tc_pipeline.py) against step 12.

See `python -m steps.step13 --help`; the idea and its measured outcome are in the docstring of
schedules/step13_tc_pipeline.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(13))
