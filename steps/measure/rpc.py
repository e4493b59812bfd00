"""Measure candidates on the GPUs behind TVM's RPC tracker: one client thread per server.

The serving is TVM's own: a tracker, and one ``tvm.exec.rpc_server`` per GPU registered under
a key (``python -m steps.rpc_pool`` starts them). This is the client. A candidate is built
and exported as a shared library here (``build_job``, in the caller's build processes, in
parallel as the local sweep builds); a client thread uploads it to its server, loads it,
checks it against float64 as the local path does (inputs in [-1, 1), C poisoned with NaN,
‖C − ref‖ / ‖ref‖ with NaN or inf failing, the same tolerance) and times it with
time_evaluator, whose loop runs on the server (``harness.evaluator_timing``, the local path's
samples). The result is the local path's dict: M, N, K, config, then rel_err, median_ms,
gflops, or error.

Where the check runs. The local path copies C to the host and compares it with numpy's float64
product. TVM's RPC moves tensors at only 30-50 MB/s, and at 4096² C is 64 MiB: that copy cost
~1.4 s per candidate on the H100 where the local check costs ~0.1 s, and made the tracker 1.2-1.35x
slower than the local path (results/nvidia-h100-80gb-hbm3/evidence/rpc_tries.txt). So the float64
product and the error's sums run on the server's device (schedules/integration/device_check.py: a library
built here once and uploaded once per session), and 2·N doubles come back per candidate. The
random inputs are drawn there too, from a seed drawn here per size and session: uploading them
cost each server 37 s of its 96 s in issue 33's first scaling run (rpc_scaling.txt), and every
server paid it again.

Where the CUDA is compiled. ``tvm.compile`` runs NVRTC where TVM's CUDA runtime is loaded (a
machine with a driver): the library then holds a cubin and the server only loads it. On a
client without one, the library holds CUDA source and the server compiles it when it loads
it, inside the session, one candidate after another (2-15 s each for this ladder's kernels),
with the project's NVRTC set-up, which the launcher gives every server (schedules/lowering/nvrtc.py).

Sessions. A server runs one session at a time, and a new session is a new process with a new
CUDA context: ~100 ms forked, 5-10 s spawned (the launcher's default: forked sessions failed
on the H100; a spawned one imports TVM), and then the inputs and their float64 product are
made again. So the session that asked the servers what they are (Tracker.probe) measures too,
the sessions on the other servers open while it asks (Remote.connect), a client thread that
has none opens its own as it starts, and each holds its session for a batch of candidates,
with the inputs and float64 product of the last OPERAND_SIZES sizes kept on its device. TVM's only timeout is the session's: the server kills
a session older than it. So sessions are asked for with SESSION_TIMEOUTS times the
per-candidate ``timeout_s`` and take new candidates until one ``timeout_s`` before their end:
a candidate the server stops has had at least ``timeout_s`` (a hung one holds its server at
most the session's time), and a session that expires is the running candidate's doing,
never its batch's.

Faults cost a candidate, never the sweep:
- a candidate past its time fails ("timeout: ...");
- a lost session (the server died, or the kernel crashed it; TVM's server then stops serving
  until restarted: the launcher restarts it) puts the candidate back once, for any server,
  then fails it ("rpc: ...");
- a kernel that raises (a CUDA fault, a load error) fails, and its session is dropped: a
  fault leaves the server's CUDA context unusable, and a new session is a new process;
- a server that stops answering altogether costs its candidate after the session's time and
  a grace period, and its thread is left behind;
- when no server has been registered under the key for ``wait_s``, the candidates still
  waiting fail ("rpc: no server ...").
Client threads follow the tracker: one per registered server, more when servers join, fewer
when one cannot get a session while others hold every server.

``target="llvm"`` builds each candidate as a CPU kernel instead (``build_cpu``): the tests
drive this very code, the distribution, the faults and the resuming, on machines with no GPU.
"""

from __future__ import annotations

import collections
import concurrent.futures as futures
import datetime
import hashlib
import importlib
import json
import os
import platform
import queue
import socket
import shutil
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import schedules
from schedules.integration import device_check

from . import harness

CONNECT_S = 5.0  # the tracker must answer within this: a wrong address fails fast
WAIT_S = 30  # how long a sweep waits for a server under its key (--wait)
TIMEOUT_S = 60  # seconds each candidate has at least on its server (--timeout)
SESSION_TIMEOUTS = 5  # a session lasts this many timeouts: a hung candidate is stopped by its end
REQUEST_S = 5.0  # one request for a session waits this long before its thread looks again
POLL_S = 0.5  # how often the collecting thread looks at the tracker, and idle clients at the queue
GRACE_S = 30.0  # past its session's end, a candidate whose server says nothing is given up
OPERAND_SIZES = 4  # sizes whose inputs and float64 product a session keeps on its device
DEVICE_BYTES = 4 << 30  # ... and at most this many bytes of them, but always the last size
TARGETS = {  # --rpc-target: how a candidate is built, and the server's device it runs on
    "cuda": ("steps.measure.rpc:build_cuda", "cuda"),
    "llvm": ("steps.measure.rpc:build_cpu", "cpu"),
}


