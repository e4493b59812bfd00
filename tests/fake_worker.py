"""A fake measurement server for tests/test_worker.py: steps.measure.harness.serve's protocol, no TVM.

Kept free of heavy imports so each spawned fake worker starts in a fraction of a second.
What it does is chosen by M; after STICKY_FAULT every later request in the same process
fails too, as every kernel does in a CUDA context after a misaligned address.
"""

from __future__ import annotations

import os
import signal
import time

OK, STICKY_FAULT, EXIT, SEGFAULT, HANG = 1, 2, 3, 4, 5
_poisoned = False  # per worker process, like a CUDA context after a fault


def _measurement(M, N, K, **fields) -> dict:
    out = dict(M=M, N=N, K=K, median_ms=None, min_ms=None, max_ms=None, gflops=None, rel_err=None, error=None)
    out.update(fields)
    return out


def fake_serve(conn) -> None:
    global _poisoned
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        _, (spec, M, N, K, arch, config, repeat, seed) = request
        if _poisoned:
            reply = _measurement(M, N, K, error="CUDAError: context poisoned by an earlier fault")
        elif M == OK:  # the pid as "gflops", so tests can tell processes apart
            reply = _measurement(M, N, K, median_ms=0.01, min_ms=0.01, max_ms=0.02,
                                 gflops=float(os.getpid()), rel_err=1e-7)
        elif M == STICKY_FAULT:
            _poisoned = True
            reply = _measurement(M, N, K, error="CUDAError: misaligned address")
        elif M == EXIT:
            os._exit(9)
        elif M == SEGFAULT:
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(30)
        else:  # HANG
            time.sleep(60)
        conn.send(("ok", reply))
