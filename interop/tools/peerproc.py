"""Stdlib-only helpers to start a throwaway redis-server and talk to peer drivers.

Used by interop/python/tests and by the measurement script interop/tools/handoff.py.
"""

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time

INTEROP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(INTEROP, "python", ".venv", "bin", "python")
PY_DRIVER = os.path.join(INTEROP, "python", "peer_driver.py")
NODE_DRIVER = os.path.join(INTEROP, "node", "peer-driver.js")

PY_PEERS = ["redis-py", "python-redis-lock", "pottery"]
NODE_PEERS = ["redlock", "sesame", "node-redisson"]


def driver_argv(peer, url):
    if peer in PY_PEERS:
        return [VENV_PY, PY_DRIVER, peer, url]
    if peer in NODE_PEERS:
        return ["node", NODE_DRIVER, peer, url]
    raise ValueError(f"unknown peer {peer!r}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on a free loopback port, no persistence."""

    def __init__(self):
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server not found on PATH")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def cmd(self, *args):
        """One command through redis-cli; returns its stripped stdout."""
        out = subprocess.run(["redis-cli", "-p", str(self.port), *map(str, args)],
                             capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            raise OSError(out.stderr)
        return out.stdout.strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Peer:
    """One peer-driver child process speaking the JSON-lines protocol."""

    def __init__(self, peer, url, env=None, stderr=None):
        self.name = peer
        self.proc = subprocess.Popen(
            driver_argv(peer, url), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=stderr, text=True, bufsize=1, env={**os.environ, **(env or {})})
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self.read(timeout=30)
        assert self.ready.get("ready") is True, self.ready

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout=30):
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise EOFError(f"{self.name} driver exited (rc={self.proc.wait()})")
        return json.loads(line)

    def call(self, req, timeout=30):
        self.send(req)
        return self.read(timeout)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send({"op": "quit"})
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
