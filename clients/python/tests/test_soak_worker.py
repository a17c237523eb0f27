"""soak_worker.py: a few workers per primitive, one paused with SIGSTOP, all killed with SIGKILL; the events hold."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

WORKER = pathlib.Path(__file__).resolve().parent.parent / "soak_worker.py"


def run_workers(redis_url, tmp_path, primitive, seconds, n=3, ttl_ms=150, pause=None):
    events = tmp_path / "events.jsonl"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), redis_url, primitive, "soak", f"w{i}", str(ttl_ms), str(events)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(n)
    ]
    try:
        time.sleep(seconds / 2)
        if pause:
            os.kill(procs[0].pid, signal.SIGSTOP)
            time.sleep(pause)
            os.kill(procs[0].pid, signal.SIGCONT)
        time.sleep(seconds / 2)
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    lines = events.read_bytes().split(b"\n")
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            continue  # a partial last line after SIGKILL
    return parsed


def end(e):
    return min(e["released_ns"], e["valid_until_ns"])


def assert_bounded(events, limit):
    """At any instant at most ``limit`` holds were believed held (exclusive: 1)."""
    points = sorted([(e["acquired_ns"], 1) for e in events] + [(end(e), -1) for e in events if end(e) > e["acquired_ns"]])
    inside = peak = 0
    for _, step in points:
        inside += step
        peak = max(peak, inside)
    assert peak <= limit


def assert_fenced_writes(events, r):
    accepted = sorted((e for e in events if e["write"] == "accepted"), key=lambda e: e["acquired_ns"])
    fences = [e["fence"] for e in accepted]
    assert fences == sorted(fences)
    if accepted:
        assert int(r.get("soak:data:fence")) >= fences[-1]


@pytest.mark.parametrize("primitive", ["mutex", "election"])
def test_exclusive(redis_url, r, tmp_path, primitive):
    events = run_workers(redis_url, tmp_path, primitive, 2.0, pause=0.5)
    assert len(events) > 10
    for e in events:
        assert e["lang"] == "python" and e["mode"] == "exclusive" and e["primitive"] == primitive
        assert isinstance(e["fence"], int) and e["write"] in ("accepted", "stale")
        assert e["release"] in ("released", "expired", "owned_by_other")
        assert e["acquired_ns"] <= e["released_ns"]
    assert_bounded(events, 1)
    assert_fenced_writes(events, r)


def test_semaphore(redis_url, r, tmp_path):
    events = run_workers(redis_url, tmp_path, "semaphore:2", 1.5, n=4)
    assert len(events) > 10
    assert all(e["mode"] == "shared" and e["write"] == "none" for e in events)
    assert_bounded(events, 2)


def test_rwlock(redis_url, r, tmp_path):
    events = run_workers(redis_url, tmp_path, "rwlock", 2.0, n=4, pause=0.4)
    writes = [e for e in events if e["mode"] == "exclusive"]
    reads = [e for e in events if e["mode"] == "shared"]
    assert writes and reads
    assert all(e["fence"] is None and e["write"] == "none" for e in reads)
    for w in writes:  # no reader or other writer inside a writer's believed hold
        for o in events:
            if o is not w:
                assert end(o) <= w["acquired_ns"] or end(w) <= o["acquired_ns"]
    assert_fenced_writes(writes, r)
