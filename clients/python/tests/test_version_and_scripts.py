"""Protocol version key, script loading and checks, tokens and names."""

from __future__ import annotations

import hashlib
import re
import shutil

import pytest
import redis

import wirelock
from wirelock import ProtocolVersionMismatch, ScriptMismatch
from wirelock import keys as K
from wirelock import scripts as S
from wirelock import tokens as T


def test_version_key_written_once(client, r):
    client.mutex.acquire("a", ttl=1.0).release()
    assert r.get("wlp:wire") == wirelock.PROTOCOL_VERSION == "1.2" and r.pttl("wlp:wire") == -1
    client.semaphore.acquire("a", limit=1, ttl=1.0).release()
    assert r.keys("*wire*") == ["wlp:wire"]  # covers <P>sem: and <P>rw: too


@pytest.mark.parametrize("found", ["2.0", "01.0", "0.9"])
def test_version_key_refuses_other_major(make_client, r, found):
    r.set("wlp:wire", found)
    client = make_client()
    for acquire in (
        lambda: client.mutex.acquire("a", ttl=1.0),
        lambda: client.semaphore.acquire("a", limit=1, ttl=1.0),
        lambda: client.rwlock.read("a", ttl=1.0),
        lambda: client.rwlock.write("a", ttl=1.0),
        lambda: client.election.campaign("a", "me", lease=1.0),
    ):
        with pytest.raises(ProtocolVersionMismatch) as refused:
            acquire()
        assert found in str(refused.value) and wirelock.PROTOCOL_VERSION in str(refused.value)
    assert r.keys("*") == ["wlp:wire"]  # nothing else written
    # A refusal is not remembered: once the key holds a compatible version, the prefix works.
    r.set("wlp:wire", "1.12")
    client.mutex.acquire("a", ttl=1.0).release()


@pytest.mark.parametrize("found", ["1", "x.y", "1.0 ", "cHl0aG9uLXRva2Vu"])
def test_a_value_that_is_not_a_version_is_a_foreign_key(make_client, r, found):
    r.set("wlp:wire", found)
    with pytest.raises(wirelock.ForeignKey) as refused:
        make_client().mutex.acquire("a", ttl=1.0)
    assert "a key that is not this library's sits at 'wlp:wire'" in str(refused.value)
    assert len(found) < 4 or found not in str(refused.value)  # another library's value may be its token
    assert r.keys("*") == ["wlp:wire"]


def test_the_old_default_prefix_in_use_is_refused_and_never_written(make_client, r):
    # python-redis-lock's lock named `wire` (its token, no expiry) is left alone and does not stop us.
    r.set("lock:wire", "cHl0aG9uLXRva2Vu")
    make_client().mutex.acquire("a", ttl=1.0).release()
    assert r.get("lock:wire") == "cHl0aG9uLXRva2Vu"
    # A version there: clients of an older release use `lock:`; the default prefix refuses, `lock:` given works.
    r.set("lock:wire", "1.0")
    with pytest.raises(wirelock.OldPrefixInUse) as refused:
        make_client().mutex.acquire("b", ttl=1.0)
    assert "prefix='lock:'" in str(refused.value)
    assert r.exists("wlp:{b}") == 0
    make_client(prefix="lock:").mutex.acquire("b", ttl=1.0).release()


def test_version_key_other_prefix_and_wrong_type(make_client, r):
    r.hset("app:wire", "x", "1")
    client = make_client(prefix="app:")
    with pytest.raises(wirelock.WrongType):
        client.mutex.acquire("a", ttl=1.0)
    assert r.keys("*") == ["app:wire"]
    make_client().mutex.acquire("a", ttl=1.0).release()  # the default prefix has its own key
    assert r.get("wlp:wire") == wirelock.PROTOCOL_VERSION


def test_version_key_checked_again_after_five_minutes(client, r, monkeypatch):
    """A success is remembered for at most five minutes, so a version key lost (FLUSHALL, failover) is written again."""
    import wirelock.connection as C

    assert C.RECHECK_AFTER == 300.0
    client.mutex.acquire("a", ttl=1.0).release()
    r.delete("wlp:wire")
    client.mutex.acquire("a", ttl=1.0).release()
    assert r.exists("wlp:wire") == 0  # remembered
    monkeypatch.setattr(C, "RECHECK_AFTER", 0.0)
    client.mutex.acquire("a", ttl=1.0).release()
    assert r.get("wlp:wire") == wirelock.PROTOCOL_VERSION


def test_compatible_version():
    assert wirelock.compatible_version("1.0") and wirelock.compatible_version("1.12")
    for bad in ("2.0", "01.0", "1", "1.", "١.0", "1.0.0"):
        assert not wirelock.compatible_version(bad)


def test_scripts_table_digest():
    assert len(S.SCRIPT_SHA1) == 35
    assert S.scripts_digest() == S.SCRIPTS_DIGEST


