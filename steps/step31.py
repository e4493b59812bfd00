"""python -m steps.step31: build, verify and time step 31 (schedules/step31_dependent_stream_k.py) against step 27.

See `python -m steps.step31 --help`; the idea and its measured outcome are in the docstring of
schedules/step31_dependent_stream_k.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(31))
