#!/usr/bin/env python3
"""Derive the name vectors in contracts.json from the naming rules described in CONTRACTS.md.

This is an independent re-statement of each Java (and node-redisson) naming rule, written
from the rules as described in CONTRACTS.md (no upstream code is copied here), plus the
Redis Cluster key-slot function (CRC16/XMODEM of the hash tag or of the whole key).

    python3 derive_vectors.py            # prints the "name_vectors" JSON
    python3 derive_vectors.py --check    # also compares with contracts.json

Standard library only. Names are taken as Unicode strings (NFC) and encoded as UTF-8,
which is what every one of these clients sends for String keys/channels.
"""
import json
import os
import sys

NAMES = ["orders", "a{b}", "{tag}x", "x{", "}y", "a:b", "\u00fcn\u00efcode"]

# Example settings used for the vectors (each is a required or defaulted parameter of the peer).
SPRING_REGISTRY_KEY = "locks"        # RedisLockRegistry(connectionFactory, registryKey): no default
SHEDLOCK_PREFIX = "job-lock"         # ShedLock default key prefix
SHEDLOCK_ENV = "default"             # ShedLock default environment


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def hashed_part(key: bytes) -> bytes:
    """Redis Cluster hash-tag rule: first '{', then the first '}' after it; a non-empty
    substring between them is hashed, otherwise the whole key is."""
    start = key.find(b"{")
    if start == -1:
        return key
    end = key.find(b"}", start + 1)
    if end == -1 or end == start + 1:
        return key
    return key[start + 1:end]


def slot(s: str) -> int:
    return crc16_xmodem(hashed_part(s.encode("utf-8"))) % 16384


# Redisson RedissonObject.prefixName: if the name contains '{' anywhere, "<prefix>:<name>",
# else "<prefix>:{<name>}".
def redisson_prefix(prefix: str, name: str) -> str:
    return f"{prefix}:{name}" if "{" in name else f"{prefix}:{{{name}}}"


# node-redisson 1.0.4 RedissonBaseLock.prefixName: only a name that STARTS with '{' is left bare.
def node_redisson_prefix(prefix: str, name: str) -> str:
    return f"{prefix}:{name}" if name.startswith("{") else f"{prefix}:{{{name}}}"


def latch_slot(template: str):
    """Slot of an unlock-latch name "<prefix part>:<requestId>"; None when the hashed part
    would include the random request id (no usable hash tag before it), i.e. the slot
    changes from one unlock to the next."""
    a = template.replace("<requestId>", "0" * 32)
    b = template.replace("<requestId>", "f" * 32)
    return slot(a) if hashed_part(a.encode()) == hashed_part(b.encode()) else None


def vectors():
    out = []
    for n in NAMES:
        r_key = n
        r_chan = redisson_prefix("redisson_lock__channel", n)
        r_token = redisson_prefix("redisson_lock_token", n)
        r_latch = redisson_prefix("redisson_unlock_latch", n) + ":<requestId>"
        n_chan = node_redisson_prefix("redisson_lock__channel", n)
        n_latch = node_redisson_prefix("redisson_unlock_latch", n) + ":<requestId>"
        s_key = f"{SPRING_REGISTRY_KEY}:{n}"
        s_chan = f"{SPRING_REGISTRY_KEY}-channel:{s_key}"
        sh_key = f"{SHEDLOCK_PREFIX}:{SHEDLOCK_ENV}:{n}"
        # the latch slot does not depend on the random request id unless the prefix part
        # has no usable hash tag; compute it with a fixed 32-hex-char stand-in id.
        r_latch_s = latch_slot(r_latch)
        n_latch_s = latch_slot(n_latch)
        v = {
            "name": n,
            "name_utf8_hex": n.encode("utf-8").hex(),
            "redisson_rlock": {
                "key": r_key, "channel": r_chan, "unlock_latch": r_latch,
                "slots": {"key": slot(r_key), "channel": slot(r_chan), "unlock_latch": r_latch_s},
                "cluster_same_slot": slot(r_key) == slot(r_chan) == r_latch_s,
            },
            "redisson_fenced_lock": {
                "key": r_key, "channel": r_chan, "token_key": r_token,
                "slots": {"key": slot(r_key), "token_key": slot(r_token)},
                "cluster_same_slot": slot(r_key) == slot(r_token) == slot(r_chan) == r_latch_s,
            },
            "node_redisson": {
                "key": n, "channel": n_chan, "unlock_latch": n_latch,
                "channel_matches_redisson": n_chan == r_chan,
                "slots": {"key": slot(n), "channel": slot(n_chan), "unlock_latch": n_latch_s},
                "cluster_same_slot": slot(n) == slot(n_chan) == n_latch_s,
            },
            "spring_redis_lock_registry": {
                "registry_key": SPRING_REGISTRY_KEY,
                "key": s_key, "pubsub_channel": s_chan, "pubsub_message": s_key,
                "pubsub_subscribe_pattern": f"{SPRING_REGISTRY_KEY}-channel:*",
                "slots": {"key": slot(s_key)},
            },
            "shedlock_redis": {
                "key_prefix": SHEDLOCK_PREFIX, "env": SHEDLOCK_ENV, "key": sh_key,
                "slots": {"key": slot(sh_key)},
            },
        }
        out.append(v)
    return out


def self_test():
    # Published reference values: CRC16("123456789") = 0x31C3 (Redis cluster spec);
    # CLUSTER KEYSLOT somekey = 11058, foo{hash_tag} = 2515 (redis.io CLUSTER KEYSLOT page).
    assert crc16_xmodem(b"123456789") == 0x31C3
    assert slot("somekey") == 11058
    assert slot("foo{hash_tag}") == 2515
    assert hashed_part(b"foo{}{bar}") == b"foo{}{bar}"
    assert hashed_part(b"foo{{bar}}zap") == b"{bar"
    assert hashed_part(b"foo{bar}{zap}") == b"bar"


if __name__ == "__main__":
    self_test()
    vs = vectors()
    if "--check" in sys.argv:
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "contracts.json"), encoding="utf-8") as f:
            doc = json.load(f)
        if doc["name_vectors"]["vectors"] != vs:
            print("MISMATCH between derive_vectors.py and contracts.json name_vectors", file=sys.stderr)
            sys.exit(1)
        print("contracts.json name_vectors match the derivation")
    else:
        print(json.dumps(vs, ensure_ascii=False, indent=2))
