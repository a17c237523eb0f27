"""wire/vectors/names.json: every key and slot derived with wirelock's key functions."""

from __future__ import annotations

import json

import pytest

from wirelock import keys as K
from wirelock.scripts import PROTOCOL_VERSION, default_scripts_dir

DOC = json.loads((default_scripts_dir().parent / "vectors" / "names.json").read_text(encoding="utf-8"))

# names.json's key names → the suffix each stands for (beside the lock key itself)
SUFFIX = {
    "fence": "fence", "channel": "released", "awaited": "awaited", "waiting": "waiting", "queue": "queue",
    "heartbeats": "heartbeats", "grants": "grants", "info": "info", "record": "info", "leader_channel": "leader",
    "given_back": "given-back", "promised": "promised", "permits": "permits", "slots": "slots",
    "permit_grants": "permit-grants", "limit": "limit", "readers": "readers",
}
ATTR = {
    "fence": "fence", "channel": "released", "awaited": "awaited", "waiting": "waiting", "queue": "queue",
    "heartbeats": "heartbeats", "grants": "grants", "info": "info", "record": "info", "leader_channel": "leader",
    "given_back": "given_back", "promised": "promised", "permits": "permits", "slots": "slots",
    "permit_grants": "permit_grants", "limit": "limit", "readers": "readers",
}


def test_header():
    assert DOC["format"] == 1 and DOC["protocol"] == PROTOCOL_VERSION
    assert DOC["max_resource_name_bytes"] == K.MAX_RESOURCE_NAME


@pytest.mark.parametrize("entry", DOC["names"], ids=lambda e: f"{e.get('primitive', 'lock')}:{e['prefix']}:{e['name'][:24]}")
def test_entry(entry):
    prefix, name = entry["prefix"], entry["name"]
    if "name_utf8_hex" in entry:
        assert name.encode("utf-8").hex() == entry["name_utf8_hex"]
    res = K.ResourceKeys.of(prefix, name)
    for field, expected in entry["keys"].items():
        if field == "lock":
            got = res.lock
        elif field.startswith("tick:"):
            got = res.tick(int(field.split(":", 1)[1]))
        else:
            got = getattr(res, ATTR[field])
            assert got == f"{res.lock}:{SUFFIX[field]}"
        assert got == expected, field
        assert K.key_slot(got) == entry["slot"], field
    assert res.slot == entry["slot"]
    assert K.crc16_xmodem(K.escape(name).encode("utf-8")) % 16384 == entry["slot"]
    assert K.decode_lock_key(prefix, res.lock) == name
    # The semaphore's and the read-write lock's keys, derived from the base prefix as the client does.
    primitive = entry.get("primitive")
    if primitive == "semaphore":
        assert K.semaphore_keys(prefix[: -len("sem:")], name) == res
    if primitive == "rwlock":
        assert K.rwlock_keys(prefix[: -len("rw:")], name) == res


@pytest.mark.parametrize("entry", DOC["guards"], ids=lambda e: e["data"] or "<empty>")
def test_guard(entry):
    """WIRE.md 16.1: the guard of a data key, in its slot; refused where no guard derives from it."""
    from wirelock.errors import InvalidArgument

    if entry.get("refused"):
        with pytest.raises(InvalidArgument):
            K.guard_for(entry["data"])
        return
    guard = K.guard_for(entry["data"])
    assert guard == entry["guard"]
    assert K.key_slot(guard) == K.key_slot(entry["data"]) == entry["slot"]
