"""python -m steps.step24: build, verify and time step 24 (schedules/step24_matvec.py) against step 11 (the fp32 matrix-vector mode it replaces) and cuBLAS.

See `python -m steps.step24 --help`; the idea and its measured outcome are in the docstring of
schedules/step24_matvec.py. Any CUDA GPU.
"""

from .commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main(24))
