#!/usr/bin/env python3
"""Cross-language lock benchmark: our Rust lock against the Python and Node lock packages.

    interop/tools/bench_languages.py [--quick] [--runs 3] [--rust-driver PATH] [--skip-ours]
                                     [--contenders a,b,..] [--json PATH] [--seed N]

Every contender is a driver process speaking the JSON-lines protocol of interop/README.md
and measured through its `bench` op: ours (target/release/lock-driver, ids `ours` and
`ours-nofence`), redis-py, python-redis-lock, pottery (python/peer_driver.py), redlock,
sesame, node-redisson (node/peer-driver.js). The script starts its own redis-server, pins
it to CPU 1 and every driver to CPU 0 (taskset, when the machine has >= 2 CPUs), and runs:

  1. uncontended cycle: 1 process, one key, wait 0, hold 0, n = 3000 (quick: 300), cap 20 s;
  2. contended hand-off: 4 processes of one contender on one key, hold 1 ms, wait 10 s,
     5 s (quick: 1 s), the four bench requests sent together;
  3. server commands per acquisition for both (CONFIG RESETSTAT before, INFO commandstats
     after, the script's own CONFIG call taken off).

Each run measures every contender in turn, in an order shuffled per run; the tables give
the median over runs and the min-max. Standard library only.
"""

import argparse
import json
import os
import platform
import queue
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

INTEROP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(INTEROP)
VENV_PY = os.path.join(INTEROP, "python", ".venv", "bin", "python")
PY_DRIVER = os.path.join(INTEROP, "python", "peer_driver.py")
NODE_DRIVER = os.path.join(INTEROP, "node", "peer-driver.js")
DEFAULT_RUST_DRIVER = os.path.join(ROOT, "target", "release", "lock-driver")
BUILD_HINT = "cargo build --release -p lock-bench --bin lock-driver"

OURS = ["ours", "ours-nofence"]
PY_PEERS = ["redis-py", "python-redis-lock", "pottery"]
NODE_PEERS = ["redlock", "sesame", "node-redisson"]
ALL = OURS + PY_PEERS + NODE_PEERS
PACKAGE = {"redis-py": "redis", "python-redis-lock": "python-redis-lock", "pottery": "pottery",
           "redlock": "redlock", "sesame": "@sesamecare-oss/redlock", "node-redisson": "node-redisson"}

TTL_MS = 10000        # python-redis-lock refuses a wait longer than its (whole-second) expiry
HANDOFF_PROCS = 4
HANDOFF_WAIT_MS = 10000
HANDOFF_HOLD_US = 1000
UNCONTENDED_CAP_MS = 20000
HANDOFF_N = 10**9     # the duration bounds the hand-off run

LUA_NOTE = ("Redis counts every command a Lua script runs (redis.call/pcall) as a command of its own, "
            "on top of the EVAL/EVALSHA that ran the script, so a release script doing GET + DEL "
            "counts 3.")


