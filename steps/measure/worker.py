"""A child process for GPU measurements, so a CUDA fault costs one measurement, not the run.

A kernel that faults on the GPU (``cudaErrorMisalignedAddress``, an illegal address, a
launch failure) leaves the CUDA context of its process unusable: every later kernel in that
process fails too. So ``harness.KernelRunner.measure`` builds, checks and times each kernel in
a worker process (``multiprocessing``, "spawn" context: a fresh interpreter that imports TVM
and creates its own CUDA context) and talks to it over a pipe. When a measurement fails in any
way (an exception, a wrong result, the worker dying or hanging) that step and size are
reported as failed and the worker is stopped; the next measurement starts a fresh one. A
clean run starts one worker (one TVM import, about 1-3 s) and reuses it for every measurement.

``Worker`` is the process plumbing, independent of TVM (tests drive it with fake servers);
the real server loop that runs in the child is ``harness.serve``, beside the runner whose
``measure`` it calls (this module imports nothing of the project's).
"""

from __future__ import annotations

import multiprocessing
import signal

DEFAULT_TIMEOUT_S = 600.0  # one build + check + timing; a kernel that hangs is killed after this
STOP_GRACE_S = 5.0


class WorkerError(RuntimeError):
    """The worker died, hung or could not be reached; the message is one line."""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Worker:
    """One spawned process running ``target(conn, *args)``: it answers every request sent on
    ``conn`` with one reply, and returns when it receives ``None`` or the pipe closes.

    Started on the first ``call``; ``stop`` ends it (the next ``call`` starts a new one).
    """

    def __init__(self, target, args: tuple = (), timeout_s: float = DEFAULT_TIMEOUT_S):
        self._ctx = multiprocessing.get_context("spawn")
        self._target = target
        self._args = args
        self.timeout_s = timeout_s
        self._proc = None
        self._conn = None
        self.starts = 0  # processes started so far (1 for a run without failures)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> None:
        self.stop()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=self._target, args=(child, *self._args), daemon=True,
                                 name="gpu-measure-worker")
        proc.start()
        child.close()  # the parent keeps only its end: a dead child then reads as EOF
        self._proc, self._conn = proc, parent
        self.starts += 1

    def call(self, request, timeout_s: float | None = None):
        """Send one request and return the reply; WorkerError if the worker dies or hangs
        (it is then stopped, and the next call starts a fresh one)."""
        if not self.alive:
            self.start()
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            self._conn.send(request)
            if not self._conn.poll(timeout):
                self.stop(kill=True)
                raise WorkerError(f"no reply within {timeout:g} s; worker process killed")
            return self._conn.recv()
        except (EOFError, OSError) as exc:  # the child exited (or was killed) mid-request
            self._reap()
            code = self._proc.exitcode if self._proc is not None else None
            self._discard()
            raise WorkerError(f"worker process died ({_exit_text(code)})") from exc

    def stop(self, kill: bool = False) -> None:
        """End the worker: politely (a ``None`` request), or at once with ``kill``."""
        if self._proc is None:
            return
        if not kill and self._proc.is_alive():
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._proc.join(STOP_GRACE_S)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(STOP_GRACE_S)
        self._discard()

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.join(STOP_GRACE_S)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(STOP_GRACE_S)

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