def test_refuses_mismatched_script(tmp_path, monkeypatch):
    for path in S.default_scripts_dir().glob("*.lua"):
        shutil.copy(path, tmp_path / path.name)
    S.ScriptSet(tmp_path)  # an identical copy loads
    (tmp_path / "release.lua").write_bytes((tmp_path / "release.lua").read_bytes() + b"\n")
    monkeypatch.setenv("WIRELOCK_SCRIPTS", str(tmp_path))
    with pytest.raises(ScriptMismatch, match="release.lua: SHA-1"):
        S.ScriptSet()
    (tmp_path / "extend.lua").unlink()
    with pytest.raises(ScriptMismatch, match="extend.lua: cannot read"):
        S.ScriptSet(tmp_path)


def test_evalsha_falls_back_to_eval(redis_url):
    conn = redis.Redis.from_url(redis_url, protocol=2)
    scripts = S.ScriptSet()
    conn.script_flush()
    assert conn.script_exists(S.SCRIPT_SHA1["wire-version"]) == [False]
    assert scripts.run(conn, "wire-version", ["t:wire"], ["1.0"]) is None  # NOSCRIPT → EVAL
    assert conn.script_exists(S.SCRIPT_SHA1["wire-version"]) == [True]  # EVAL cached it
    assert scripts.run(conn, "wire-version", ["t:wire"], ["1.0"]) == b"1.0"  # EVALSHA
    conn.close()


def test_tokens():
    token = T.new_token()
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert T.new_token() != token
    labelled = T.new_token("worker 3")
    assert labelled[32:] == " worker 3"
    assert T.owner_id(token) == token[:8]
    assert T.owner_id("foreign") == "~" + hashlib.sha1(b"foreign").hexdigest()[:8]
    assert T.waiter_id(labelled) == hashlib.sha1(labelled.encode()).hexdigest()[:16]
    assert re.fullmatch(r"[0-9a-f]{16}", T.new_origin())
    for bad in ("", "a" * 257, "x\ny"):
        with pytest.raises(wirelock.InvalidArgument):
            T.new_token(bad)


def test_names_and_prefixes():
    assert K.lock_key("lock:", "orders/42") == "lock:{orders/42}"
    assert K.lock_key("lock:", "a{b}c") == "lock:{a%7Bb%7Dc}"
    assert K.lock_key("lock:", "100%") == "lock:{100%25}"
    assert K.lock_key("lock:", "{}") == "lock:{%7B%7D}"
    assert K.lock_key("", "x") == "{x}"
    K.validate_name("é" * 512)
    with pytest.raises(wirelock.InvalidArgument):
        K.validate_name("é" * 513)  # 1026 bytes
    with pytest.raises(wirelock.InvalidArgument):
        K.validate_name("a\x9fb")  # C1 control
    for bad in ("a{", "}", "p\x00"):
        with pytest.raises(wirelock.InvalidArgument):
            K.validate_prefix(bad)
    for bad in ("a}b", "%41", "%7b"):
        with pytest.raises(ValueError):
            K.unescape(bad)
    assert K.semaphore_keys("lock:", "pool").lock == "lock:sem:{pool}"
    assert K.rwlock_keys("lock:", "config").lock == "lock:rw:{config}"


def test_message_grammar():
    """WIRE.md 6.5 (1.1): the four forms read exactly; anything else is foreign (handled as a broadcast)."""
    from wirelock.listener import parse_message

    o, w = "0123456789abcdef", "fedcba9876543210"
    assert parse_message(o) == ("broadcast", o, None, None)
    assert parse_message("") == ("broadcast", "", None, None)
    assert parse_message("force-release") == ("broadcast", "force-release", None, None)
    assert parse_message(f"{o}>{w}") == ("named", o, w, None)
    assert parse_message(f">{w}") == ("named", "", w, None)
    assert parse_message(f"{o} {w}") == ("told", o, w, None)
    assert parse_message(f"force-release {w}") == ("told", "force-release", w, None)
    assert parse_message(f"{o}+42 {w}") == ("granted", o, w, "42")
    assert parse_message(f"{o}+ {w}") == ("granted", o, w, None)
    assert parse_message(f"+99999999999999999999999 {w}") == ("granted", "", w, "99999999999999999999999")
    for foreign in (
        "abc",  # not 16 hex digits
        "0",  # Redisson's release
        "registry:a b",  # Spring's lock key with a space: 1.0 read it as told (section 19's old gap)
        "registry:x 0123456789abcdef",  # …even with a waiter id after the space
        "registry:a>b",
        "wlp:{x y}>z",
        o.upper(),  # upper-case hex is not an origin
        f"{o}>{w[:15]}",  # a short process
        f"{o} {w}x",
        f"{o}+4a {w}",  # a fence of digits only
        f"{o}+42  {w}",
        f"{o}>{w}\n",
        f"{o}\n",
    ):
        assert parse_message(foreign) == ("foreign", foreign, None, None), foreign
