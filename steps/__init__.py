"""Command-line front ends for the ladder: ``python -m steps.stepN``.

Each stepN module is a thin wrapper over :mod:`steps.cli`; the GPU work lives in
:mod:`steps.harness`, result files in :mod:`steps.results`, nvcc reports in :mod:`steps.nvcc`.

``python -m steps.stepN`` for a number with no stepN.py (``steps.step99``) runs the same CLI
with that number, through the finder below: a step in the registry runs, and any other number
gets the CLI's one-line error (``unknown step 99; steps are 1-14``, the range read from
schedules.STEPS) instead of Python's "No module named steps.step99".
"""

import importlib.abc
import importlib.util
import re
import sys
from pathlib import Path

_STEP_MODULE = re.compile(rf"{re.escape(__name__)}\.step(0|[1-9][0-9]*)")


class _StepCLILoader(importlib.abc.InspectLoader):
    """``python -m`` (runpy) runs a module from ``get_code``: here, ``steps.cli.main(N)``."""

    def __init__(self, number: int):
        self.number = number

    def get_source(self, fullname):
        return ("from steps.commands.cli import main\n"
                "if __name__ == '__main__':\n"
                f"    raise SystemExit(main({self.number}))\n")

    def exec_module(self, module):
        # A plain import of a step with no module stays an import error, as before.
        raise ModuleNotFoundError(f"No module named {module.__name__!r} (python -m runs it as step "
                                  f"{self.number} of the ladder)", name=module.__name__)


class _StepCLIFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path, so it sees only steps.stepN names no file provides."""

    def find_spec(self, fullname, path=None, target=None):
        match = _STEP_MODULE.fullmatch(fullname)
        if match is None:
            return None
        # runpy makes the origin sys.argv[0], which TVM reads: the file whose code runs.
        origin = str(Path(__file__).parent / "commands" / "cli.py")
        return importlib.util.spec_from_loader(fullname, _StepCLILoader(int(match[1])), origin=origin)


if not any(isinstance(f, _StepCLIFinder) for f in sys.meta_path):
    sys.meta_path.append(_StepCLIFinder())
