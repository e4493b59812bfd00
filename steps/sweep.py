"""python -m steps.sweep: search a step's config space on the GPU, keep the best per size.

The command is steps/commands/sweep.py; see `python -m steps.sweep --help`.
"""

import sys

# tvm_ffi imports torch whenever it is installed, and a sweep never uses it: 2.6 s of the 5.2 s
# of imports on the H100's host, paid again by each build process (spawned: each imports this
# module first). A None in sys.modules makes `import torch` an ImportError, which tvm_ffi takes
# as "no torch". A process that imported torch already keeps it.
sys.modules.setdefault("torch", None)

from .commands.sweep import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
