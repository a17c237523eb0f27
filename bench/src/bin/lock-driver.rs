//! This library as a peer driver of `interop/` (the JSON-lines protocol of `interop/README.md`), so that
//! `interop/tools/bench_languages.py` measures it exactly as it measures the Python and Node lock packages.
//!
//! ```text
//! cargo build --release -p lock-bench --bin lock-driver
//! target/release/lock-driver ours redis://127.0.0.1:6379          # the default lock: fencing on
//! target/release/lock-driver ours-nofence redis://127.0.0.1:6379  # fencing off: SET NX PX, compare-and-delete
//! ```
//!
//! Ops: `describe`, `acquire`, `release`, `bench`, `quit` (see `interop/README.md`). Timestamps are
//! `CLOCK_MONOTONIC` nanoseconds, as the other drivers'.
// A driver speaks on stdout.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use lock_core::{Fencing, Guard, Lock, LockError, LockKeys, LockOptions};
use lock_redis_rs::RedisStore;
use lock_testkit::history::monotonic_nanos;
use serde_json::{json, Value};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [peer, url] = args.as_slice() else {
        return Err("usage: lock-driver <ours|ours-nofence> <redis-url>".into());
    };
    let fencing = match peer.as_str() {
        "ours" => Fencing::OnAcquire,
        "ours-nofence" => Fencing::Off,
        other => return Err(format!("unknown contender {other:?}: ours or ours-nofence").into()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve(peer, url, fencing))
}

fn reply(value: &Value) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{value}")?;
    out.flush()?;
    Ok(())
}

fn options(request: &Value, fencing: Fencing) -> LockOptions {
    let ms = |field: &str| Duration::from_millis(request[field].as_u64().unwrap_or(0));
    LockOptions::new(ms("ttl_ms")).with_wait(ms("wait_ms")).with_fencing_mode(fencing)
}

fn error_text(err: &LockError) -> String {
    format!("{}: {}", err.kind(), err.report())
}

/// One acquire as the protocol means it: one try when the wait is zero, else a wait that gives up as "not acquired".
async fn take(lock: &Lock, name: &str, options: &LockOptions) -> lock_core::Result<Option<Guard>> {
    if options.wait().is_zero() {
        return lock.try_acquire(name, options).await;
    }
    match lock.acquire(name, options).await {
        Ok(guard) => Ok(Some(guard)),
        Err(LockError::Contended { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

async fn serve(peer: &str, url: &str, fencing: Fencing) -> Result<(), Error> {
    let lock = Lock::new(RedisStore::connect(url).await?);
    let mut held: HashMap<String, Guard> = HashMap::new();
    reply(&json!({"ready": true, "peer": peer, "version": env!("CARGO_PKG_VERSION"), "package": "lock-redis-rs",
        "runtime": "Rust, tokio current-thread, redis-rs"}))?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let request: Value = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(err) => {
                reply(&json!({"ok": false, "error": format!("BadRequest: {err}")}))?;
                continue;
            }
        };
        let name = request["name"].as_str().unwrap_or_default().to_owned();
        let answer = match request["op"].as_str() {
            Some("describe") => match LockKeys::for_layout(lock.layout(), lock.key_prefix(), &name) {
                Ok(keys) => json!({"ok": true, "keys": [keys.lock()], "channels": [keys.channel()], "lists": [],
                    "notes": "this library's native layout (WIRE.md)"}),
                Err(err) => json!({"ok": false, "error": error_text(&err)}),
            },
            Some("acquire") => {
                let started_ns = monotonic_nanos();
                match take(&lock, &name, &options(&request, fencing)).await {
                    Ok(guard) => {
                        let at_ns = monotonic_nanos();
                        let acquired = guard.is_some();
                        if let Some(guard) = guard {
                            held.insert(name, guard);
                        }
                        json!({"ok": true, "acquired": acquired, "started_ns": started_ns, "at_ns": at_ns})
                    }
                    Err(err) => json!({"ok": false, "error": error_text(&err)}),
                }
            }
            Some("release") => {
                let started_ns = monotonic_nanos();
                match held.remove(&name) {
                    None => json!({"ok": true, "released": false, "error": "NotHeld: no lock of that name",
                        "started_ns": started_ns, "at_ns": monotonic_nanos()}),
                    Some(guard) => {
                        let (released, error) = match guard.release().await {
                            Ok(lock_core::ReleaseOutcome::Released) => (true, Value::Null),
                            Ok(other) => (false, json!(format!("{other:?}"))),
                            Err(err) => (false, json!(error_text(&err))),
                        };
                        json!({"ok": true, "released": released, "error": error, "started_ns": started_ns,
                            "at_ns": monotonic_nanos()})
                    }
                }
            }
            Some("bench") => bench(&lock, &name, &request, fencing).await,
            Some("quit") => break,
            other => json!({"ok": false, "error": format!("UnknownOp: {other:?}")}),
        };
        reply(&answer)?;
    }
    Ok(())
}

/// `bench`: acquire → hold → release cycles until `n` succeeded or `duration_ms` has passed (see `interop/README.md`:
/// the same loop as the Python and Node drivers').
#[allow(clippy::disallowed_methods)] // the hold: see below
async fn bench(lock: &Lock, name: &str, request: &Value, fencing: Fencing) -> Value {
    let options = options(request, fencing);
    let hold = Duration::from_micros(request["hold_us"].as_u64().unwrap_or(0));
    let n = request["n"].as_u64().unwrap_or(u64::MAX);
    let limit = Duration::from_millis(request["duration_ms"].as_u64().unwrap_or(u64::from(u32::MAX)));
    let (mut cycles, mut failed, mut failed_releases) = (0_u64, 0_u64, 0_u64);
    let mut release_error = Value::Null;
    let (mut acquire_ns, mut cycle_ns) = (Vec::new(), Vec::new());
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let mut start = None;
    let mut end = None;
    while cycles < n {
        let t0 = Instant::now();
        let first = *start.get_or_insert(t0);
        if t0.duration_since(first) >= limit {
            break;
        }
        let guard = match take(lock, name, &options).await {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                failed += 1;
                end = Some(Instant::now());
                continue;
            }
            Err(err) => return json!({"ok": false, "error": error_text(&err)}),
        };
        let t1 = Instant::now();
        if !hold.is_zero() {
            // The hold is the work under the lock, timed to the microsecond as the other drivers' (a tokio timer
            // rounds 1 ms up to the next tick, doubling it); this driver runs one task, so blocking its thread for
            // the hold stalls nothing else.
            std::thread::sleep(hold);
        }
        if let Err(err) = guard.release().await {
            failed_releases += 1;
            release_error = json!(error_text(&err));
        }
        let t2 = Instant::now();
        end = Some(t2);
        cycles += 1;
        acquire_ns.push(nanos(t1.duration_since(t0)));
        cycle_ns.push(nanos(t2.duration_since(t0)));
    }
    let elapsed_ns = match (start, end) {
        (Some(start), Some(end)) => nanos(end.duration_since(start)),
        _ => 0,
    };
    json!({"ok": true, "cycles": cycles, "failed": failed, "elapsed_ns": elapsed_ns, "acquire_ns": acquire_ns,
        "cycle_ns": cycle_ns, "failed_releases": failed_releases, "release_error": release_error})
}
