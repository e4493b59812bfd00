"""python -m steps.rpc_pool: TVM's RPC tracker and one rpc_server per GPU, for tuning on every GPU.

    python -m steps.rpc_pool --gpus 0,1,2,3 --key h100       # a tracker here, a server per GPU
    python -m steps.rpc_pool --gpus 0-7 --tracker head:9190 --key h100 --custom-addr 10.0.0.12
                                                              # another host, the same tracker

It starts TVM's own processes: ``python -m tvm.exec.rpc_tracker`` where no --tracker is
given, and one ``python -m tvm.exec.rpc_server`` per GPU, pinned with CUDA_VISIBLE_DEVICES (a
session opens device 0, which is then that GPU), each on a port of its own (two servers given
one port range took the same port, and one died), each with the project's NVRTC set-up in its
environment (schedules/lowering/nvrtc.py: the CUDA wheels' headers, subnormals kept, a compute cache
of its own), since a server compiles any kernel that reaches it as CUDA source, and each
session a fresh Python (TVM's --no-fork; --fork for TVM's default, whose forked sessions could
not use CUDA on the H100: docs/usage.md). It prints how to point a sweep or MetaSchedule at
them, then watches them: a server that exits, or stays unregistered at the tracker (TVM's
server stops serving once a kernel has crashed its session), is restarted. Ctrl-C stops
everything it started.

On several hosts, run it once per host against one tracker (--tracker). The tracker hands
clients the address it saw each server connect from: servers that reach the tracker through
another address than the clients would use (this host's own tracker, reached at 127.0.0.1)
need --custom-addr for clients on other hosts. The servers execute whatever they are sent:
trusted networks only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from schedules.lowering import nvrtc

from ..measure import rpc
from ..measure.worker import _exit_text
from ..report.pipes import quiet_broken_pipe
from . import options

PROG = "python -m steps.rpc_pool"
TRACKER_PORT = 9190
SERVER_PORT = 9300
READY_S = 120.0  # a server imports TVM and registers; on a loaded host that takes a while
UNREGISTERED_S = 6.0  # a registered server missing from the tracker this long has stopped serving
WATCH_S = 2.0
STOP_S = 5.0  # SIGTERM, then SIGKILL after this
MAX_FAILURES = 3  # restarts in a row of a server that never registered: then it is given up


class LaunchError(Exception):
    """A process could not be started or never became ready: one line."""


def gpu_list(text: str) -> list[str]:
    """'0,1,2,3' or '0-3' or '0,2-3' -> ['0', '1', '2', '3'] (CUDA_VISIBLE_DEVICES values)."""
    import argparse

    out: list[str] = []
    for item in text.split(","):
        first, dash, last = item.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise argparse.ArgumentTypeError(f"not a GPU list like 0,1,2,3 or 0-3: {text!r}")
        out += [str(i) for i in range(int(first), int(last if dash else first) + 1)]
    if not out or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"not a GPU list like 0,1,2,3 or 0-3: {text!r}")
    return out



def _port(text: str) -> int:
    value = options._at_least(text, 0)
    if value > 65535:
        import argparse

        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def free_port(host: str, start: int, taken=()) -> int:
    """The first port from `start` that `host` can bind (any free one for 0), skipping `taken`."""
    for port in ([0] if start == 0 else range(start, min(start + 1000, 65536))):
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            if s.getsockname()[1] not in taken:
                return s.getsockname()[1]
    raise LaunchError(f"no free port on {host} from {start}")


def server_environment(gpu: str, no_torch: str | None = None) -> dict:
    """A server's environment: ours, the project's NVRTC set-up, and its one GPU; with
    `no_torch` (a folder, no_torch_folder's), that folder first on its PYTHONPATH."""
    env = dict(os.environ)
    nvrtc.use_wheel_headers(env)
    nvrtc.keep_subnormals(env)
    env["CUDA_VISIBLE_DEVICES"] = gpu
    return _first_on_path(env, no_torch)


def _first_on_path(env: dict, folder: str | None) -> dict:
    """`env` with `folder` (where given) first on its PYTHONPATH."""
    if folder:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, env.get("PYTHONPATH")) if p)
    return env