class TrackerError(Exception):
    """The tracker cannot be reached, or no server under the key can be had: one line."""


class NoFreeServer(TrackerError):
    """No server under the key was free for a session within the wait."""


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ValueError, one line, for anything else."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {text!r}")
    return host.strip("[]"), int(port)


# --- the tracker -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tracker:
    """A tracker's address and the key its servers registered under; every call is bounded in
    time (TVM's own client waits a minute to connect and forever for a free server)."""

    host: str
    port: int
    key: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    def _connect(self, timeout: float) -> socket.socket:
        from tvm.rpc import base

        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as exc:
            raise TrackerError(f"cannot reach the RPC tracker at {self}: {exc.strerror or exc}") from None
        try:
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", base.recvall(sock, 4))[0]
        except (OSError, struct.error) as exc:
            sock.close()
            raise TrackerError(f"{self} did not answer as an RPC tracker: {exc}") from None
        if magic != base.RPC_TRACKER_MAGIC:
            sock.close()
            raise TrackerError(f"{self} is not an RPC tracker")
        return sock

    def _ask(self, message: list, timeout: float, wait_s: float | None = None):
        """The tracker's answer to one message (connected within `timeout`, answered within
        `wait_s` where given: socket.timeout past it, for the caller to name)."""
        from tvm.rpc import base

        sock = self._connect(timeout)
        try:
            if wait_s is not None:
                sock.settimeout(wait_s)
            base.sendjson(sock, message)
            value = base.recvjson(sock)
        except OSError as exc:
            if wait_s is not None and isinstance(exc, socket.timeout):
                raise
            raise TrackerError(f"the RPC tracker at {self} stopped answering: {exc}") from None
        finally:
            sock.close()
        if value[0] != base.TrackerCode.SUCCESS:
            raise TrackerError(f"the RPC tracker at {self} answered {value!r}")
        return value[1]

    def summary(self, timeout: float = CONNECT_S) -> dict:
        """The tracker's own summary: {"server_info": [...], "queue_info": {...}}."""
        from tvm.rpc import base

        return self._ask([base.TrackerCode.SUMMARY], timeout)

    def servers(self, timeout: float = CONNECT_S) -> list[str]:
        """'host:port' of each server registered under the key, busy or free."""
        return [":".join(map(str, s["addr"])) for s in self.summary(timeout)["server_info"]
                if s.get("key") == f"server:{self.key}"]

    def wait_for_servers(self, wait_s: float) -> list[str]:
        """The servers under the key, waiting up to `wait_s` for the first to register."""
        deadline = time.monotonic() + wait_s
        while True:
            found = self.servers()
            if found or time.monotonic() >= deadline:
                break
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if not found:
            raise TrackerError(f"no RPC server under key {self.key!r} at the tracker {self} after {wait_s:g} s "
                               "(python -m steps.rpc_pool starts them)")
        return found

    def request(self, session_timeout: float, wait_s: float = REQUEST_S, priority: int = 1):
        """(a session on a free server under the key, its 'host:port').

        NoFreeServer when none is free within `wait_s`: the request is then dropped (closing
        its connection withdraws it; a server it was matched to meanwhile takes a new key
        after a few seconds, as TVM's server does for any unused match)."""
        from tvm import rpc
        from tvm.rpc import base

        try:
            url, port, match_key = self._ask([base.TrackerCode.REQUEST, self.key, "", priority], CONNECT_S, wait_s)
        except socket.timeout:
            raise NoFreeServer(f"no server under key {self.key!r} at {self} was free for {wait_s:g} s") from None
        return rpc.connect(url, port, match_key, session_timeout), f"{url}:{port}"

    def probe(self, device: str, wait_s: float, keep_s: float | None = None) -> dict:
        """What the servers are, asked of one of them: its device's name, arch, SM count and
        shared memory per block (CUDA), and how many servers there are. With `keep_s`, the
        session asked is kept for the sweep's first client (info["session"], a _Session lasting
        keep_s): a spawned session costs 5-10 s to start, once is enough."""
        servers = self.wait_for_servers(wait_s)
        asked = time.monotonic()
        try:
            session, server = self.request(session_timeout=keep_s or TIMEOUT_S, wait_s=wait_s)
        except NoFreeServer:
            raise TrackerError(f"every server under key {self.key!r} at {self} stayed busy for {wait_s:g} s") from None
        except TrackerError:
            raise
        except Exception as exc:  # the server vanished between the tracker's answer and the connect
            raise TrackerError(f"cannot open a session on a server under key {self.key!r}: "
                               f"{harness._one_line(exc)}") from None
        info = {"server": server, "servers": len(servers), "device": device}
        try:
            dev = session.cuda(0) if device == "cuda" else session.cpu(0)
            if not dev.exist:
                raise TrackerError(f"the server {server} under key {self.key!r} has no {device} device")
            if device == "cuda":
                info.update(gpu=dev.device_name, compute_capability=dev.compute_version,
                            arch="sm_" + dev.compute_version.replace(".", ""),
                            sm_count=dev.multi_processor_count,
                            max_shared_memory_per_block=dev.max_shared_memory_per_block)
        except TrackerError:
            raise
        except Exception as exc:
            raise TrackerError(f"the server {server} under key {self.key!r} failed a device query: "
                               f"{harness._one_line(exc)}") from None
        if keep_s is not None:
            info["session"] = _Session(session, server, asked, time.monotonic())
        del session  # otherwise ended here: no name may outlive the session's use
        return info


