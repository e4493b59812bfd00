"""python -m steps.step27: build, verify and time step 27 (schedules/step27_stream_k.py) against step 22.

See `python -m steps.step27 --help`; the idea and its measured outcome are in the docstring of
schedules/step27_stream_k.py. It needs a Hopper GPU (sm_90a); elsewhere it says so in one line.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(27))