def no_torch_folder() -> str:
    """A new folder holding a `torch` package whose import fails, for the PYTHONPATH of the
    tracker and servers a launch starts.

    tvm_ffi imports torch whenever it is installed, and they and the sessions never use it:
    on the H100's host that import was 2.6 s of each spawned session's start, and the session
    that first asks a server what it is stands between a sweep and its first result. An
    ImportError is what tvm_ffi takes as "no torch". (python -m steps.sweep does the same for
    itself and its build processes: steps/commands/sweep.py _keep_torch_out.)"""
    folder = tempfile.mkdtemp(prefix="rpc-pool-")
    os.mkdir(os.path.join(folder, "torch"))
    with open(os.path.join(folder, "torch", "__init__.py"), "w") as f:
        f.write('raise ImportError("torch is kept out of RPC servers started by steps.rpc_pool")\n')
    return folder


def missing_packages(tracker: bool) -> list[str]:
    """What TVM's processes import and this Python lacks: the tracker runs on tornado, and each
    server's session process is started through cloudpickle."""
    names = ["cloudpickle"] + (["tornado"] if tracker else [])
    return [name for name in names if importlib.util.find_spec(name) is None]


@dataclass
class _Process:
    name: str
    port: int
    gpu: str | None = None
    proc: subprocess.Popen | None = None
    started: float = 0.0
    seen: float | None = None  # when the tracker last listed it (servers)
    failures: int = 0  # restarts in a row without registering
    given_up: bool = False


