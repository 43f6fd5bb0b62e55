"""A stand-in ``nvidia-cuda-mps-control`` for the simulated GPUs.

Same command line and behaviour the hooks rely on, as NVIDIA documents them:

* ``nvidia-cuda-mps-control -d`` starts a control daemon in the background, listening in
  ``$CUDA_MPS_PIPE_DIRECTORY`` (default ``/tmp/nvidia-mps``), for the GPU in
  ``$CUDA_VISIBLE_DEVICES``; it writes ``nvidia-cuda-mps-control.pid`` there and
  ``control.log`` in ``$CUDA_MPS_LOG_DIRECTORY``.  It refuses a second daemon in the
  same directory.
* ``echo CMD | nvidia-cuda-mps-control`` sends commands to that daemon:
  ``get_server_list``, ``get_client_list <id>``, ``quit``.  With no daemon listening it
  exits 1; a daemon that does not answer (stopped: ``kill -STOP``) makes it wait.

The daemon is a real background process (so it can die or hang like a real one), and it
keeps its server and clients in the node's simulated state (``sim/mps.py``), found
through ``$SLURM_GPUPOOL_SIM_STATE``.  Its socket is private to the stand-in: real MPS
uses its own pipes, which nothing of ours reads.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time

from slurm_gpupool.hw.sim.state import SimStore

PID_FILE = "nvidia-cuda-mps-control.pid"
SOCKET = "control"
REPLY_TIMEOUT_S = 30.0


def _dirs(env: dict[str, str]) -> tuple[str, str]:
    """The pipe and log directories, with NVIDIA's defaults."""
    pipes = env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
    return pipes, env.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps"


def _store(env: dict[str, str]) -> SimStore:
    path = env.get("SLURM_GPUPOOL_SIM_STATE")
    if not path:
        raise SystemExit("nvidia-cuda-mps-control (simulated): no SLURM_GPUPOOL_SIM_STATE")
    return SimStore(path)


def _log(log_dir: str, text: str) -> None:
    with contextlib.suppress(OSError), open(os.path.join(log_dir, "control.log"), "a") as f:
        f.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {text}\n")


def _answer(env: dict[str, str], pipes: str, log_dir: str, line: str) -> tuple[str, bool]:
    """The daemon's reply to one command, and whether it quits."""
    from slurm_gpupool.hw.sim import mps

    words = line.split()
    st = _store(env).read()
    d = next((x for x in st.get("mps", []) if x["pipe_dir"] == pipes), None)
    if not words:
        return "", False
    if words[0] == "quit":
        _log(log_dir, "CMD: quit")
        mps.unregister_daemon(_store(env), pipes)
        return "", True
    if words[0] == "get_server_list":
        return (str(d["server"]["id"]) if d and d["server"] else ""), False
    if words[0] == "get_client_list" and len(words) == 2:
        ok = d and d["server"] and str(d["server"]["id"]) == words[1]
        return ("\n".join(str(c["pid"]) for c in d["clients"]) if ok and d else ""), False
    return f"unknown command {words[0]}", False


def _serve(env: dict[str, str], pipes: str, log_dir: str) -> None:
    """The daemon's loop: one command per connection."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.chdir(pipes)  # a relative socket name: pipe directories can be longer than sun_path
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SOCKET)
    srv.bind(SOCKET)
    srv.listen(16)
    tmp = f".{PID_FILE}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, PID_FILE)
    _log(log_dir, "Control daemon started (simulated)")
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            with contextlib.suppress(OSError):
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            reply, quit_ = _answer(env, pipes, log_dir, data.decode(errors="replace"))
            with contextlib.suppress(OSError):
                conn.sendall(reply.encode() + (b"\n" if reply else b""))
        if quit_:
            for name in (SOCKET, PID_FILE):
                with contextlib.suppress(OSError):
                    os.unlink(name)
            _log(log_dir, "Control daemon exited (quit)")
            os._exit(0)


def start_daemon(env: dict[str, str]) -> int:
    """``-d``: check, register, fork into the background; returns once the daemon listens."""
    from slurm_gpupool.hw.sim import mps

    pipes, log_dir = _dirs(env)
    uuid = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]
    store = _store(env)
    if mps.daemon_at(store.read(), pipes) is not None:
        sys.stderr.write(f"An instance of this daemon is already running in {pipes}\n")
        return 1
    os.makedirs(pipes, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the daemon: detached, every inherited descriptor closed (a caller's capture pipes)
        os.close(r)
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, w)
        os.closerange(w + 1, 65536)
        try:
            mps.register_daemon(store, pipes, log_dir, uuid, os.getpid())
            os.write(w, b"ok")
        except Exception as e:
            os.write(w, f"{e}".encode()[:500])
            os._exit(1)
        os.close(w)
        try:
            _serve(env, pipes, log_dir)
        finally:
            os._exit(1)
    os.close(w)
    os.waitpid(pid, 0)
    got = b""
    while True:
        chunk = os.read(r, 1024)
        if not chunk:
            break
        got += chunk
    os.close(r)
    if got != b"ok":
        sys.stderr.write(f"nvidia-cuda-mps-control (simulated): {got.decode(errors='replace') or 'daemon died'}\n")
        return 1
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(pipes, PID_FILE)) and time.monotonic() < deadline:
        time.sleep(0.005)
    return 0


def send(pipes: str, line: str, timeout_s: float = REPLY_TIMEOUT_S) -> str | None:
    """One command to the daemon in ``pipes``; None if none listens."""
    here = os.getcwd()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(pipes)
        s.connect(SOCKET)
    except OSError:
        s.close()
        return None
    finally:
        with contextlib.suppress(OSError):
            os.chdir(here)
    with s:
        s.settimeout(timeout_s)
        s.sendall(line.strip().encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data.decode(errors="replace")
            data += chunk


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    if args == ["-d"]:
        return start_daemon(env)
    if args:
        sys.stderr.write("usage: nvidia-cuda-mps-control [-d]   (simulated; commands on stdin)\n")
        return 2
    pipes, _ = _dirs(env)
    for line in sys.stdin.read().splitlines():
        if not line.strip():
            continue
        try:
            reply = send(pipes, line)
        except TimeoutError:
            sys.stderr.write("nvidia-cuda-mps-control (simulated): the daemon does not answer\n")
            return 1
        if reply is None:
            sys.stderr.write("Cannot find MPS control daemon process\n")
            return 1
        sys.stdout.write(reply)
    return 0


def stand_in_text(python: str | None = None) -> str:
    """The stand-in's script for ``python`` (default: this interpreter)."""
    body = "import sys\nfrom slurm_gpupool.hw.sim.mps_control import main\nsys.exit(main())\n"
    return f"#!{python or sys.executable}\n{body}"


def write_stand_in(path: str, python: str | None = None) -> None:
    """Install the stand-in as an executable ``path`` for ``python`` (tests, the sandbox)."""
    from pathlib import Path

    from slurm_gpupool.util.atomic import write_bytes_atomic

    write_bytes_atomic(Path(path), stand_in_text(python).encode(), 0o755)


if __name__ == "__main__":
    sys.exit(main())
