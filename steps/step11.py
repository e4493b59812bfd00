"""python -m steps.step11: build, verify and time step 11 (schedules/step11_split_k.py) against step 10.

See `python -m steps.step11 --help`; the idea and its measured outcome are in the docstring of
schedules/step11_split_k.py.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(11))
