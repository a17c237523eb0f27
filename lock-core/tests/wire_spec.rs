//! WIRE.md against the engine: its protocol version is `lock_core::wire::VERSION`; its scripts table lists every
//! script the engine sends, each with its SHA-1; the changelog entry of the current version carries the digest of
//! exactly these scripts (so a script that changes without a new version and changelog entry fails here); and the
//! name vectors (`wire/vectors/names.json`) are the keys the engine derives. The step vectors run in lock-testkit
//! (in-memory store) and lock-redis-rs (Redis, Valkey).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::PathBuf;

use lock_core::backend::scripts::ALL;
use lock_core::{Lock, LockKeys, MemoryStore, Semaphore};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn wire_md() -> String {
    std::fs::read_to_string(root().join("WIRE.md")).unwrap()
}

/// The scripts digest of WIRE.md "Changing the protocol": SHA-1 over `<name> <sha1>\n` of every script, by name.
fn digest() -> String {
    let mut lines: Vec<String> = ALL.iter().map(|s| format!("{} {}\n", s.name(), s.sha1())).collect();
    lines.sort();
    sha1_hex(lines.concat().as_bytes())
}

fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

#[test]
fn the_protocol_version_is_the_engines() {
    let md = wire_md();
    let line = md.lines().find(|l| l.starts_with("Protocol version: ")).expect("a 'Protocol version:' line");
    assert_eq!(line.trim_start_matches("Protocol version: ").trim(), lock_core::wire::VERSION);
}

#[test]
fn the_scripts_table_lists_every_script_with_its_sha1() {
    let md = wire_md();
    let rows: Vec<(String, String, String)> = md
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains("wire/scripts/"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2].to_owned(), cells[3].to_owned())
        })
        .collect();
    for script in ALL {
        let row = rows.iter().find(|(name, _, _)| name == script.name());
        let (_, file, sha1) = row.unwrap_or_else(|| panic!("WIRE.md's scripts table has no row for {}", script.name()));
        assert_eq!(file, &format!("wire/scripts/{}.lua", script.name()));
        assert_eq!(sha1, script.sha1(), "{}: WIRE.md lists another SHA-1 (see 'Changing the protocol')", script.name());
    }
    assert_eq!(rows.len(), ALL.len(), "WIRE.md lists a script the engine does not have");
}

#[test]
fn a_script_change_comes_with_a_new_version_and_changelog_entry() {
    let md = wire_md();
    let entries: Vec<(String, String)> = md
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| {
            let (version, rest) = l.split_once(" (scripts digest ")?;
            let (digest, _) = rest.split_once("): ")?;
            Some((version.to_owned(), digest.to_owned()))
        })
        .collect();
    let current = entries.iter().find(|(v, _)| v == lock_core::wire::VERSION);
    let (_, recorded) = current.unwrap_or_else(|| panic!("no changelog entry for {}", lock_core::wire::VERSION));
    assert_eq!(
        recorded,
        &digest(),
        "the scripts changed since protocol {} was recorded: bump the version in WIRE.md and lock_core::wire, and add a \
         changelog entry with the new digest",
        lock_core::wire::VERSION
    );
    let mut digests: Vec<&String> = entries.iter().map(|(_, d)| d).collect();
    digests.sort();
    digests.dedup();
    assert_eq!(digests.len(), entries.len(), "two protocol versions with one scripts digest");
}