class Launch:
    """A tracker (unless one is given) and one server per GPU, started, watched and stopped."""

    def __init__(self, gpus: list[str], key: str, tracker: tuple[str, int] | None = None, host: str = "0.0.0.0",
                 port: int = TRACKER_PORT, server_port: int = SERVER_PORT, custom_addr: str | None = None,
                 say=None, ready_s: float = READY_S, spawn: bool = True):
        self.gpus = gpus
        self.spawn = spawn
        self.no_torch: str | None = None  # no_torch_folder(), for the tracker and servers; removed at stop
        self.key = key
        self.host = host
        self.custom_addr = custom_addr
        self.server_port = server_port
        self.ready_s = ready_s
        self.say = say or (lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True))
        self.own_tracker = tracker is None
        local = host if host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        self.tracker_process = _Process("tracker", free_port(host, port)) if tracker is None else None
        # Where the servers find the tracker, and where a client on this host does.
        self.tracker_address = tracker or (local, self.tracker_process.port)
        self.servers = [_Process(f"server for GPU {gpu}", 0, gpu) for gpu in gpus]
        self.seen_as: str | None = custom_addr  # the address the tracker lists our servers under

    @property
    def tracker(self) -> rpc.Tracker:
        return rpc.Tracker(*self.tracker_address, self.key)

    # --- starting ---

    def start(self) -> None:
        """Start everything; return once every server is registered (LaunchError when none is
        within ready_s; a note for each one missing)."""
        if self.tracker_process is not None:
            self._start_tracker()
        self._wait_for_tracker()
        if self.seen_as is None:
            with socket.create_connection(self.tracker_address, timeout=rpc.CONNECT_S) as s:
                self.seen_as = s.getsockname()[0]
        for server in self.servers:
            self._start_server(server)
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline and not all(s.seen for s in self.servers):
            time.sleep(0.2)
            self.watch()
            if all(s.given_up for s in self.servers):
                break
        if not any(s.seen for s in self.servers):
            raise LaunchError(f"no server registered at the tracker {self.tracker} within {self.ready_s:g} s "
                              f"(python -m tvm.exec.rpc_server --tracker {self.tracker} --key {self.key} "
                              "by hand shows why)")
        for s in self.servers:
            if not s.seen:
                self.say(f"{s.name} is not registered yet; still watching it")

    def _start_tracker(self) -> None:
        t = self.tracker_process
        cmd = [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", self.host, "--port", str(t.port),
               "--port-end", str(t.port + 1), "--silent"]
        env = _first_on_path(dict(os.environ), self._no_torch_folder())
        t.proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        t.started = time.monotonic()

    def _no_torch_folder(self) -> str:
        """no_torch_folder(), made once for this launch, removed at stop."""
        if self.no_torch is None:
            self.no_torch = no_torch_folder()
        return self.no_torch

    def _wait_for_tracker(self) -> None:
        deadline = time.monotonic() + 60.0
        while True:
            t = self.tracker_process
            if t is not None and t.proc.poll() is not None:
                raise LaunchError(f"the tracker exited at start ({_exit_text(t.proc.returncode)}); "
                                  f"python -m tvm.exec.rpc_tracker --port {t.port} by hand shows why")
            try:
                self.tracker.summary(timeout=1.0)
                return
            except rpc.TrackerError as exc:
                if time.monotonic() > deadline:
                    raise LaunchError(str(exc)) from None
            time.sleep(0.2)

    def _start_server(self, server: _Process) -> None:
        taken = {s.port for s in self.servers if s is not server and s.port}
        if self.tracker_process is not None:
            taken.add(self.tracker_process.port)
        # A restart tries its old port first: the tracker's list then reads as before.
        server.port = free_port(self.host, server.port or self.server_port, taken)
        cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", f"{self.tracker}", "--key", self.key,
               "--host", self.host, "--port", str(server.port), "--port-end", str(server.port + 1), "--silent"]
        if self.custom_addr:
            cmd += ["--custom-addr", self.custom_addr]
        if self.spawn:  # each session a fresh Python, not a fork of the server (TVM's --no-fork)
            # On the H100 (driver 580, 2026-11-25) a forked session's driver-API calls failed
            # with CUDA_ERROR_NOT_INITIALIZED; spawned sessions work (fork_probe:
            # results/nvidia-h100-80gb-hbm3/evidence/rpc_tries.txt, try 3).
            cmd += ["--no-fork"]
        server.proc = subprocess.Popen(cmd, env=server_environment(server.gpu, self._no_torch_folder()),
                                       start_new_session=True, stdin=subprocess.DEVNULL)
        server.started, server.seen = time.monotonic(), None

    # --- watching ---

    def watch(self) -> None:
        """Restart what died: our tracker if it exited; a server that exited, or that the
        tracker has stopped listing (or never listed, within ready_s)."""
        now = time.monotonic()
        t = self.tracker_process
        if t is not None and t.proc.poll() is not None:
            self.say(f"the tracker exited ({_exit_text(t.proc.returncode)}); restarting it on port {t.port}")
            self._start_tracker()
            return
        try:
            listed = {tuple(s["addr"]) for s in self.tracker.summary(timeout=2.0)["server_info"]
                      if s.get("key") == f"server:{self.key}"}
        except rpc.TrackerError:
            return  # the tracker is away (restarting, or another host's): nothing to judge by
        for s in self.servers:
            if s.given_up:
                continue
            if (self.seen_as, s.port) in listed:
                s.seen, s.failures = now, 0
                continue
            why = None
            if s.proc.poll() is not None:
                why = f"exited ({_exit_text(s.proc.returncode)})"
            elif s.seen is not None and now - s.seen > UNREGISTERED_S:
                why = "is alive but no longer registered at the tracker (a kernel crashed its session?)"
            elif s.seen is None and now - s.started > self.ready_s:
                why = f"did not register within {self.ready_s:g} s"
            if why is None:
                continue
            if s.seen is None:
                s.failures += 1
            if s.failures >= MAX_FAILURES:
                s.given_up = True
                _stop([s])
                self.say(f"{s.name} (port {s.port}) {why}; giving up on it after {MAX_FAILURES} starts "
                         f"(python -m tvm.exec.rpc_server --tracker {self.tracker} --key {self.key} shows why)")
                continue
            self.say(f"{s.name} (port {s.port}) {why}; restarting it")
            _stop([s])
            self._start_server(s)

    def stop(self) -> None:
        """Stop every process started here: servers first, then the tracker."""
        _stop(self.servers)
        if self.tracker_process is not None:
            _stop([self.tracker_process])
        if self.no_torch is not None:
            shutil.rmtree(self.no_torch, ignore_errors=True)
            self.no_torch = None

    # --- what to tell the user ---

    def usage(self, public_host: str | None = None) -> str:
        host, port = self.tracker_address
        if self.own_tracker and self.host in ("0.0.0.0", "", "::"):
            host = public_host or socket.gethostname()
        ready = [s for s in self.servers if s.seen]
        gpus = ",".join(s.gpu for s in ready)
        ports = ",".join(str(s.port) for s in ready)
        where = "started here" if self.own_tracker else "given"
        lines = [f"tracker {host}:{port} ({where}), key {self.key!r}: {len(ready)} servers, GPUs {gpus}, "
                 f"ports {ports}, registered as {self.seen_as}",
                 "point a sweep or MetaSchedule at them:",
                 f"  python -m steps.sweep --step 10 --sizes 2048 --tracker {host}:{port} --key {self.key}",
                 f"  python -m steps.cublas --tune --tracker {host}:{port} --key {self.key}",
                 f"  python -m tvm.exec.query_rpc_tracker --host {host} --port {port}"]
        if self.seen_as in ("127.0.0.1", "::1"):
            lines.append("the servers are registered as 127.0.0.1: clients on other hosts need --custom-addr")
        lines.append("Ctrl-C stops the " + ("tracker and " if self.own_tracker else "") + "servers started here.")
        return "\n".join(lines)


