#!/usr/bin/env python3
"""Stand-in ``nvidia-cuda-mps-control`` for the gpuops lab (never shipped by a role).

``extensions/molecule/lab/gpu_tools.yml`` installs it as ``/usr/bin/nvidia-cuda-mps-control`` (where the driver's
utilities put the real one, NVIDIA MPS "Appendix: Tools and Interface Reference": "Typically stored under /usr/bin")
on the nodes of the scenarios that import it. It behaves as NVIDIA's does as far as the mps role relies on it
(roles/mps: the unit gpuops-mps@.service, its drop-ins, the Slurm hooks); there is no GPU, so no MPS server is ever
started and no CUDA client connects.

``nvidia-cuda-mps-control -d``
    starts the control daemon in the background and returns once it listens (what ``Type=forking`` waits for):
    its socket ``control`` and its lock ``control_lock`` in ``CUDA_MPS_PIPE_DIRECTORY`` (default
    ``/tmp/nvidia-mps``), its log ``control.log`` in ``CUDA_MPS_LOG_DIRECTORY`` (default ``/var/log/nvidia-mps``),
    both made where missing. A second daemon on the same pipe directory exits 1 ("An instance of this daemon is
    already running"). ``-f`` runs it in the foreground.
``nvidia-cuda-mps-control`` (no option)
    the user interface: sends the commands read on stdin, one a line, to the daemon of ``CUDA_MPS_PIPE_DIRECTORY``
    and prints each answer. No daemon there: "Cannot find MPS control daemon process", exit 1.

Commands (NVIDIA MPS, "nvidia-cuda-mps-control" commands): ``get_server_list`` (no server runs: nothing),
``get_device_client_list``, ``ps`` (nothing), ``set_default_active_thread_percentage <p>`` (0 < p <= 100; answers the
value, ``50.0``), ``get_default_active_thread_percentage`` (``100.0`` until set),
``set_default_device_pinned_mem_limit <dev> <value>`` (``<n>M`` or ``<n>G``, ``<dev>`` an index of the daemon's
``CUDA_VISIBLE_DEVICES``), ``get_default_device_pinned_mem_limit <dev>`` (``0M`` until set), ``shutdown_server <pid>``
and ``start_server -uid <uid>`` (no server in the lab: refused), ``quit [-t <s>]`` (the daemon exits; "The set value
is lost if a quit command is executed"). Every connection, command and answer goes to ``control.log`` in NVIDIA's
"Control Log" format (``[<date time.ms> Control <pid>] ...``), which is where the lab's tests read what the daemon was
told.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import re
import socket
import sys

DEFAULT_PIPE = "/tmp/nvidia-mps"
DEFAULT_LOG = "/var/log/nvidia-mps"
MEMORY = re.compile(r"^[0-9]+[MG]$")


def directories() -> tuple[str, str]:
    return (
        os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE,
        os.environ.get("CUDA_MPS_LOG_DIRECTORY") or DEFAULT_LOG,
    )


class Daemon:
    """The control daemon's state: its defaults, lost when it quits."""

    def __init__(self, pipe: str, log: str, visible: str) -> None:
        self.pipe = pipe
        self.log_path = os.path.join(log, "control.log")
        self.devices = [device for device in visible.split(",") if device] if visible else []
        self.percentage = 100.0
        self.pinned: dict[int, str] = {}
        self.running = True

    def log(self, message: str) -> None:
        now = datetime.datetime.now()
        stamp = now.strftime("%Y-%m-%d %H:%M:%S.") + f"{now.microsecond // 1000:03d}"
        with open(self.log_path, "a", encoding="utf-8") as handle:
            handle.write(f"[{stamp} Control {os.getpid()}] {message}\n")

    def device(self, word: str) -> int | None:
        if not word.isdigit():
            return None
        index = int(word)
        if self.devices and index >= len(self.devices):
            return None
        return index

    def answer(self, line: str) -> str:
        """The answer to one command (empty where the real daemon prints nothing)."""
        words = line.split()
        name, args = words[0], words[1:]
        if name == "quit":
            self.running = False
            return ""
        if name in ("get_server_list", "get_device_client_list", "ps"):
            return ""
        if name == "get_default_active_thread_percentage":
            return f"{self.percentage:.1f}"
        if name == "set_default_active_thread_percentage":
            try:
                value = float(args[0])
            except (IndexError, ValueError):
                return "Invalid thread percentage"
            if not 0 < value <= 100:
                return "Invalid thread percentage"
            self.percentage = value
            return f"{value:.1f}"
        if name == "set_default_device_pinned_mem_limit":
            if len(args) != 2 or self.device(args[0]) is None or not MEMORY.match(args[1]):
                return "Invalid device or memory limit"
            self.pinned[int(args[0])] = args[1]
            return ""
        if name == "get_default_device_pinned_mem_limit":
            if len(args) != 1 or self.device(args[0]) is None:
                return "Invalid device"
            return self.pinned.get(int(args[0]), "0M")
        if name in ("start_server", "shutdown_server"):
            return f"{name}: no MPS server in the gpuops lab"
        return f"Unrecognized command: {name}"

    def serve(self, listener: socket.socket) -> None:
        while self.running:
            connection, _address = listener.accept()
            with connection:
                self.log("Accepting connection...")
                self.log("NEW UI")
                data = b""
                while True:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                for line in data.decode("utf-8", "replace").splitlines():
                    if not line.strip():
                        continue
                    self.log(f"Cmd:{line.strip()}")
                    reply = self.answer(line.strip())
                    if reply:
                        self.log(reply)
                        connection.sendall(reply.encode() + b"\n")
                    if not self.running:
                        break
                self.log("UI closed")
        self.log("Exit")