/// CRC16/XMODEM mod 16384 of the hash tag (or the whole key): the Redis Cluster specification.
fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match key.find('{') {
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[test]
fn the_name_vectors_are_the_engines_keys() {
    let text = std::fs::read_to_string(root().join("wire/vectors/names.json")).unwrap();
    let names: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(names["protocol"], lock_core::wire::VERSION);
    assert_eq!(names["max_resource_name_bytes"].as_u64(), Some(lock_core::MAX_RESOURCE_NAME as u64));
    let entries = names["names"].as_array().unwrap();
    assert!(entries.len() >= 20);
    let mut longest = false;
    for entry in entries {
        let (prefix, name) = (entry["prefix"].as_str().unwrap(), entry["name"].as_str().unwrap());
        longest |= name.len() == lock_core::MAX_RESOURCE_NAME;
        if let Some(hex) = entry.get("name_utf8_hex").and_then(Value::as_str) {
            let ours: String = name.bytes().map(|b| format!("{b:02x}")).collect();
            assert_eq!(ours, hex, "{name:?}");
        }
        let keys = LockKeys::new(prefix, name).unwrap_or_else(|e| panic!("{prefix:?} {name:?}: {e}"));
        let expected = &entry["keys"];
        for (field, ours) in [
            ("lock", keys.lock()),
            ("fence", keys.fence()),
            ("channel", keys.channel()),
            ("awaited", keys.awaited()),
            ("waiting", keys.waiting()),
        ] {
            assert_eq!(expected[field].as_str(), Some(ours), "{prefix:?} {name:?}: {field}");
        }
        assert_eq!(entry["slot"].as_u64(), Some(u64::from(slot(keys.lock()))), "{prefix:?} {name:?}: slot");
        // Every key a primitive keeps beside the lock key is in its slot.
        for (field, key) in expected.as_object().unwrap() {
            assert_eq!(slot(key.as_str().unwrap()), slot(keys.lock()), "{name:?}: {field} is in another slot");
        }
        assert_eq!(LockKeys::resource_of(prefix, keys.lock()).as_deref(), Some(name), "{name:?}: the inverse");
    }
    assert!(longest, "no vector of the longest name allowed");
    // The semaphore's namespace, as the engine derives it.
    let semaphore = entries.iter().find(|e| e["primitive"] == "semaphore").unwrap();
    let engine = Semaphore::new(Lock::new(MemoryStore::new()), semaphore["name"].as_str().unwrap(), 2).unwrap();
    assert_eq!(semaphore["keys"]["lock"].as_str(), Some(engine.keys().lock()));
    assert_eq!(semaphore["prefix"].as_str(), Some("wlp:sem:"));
}

/// The layout a `names.json` entry names.
fn layout_of(name: &str) -> lock_core::KeyLayout {
    use lock_core::KeyLayout;
    match name.split_once(':') {
        Some(("spring", registry)) => KeyLayout::spring(registry, true),
        Some(("prefixed", prefix)) => KeyLayout::prefixed(prefix),
        _ => match name {
            "plain" => KeyLayout::plain(),
            "python-redis-lock" => KeyLayout::python_redis_lock(),
            "pottery" => KeyLayout::pottery(),
            "redisson" => KeyLayout::redisson(),
            other => panic!("unknown layout {other:?} in names.json"),
        },
    }
}

/// WIRE.md §2.1.1: the names `names.json` lists as refused are refused by the engine, for the clash it names, and
/// those it lists as accepted are not.
#[test]
fn the_namespace_vectors_are_the_engines_rule() {
    use lock_core::namespace::{lock_key_clash, Clash};
    let text = std::fs::read_to_string(root().join("wire/vectors/names.json")).unwrap();
    let names: Value = serde_json::from_str(&text).unwrap();
    let refused = names["refused"].as_array().unwrap();
    assert!(refused.len() >= 10);
    for entry in refused {
        let (layout, prefix, name) =
            (entry["layout"].as_str().unwrap(), entry["prefix"].as_str().unwrap(), entry["name"].as_str().unwrap());
        let err = LockKeys::for_layout(&layout_of(layout), prefix, name).unwrap_err();
        assert!(err.to_string().contains(&format!("{name:?}")), "{layout} {name:?}: {err}");
        // The lock key the layout would have made, and the clash the rule finds there.
        let key = match layout {
            "plain" | "redisson" => name.to_owned(),
            "python-redis-lock" => format!("lock:{name}"),
            "pottery" => format!("redlock:{name}"),
            other => format!("{}:{name}", other.split_once(':').unwrap().1),
        };
        let clash = lock_key_clash(prefix, &key).unwrap_or_else(|| panic!("{layout} {name:?}: no clash"));
        let kind = match clash {
            Clash::VersionKey { .. } => "version",
            Clash::NativeSpace { .. } => "native",
            Clash::Beside { .. } => "beside",
            Clash::PeerKey { .. } => "peer",
            other => panic!("{other:?}"),
        };
        assert_eq!(entry["clash"].as_str(), Some(kind), "{layout} {name:?}");
    }
    for entry in names["accepted"].as_array().unwrap() {
        let (layout, prefix, name) =
            (entry["layout"].as_str().unwrap(), entry["prefix"].as_str().unwrap(), entry["name"].as_str().unwrap());
        LockKeys::for_layout(&layout_of(layout), prefix, name).unwrap_or_else(|e| panic!("{layout} {name:?}: {e}"));
    }
}

/// WIRE.md 16.1: the guard `FencedResource::new` derives for a data key is the one `names.json` gives (which the
/// Python client derives too), in the data key's slot; the keys it lists as refused are refused.
#[test]
fn the_guard_vectors_are_the_engines_rule() {
    let text = std::fs::read_to_string(root().join("wire/vectors/names.json")).unwrap();
    let names: Value = serde_json::from_str(&text).unwrap();
    let entries = names["guards"].as_array().unwrap();
    assert!(entries.len() >= 10, "too few guard vectors");
    for entry in entries {
        let data = entry["data"].as_str().unwrap();
        let derived = lock_core::fenced::guard_for(data);
        if entry["refused"].as_bool() == Some(true) {
            assert!(matches!(derived, Err(lock_core::LockError::InvalidArgument(_))), "{data:?}: {derived:?}");
            continue;
        }
        let guard = derived.unwrap();
        assert_eq!(guard, entry["guard"].as_str().unwrap(), "{data:?}");
        assert_eq!(u64::from(slot(&guard)), entry["slot"].as_u64().unwrap(), "{data:?}: the guard's slot");
        assert_eq!(slot(&guard), slot(data), "{data:?}: the guard is not in the data's slot");
    }
}
