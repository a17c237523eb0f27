//! `lockctl` as an operator runs it: the built binary against a real redis-server, locks taken by this process.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)] // tests fail by panicking; figures are printed

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_core::{HolderLabel, Lock, LockOptions, ReleaseOutcome, RetryPolicy};
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;
use serde_json::Value;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn lockctl(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.arg("-u").arg(url).args(args).env_remove("REDIS_URL").stdin(Stdio::null());
    cmd
}

/// Runs to the end (every command here ends by itself; `watch` is bounded with `--for-secs`).
fn run(url: &str, args: &[&str]) -> Output {
    lockctl(url, args).output().expect("run lockctl")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

async fn lock_on(server: &RedisServer) -> Lock {
    Lock::new(RedisStore::connect(&server.url()).await.expect("connect"))
}

fn labelled(label: &str, ttl_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_holder_label(HolderLabel::new(label).unwrap())
}

#[tokio::test]
async fn inspect_says_who_holds_a_lock_and_exits_one_when_it_is_free() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let free = run(&url, &["inspect", "orders/42"]);
    assert_eq!(free.status.code(), Some(1), "{free:?}");
    assert!(stdout(&free).contains("free"), "{}", stdout(&free));
    let empty = run(&url, &["inspect", ""]);
    assert_eq!(empty.status.code(), Some(2), "an empty resource name is a usage error: {empty:?}");

    let lock = lock_on(&server).await;
    let guard = lock.acquire("orders/42", &labelled("web-7 pid 4121", 30_000)).await.unwrap();
    let held = run(&url, &["inspect", "orders/42"]);
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let text = stdout(&held);
    assert!(text.contains("held by web-7 pid 4121"), "{text}");
    assert!(text.contains(&guard.fencing_token().unwrap().to_string()), "the fence is missing: {text}");

    let doc = json(&run(&url, &["inspect", "orders/42", "--json"]));
    assert_eq!(doc["held"], true);
    assert_eq!(doc["holder"]["label"], "web-7 pid 4121");
    assert!(guard.token().as_str().starts_with(doc["holder"]["owner"].as_str().unwrap()));
    let ttl = doc["holder"]["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 20_000 && ttl <= 30_000, "ttl_ms {ttl}");
    assert_eq!(doc["fence"].as_u64(), guard.fencing_token().map(|f| f.get()));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn list_scans_for_held_locks_and_decodes_their_names() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let names = ["plain", "a{b}c", "100% sure"];
    let mut guards = Vec::new();
    for (i, name) in names.iter().enumerate() {
        guards.push(lock.acquire(name, &labelled(&format!("holder {i}"), 30_000)).await.unwrap());
    }
    // A released lock leaves its fencing counter, which is not a lock; another prefix is not listed.
    lock.acquire("released", &LockOptions::new(ms(30_000))).await.unwrap().release().await.unwrap();
    let other = lock.clone().with_key_prefix("other:");
    let _elsewhere = other.acquire("hidden", &LockOptions::new(ms(30_000))).await.unwrap();

    let doc = json(&run(&url, &["list", "--json"]));
    let listed: Vec<&str> = doc.as_array().unwrap().iter().map(|row| row["resource"].as_str().unwrap()).collect();
    let mut expected = names.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected, "{doc}");
    for row in doc.as_array().unwrap() {
        assert!(row["holder"]["label"].as_str().unwrap().starts_with("holder "), "{row}");
    }
    let text = stdout(&run(&url, &["list"]));
    assert!(text.lines().next().unwrap().starts_with("RESOURCE"), "{text}");
    assert!(text.contains("a{b}c") && text.contains("holder 1"), "{text}");
    let other_prefix = json(&run(&url, &["--prefix", "other:", "list", "--json"]));
    assert_eq!(other_prefix.as_array().unwrap().len(), 1, "{other_prefix}");
}