# -- a tiny RESP2 client (the script's own connection: FLUSHALL, CONFIG, INFO) -----------
class Resp:
    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("redis-server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """redis-server on a free loopback port, no persistence, optionally pinned."""

    def __init__(self, pin_prefix):
        self.port = free_port()
        self.proc = subprocess.Popen(
            pin_prefix + ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                self.conn = Resp(self.port)
                if self.conn.cmd("PING") == "PONG":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        info = self.conn.cmd("INFO", "server")
        self.version = dict(kv.split(":", 1) for kv in info.split("\r\n") if ":" in kv).get("redis_version")

    def reset_stats(self):
        self.conn.cmd("CONFIG", "RESETSTAT")

    def commands_since_reset(self):
        """Sum of `calls` over INFO commandstats, minus the script's own CONFIG RESETSTAT (the
        INFO being answered is not counted yet); also returns the per-command counts."""
        per = {}
        for line in self.conn.cmd("INFO", "commandstats").split("\r\n"):
            if line.startswith("cmdstat_"):
                name, fields = line[len("cmdstat_"):].split(":", 1)
                per[name] = int(dict(f.split("=", 1) for f in fields.split(","))["calls"])
        per["config|resetstat"] = per.get("config|resetstat", 0) - 1
        if per["config|resetstat"] == 0:
            del per["config|resetstat"]
        return sum(per.values()), per

    def stop(self):
        if getattr(self, "conn", None):
            self.conn.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- driver processes -------------------------------------------------------------------
class DriverError(Exception):
    pass


class Driver:
    """One driver child process; its stdout lines are pumped into a queue by a thread."""

    def __init__(self, contender, argv):
        self.name = contender
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_ready(self, timeout=60):
        self.ready = self.read(timeout)
        if self.ready.get("ready") is not True:
            raise DriverError(f"{self.name}: first line is not ready: {self.ready}")
        return self.ready

    def send(self, req):
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise DriverError(f"{self.name}: cannot write to the driver: {exc}{self.stderr_tail()}")

    def read(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise DriverError(f"{self.name}: no reply within {timeout:.0f} s{self.stderr_tail()}")
        if line is None:
            raise DriverError(f"{self.name}: driver exited (rc={self.proc.wait()}){self.stderr_tail()}")
        return json.loads(line)

    def call(self, req, timeout):
        self.send(req)
        return self.read(timeout)

    def stderr_tail(self, n=600):
        try:
            self.err.flush()
            self.err.seek(0)
            text = self.err.read().strip()
        except (OSError, ValueError):
            return ""
        return f"; stderr: ...{text[-n:]}" if text else ""

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send({"op": "quit"})
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, DriverError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.err.close()


# -- statistics -------------------------------------------------------------------------
def pct(sorted_vals, p):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, -(-p * len(sorted_vals) // 100) - 1))
    return sorted_vals[k]


def jain(xs):
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if s2 else None


def check_bench_reply(name, r):
    if not r.get("ok"):
        raise DriverError(f"{name}: bench failed: {r.get('error')}")
    for field in ("cycles", "failed", "elapsed_ns", "acquire_ns", "cycle_ns"):
        if field not in r:
            raise DriverError(f"{name}: bench reply lacks {field!r}")
    if not (len(r["acquire_ns"]) == len(r["cycle_ns"]) == r["cycles"]):
        raise DriverError(f"{name}: bench reply arrays do not match cycles={r['cycles']}")
    return r


# -- the benchmark ----------------------------------------------------------------------
class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.cpus = len(cpus) or os.cpu_count() or 1
        self.pinned = bool(shutil.which("taskset")) and 0 in cpus and 1 in cpus
        self.client_pin = ["taskset", "-c", "0"] if self.pinned else []
        self.server_pin = ["taskset", "-c", "1"] if self.pinned else []
        self.uncontended_n = 300 if self.quick else 3000
        self.handoff_ms = 1000 if self.quick else 5000
        self.warmup_n = 30 if self.quick else 200
        self.versions = {}

    def argv(self, contender, url):
        if contender in OURS:
            base = [self.args.rust_driver, contender, url]
        elif contender in PY_PEERS:
            base = [VENV_PY, PY_DRIVER, contender, url]
        else:
            base = ["node", NODE_DRIVER, contender, url]
        return self.client_pin + base

    def start(self, contender, count):
        drivers = [Driver(contender, self.argv(contender, self.srv.url)) for _ in range(count)]
        try:
            for d in drivers:
                ready = d.wait_ready()
                if contender not in OURS and ready.get("peer") != contender:
                    raise DriverError(f"{contender}: ready line names peer {ready.get('peer')!r}")
            self.versions.setdefault(contender, drivers[0].ready)
            return drivers
        except BaseException:
            for d in drivers:
                d.close()
            raise

    def bench_req(self, key, wait_ms, hold_us, n, duration_ms):
        return {"op": "bench", "name": key, "ttl_ms": TTL_MS, "wait_ms": wait_ms,
                "hold_us": hold_us, "n": n, "duration_ms": duration_ms}

    def warm_up(self, drivers, key):
        """A few uncontended cycles per process, before the stats reset: script loading
        (NOSCRIPT -> SCRIPT LOAD), connection set-up and JIT warm-up stay out of the numbers."""
        for d in drivers:
            check_bench_reply(d.name, d.call(self.bench_req(key, 0, 0, self.warmup_n, 10000), 60))

    def uncontended(self, contender):
        key = "bench:uncontended"
        self.srv.conn.cmd("FLUSHALL")
        drivers = self.start(contender, 1)
        try:
            self.warm_up(drivers, key)
            self.srv.reset_stats()
            r = check_bench_reply(contender, drivers[0].call(
                self.bench_req(key, 0, 0, self.uncontended_n, UNCONTENDED_CAP_MS),
                UNCONTENDED_CAP_MS / 1000 + 120))
            cmds, per = self.srv.commands_since_reset()
        finally:
            for d in drivers:
                d.close()
        cyc = sorted(r["cycle_ns"])
        acq = sorted(r["acquire_ns"])
        return {
            "cycles": r["cycles"], "failed": r["failed"], "elapsed_ns": r["elapsed_ns"],
            "failed_releases": r.get("failed_releases", 0),
            "cycles_per_s": r["cycles"] / r["elapsed_ns"] * 1e9 if r["elapsed_ns"] else None,
            "cycle_p50_us": pct(cyc, 50) / 1e3 if cyc else None,
            "cycle_p99_us": pct(cyc, 99) / 1e3 if cyc else None,
            "acquire_p50_us": pct(acq, 50) / 1e3 if acq else None,
            "server_cmds": cmds, "server_cmds_by_name": per,
            "cmds_per_acq": cmds / r["cycles"] if r["cycles"] else None,
            "raw": {k: r[k] for k in ("cycles", "failed", "elapsed_ns", "acquire_ns", "cycle_ns")},
        }

    def handoff(self, contender):
        key = "bench:handoff"
        self.srv.conn.cmd("FLUSHALL")
        drivers = self.start(contender, HANDOFF_PROCS)
        try:
            self.warm_up(drivers, key)
            self.srv.reset_stats()
            req = self.bench_req(key, HANDOFF_WAIT_MS, HANDOFF_HOLD_US, HANDOFF_N, self.handoff_ms)
            for d in drivers:  # all four first, then the four replies
                d.send(req)
            timeout = (self.handoff_ms + HANDOFF_WAIT_MS) / 1000 + 120
            replies = [check_bench_reply(d.name, d.read(timeout)) for d in drivers]
            cmds, per = self.srv.commands_since_reset()
        finally:
            for d in drivers:
                d.close()
        counts = [r["cycles"] for r in replies]
        total = sum(counts)
        waits = sorted(w for r in replies for w in r["acquire_ns"])
        holds = sorted(c - a for r in replies for a, c in zip(r["acquire_ns"], r["cycle_ns"]))
        span = max(r["elapsed_ns"] for r in replies)
        return {
            "cycles": total, "per_process": counts, "failed": sum(r["failed"] for r in replies),
            "failed_releases": sum(r.get("failed_releases", 0) for r in replies),
            "elapsed_ns": [r["elapsed_ns"] for r in replies],
            "acq_per_s": total / span * 1e9 if span else None,
            "wait_p50_ms": pct(waits, 50) / 1e6 if waits else None,
            "wait_p99_ms": pct(waits, 99) / 1e6 if waits else None,
            "hold_release_p50_us": pct(holds, 50) / 1e3 if holds else None,
            "fairness": jain(counts),
            "server_cmds": cmds, "server_cmds_by_name": per,
            "cmds_per_acq": cmds / total if total else None,
            "raw": [{k: r[k] for k in ("cycles", "failed", "elapsed_ns", "acquire_ns", "cycle_ns")}
                    for r in replies],
        }

    def run(self, contenders):
        self.srv = Server(self.server_pin)
        rnd = random.Random(self.args.seed)
        runs = []
        try:
            for i in range(self.args.runs):
                order = contenders[:]
                rnd.shuffle(order)
                res = {"run": i + 1, "order": order, "uncontended": {}, "handoff": {}}
                for scenario, fn in (("uncontended", self.uncontended), ("handoff", self.handoff)):
                    for c in order:
                        t = time.monotonic()
                        try:
                            res[scenario][c] = fn(c)
                        except DriverError as exc:
                            res[scenario][c] = {"error": str(exc)}
                        status = res[scenario][c].get("error") or "ok"
                        print(f"[run {i + 1}/{self.args.runs}] {scenario:<11} {c:<17} "
                              f"{time.monotonic() - t:5.1f} s  {status[:200]}", file=sys.stderr, flush=True)
                runs.append(res)
        finally:
            self.srv.stop()
        return runs


# -- report -----------------------------------------------------------------------------
def agg(runs, scenario, contender, metric):
    vals = [r[scenario][contender][metric] for r in runs
            if contender in r[scenario] and "error" not in r[scenario][contender]
            and r[scenario][contender].get(metric) is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def fmt(a, digits, runs):
    if a is None:
        return "n/a"
    f = f"{{:,.{digits}f}}"
    s = f.format(a["median"])
    if runs > 1:
        s += f" ({f.format(a['min'])}–{f.format(a['max'])})"
    return s


def label(contender, ready):
    if ready is None:
        return "?"
    if contender in OURS:
        rt = ready.get("runtime") or "Rust"
        pkg = ready.get("package")
        return f"{rt} · {pkg + ' ' if pkg else 'this library '}{ready.get('version')}"
    rt = ready.get("runtime") or ("Python" if contender in PY_PEERS else "Node")
    base = f"{rt} · {PACKAGE[contender]} {ready.get('version')}"
    if contender in PY_PEERS and contender != "redis-py":
        base += f" (redis-py {ready.get('redis_py_version')})"
    if contender in NODE_PEERS:
        base += f" (ioredis {ready.get('ioredis_version')})"
    return base


def table(runs, scenario, contenders, columns, versions, nruns):
    head = ["contender", "language · package version"] + [c[0] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in contenders:
        cells = [f"`{c}`", label(c, versions.get(c))]
        if not any(c in r[scenario] and "error" not in r[scenario][c] for r in runs):
            cells += ["error"] * len(columns)
        else:
            cells += [fmt(agg(runs, scenario, c, m), d, nruns) for _, m, d in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_info():
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except OSError:
        head = None
    return {"cpu_model": model, "platform": platform.platform(), "git_head": head}


def report(bench, runs, contenders, meta):
    nruns = len(runs)
    out = []
    out.append(f"## Uncontended cycle (1 process, wait 0, hold 0, n = {bench.uncontended_n}, "
               f"cap {UNCONTENDED_CAP_MS // 1000} s)\n")
    out.append(table(runs, "uncontended", contenders, [
        ("cycles/s", "cycles_per_s", 0), ("cycle p50 µs", "cycle_p50_us", 1),
        ("cycle p99 µs", "cycle_p99_us", 1), ("server cmds/acq", "cmds_per_acq", 2),
    ], bench.versions, nruns))
    out.append(f"\n## Contended hand-off ({HANDOFF_PROCS} processes, one key, hold "
               f"{HANDOFF_HOLD_US} µs, wait up to {HANDOFF_WAIT_MS // 1000} s, "
               f"{bench.handoff_ms / 1000:g} s)\n")
    out.append(table(runs, "handoff", contenders, [
        ("acquisitions/s", "acq_per_s", 0), ("wait p50 ms", "wait_p50_ms", 2),
        ("wait p99 ms", "wait_p99_ms", 2), ("fairness (Jain)", "fairness", 3),
        ("failed acquires", "failed", 0), ("hold+release p50 µs", "hold_release_p50_us", 0),
        ("server cmds/acq", "cmds_per_acq", 2),
    ], bench.versions, nruns))
    notes = []
    for r in runs:
        for scenario in ("uncontended", "handoff"):
            for c, res in r[scenario].items():
                if "error" in res:
                    notes.append(f"- run {r['run']}, {scenario}, `{c}`: {res['error']}")
                elif res.get("failed_releases"):
                    notes.append(f"- run {r['run']}, {scenario}, `{c}`: {res['failed_releases']} "
                                 f"release(s) reported an error")
    if notes:
        out.append("\nErrors:\n" + "\n".join(notes))
    pin = ("redis-server pinned to CPU 1 and every driver process to CPU 0 (`taskset -c`)"
           if bench.pinned else
           f"nothing pinned ({bench.cpus} CPU(s) or no taskset): server and drivers share the CPUs")
    out.append(f"""