def bind(pipe: str, log: str) -> tuple[int, socket.socket]:
    """The daemon's lock and listening socket; SystemExit with NVIDIA's message where one already runs."""
    os.makedirs(pipe, mode=0o755, exist_ok=True)
    os.makedirs(log, mode=0o755, exist_ok=True)
    lock = os.open(os.path.join(pipe, "control_lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        raise SystemExit("An instance of this daemon is already running") from error
    path = os.path.join(pipe, "control")
    if os.path.lexists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    return lock, listener


def run_daemon(pipe: str, log: str, ready_fd: int | None) -> int:
    try:
        lock, listener = bind(pipe, log)
    except (SystemExit, OSError) as error:
        if ready_fd is not None:
            os.write(ready_fd, f"{error}\n".encode())
            os.close(ready_fd)
        else:
            print(error, file=sys.stderr)
        return 1
    daemon = Daemon(pipe, log, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    daemon.log(f"Starting control daemon using socket {pipe}/control")
    daemon.log(f"To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY={pipe}")
    if ready_fd is not None:
        os.write(ready_fd, b"ok\n")
        os.close(ready_fd)
    try:
        daemon.serve(listener)
    finally:
        listener.close()
        os.unlink(os.path.join(pipe, "control"))
        os.close(lock)
    return 0


def background(pipe: str, log: str) -> int:
    """-d: fork twice, the daemon in a session of its own; the caller returns once it listens."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child:
        os.close(write_end)
        with os.fdopen(read_end, encoding="utf-8") as ready:
            status = ready.readline().strip()
        os.waitpid(child, 0)  # the first child, gone once the daemon has forked: no zombie left in the unit's cgroup
        if status == "ok":
            return 0
        print(status or "the MPS control daemon did not start", file=sys.stderr)
        return 1
    os.close(read_end)
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.chdir("/")
    os._exit(run_daemon(pipe, log, write_end))


def interface(pipe: str) -> int:
    """The user interface: stdin's commands to the daemon, its answers to stdout."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(os.path.join(pipe, "control"))
    except OSError:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    with client:
        client.sendall(sys.stdin.read().encode())
        client.shutdown(socket.SHUT_WR)
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            sys.stdout.write(chunk.decode("utf-8", "replace"))
    return 0


def main(argv: list[str]) -> int:
    pipe, log = directories()
    if argv in (["-h"], ["--help"]):
        print("Usage: nvidia-cuda-mps-control [-d | -f]")
        return 0
    if argv == ["-d"]:
        return background(pipe, log)
    if argv == ["-f"]:
        return run_daemon(pipe, log, None)
    if argv:
        print(f"nvidia-cuda-mps-control: unknown option {' '.join(argv)}", file=sys.stderr)
        return 1
    return interface(pipe)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