#[tokio::test]
async fn force_release_asks_first_frees_and_keeps_the_fence() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let stuck = lock.acquire("nightly", &labelled("cron 3", 60_000)).await.unwrap();

    // Not confirmed (stdin is not a terminal, no --yes): nothing happens.
    let refused = run(&url, &["force-release", "nightly"]);
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes"));
    assert!(lock.inspect("nightly").await.unwrap().is_held(), "an unconfirmed force-release freed the lock");

    let forced = run(&url, &["force-release", "nightly", "--yes", "--json"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    let doc = json(&forced);
    assert_eq!((doc["released"].as_bool(), doc["previous"]["label"].as_str()), (Some(true), Some("cron 3")));
    let next = lock.try_acquire("nightly", &LockOptions::new(ms(1_000))).await.unwrap().expect("free after force");
    assert!(next.fencing_token() > stuck.fencing_token(), "the fencing counter went back");
    assert_eq!(stuck.release().await.unwrap(), ReleaseOutcome::OwnedByOther);
    next.release().await.unwrap();

    let nothing = run(&url, &["force-release", "nightly", "--yes"]);
    assert_eq!(nothing.status.code(), Some(1), "{nothing:?}");
}

/// The releaser is another process (`lockctl`), the waiter this one: the waiter retries only every 5 s, so only
/// the forced release's notification can hand it the lock sooner. Prints the figures (`--nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_from_another_process_wakes_a_waiter_at_once() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let _stuck = lock.acquire("ledger", &LockOptions::new(ms(60_000))).await.unwrap();
    let slow = RetryPolicy::default().with_min_delay(ms(5_000)).with_max_delay(ms(5_000));
    let waiting = LockOptions::new(ms(10_000)).with_wait(ms(20_000)).with_retry(slow);
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.acquire("ledger", &waiting).await;
            (guard, Instant::now())
        })
    };
    let started = Instant::now();
    while !lock.inspect("ledger").await.unwrap().awaited() {
        assert!(started.elapsed() < ms(5_000), "the waiter never tried");
        tokio::time::sleep(ms(2)).await;
    }
    let spawned = Instant::now();
    let cli = tokio::task::spawn_blocking(move || {
        let out = lockctl(&url, &["force-release", "ledger", "--yes"]).output().expect("run lockctl");
        (out, Instant::now())
    });
    let (guard, acquired) = waiter.await.unwrap();
    let (out, exited) = cli.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    guard.expect("the waiter's acquire").release().await.unwrap();
    let woke = acquired.duration_since(spawned);
    println!(
        "forced release from another process: waiter acquired {:.1} ms after lockctl was spawned \
         (lockctl ran {:.1} ms in all, connecting included)",
        woke.as_secs_f64() * 1e3,
        exited.duration_since(spawned).as_secs_f64() * 1e3
    );
    assert!(woke < ms(2_000), "the waiter got the lock {woke:?} after the forced release: it was not woken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_change_of_holder() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let child =
        lockctl(&url, &["watch", "jobs", "--json", "--changes", "3", "--interval-ms", "50", "--for-secs", "20"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn lockctl watch");
    // Free, then held by "first", then free again.
    tokio::time::sleep(ms(300)).await;
    let guard = lock.acquire("jobs", &labelled("first", 30_000)).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    guard.release().await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let held: Vec<bool> = lines.iter().map(|l| l["held"].as_bool().unwrap()).collect();
    assert_eq!(held, [false, true, false], "{lines:?}");
    assert_eq!(lines[1]["holder"]["label"], "first");
}

#[test]
fn errors_are_typed_exit_codes_and_never_show_a_password() {
    // Nothing listens on this port (a server started and stopped), and the URL carries a password.
    let port = {
        let server = RedisServer::start().expect("redis-server");
        server.port()
    };
    let url = format!("redis://:hunter2secret@127.0.0.1:{port}");
    let out = run(&url, &["--timeout-ms", "500", "inspect", "x"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("lockctl: "), "{stderr}");
    assert!(!stderr.contains("hunter2secret") && !stdout(&out).contains("hunter2secret"), "{stderr}");

    let usage = Command::new(env!("CARGO_BIN_EXE_lockctl")).arg("inspect").output().unwrap();
    assert_eq!(usage.status.code(), Some(2), "a missing argument is a usage error: {usage:?}");
}
