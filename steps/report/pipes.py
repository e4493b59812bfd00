"""Every CLI's ``main`` is wrapped by ``quiet_broken_pipe``: ``python -m steps.table | head -2``
stops quietly when ``head`` has read its lines, instead of printing a BrokenPipeError traceback.

Kept apart from steps/commands/cli.py, which imports TVM, so light CLIs (steps.table) stay light.
"""

from __future__ import annotations

import functools
import os
import sys

# 128 + SIGPIPE (13): the status a shell reports for a program whose reader went away, as for
# `seq 1000000 | head -1`. Without `set -o pipefail` a pipeline's status is head's, so this is
# seen only by whoever asked to see it, and it does not claim that a run the reader cut short
# (a `--save` stopped before its last file) finished.
EXIT_BROKEN_PIPE = 141


def quiet_broken_pipe(main):
    """Wrap a CLI's ``main`` so that a closed stdout ends it quietly with EXIT_BROKEN_PIPE.

    Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError: in a
    print (caught here), or, for output still buffered when ``main`` returns or exits, in the
    interpreter's final flush ("Exception ignored ... BrokenPipeError", exit 120). So stdout
    is flushed here, and after a broken pipe it is pointed at /dev/null, so that the final
    flush has somewhere to write the rest."""

    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            try:
                return main(*args, **kwargs)
            finally:  # also on SystemExit (argparse's --help): its output may still be buffered
                sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return EXIT_BROKEN_PIPE

    return run
