"""python -m steps.step6: build, verify and time step 6 (schedules/step6_double_buffer.py) against step 5.

See `python -m steps.step6 --help`; the idea and its measured outcome are in the docstring of
schedules/step6_double_buffer.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(6))
