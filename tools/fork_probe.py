"""Why a forked RPC session fails on the H100 (issue 32): one question per session, on TVM's own
rpc_server started as steps.rpc_pool starts it (its environment, GPU 0), forking and spawning.

    python tools/fork_probe.py

Before any session it says whether the server's processes have the CUDA driver mapped
(/proc/PID/maps), i.e. whether something in them touched CUDA before forking. Then, per server
mode, sessions that each do one thing first: ask the device's name (a driver-API call), allocate
(the runtime API), or load and run a built step-4 kernel (driver API: cuModuleLoadData,
cuLaunchKernel) and check it against float64. A probe for a GPU session: it writes nothing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cuda_mapped(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as f:
            libs = {line.split()[-1].rsplit("/", 1)[-1] for line in f if "libcuda" in line}
    except OSError as exc:
        return f"? ({exc.strerror})"
    return ", ".join(sorted(libs)) or "none"


def main() -> int:
    import tvm
    from tvm import rpc

    import schedules
    from steps.commands import rpc_pool
    from steps.measure import harness

    M = N = K = 256
    lib = schedules.build(4, M, N, K, arch=harness.gpu_arch())
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "step4.so")
    lib.export_library(path)
    a, b = harness.random_operands(M, N, K, np.random.default_rng(0))
    ref = a.astype(np.float64) @ b.astype(np.float64)

    def name(sess, dev):
        return dev.device_name

    def allocate(sess, dev):
        tvm.runtime.empty((1,), "float32", dev)
        dev.sync()
        return "ok"

    def kernel(sess, dev):
        sess.upload(path)
        mod = sess.load_module("step4.so")
        ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
        return f"relative error {harness.verify_on(dev, mod['main'], ta, tb, ref):.1e}"

    orders = {"name": [name, allocate, kernel], "allocate": [allocate, name, kernel], "kernel": [kernel, name]}
    for mode in ("fork", "spawn"):
        port = rpc_pool.free_port("127.0.0.1", 9400)
        cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port),
               "--port-end", str(port + 1)] + (["--no-fork"] if mode == "spawn" else [])
        server = subprocess.Popen(cmd, env=rpc_pool.server_environment("0"), start_new_session=True,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            t0 = time.monotonic()
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() - t0 > 90 or server.poll() is not None:
                        print(f"{mode}: the server did not listen", flush=True)
                        raise SystemExit(1)
                    time.sleep(0.5)
            time.sleep(1.0)  # the listening socket is up; let its serving loop start
            print(f"== {mode}: up after {time.monotonic() - t0:.1f} s; libcuda mapped before any session: "
                  + "; ".join(f"pid {p}: {cuda_mapped(p)}" for p in process_tree(server.pid)), flush=True)
            for first, steps in orders.items():
                t1 = time.monotonic()
                sess = rpc.connect("127.0.0.1", port, session_timeout=60)
                dev = sess.cuda(0)
                said = []
                for step in steps:
                    try:
                        said.append(f"{step.__name__}: {step(sess, dev)}")
                    except Exception as exc:
                        said.append(f"{step.__name__}: FAILED {harness._one_line(exc)[-150:]}")
                print(f"  {first} first ({time.monotonic() - t1:.1f} s): " + " | ".join(said), flush=True)
                del dev, sess  # the session ends only when nothing holds it (a device holds it)
        finally:
            server.terminate()
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()
            try:
                os.killpg(server.pid, 9)  # its session processes (its own session group)
            except OSError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