**Method.** `interop/tools/bench_languages.py{' --quick' if bench.quick else ''} --runs {nruns}`,
{meta['date']}, git {meta['git_head']}, {meta['cpu_model']} ({bench.cpus} CPUs), redis-server
{bench.srv.version} (own server, loopback, no persistence), {pin}; load average {meta['load_start']}
at start, {meta['load_end']} at the end; {meta['wall_s']:.0f} s in all. Every contender is a driver
process using the package's public API with its defaults (TTL {TTL_MS} ms), measured by the
driver's `bench` op (interop/README.md) on the CLOCK_MONOTONIC clock; the contenders ran one after
another, in an order shuffled per run (seed {meta['seed']}; orders: {'; '.join(', '.join(r['order']) for r in runs)}),
fresh processes and a FLUSHALL for every measurement, {bench.warmup_n} uncontended warm-up cycles per
process before it. Cells are the median over {nruns} run(s){' (min–max)' if nruns > 1 else ''}.
Percentiles are nearest-rank over all cycles of a run (hand-off: of all four processes). Hand-off
acquisitions/s = all cycles / the longest process's elapsed time; wait = time in the package's acquire
call; fairness = Jain's index of the four per-process cycle counts (1 = equal, 0.25 = one process
got everything); hold+release = from acquire's return to release's return (the hold is each
language's own sleep). Server commands per acquisition = the sum of `calls` in INFO commandstats
after a CONFIG RESETSTAT, less that CONFIG call, over successful acquisitions; {LUA_NOTE}
The polling packages (redis-py, pottery, redlock, sesame) wait with their default retry sleeps,
which set their hand-off numbers.""")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 300, 1 s hand-off: a smoke test")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rust-driver", default=DEFAULT_RUST_DRIVER,
                    help="our driver binary (default: target/release/lock-driver)")
    ap.add_argument("--skip-ours", action="store_true", help="leave ours and ours-nofence out")
    ap.add_argument("--contenders", help="comma-separated subset of: " + ",".join(ALL))
    ap.add_argument("--json", help="save the raw results here")
    ap.add_argument("--seed", type=int, help="seed of the per-run order (default: random)")
    args = ap.parse_args()

    contenders = args.contenders.split(",") if args.contenders else ALL[:]
    unknown = [c for c in contenders if c not in ALL]
    if unknown:
        ap.error(f"unknown contender(s): {', '.join(unknown)}")
    if args.skip_ours:
        contenders = [c for c in contenders if c not in OURS]
    if not contenders:
        ap.error("no contender left")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if any(c in OURS for c in contenders) and not os.access(args.rust_driver, os.X_OK):
        print(f"bench_languages: the Rust driver {args.rust_driver} does not exist or is not "
              f"executable.\nBuild it with:  {BUILD_HINT}\n(or pass --rust-driver PATH, or "
              f"--skip-ours to leave ours out)", file=sys.stderr)
        return 2
    for exe in ("redis-server",) + (("node",) if any(c in NODE_PEERS for c in contenders) else ()):
        if shutil.which(exe) is None:
            print(f"bench_languages: {exe} is not on PATH", file=sys.stderr)
            return 2
    if any(c in PY_PEERS for c in contenders) and not os.access(VENV_PY, os.X_OK):
        print(f"bench_languages: {VENV_PY} is missing; run interop/setup.sh", file=sys.stderr)
        return 2
    if any(c in NODE_PEERS for c in contenders) and not os.path.isdir(
            os.path.join(INTEROP, "node", "node_modules")):
        print("bench_languages: interop/node/node_modules is missing; run interop/setup.sh", file=sys.stderr)
        return 2
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)

    bench = Bench(args)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "seed": args.seed,
            "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()), **machine_info()}
    t0 = time.monotonic()
    runs = bench.run(contenders)
    meta["wall_s"] = time.monotonic() - t0
    meta["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(report(bench, runs, contenders, meta))
    if args.json:
        summary = {s: {c: {m: agg(runs, s, c, m) for m in metrics} for c in contenders}
                   for s, metrics in (("uncontended", ["cycles_per_s", "cycle_p50_us", "cycle_p99_us",
                                                       "cmds_per_acq"]),
                                      ("handoff", ["acq_per_s", "wait_p50_ms", "wait_p99_ms", "fairness",
                                                   "failed", "hold_release_p50_us", "cmds_per_acq"]))}
        doc = {"meta": {**meta, "quick": bench.quick, "runs": len(runs), "pinned": bench.pinned,
                        "cpus": bench.cpus, "redis_version": bench.srv.version, "ttl_ms": TTL_MS,
                        "uncontended_n": bench.uncontended_n, "handoff_ms": bench.handoff_ms,
                        "handoff_procs": HANDOFF_PROCS, "handoff_wait_ms": HANDOFF_WAIT_MS,
                        "handoff_hold_us": HANDOFF_HOLD_US, "warmup_n": bench.warmup_n,
                        "rust_driver": args.rust_driver if any(c in OURS for c in contenders) else None,
                        "ready": bench.versions, "lua_note": LUA_NOTE},
               "summary": summary, "runs": runs}
        with open(args.json, "w") as f:
            json.dump(doc, f)
        print(f"\n(raw results: {args.json})", file=sys.stderr)
    failed = any("error" in r[s][c] for r in runs for s in ("uncontended", "handoff") for c in r[s])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