@dataclass(frozen=True)
class Remote:
    """Where and how a sweep measures over RPC: the tracker and key, the target its candidates
    are built for ("cuda"; "llvm" builds CPU kernels of the same candidates, for tests), the
    per-candidate timeout, the wait for servers, and the builder ("module:function", for tests;
    by default the target's)."""

    tracker: Tracker
    target: str = "cuda"
    timeout_s: float = TIMEOUT_S
    wait_s: float = WAIT_S
    builder: str | None = None
    # connect's sessions, until the sweep's RemoteRunner takes them for its client threads
    handover: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def device(self) -> str:
        return TARGETS[self.target][1]

    @property
    def build_spec(self) -> str:
        return self.builder or TARGETS[self.target][0]

    def connect(self) -> dict:
        """Wait (bounded) for a server under the key and ask it what it is (Tracker.probe). The
        session that asked is kept in `handover` for the sweep's first client thread, and one on
        each other server registered then is opened meanwhile, for the others: a spawned session
        takes 5-10 s to start, and on two H100s the second server's was the last thing the sweep
        waited for before both measured (issue 33, results/<gpu>/evidence/rpc_scaling_tries.txt)."""
        session_s = SESSION_TIMEOUTS * self.timeout_s
        others = [_open_meanwhile(self.tracker, session_s)
                  for _ in self.tracker.wait_for_servers(self.wait_s)[1:]]
        info = self.tracker.probe(self.device, self.wait_s, keep_s=session_s)
        probed = futures.Future()
        probed.set_result(info.pop("session"))
        self.handover["sessions"] = [probed, *others]
        return info

    def take_sessions(self) -> list:
        """connect's sessions (Futures of _Session), once ([] after that, or before connect)."""
        return self.handover.pop("sessions", [])


def _open_meanwhile(tracker: Tracker, session_s: float) -> futures.Future:
    """A Future of a session on a server under the key, opened in a thread of its own."""
    opened: futures.Future = futures.Future()

    def open_():
        try:
            opened.set_result(_Session.open(tracker, session_s))
        except Exception as exc:  # noqa: BLE001 - none free, or a fault: the client opens its own
            opened.set_exception(exc)

    threading.Thread(target=open_, daemon=True, name="rpc-open-session").start()
    return opened


def environment(remote: Remote, info: dict) -> dict:
    """What a result measured over RPC is stamped with: the servers' GPU as one of them reports
    it, this client's TVM and numpy, the date, and the tracker, key and server count."""
    import tvm

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tvm_version": tvm.__version__,
        "host": info["server"],
        "client": platform.node(),
        "numpy_version": np.__version__,
    }
    env.update({k: info[k] for k in ("gpu", "compute_capability", "sm_count", "max_shared_memory_per_block")
                if k in info})
    env["rpc"] = f"tracker {remote.tracker}, key {remote.tracker.key}, {info['servers']} servers"
    return env


# --- building: in the caller's build processes --------------------------------------------------


def build_cuda(step_number: int, M: int, N: int, K: int, arch: str, config: dict):
    """The candidate as the local sweep builds it."""
    step = schedules.get_step(step_number)
    return schedules.build(step, M, N, K, arch=arch, config=step.Config.from_dict(config))


def build_cpu(step_number: int, M: int, N: int, K: int, arch: str, config: dict):
    """The candidate as a CPU kernel: the base matmul tiled block_m x block_n (so candidates
    differ in speed), its k loop outside the tile, compiled for llvm. For the tests of the
    distribution, which run where there is no GPU; the config is validated as the GPU's is."""
    import tvm
    from tvm import s_tir
    from tvm.target import Target

    from schedules.matmul import matmul

    step = schedules.get_step(step_number)
    cfg = step.Config.from_dict(config)
    sch = s_tir.Schedule(matmul(M, N, K))
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i_outer, i_inner = sch.split(i, [None, min(M, getattr(cfg, "block_m", 32))])
    j_outer, j_inner = sch.split(j, [None, min(N, getattr(cfg, "block_n", 32))])
    sch.reorder(i_outer, j_outer, k, i_inner, j_inner)
    return tvm.compile(sch.mod, target=Target({"kind": "llvm"}))