def _stop(processes) -> None:
    """SIGTERM each process's group (a server's session processes are in it), then SIGKILL
    whatever is left after STOP_S."""
    running = [p for p in processes if p.proc is not None and p.proc.poll() is None]
    for p in running:
        _signal_group(p.proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    for p in running:
        try:
            p.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in processes:
        if p.proc is not None:
            _signal_group(p.proc, signal.SIGKILL)  # the group's other processes, if any outlived it
            try:
                p.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                pass


def _signal_group(proc: subprocess.Popen, sig) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def parser():
    p = options.new_parser(PROG, __doc__.strip().splitlines()[0])
    p.add_argument("--gpus", type=gpu_list, required=True, metavar="LIST",
                   help="the GPUs to serve, one server each: 0,1,2,3 or 0-3 (CUDA_VISIBLE_DEVICES values)")
    p.add_argument("--key", required=True, help="the key the servers register under (a sweep's --key)")
    p.add_argument("--tracker", type=options.tracker_address, default=None, metavar="HOST:PORT",
                   help="register at this tracker (another host's); default: start one here")
    p.add_argument("--host", default="0.0.0.0", help="the address the tracker and servers listen on (default: all)")
    p.add_argument("--port", type=_port, default=TRACKER_PORT,
                   help=f"the tracker's port when started here: the first free from it, 0 for any "
                        f"(default: {TRACKER_PORT})")
    p.add_argument("--server-port", type=_port, default=SERVER_PORT,
                   help=f"the servers' ports: the first free from it, one each, 0 for any (default: {SERVER_PORT})")
    p.add_argument("--custom-addr", default=None, metavar="ADDR",
                   help="the address the servers register under, for clients on other hosts")
    p.add_argument("--fork", action="store_true",
                   help="fork each session from its server (TVM's default) instead of starting a fresh Python: "
                        "faster to start, but CUDA failed in forked sessions on the H100 (docs/usage.md)")
    return p


@quiet_broken_pipe
def main(argv=None) -> int:
    try:
        args = parser().parse_args(argv)
        if args.tracker is not None and args.port != TRACKER_PORT:
            raise options.UsageError("--port is the port of a tracker started here; with --tracker none is started")
        missing = missing_packages(tracker=args.tracker is None)
        if missing:
            raise options.UsageError(f"TVM's RPC processes need {', '.join(missing)}: pip install -e \".[rpc]\"")
        launch = Launch(args.gpus, args.key, args.tracker, args.host, args.port, args.server_port, args.custom_addr,
                        spawn=not args.fork)
    except (options.UsageError, LaunchError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_USAGE

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    # Ctrl-C stops it even where it was started with SIGINT ignored (a shell's background job, a
    # parent that ignores it: Python then installs no KeyboardInterrupt of its own, and the
    # launcher ran on after Ctrl-C; seen in a CI run, 2026-11-28).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        launch.start()
        print(launch.usage(), flush=True)
        while True:
            time.sleep(WATCH_S)
            launch.watch()
            if all(s.given_up for s in launch.servers):
                launch.say("every server was given up; stopping")
                return options.EXIT_FAILED
    except KeyboardInterrupt:
        return 0
    except LaunchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return options.EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second Ctrl-C or TERM must not cut the stop short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        launch.stop()
        launch.say("stopped the " + ("tracker and " if launch.own_tracker else "") + "servers started here")
