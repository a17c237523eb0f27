//! `wire/scripts/` holds every script exactly as the engine sends it (its parts joined), named `<name>.lua`, so that a
//! client in another language loads the same bytes and `EVALSHA`s the same SHA-1 (WIRE.md lists them). This test
//! fails when a script changed and its copy did not; `LOCK_WIRE_BLESS=1 cargo test -p lock-core --test
//! wire_scripts` rewrites the copies (then WIRE.md's table and protocol version: see its "Changing the protocol").
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::PathBuf;

use lock_core::backend::scripts::ALL;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wire/scripts")
}

#[test]
fn every_script_has_its_exact_copy_in_wire_scripts() {
    let bless = std::env::var_os("LOCK_WIRE_BLESS").is_some();
    let mut stale = Vec::new();
    for script in ALL {
        let path = dir().join(format!("{}.lua", script.name()));
        if bless {
            std::fs::write(&path, script.body()).unwrap();
        }
        match std::fs::read_to_string(&path) {
            Ok(copy) if copy == script.body() => {}
            _ => stale.push(script.name()),
        }
    }
    assert!(stale.is_empty(), "wire/scripts/ differs from the engine for {stale:?}: LOCK_WIRE_BLESS=1 rewrites them");
    // No copy of a script the engine no longer has.
    for entry in std::fs::read_dir(dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let known = ALL.iter().any(|s| format!("{}.lua", s.name()) == name);
        assert!(known, "wire/scripts/{name} is no script of the engine");
    }
}
