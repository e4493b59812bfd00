"""python -m steps.step5: build, verify and time step 5 (schedules/step5_registers.py) against step 4.

See `python -m steps.step5 --help`; the idea and its measured outcome are in the docstring of
schedules/step5_registers.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(5))
