"""The ladder's commands: ``python -m steps.stepN``, ``python -m steps`` and the tools beside them.

Every module at the top of this package is an entry point, two lines over the code below it:

    step1.py … step22.py   python -m steps.stepN    one step: build, check, time (commands/cli.py)
    __main__.py            python -m steps          the whole ladder (commands/ladder.py)
    bench.py  sweep.py  cublas.py  crosscheck.py  special.py    commands/<name>.py
    epilogue.py  model.py  rpc_pool.py              commands/<name>.py
    plot.py  table.py                               report/<name>.py

The packages, each importing only from those below it (tests/test_layout.py holds them to it):

    commands/   what each command does: its options, its run, what it prints
    report/     renders saved results: the README's tables, the plots
    measure/    builds, checks and times on the GPU: harness, worker, references, nvcc, rpc
    results/    the files runs write and read, and their models: no TVM, no GPU
    (schedules/ underneath all of them: pure IR)

``python -m steps.stepN`` for a number with no stepN.py (``steps.step99``) would be Python's
"No module named steps.step99"; ``_no_such_step`` below makes it the step command's one-line
error and exit 2 (``unknown step 99; steps are 1-22``, the range read from schedules.STEPS).
docs/maintaining.md has the map with each module's job.
"""

import re
import sys
from pathlib import Path

_STEP_MODULE = re.compile(rf"{re.escape(__name__)}\.step(0|[1-9][0-9]*)")


def _python_m_target() -> str | None:
    """The module ``python -m`` is looking for, while it looks: Python sets sys.argv[0] to
    "-m" until the module is found, and sys.orig_argv keeps the command line as typed."""
    if sys.argv[:1] != ["-m"]:
        return None
    argv = getattr(sys, "orig_argv", [])
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:]
    return None


def _no_such_step() -> None:
    """``python -m steps.stepN`` with no steps/stepN.py: run the step command for N, which
    prints its one-line error (exit 2). Any other import of this package goes on as usual."""
    match = _STEP_MODULE.fullmatch(_python_m_target() or "")
    if match is None or Path(__file__).with_name(f"step{match[1]}.py").exists():
        return
    from .commands.cli import main

    raise SystemExit(main(int(match[1])))


_no_such_step()
