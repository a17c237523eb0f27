#!/usr/bin/env python3
"""Server CPU per acquire of each fenced-acquire candidate (issue 51), measured on redis-server alone.

    python3 bench/server-cost/fence_candidates.py [--port 6390] [--n 200000] [--runs 3]

For each candidate, N acquisitions on fresh keys are sent through `redis-cli --pipe` (no client in the way), and
the server's own CPU time (`INFO cpu`: used_cpu_user + used_cpu_sys of the main thread's process) is divided by N.
Candidates: the plain `SET NX PX`; lock-core's ACQUIRE script as sent (wire/scripts/acquire.lua); the same with the
counter's idle expiry (protocol 1.2's `ARGV[6]`, the default: one `PEXPIRE` more); the same script as a Redis 7
function (`FCALL`); the same steps without the counter's validation; with the floor from the client instead of TIME;
`MULTI`/`SET NX PX`/`INCR`/`EXEC` (no time floor); and the fence on demand (`SET NX PX`, then the FENCE script),
without and with the idle expiry. Each run measures every candidate in turn, rotated; the median per candidate is printed.
Needs redis-server and redis-cli on PATH; starts its own server (pinned to the last CPU when taskset exists).
"""
import argparse
import contextlib
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ACQUIRE = open(os.path.join(HERE, "..", "..", "wire", "scripts", "acquire.lua")).read()
FENCE = open(os.path.join(HERE, "..", "..", "wire", "scripts", "fence.lua")).read()
# The engine's default idle expiry of a fencing counter (a week, in ms).
IDLE = 7 * 24 * 3600 * 1000

LEAN = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local current = redis.call('GET', KEYS[2])
  local now = redis.call('TIME')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local step = floor - (tonumber(current) or 0)
  if step < 1 then step = 1 end
  return {1, redis.call('INCRBY', KEYS[2], string.format('%d', step))}
end
return {0, redis.call('PTTL', KEYS[1])}
"""

CLIENT_FLOOR = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local current = redis.call('GET', KEYS[2])
  local step = tonumber(ARGV[3]) - (tonumber(current) or 0)
  if step < 1 then step = 1 end
  return {1, redis.call('INCRBY', KEYS[2], string.format('%d', step))}
end
return {0, redis.call('PTTL', KEYS[1])}
"""


# The same acquire as a Redis 7 function (FCALL): no script cache lookup, the same Lua.
FUNCTION = "#!lua name=lockwire\nredis.register_function('acquire', function(KEYS, ARGV)\n" + ACQUIRE + "\nend)\n"


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=True).stdout


def cpu(port):
    info = cli(port, "INFO", "cpu")
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def commands(kind, n, tag):
    sha = {"acquire": hashlib.sha1(ACQUIRE.encode()).hexdigest(), "lean": hashlib.sha1(LEAN.encode()).hexdigest(),
           "client-floor": hashlib.sha1(CLIENT_FLOOR.encode()).hexdigest(), "fence": hashlib.sha1(FENCE.encode()).hexdigest()}
    token = "0123456789abcdef0123456789abcdef"
    floor = int(time.time() * 1_000_000)
    parts = []
    for i in range(n):
        lock, fence = f"lock:{{{tag}-{i}}}", f"lock:{{{tag}-{i}}}:fence"
        if kind == "set-nx-px":
            parts.append(resp("SET", lock, token, "NX", "PX", 10000))
        elif kind == "acquire":
            parts.append(resp("EVALSHA", sha["acquire"], 3, lock, fence, f"lock:{{{tag}-{i}}}:awaited", token, 10000, 1, ""))
        elif kind == "acquire-idle":
            parts.append(resp("EVALSHA", sha["acquire"], 3, lock, fence, f"lock:{{{tag}-{i}}}:awaited", token, 10000, 1, "", "", IDLE))
        elif kind in ("on-demand", "on-demand-idle"):
            idle = IDLE if kind == "on-demand-idle" else ""
            parts.append(resp("SET", lock, token, "NX", "PX", 10000) + resp("EVALSHA", sha["fence"], 2, lock, fence, token, idle))
        elif kind in ("lean", "client-floor"):
            parts.append(resp("EVALSHA", sha[kind], 2, lock, fence, token, 10000, floor + i))
        elif kind == "function":
            parts.append(resp("FCALL", "acquire", 3, lock, fence, f"lock:{{{tag}-{i}}}:awaited", token, 10000, 1, ""))
        elif kind == "multi-incr":
            parts.append(resp("MULTI") + resp("SET", lock, token, "NX", "PX", 10000) + resp("INCR", fence) + resp("EXEC"))
    return b"".join(parts)


def pipe(port, payload):
    """Sends `payload` (RESP commands) through `redis-cli --pipe`."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(payload)
        f.flush()
        with open(f.name, "rb") as data:
            subprocess.run(["redis-cli", "-p", str(port), "--pipe"], stdin=data, capture_output=True, check=True)


@contextlib.contextmanager
def server():
    """A redis-server of its own without persistence (pinned to the last CPU when taskset exists): its port."""
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", str((os.cpu_count() or 1) - 1)] + cmd
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                cli(port, "PING")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait()


def arguments():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    return ap.parse_args()


def main():
    args = arguments()
    with server() as port:
        for body in (ACQUIRE, LEAN, CLIENT_FLOOR, FENCE):
            cli(port, "SCRIPT", "LOAD", body)
        cli(port, "FUNCTION", "LOAD", "REPLACE", FUNCTION)
        kinds = ["set-nx-px", "acquire", "acquire-idle", "function", "lean", "client-floor", "multi-incr", "on-demand",
                 "on-demand-idle"]
        results = {k: [] for k in kinds}
        for run in range(args.runs):
            for k in kinds[run % len(kinds):] + kinds[: run % len(kinds)]:
                payload = commands(k, args.n, f"{k}-{run}")
                before = cpu(port)
                pipe(port, payload)
                results[k].append((cpu(port) - before) * 1e6 / args.n)
                cli(port, "FLUSHALL")
        base = statistics.median(results["set-nx-px"])
        print("| candidate | server CPU µs per acquire (median of %d runs, min–max) | × SET NX PX |" % args.runs)
        print("|---|---|---|")
        for k in kinds:
            m = statistics.median(results[k])
            print(f"| {k} | {m:.2f} ({min(results[k]):.2f}–{max(results[k]):.2f}) | {m / base:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