def build_checker(device: str, arch: str, directory: str) -> str:
    """The check's library (schedules/integration/device_check.py) for the servers' device, exported in
    `directory`; its path."""
    path = os.path.join(directory, f"device_check_{device}.so")
    device_check.build(device, arch).export_library(path)
    return path


def _resolve(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def library_name(step_number: int, size, config: dict) -> str:
    """A file name per candidate: step, size and a hash of the config."""
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
    return f"step{step_number}_{'x'.join(map(str, size))}_{digest}.so"


def build_job(builder: str, step_number: int, size, config: dict, arch: str, directory: str) -> dict:
    """Build one candidate with `builder` ("module:function") and export it as a shared library
    in `directory` (a .so: a .tar would need a compiler on the server). Returns the local
    result's M, N, K and config, with "path", or with "error" (as the local sweep's)."""
    M, N, K = size
    out = {"M": M, "N": N, "K": K, "config": config}
    started = time.monotonic()
    try:
        lib = _resolve(builder)(step_number, M, N, K, arch, config)
        path = os.path.join(directory, library_name(step_number, size, config))
        lib.export_library(path)
    except Exception as exc:
        return {**out, "error": "build: " + harness._one_line(exc)}
    # Where a sweep's time goes (its log keeps it): the build here, then on the server the
    # upload and load, the check and the timing (RemoteRunner._measure's "rpc").
    return {**out, "path": path, "build_s": round(time.monotonic() - started, 3)}


# --- measuring: one client thread per server -----------------------------------------------------


@dataclass
class Candidate:
    """A built candidate on its way to a server: `job` is the caller's, handed back with the result."""

    job: tuple
    path: str
    size: tuple
    result: dict  # M, N, K, config: what the result starts from
    repeat: int
    tolerance: float
    attempts: int = 0
    keep: bool = False  # its library stays once measured (a confirmation round may time it again)

    def failed(self, why: str) -> dict:
        return {**self.result, "error": why}

    def libraries(self) -> list[str]:
        return [] if self.keep else [self.path]


@dataclass
class Finalists:
    """A shape's best few candidates, built and measured once already, on their way to one
    server to be timed again in turns (harness.alternating_timings), in one session: `results`
    are their first results (M, N, K, config, gflops), `paths` their libraries. The result is
    {M, N, K, "finalists": [harness.confirmed rows]}, or with "error"."""

    job: tuple
    paths: list[str]
    size: tuple
    results: list[dict]
    repeat: int
    rounds: int
    attempts: int = 0

    def failed(self, why: str) -> dict:
        M, N, K = self.size
        return {"M": M, "N": N, "K": K, "error": why}

    def libraries(self) -> list[str]:
        return list(self.paths)


@dataclass
class _Session:
    rpc: object
    server: str
    started: float  # before it was asked for: the server's clock starts before the connect returns
    ready: float  # when the connect returned: a spawned session's process is up by then
    tensors: dict = field(default_factory=dict)  # size -> _SizeOnDevice, oldest first
    checker: object = None  # the check's library (schedules/integration/device_check.py), loaded on the server
    measured: int = 0
    warm_s: float | None = None  # RemoteRunner._warm's time, before the first candidate

    @classmethod
    def open(cls, tracker: Tracker, session_s: float) -> _Session:
        # A function of its own: the caller keeps no name for the RPC session, which must go
        # with its _Session (a server serves one session at a time; one still held keeps its
        # server busy until the session's timeout: seen on the H100, every renewal waited so).
        asked = time.monotonic()
        session, server = tracker.request(session_timeout=session_s)
        return cls(session, server, asked, time.monotonic())

    def age(self) -> float:
        return time.monotonic() - self.started

    def takes_candidates(self, window_s: float, session_s: float) -> bool:
        """Whether to start a candidate on it: within its first `window_s` (its `session_s` less
        one candidate's timeout), or, when starting it took longer than that (a spawned process
        on a slow host), until it has measured one, so that it is not renewed over and over; but
        then only in the first half of that last timeout, not where the server ends the session
        under the candidate (one that took 5.7 s of its 6 to open ran one, which failed at once
        as a timeout: the tests, on a loaded host)."""
        if self.age() <= window_s:
            return True
        late = window_s + (session_s - window_s) / 2
        return not self.measured and self.ready - self.started > window_s and self.age() < late


class _Work:
    """The candidates waiting for a server (a queue's put, get and get_nowait), handed out by
    size: a client takes the oldest candidate of a size it took before in its session (whose
    inputs its server holds), else the oldest of a size no client has taken, else, rather than
    wait idle, the oldest. A server draws a size's inputs and their float64 product once per
    session (RemoteRunner._tensors); handed out in arrival order, every server drew every size,
    and on 4 H200s that phase grew from 13 s of server time on 1 server to 52 s on 4, ~10 s of
    each server's 62 (issue 51; results/nvidia-h200/evidence/rpc_scaling_tries.txt)."""

    def __init__(self):
        self._items: list = []
        self._ready = threading.Condition()
        self._takers: dict = {}  # size -> ids of the clients that took a candidate of it

    def put(self, item) -> None:
        with self._ready:
            self._items.append(item)
            self._ready.notify()

    def get_nowait(self):
        with self._ready:
            if not self._items:
                raise queue.Empty
            return self._items.pop(0)

    def get(self, timeout: float, client: int | None = None):
        """The next candidate for `client` (an id), waiting up to `timeout` s; queue.Empty if none."""
        with self._ready:
            if not self._items:
                self._ready.wait(timeout)
            if not self._items:
                raise queue.Empty
            item = self._items.pop(self._pick(client))
            if client is not None:
                self._takers.setdefault(item.size, set()).add(client)
            return item

    def _pick(self, client) -> int:
        free = None
        for i, item in enumerate(self._items):
            takers = self._takers.get(item.size, ())
            if client in takers:
                return i
            if free is None and not takers:
                free = i
        return free if free is not None else 0

    def claim(self, client: int, size) -> None:
        with self._ready:
            self._takers.setdefault(size, set()).add(client)

    def forget(self, client: int) -> None:
        """`client`'s session ended: its server holds none of its sizes now."""
        with self._ready:
            for takers in self._takers.values():
                takers.discard(client)


@dataclass
class _Client:
    thread: threading.Thread | None = None
    session: _Session | None = None
    running: tuple | None = None  # (candidate, since)
    abandoned: bool = False  # its server stopped answering: whatever it returns is dropped


@dataclass
class _SizeOnDevice:
    """One size's tensors on a server's device: the inputs, an output for the timing, one for
    the check, their float64 product and the check's per-column sums."""

    a: object
    b: object
    timed: object
    checked: object
    ref: object
    error_sums: object
    ref_sums: object
    nbytes: int

    @staticmethod
    def bytes_for(size) -> int:
        M, N, K = size
        return 4 * (M * K + K * N + 2 * M * N) + 8 * (M * N + 2 * N)

    @classmethod
    def empty(cls, dev, size) -> _SizeOnDevice:
        """Every tensor allocated on `dev`, none filled."""
        import tvm

        M, N, K = size
        return cls(a=tvm.runtime.empty((M, K), "float32", dev), b=tvm.runtime.empty((K, N), "float32", dev),
                   timed=tvm.runtime.empty((M, N), "float32", dev),
                   checked=tvm.runtime.empty((M, N), "float32", dev),
                   ref=tvm.runtime.empty((M, N), "float64", dev),
                   error_sums=tvm.runtime.empty((N,), "float64", dev),
                   ref_sums=tvm.runtime.empty((N,), "float64", dev),
                   nbytes=cls.bytes_for(size))


def check_on_device(checker, func, t: _SizeOnDevice) -> float:
    """The local check (harness.verify_on) where C is: poison C with NaN, run, then
    ‖C − ref‖ / ‖ref‖ from the 2·N doubles of the column sums (schedules/integration/device_check.py)."""
    checker["poison"](t.checked)
    func(t.a, t.b, t.checked)
    checker["error_sums"](t.checked, t.ref, t.error_sums, t.ref_sums)
    return device_check.relative_error(t.error_sums.numpy(), t.ref_sums.numpy())


class RemoteRunner:
    """Measures built candidates on the servers under the tracker's key (the module docstring
    says how, and what each fault costs). ``submit`` hands a built candidate over, ``report``
    a result with nothing to measure (a failed build); ``collect`` delivers the results, in
    the calling thread, while it watches the tracker."""

    def __init__(self, tracker: Tracker, device: str = "cuda", timeout_s: float = TIMEOUT_S,
                 wait_s: float = WAIT_S, arch: str = "sm_90", sessions: list | None = None,
                 checker=None):
        self.tracker = tracker
        # Sessions opened already (Remote.connect's: Futures of _Session), one per client thread.
        self._handover = list(sessions or [])
        self.opened = 0  # sessions this runner asked for
        self.device = device
        # The check's library, built once for the servers' device (build_checker); each session
        # loads it. `checker`: a Future of its path, built elsewhere meanwhile (a sweep builds it
        # in its build processes, beside the first candidates: ~2-3 s less before the first
        # result on the H100's host); None: built here, now.
        self._checker_dir = None
        if checker is None:
            self._checker_dir = tempfile.mkdtemp(prefix="rpc-check-")
            checker = futures.Future()
            checker.set_result(build_checker(device, arch, self._checker_dir))
        self._checker_built = checker
        self.timeout_s = timeout_s
        self.session_s = SESSION_TIMEOUTS * timeout_s
        self.wait_s = wait_s
        self.served: collections.Counter = collections.Counter()  # server -> candidates it measured
        self.retried = 0  # candidates put back after a lost session
        self._todo = _Work()  # handed out by size: _Work says why
        self._results: queue.Queue = queue.Queue()
        self._clients: list[_Client] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._seeds = np.random.default_rng()  # each size's inputs, on each server: fresh
        self._last_server = time.monotonic()
        self._watched = 0.0
        self._no_server: str | None = None  # why the waiting candidates fail, while no server is there

    # --- the caller's side ---

    def submit(self, candidate: Candidate) -> None:
        if self._no_server:
            self._fail(candidate, self._no_server)
        else:
            self._todo.put(candidate)

    def report(self, job: tuple, result: dict) -> None:
        self._results.put((job, result))

    def collect(self, count: int, on_result) -> None:
        """Call on_result(job, result) for `count` results, submitted or reported (those may
        still be arriving from another thread)."""
        for _ in range(count):
            while True:
                self._watch()
                try:
                    job, result = self._results.get(timeout=POLL_S)
                    break
                except queue.Empty:
                    continue
            on_result(job, result)

    def in_flight(self) -> list[tuple[str, Candidate]]:
        """(server, candidate) of each candidate being measured now."""
        with self._lock:
            return [(c.session.server, c.running[0]) for c in self._clients
                    if c.running and c.session and not c.abandoned]

    def close(self) -> None:
        """Stop the client threads (each ends its session); a thread still waiting on a
        server that stopped answering is left to die with the process (daemon)."""
        self._closing.set()
        with self._lock:
            self._handover = []  # a session no client took ends here
        deadline = time.monotonic() + 2 * POLL_S + 1.0
        for client in list(self._clients):
            if client.thread is not None:
                client.thread.join(max(0.0, deadline - time.monotonic()))
        if self._checker_dir:
            shutil.rmtree(self._checker_dir, ignore_errors=True)

    # --- watching the tracker (the collecting thread) ---

    def _watch(self) -> None:
        now = time.monotonic()
        if now - self._watched < POLL_S:
            return
        self._watched = now
        try:
            servers = self.tracker.servers()
        except TrackerError:
            servers = []  # sessions already open go on; new ones wait for the tracker to return
        with self._lock:
            live = [c for c in self._clients if c.thread.is_alive() and not c.abandoned]
            if servers:
                self._last_server, self._no_server = now, None
            elif now - self._last_server > self.wait_s and not any(c.session for c in live):
                self._no_server = (f"rpc: no server under key {self.tracker.key!r} at the tracker "
                                   f"{self.tracker} for {self.wait_s:g} s")
            for _ in range(len(servers) - len(live)):
                self._start_client()
            stuck = [c for c in live if c.running and now - c.running[1] > self.session_s + GRACE_S]
            for client in stuck:
                client.abandoned = True
                candidate, _ = client.running
                server = client.session.server if client.session else "its server"
                self._fail(candidate, f"rpc: no answer from {server} in {self.session_s + GRACE_S:g} s")
        if self._no_server:
            while True:
                try:
                    self._fail(self._todo.get_nowait(), self._no_server)
                except queue.Empty:
                    break

    def _start_client(self) -> None:
        client = _Client()
        client.thread = threading.Thread(target=self._serve, args=(client,), daemon=True,
                                         name=f"rpc-client-{len(self._clients)}")
        self._clients.append(client)
        client.thread.start()

    def _surplus(self, client: _Client) -> bool:
        """Whether this client should retire: more clients than registered servers."""
        try:
            servers = len(self.tracker.servers())
        except TrackerError:
            return False
        with self._lock:
            live = [c for c in self._clients if c.thread.is_alive() and not c.abandoned]
            if len(live) > max(servers, 1):
                self._clients.remove(client)
                return True
        return False

    # --- a client thread ---

    def _serve(self, client: _Client) -> None:
        try:
            with self._lock:
                handed = self._handover.pop(0) if self._handover else None
            if handed is not None:
                try:
                    client.session = handed.result()
                except Exception:  # noqa: BLE001 - it could not be opened: opened below, or later
                    client.session = None
            if client.session is None:
                try:  # a session before the first candidate: a spawned one starts while the builds run
                    client.session = self._open()
                except Exception:  # noqa: BLE001 - none free, or a fault: the candidates' path asks again and reports
                    pass
            if client.session is not None:
                self._warm(client.session)
            self._serve_until_done(client)
        finally:
            client.session = None  # ends the session: the server takes its next client
            self._todo.forget(id(client))

    def _serve_until_done(self, client: _Client) -> None:
        while not self._closing.is_set() and not client.abandoned:
            try:
                candidate = self._todo.get(POLL_S, id(client))
            except queue.Empty:
                continue
            if client.session is not None and not client.session.takes_candidates(self.session_s - self.timeout_s, self.session_s):
                client.session = None  # new candidates until a timeout_s before the session's end
            if client.session is None:  # a new session holds no inputs yet, but will this one's
                self._todo.forget(id(client))
                self._todo.claim(id(client), candidate.size)
                try:
                    client.session = self._open()
                except NoFreeServer:
                    self._todo.put(candidate)
                    if self._surplus(client):
                        return
                    continue
                except TrackerError:
                    self._todo.put(candidate)
                    time.sleep(POLL_S)  # the collecting thread decides when to give up
                    continue
                except Exception as exc:  # the server went between the tracker's answer and the connect
                    self._lost(candidate, f"cannot connect: {harness._one_line(exc)}")
                    continue
            started = time.monotonic()
            client.running = (candidate, started)
            measure = self._confirm if isinstance(candidate, Finalists) else self._measure
            result, keep = measure(client.session, candidate, started)
            with self._lock:  # the collecting thread may have given this candidate up meanwhile
                if client.abandoned:
                    return
                client.running = None
            if not keep:
                client.session = None
            if result is not None:
                _remove(*candidate.libraries())
                self._results.put((candidate.job, result))

    def _warm(self, session: _Session) -> None:
        """Ready the session's device before its first candidate, while the candidates still
        build: the first device call creates the CUDA context, and the check's library loads on
        the device at its first call. (In issue 33's first run on two H200s, both servers' first
        candidates spent 4-5 s making their inputs, where a one-server run's spent 0.24 s; with
        this, each session spent ~2 s here, before its first candidate, and that candidate's
        inputs took under 0.01 s.) A fault here is left for the first candidate to meet and report."""
        import tvm

        started = time.monotonic()
        try:
            dev = session.rpc.cuda(0) if self.device == "cuda" else session.rpc.cpu(0)
            self._checker(session)["uniform"](tvm.runtime.empty((1, 1), "float32", dev), 0)  # (R, C) any
        except Exception:  # noqa: BLE001
            return
        session.warm_s = round(time.monotonic() - started, 3)

    def _open(self) -> _Session:
        with self._lock:
            self.opened += 1
        return _Session.open(self.tracker, self.session_s)

    def _measure(self, session: _Session, candidate: Candidate, started: float) -> tuple[dict | None, bool]:
        """(the candidate's result, whether the session is still good); None for a candidate
        put back after a lost session."""
        out = dict(candidate.result)
        M, N, K = candidate.size
        name = os.path.basename(candidate.path)
        phase = "load"
        try:
            session.rpc.upload(candidate.path)
            mod = session.rpc.load_module(name)
            checker = self._checker(session)
            loaded = time.monotonic()
            phase = "run"
            dev = session.rpc.cuda(0) if self.device == "cuda" else session.rpc.cpu(0)
            tensors = self._tensors(session, dev, candidate.size)
            prepared = time.monotonic()
            err = check_on_device(checker, mod["main"], tensors)
            checked = time.monotonic()
            timing = harness.evaluator_timing(mod, dev, [tensors.a, tensors.b, tensors.timed], candidate.repeat)
            session.rpc.remove(name)
        except Exception as exc:
            return self._fault(session, candidate, phase, exc, started), False
        with self._lock:
            self.served[session.server] += 1
        session.measured += 1
        out.update(rel_err=err, median_ms=timing.median_ms, gflops=timing.gflops(M, N, K))
        done = time.monotonic()
        # Where the time went on the server: upload and load; the inputs and float64 product
        # when the size is new to the session; the check; the timing.
        out["rpc"] = {"server": session.server, "load_s": round(loaded - started, 3),
                      "run_s": round(done - loaded, 3), "operands_s": round(prepared - loaded, 3),
                      "check_s": round(checked - prepared, 3), "time_s": round(done - checked, 3)}
        if session.measured == 1 and session.warm_s is not None:  # the session's first: its warm-up
            out["rpc"]["warm_s"] = session.warm_s
        if not err <= candidate.tolerance:
            out["error"] = f"wrong result: relative error {err:.3g}"
        return out, True

    def _confirm(self, session: _Session, finalists: Finalists, started: float) -> tuple[dict | None, bool]:
        """A shape's finalists timed again, in turns, in this session (harness.alternating_timings),
        on the session's inputs for the size and on _placements' others: (the result, whether the
        session is still good), as _measure's. They are not checked again: the same libraries
        passed the check when they were first measured."""
        names = [os.path.basename(path) for path in finalists.paths]
        phase = "load"
        try:
            mods = []
            for path, name in zip(finalists.paths, names):
                session.rpc.upload(path)
                mods.append(session.rpc.load_module(name))
            loaded = time.monotonic()
            phase = "run"
            dev = session.rpc.cuda(0) if self.device == "cuda" else session.rpc.cpu(0)
            tensors = self._tensors(session, dev, finalists.size)
            arg_sets = [[tensors.a, tensors.b, tensors.timed]] + self._placements(session, dev, finalists.size)
            prepared = time.monotonic()
            timings = harness.alternating_timings(mods, dev, arg_sets, finalists.repeat, finalists.rounds)
            for name in names:
                session.rpc.remove(name)
        except Exception as exc:
            return self._fault(session, finalists, phase, exc, started), False
        done = time.monotonic()
        count = len(mods)
        # The group's server time, shared out: each row's load_s and run_s sum to it.
        share = {"server": session.server, "load_s": round((loaded - started) / count, 3),
                 "run_s": round((done - loaded) / count, 3), "operands_s": round((prepared - loaded) / count, 3),
                 "time_s": round((done - prepared) / count, 3)}
        with self._lock:
            self.served[session.server] += count
        M, N, K = finalists.size
        rows = [{**harness.confirmed(res, timing), "rpc": share} for res, timing in zip(finalists.results, timings)]
        return {"M": M, "N": N, "K": K, "finalists": rows}, True

    def _fault(self, session: _Session, candidate: Candidate | Finalists, phase: str, exc: Exception,
               started: float) -> dict | None:
        """The result of a candidate whose load or run raised: a timeout, a lost session (put
        back once), or the kernel's own error."""
        text = harness._one_line(exc)
        if "RPCSessionTimeoutError" in str(exc) or session.age() >= 0.95 * self.session_s:
            return candidate.failed(f"timeout: still running on {session.server} after "
                                    f"{time.monotonic() - started:.0f} s (--timeout {self.timeout_s:g})")
        if not _alive(session):
            self._lost(candidate, f"{session.server}: {text}")
            return None
        return candidate.failed(f"{phase}: {text}")

    def _lost(self, candidate: Candidate, why: str) -> None:
        candidate.attempts += 1
        if candidate.attempts < 2:
            with self._lock:
                self.retried += 1
            self._todo.put(candidate)
        else:
            self._fail(candidate, f"rpc: the session was lost twice (its server died, or the kernel crashed it): {why}")

    def _fail(self, candidate: Candidate | Finalists, why: str) -> None:
        _remove(*candidate.libraries())
        self._results.put((candidate.job, candidate.failed(why)))

    def _checker(self, session: _Session):
        if session.checker is None:
            path = self._checker_built.result()  # raises what its build raised: the candidate fails
            session.rpc.upload(path)
            session.checker = session.rpc.load_module(os.path.basename(path))
        return session.checker

    def _tensors(self, session: _Session, dev, size) -> _SizeOnDevice:
        """This session's tensors for the size on the server's device (_SizeOnDevice): the
        inputs drawn there, and their float64 product made there."""
        if size not in session.tensors:
            # Parallel builds finish out of order: sizes interleave, so several stay on the device.
            nbytes = _SizeOnDevice.bytes_for(size)
            while session.tensors and (len(session.tensors) >= OPERAND_SIZES
                                       or nbytes + sum(t.nbytes for t in session.tensors.values()) > DEVICE_BYTES):
                del session.tensors[next(iter(session.tensors))]
            t = _SizeOnDevice.empty(dev, size)
            self._draw(session, t.a, t.b)
            self._checker(session)["reference"](t.a, t.b, t.ref)
            session.tensors[size] = t
        return session.tensors[size]

    def _draw(self, session: _Session, a, b) -> None:
        """Fresh inputs in A and B, drawn on the device from seeds drawn here."""
        with self._lock:
            seeds = [int(s) for s in self._seeds.integers(2**32, size=2)]
        checker = self._checker(session)
        checker["uniform"](a, seeds[0])
        checker["uniform"](b, seeds[1])

    def _placements(self, session: _Session, dev, size) -> list[list]:
        """harness.PLACEMENTS - 1 more sets of A, B and C for a confirmation, drawn on the device
        at addresses of their own (all alive together); freed with the group."""
        import tvm

        M, N, K = size
        sets = []
        for _ in range(harness.PLACEMENTS - 1):
            a, b = tvm.runtime.empty((M, K), "float32", dev), tvm.runtime.empty((K, N), "float32", dev)
            self._draw(session, a, b)
            sets.append([a, b, tvm.runtime.empty((M, N), "float32", dev)])
        return sets


def _alive(session: _Session) -> bool:
    """Whether the session still answers: a look-up of a server function is one round trip that
    leaves the device alone (a CUDA fault's context fails any device call, yet the session that
    reported the fault is alive; and a CPU device's ``exist`` is answered here, unasked)."""
    try:
        session.rpc.get_function("tvm.rpc.server.remove")
        return True
    except Exception:
        return False


def _remove(*paths: str) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass
