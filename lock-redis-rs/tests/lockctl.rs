//! `lockctl` as an operator runs it: the built binary against a real redis-server, locks taken by this process.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)] // tests fail by panicking; figures are printed

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_core::{HolderLabel, Lock, LockOptions, ReleaseOutcome, RetryPolicy};
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;
use serde_json::{json, Value};

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
    let fence = guard.fence().await.unwrap();
    let held = run(&url, &["inspect", "orders/42"]);
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    let text = stdout(&held);
    assert!(text.contains("held by web-7 pid 4121"), "{text}");
    assert!(text.contains(&fence.to_string()), "the fence is missing: {text}");

    let doc = json(&run(&url, &["inspect", "orders/42", "--json"]));
    assert_eq!(doc["held"], true);
    assert_eq!(doc["holder"]["label"], "web-7 pid 4121");
    assert!(guard.token().as_str().starts_with(doc["holder"]["owner"].as_str().unwrap()));
    let ttl = doc["holder"]["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 20_000 && ttl <= 30_000, "ttl_ms {ttl}");
    assert_eq!(doc["fence"].as_u64(), guard.fence().await.ok().map(|f| f.get()));
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
    assert!(next.fence().await.ok() > stuck.fence().await.ok(), "the fencing counter went back");
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

fn owner_of(url: &str, resource: &str) -> String {
    let doc = json(&run(url, &["inspect", resource, "--json"]));
    doc["holder"]["owner"].as_str().unwrap_or_else(|| panic!("no owner: {doc}")).to_owned()
}

/// Review finding 3: the holder shown is the only one deleted. A held the lock when the operator looked; A released
/// and B acquired before the operator answered; forcing with A's owner id leaves B's lock alone and exits 5.
#[tokio::test]
async fn force_release_with_the_owner_shown_spares_a_new_holder() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let a = lock.acquire("ledger", &labelled("A", 60_000)).await.unwrap();
    let shown = owner_of(&url, "ledger");
    a.release().await.unwrap();
    let b = lock.acquire("ledger", &labelled("B", 60_000)).await.unwrap();

    let out = run(&url, &["force-release", "ledger", "--yes", "--owner", &shown]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(stdout(&out).contains("changed hands") && stdout(&out).contains("held by B"), "{}", stdout(&out));
    let seen = lock.inspect("ledger").await.unwrap();
    assert_eq!(seen.holder().and_then(|h| h.label.as_deref()), Some("B"), "B's lock was deleted: {seen:?}");
    b.extend(ms(60_000)).await.expect("B still holds its lock");

    let doc = json(&run(&url, &["force-release", "ledger", "--yes", "--owner", &shown, "--json"]));
    assert_eq!((doc["holder_changed"].as_bool(), doc["exit_code"].as_u64()), (Some(true), Some(5)), "{doc}");
    let bad = run(&url, &["force-release", "ledger", "--yes", "--owner", "B"]);
    assert_eq!(bad.status.code(), Some(2), "a malformed owner id is a usage error: {bad:?}");

    let freed = run(&url, &["force-release", "ledger", "--yes", "--owner", &owner_of(&url, "ledger")]);
    assert_eq!(freed.status.code(), Some(0), "{freed:?}");
    assert!(!lock.inspect("ledger").await.unwrap().is_held());
}

/// Review finding 4: over Redlock, deleting on a minority while the holder keeps a majority is not a release. The
/// holder's key is on all three instances; the operator's user may not `DEL` on two of them, so the forced release
/// frees one instance only: exit 6, each instance's error printed (text and JSON), and the lock still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_over_redlock_that_frees_a_minority_is_partial() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().expect("redis-server")).collect();
    let holder = "0123456789abcdef0123456789abcdef holder";
    for (i, server) in servers.iter().enumerate() {
        let set = server.command(&["SET", "wlp:{batch}", holder, "PX", "60000"]).unwrap();
        assert!(!set.is_error(), "{set:?}");
        if i > 0 {
            let acl = server.command(&["ACL", "SETUSER", "ops", "on", ">pw", "~*", "&*", "+@all", "-del"]).unwrap();
            assert!(!acl.is_error(), "{acl:?}");
        }
    }
    let urls = [servers[0].url(), servers[1].url_for("ops", "pw", false), servers[2].url_for("ops", "pw", false)];
    let args = |extra: &[&'static str]| {
        let mut all: Vec<&str> = Vec::new();
        for url in &urls {
            all.extend(["-u", url.as_str()]);
        }
        all.extend(["force-release", "batch", "--yes"]);
        all.extend(extra);
        all.into_iter().map(str::to_owned).collect::<Vec<String>>()
    };
    let exec = |args: Vec<String>| {
        Command::new(env!("CARGO_BIN_EXE_lockctl")).args(args).env_remove("REDIS_URL").output().expect("lockctl")
    };
    let out = exec(args(&[]));
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("not free") && text.contains("instance 1  error") && text.contains("instance 2  error"),
        "{text}"
    );
    assert!(text.contains("instance 0  released"), "{text}");
    for server in &servers[1..] {
        let value = server.command(&["GET", "wlp:{batch}"]).unwrap();
        assert_eq!(value.as_text().as_deref(), Some(holder), "the holder lost its key where the release was refused");
    }
    let doc: Value = serde_json::from_slice(&exec(args(&["--json"])).stdout).unwrap();
    assert_eq!(
        (doc["released"].as_bool(), doc["free"].as_bool(), doc["exit_code"].as_u64()),
        (Some(false), Some(false), Some(6))
    );
    assert_eq!(doc["errors"].as_array().map(Vec::len), Some(2), "{doc}");
}

/// Review finding 5: once its subscription's connection is killed, `watch` polls on its interval (and subscribes
/// again) instead of spinning: a spinning watcher ran thousands of INSPECT scripts a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_whose_subscription_drops_polls_on_its_interval() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let mut child = lockctl(&url, &["watch", "quiet", "--interval-ms", "200", "--for-secs", "30"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn lockctl watch");
    let subscribers = || {
        let reply = server.command(&["PUBSUB", "NUMSUB", "wlp:{quiet}:released"]).unwrap();
        match reply {
            lock_testkit::Reply::Array(items) => items.last().and_then(lock_testkit::Reply::as_int).unwrap_or(0),
            _ => 0,
        }
    };
    let t0 = Instant::now();
    while subscribers() == 0 {
        assert!(t0.elapsed() < ms(10_000), "watch never subscribed");
        tokio::time::sleep(ms(20)).await;
    }
    let killed = server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap();
    assert!(!killed.is_error(), "{killed:?}");
    let scripts =
        || server.command_calls().unwrap().iter().filter(|(k, _)| k.starts_with("eval")).map(|(_, v)| v).sum::<u64>();
    let before = scripts();
    let window = Instant::now();
    tokio::time::sleep(ms(1_500)).await;
    let ran = scripts() - before;
    let elapsed = window.elapsed();
    // One inspection (a script in each of the three spaces) per 200 ms interval, plus a few around a
    // resubscription; a spin runs thousands.
    let bound = 10 + 3 * 2 * (elapsed.as_millis() as u64 / 200);
    assert!(ran <= bound, "{ran} inspections in {elapsed:?} after the subscription dropped (at most {bound})");
    let t0 = Instant::now();
    while subscribers() == 0 {
        assert!(t0.elapsed() < ms(10_000), "watch never subscribed again");
        tokio::time::sleep(ms(20)).await;
    }
    child.kill().unwrap();
    let _ = child.wait();
}

/// Review finding 6: a name whose keys another client broke (a fencing counter that is not a number) is skipped and
/// reported; the other locks are listed. A lock key of another type is another library's lock (issue 48): listed as
/// a foreign holder, with no expiry flagged. Finding 7: a key planted with a newline in its name forges no row.
#[tokio::test]
async fn list_skips_foreign_keys_and_lists_the_rest() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let _a = lock.acquire("a", &labelled("holder a", 30_000)).await.unwrap();
    let _b = lock.acquire("b", &labelled("holder b", 30_000)).await.unwrap();
    assert!(!server.command(&["HSET", "wlp:{foreign}", "f", "v"]).unwrap().is_error());
    assert!(!server.command(&["SET", "wlp:{broken}", "0123456789abcdef0123456789abcdef"]).unwrap().is_error());
    assert!(!server.command(&["SET", "wlp:{broken}:fence", "not a number"]).unwrap().is_error());
    let forged = "wlp:{x\nforged-row    holder    00000000}";
    assert!(!server.command(&["SET", forged, "0123456789abcdef0123456789abcdef"]).unwrap().is_error());

    let out = run(&url, &["list"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 4, "a header and three locks: {text}");
    assert!(text.contains("holder a") && text.contains("holder b") && !text.contains("forged"), "{text}");
    let foreign = text.lines().find(|l| l.starts_with("foreign")).unwrap_or_else(|| panic!("{text}"));
    assert!(foreign.contains("no expiry"), "a holder without expiry is flagged: {foreign}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("skipped \"broken\"") && stderr.lines().count() == 1, "{stderr}");
    let doc = json(&run(&url, &["list", "--json"]));
    assert_eq!(doc.as_array().map(Vec::len), Some(3), "{doc}");

    let newline = run(&url, &["inspect", "a\nb"]);
    assert_eq!(newline.status.code(), Some(2), "a name with a newline is a usage error: {newline:?}");
}

/// Every primitive through the operator's tool: `list` finds a held semaphore (its permits) beside a lock, an
/// election's leader and a job's run; `inspect` shows a semaphore's permits with their slots and a read-write lock's
/// readers (`--rwlock`); `force-release` with the owner shown frees one permit, a reader, a leader, and the next
/// holder gets in.
#[tokio::test]
async fn every_primitive_is_listed_inspected_and_freed() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let long = LockOptions::new(ms(60_000));

    let pool = lock_core::Semaphore::new(lock.clone(), "gpus", 3).unwrap();
    let two = pool.acquire(2, &long).await.unwrap();
    let one = pool.acquire(1, &long).await.unwrap();
    let timing = lock_core::ElectionOptions::default().with_lease(ms(60_000)).with_renew_deadline(ms(40_000));
    let election = lock_core::Election::new(lock.clone(), "leader", timing).unwrap();
    let leader = election.campaign("node-1", "10.0.0.1").await.unwrap();
    let plain = lock.acquire("plain", &labelled("web 1", 60_000)).await.unwrap();
    let rw = lock_core::RwLock::new(lock.clone(), "config").unwrap();
    let reader = rw.read(&long).await.unwrap();

    // Review 4, finding 9: every primitive is listed without flags, with its type.
    let listed = json(&run(&url, &["list", "--json"]));
    let rows: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["resource"].as_str().unwrap(), row["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [("leader", "election"), ("plain", "lock"), ("config", "rwlock"), ("gpus", "semaphore")],
        "{listed}"
    );
    let text = stdout(&run(&url, &["list"]));
    assert!(text.contains("2 permits") && text.contains("semaphore"), "the semaphore's row: {text}");
    assert!(text.lines().next().unwrap().contains("TYPE"), "{text}");
    let readers = json(&run(&url, &["--rwlock", "list", "--json"]));
    assert_eq!(readers[0]["resource"], "config", "{readers}");
    let config = json(&run(&url, &["inspect", "config", "--json"]));
    assert_eq!((&config["held"], &config["type"]), (&json!(true), &json!("rwlock")), "{config}");

    let seen = json(&run(&url, &["inspect", "gpus", "--json"]));
    assert_eq!(seen["held"], true, "{seen}");
    let permits = seen["shared"].as_array().unwrap();
    let mut slots: Vec<Vec<u64>> =
        permits.iter().map(|p| p["slots"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect()).collect();
    slots.sort();
    let mut want: Vec<Vec<u64>> =
        [two.slots(), one.slots()].iter().map(|s| s.iter().map(|&n| u64::from(n)).collect()).collect();
    want.sort();
    assert_eq!(slots, want, "{seen}");
    assert!(permits.iter().all(|p| p["role"] == "permit"), "{seen}");
    let text = stdout(&run(&url, &["inspect", "gpus"]));
    assert!(text.contains("permit (slots"), "{text}");

    // Free the one-slot permit by its owner id: the two-slot one stays, and a waiter for one slot gets in.
    let single = permits.iter().find(|p| p["slots"].as_array().unwrap().len() == 1).expect("the one-slot permit");
    let owner = single["owner"].as_str().unwrap().to_owned();
    let forced = run(&url, &["force-release", "gpus", "--yes", "--owner", &owner, "--json"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert_eq!(json(&forced)["previous"]["slots"].as_array().unwrap().len(), 1, "{}", stdout(&forced));
    let next = pool.try_acquire(1, &long).await.unwrap().expect("the freed slot");
    assert!(pool.try_acquire(1, &long).await.unwrap().is_none(), "more than the freed slot came free");
    assert!(one.extend(ms(60_000)).await.is_err(), "the freed permit extended");

    let seen = json(&run(&url, &["inspect", "config", "--json"]));
    assert_eq!(seen["shared"][0]["role"], "reader", "{seen}");
    let owner = seen["shared"][0]["owner"].as_str().unwrap().to_owned();
    let freed = run(&url, &["force-release", "config", "--yes", "--owner", &owner]);
    assert_eq!(freed.status.code(), Some(0), "{freed:?}");
    let writer = rw.try_write(&long).await.unwrap().expect("no reader left: the writer gets in");

    let seen = json(&run(&url, &["inspect", "leader", "--json"]));
    assert_eq!(seen["record"]["id"], "node-1", "the leader's record: {seen}");
    assert_eq!(seen["record"]["value"], "10.0.0.1", "{seen}");
    assert_eq!(seen["record"]["term"], leader.term().get().to_string(), "{seen}");
    assert!(seen["record"].get("token").is_none(), "a holder's token is never shown: {seen}");
    let text = stdout(&run(&url, &["inspect", "leader"]));
    assert!(text.contains("record    id=node-1") && text.contains(" term="), "{text}");
    let owner = seen["holder"]["owner"].as_str().unwrap().to_owned();
    let freed = run(&url, &["force-release", "leader", "--yes", "--owner", &owner]);
    assert_eq!(freed.status.code(), Some(0), "{freed:?}");
    let next_leader = election.try_campaign("node-2", "10.0.0.2").await.unwrap().expect("the election is free");
    assert!(next_leader.term() > leader.term());

    // A job's last run: free once it finished, its record says who ran it and how it ended.
    let jobs = lock_core::JobLock::new(lock.clone());
    let job = lock_core::JobOptions::new(ms(60_000)).with_holder("cron-3");
    jobs.run("nightly", &job, |_| async {}).await.unwrap();
    let seen = json(&run(&url, &["inspect", "nightly", "--json"]));
    assert_eq!((&seen["held"], &seen["record"]["holder"]), (&json!(false), &json!("cron-3")), "{seen}");
    assert_eq!(seen["record"]["outcome"], "finished", "{seen}");
    assert!(seen["record"].get("token").is_none(), "{seen}");

    for guard in [plain] {
        guard.release().await.unwrap();
    }
    two.release().await.unwrap();
    next.release().await.unwrap();
    writer.release().await.unwrap();
    next_leader.resign().await.unwrap();
    drop((reader, leader));
}

/// `lockctl` on a pseudo-terminal: its stdin and stderr are the terminal (it asks there), its stdout a pipe. The
/// returned writer answers the prompt; the reader reads what it printed on the terminal.
struct OnTerminal {
    child: std::process::Child,
    terminal: std::fs::File,
}

impl OnTerminal {
    fn spawn(url: &str, args: &[&str]) -> Self {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pseudo-terminal");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let path = std::path::PathBuf::from(name.to_string_lossy().into_owned());
        let open = || std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("the terminal");
        let child = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .arg("-u")
            .arg(url)
            .args(args)
            .env_remove("REDIS_URL")
            .stdin(open())
            .stderr(open())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn lockctl");
        OnTerminal { child, terminal: std::fs::File::from(master) }
    }

    /// Reads from the terminal until `text` shows (bounded).
    fn wait_for(&mut self, text: &str) -> String {
        use std::io::Read;
        let mut seen = Vec::new();
        let t0 = Instant::now();
        let reader = self.terminal.try_clone().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = reader;
            let mut buf = [0u8; 512];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        while !String::from_utf8_lossy(&seen).contains(text) {
            assert!(t0.elapsed() < ms(10_000), "never showed {text:?}: {}", String::from_utf8_lossy(&seen));
            if let Ok(chunk) = rx.recv_timeout(ms(100)) {
                seen.extend(chunk);
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    fn answer(&mut self, line: &str) {
        use std::io::Write;
        self.terminal.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    fn finish(self) -> Output {
        self.child.wait_with_output().unwrap()
    }
}

/// Review 4, finding 2: a forced release of a name several hold deletes exactly the holders the prompt listed. Two
/// permits are shown; a third is taken while the prompt is open; after "y" the two are freed and the third is left
/// alone, reported, and the semaphore is not free (exit 6, `"free": false`). Before, the prompt mapped two or more
/// shown holders to "anyone" and deleted the third too, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_deletes_only_the_holders_the_prompt_listed() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let long = labelled("shown", 60_000);
    let pool = lock_core::Semaphore::new(lock.clone(), "gpus", 3).unwrap();
    let (a, b) = (pool.acquire(1, &long).await.unwrap(), pool.acquire(1, &long).await.unwrap());

    let mut cli = OnTerminal::spawn(&url, &["force-release", "gpus", "--json"]);
    let asked = cli.wait_for("[y/N]");
    assert_eq!(asked.matches("permit (slots").count(), 2, "the prompt lists each holder: {asked}");
    let late = pool.acquire(1, &labelled("late", 60_000)).await.unwrap();
    cli.answer("y");
    let out = cli.finish();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let doc = json(&out);
    assert_eq!(
        (doc["free"].as_bool(), doc["released_holders"].as_array().map(Vec::len)),
        (Some(false), Some(2)),
        "{doc}"
    );
    assert_eq!(doc["kept_holders"][0]["label"], "late", "{doc}");
    assert!(a.extend(ms(60_000)).await.is_err() && b.extend(ms(60_000)).await.is_err(), "a shown permit was kept");
    late.extend(ms(60_000)).await.expect("the permit taken after the prompt was deleted");
    late.release().await.unwrap();

    // A lock key held beside a read-write lock's readers of the same name: every holder shown is freed.
    let plain = lock.acquire("both", &labelled("plain", 60_000)).await.unwrap();
    let rw = lock_core::RwLock::new(lock.clone(), "both").unwrap();
    let reader = rw.read(&long).await.unwrap();
    let mut cli = OnTerminal::spawn(&url, &["force-release", "both"]);
    let asked = cli.wait_for("[y/N]");
    assert!(asked.contains("lock held by plain") && asked.contains("rwlock read by shown"), "{asked}");
    cli.answer("y");
    let out = cli.finish();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(plain.extend(ms(60_000)).await.is_err() && reader.extend(ms(60_000)).await.is_err());
}

/// Review 4, finding 5: what a server holds is printed as data. An election's value and a holder label planted by
/// another client with a newline and an escape sequence are escaped: they forge no line and drive no terminal.
#[tokio::test]
async fn server_strings_are_escaped_in_text_output() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let forged = "0123456789abcdef0123456789abcdef web\nstate     free\u{1b}[8m";
    assert!(!server.command(&["SET", "wlp:{planted}", forged, "PX", "60000"]).unwrap().is_error());
    let record = ["HSET", "wlp:{planted}:info", "id", "n1", "value", "10.0.0.7:9000\nstate     free", "term", "3"];
    assert!(!server.command(&record).unwrap().is_error());
    for args in [&["inspect", "planted"][..], &["list"], &["watch", "planted", "--changes", "1"]] {
        let out = run(&url, args);
        let text = stdout(&out);
        assert!(!text.contains('\u{1b}'), "{args:?}: an escape sequence reached the terminal: {text:?}");
        assert!(!text.lines().any(|l| l.starts_with("state     free")), "{args:?}: a forged line: {text}");
        assert!(text.contains("\\n"), "{args:?}: the newline is shown escaped: {text}");
    }
}

/// Review 4, finding 7: over a Redlock, one instance down neither hides a lock held on a quorum nor stops the
/// others: `inspect` exits 0 and names the instance that failed, `force-release` frees the quorum, and `list`
/// takes the union over the instances (a lock held on the second and third only is listed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_with_an_instance_down_is_inspected_listed_and_freed() {
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start().expect("redis-server")).collect();
    let down = {
        let gone = RedisServer::start().expect("redis-server");
        gone.url()
    };
    let holder = "0123456789abcdef0123456789abcdef quorum";
    for server in &servers {
        assert!(!server.command(&["SET", "wlp:{batch}", holder, "PX", "60000"]).unwrap().is_error());
    }
    let args = |extra: &[&str]| {
        let mut all = vec!["-u".to_owned(), down.clone()];
        for server in &servers {
            all.extend(["-u".to_owned(), server.url()]);
        }
        all.extend(["--timeout-ms".to_owned(), "500".to_owned()]);
        all.extend(extra.iter().map(|s| (*s).to_owned()));
        all
    };
    let exec = |args: Vec<String>| {
        Command::new(env!("CARGO_BIN_EXE_lockctl")).args(args).env_remove("REDIS_URL").output().expect("lockctl")
    };
    let out = exec(args(&["inspect", "batch"]));
    assert_eq!(out.status.code(), Some(0), "held on a quorum: {out:?}");
    let text = stdout(&out);
    let port = down.rsplit(':').next().unwrap();
    assert!(text.contains("instance 0  error") && text.contains(port), "the failed instance is named: {text}");
    let listed: Value = serde_json::from_slice(&exec(args(&["list", "--json"])).stdout).unwrap();
    assert_eq!(listed[0]["resource"], "batch", "{listed}");
    let out = exec(args(&["force-release", "batch", "--yes", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for server in &servers {
        assert_eq!(server.command(&["EXISTS", "wlp:{batch}"]).unwrap(), lock_testkit::Reply::Int(0));
    }
}

/// Review 4, finding 8: `watch` shows a semaphore's permits and a read-write lock's readers (it printed "free"),
/// and a change in who shares the name is a change. Finding 10: a `--for-secs` too far to count is no bound, not a
/// panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_shared_holders_and_takes_any_bound() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let pool = lock_core::Semaphore::new(lock.clone(), "pool", 2).unwrap();
    let first = pool.acquire(1, &labelled("first", 60_000)).await.unwrap();
    let watcher = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            run(
                &url,
                &[
                    "watch",
                    "pool",
                    "--json",
                    "--changes",
                    "2",
                    "--interval-ms",
                    "50",
                    "--for-secs",
                    "18446744073709551615",
                ],
            )
        }
    });
    tokio::time::sleep(ms(500)).await;
    let second = pool.acquire(1, &labelled("second", 60_000)).await.unwrap();
    let out = watcher.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l["held"] == json!(true) && l["type"] == json!("semaphore")), "{lines:?}");
    assert_eq!(lines[1]["shared"].as_array().map(Vec::len), Some(2), "the second permit is a change: {lines:?}");
    let text = stdout(&run(&url, &["watch", "pool", "--changes", "1"]));
    assert!(text.contains("semaphore: permit") && !text.contains(": free"), "{text}");
    first.release().await.unwrap();
    second.release().await.unwrap();
}

/// Issue 54: `lockctl audit` on a Redis shared with python-redis-lock: a name held under two layouts at once, a list
/// at one of our lock keys, a peer's lock without expiry, a stray key under our prefix, the old default prefix in use;
/// text and JSON, and the exit codes (0 clean, 1 findings, 7 stopped at a bound).
#[tokio::test]
async fn audit_finds_what_breaks_locks_where_two_tenants_meet() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    let lock = lock_on(&server).await;
    let guard = lock.acquire("orders", &LockOptions::new(ms(60_000))).await.unwrap();
    let clean = run(&url, &["audit"]);
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));
    assert!(
        stdout(&clean).contains("nothing found") && stdout(&clean).contains("version key: 1."),
        "{}",
        stdout(&clean)
    );

    // python-redis-lock holds `orders` too (another service configured with its layout), without expiry.
    server.command(&["SET", "lock:orders", "cHl0aG9uLXRva2Vu"]).unwrap();
    server.command(&["RPUSH", "wlp:{queue-of-jobs}", "job-1"]).unwrap();
    server.command(&["SET", "wlp:misc", "x"]).unwrap();
    server.command(&["SET", "lock:wire", "1.0"]).unwrap();
    let found = run(&url, &["audit"]);
    assert_eq!(found.status.code(), Some(1), "{}", stdout(&found));
    let text = stdout(&found);
    for expected in [
        "held-twice",
        "python-redis-lock (lock:orders)",
        "wrong-type",
        "a list sits at this library's lock key",
        "no-expiry",
        "stray",
        "wlp:misc",
        "processes of an older release hold their locks under \"lock:\"",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
    assert!(!text.contains("cHl0aG9uLXRva2Vu"), "a peer's token was shown: {text}");
    let doc = json(&run(&url, &["audit", "--json"]));
    let kinds: Vec<&str> = doc[0]["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    for kind in ["held-twice", "wrong-type", "no-expiry", "stray", "version"] {
        assert!(kinds.contains(&kind), "{kind} missing: {doc}");
    }
    assert_eq!(doc[0]["complete"], true);

    // A bound below the keyspace: reported as incomplete, and the findings it saw still count.
    for i in 0..50 {
        server.command(&["SET", &format!("filler:{i}"), "x"]).unwrap();
    }
    server.command(&["DEL", "lock:orders", "wlp:{queue-of-jobs}", "wlp:misc", "lock:wire"]).unwrap();
    let bounded = run(&url, &["audit", "--max-keys", "5", "--scan-count", "2"]);
    assert_eq!(bounded.status.code(), Some(7), "{}", stdout(&bounded));
    assert!(stdout(&bounded).contains("not the whole keyspace"), "{}", stdout(&bounded));
    guard.release().await.unwrap();
    let down = run("redis://127.0.0.1:1", &["audit"]);
    assert_eq!(down.status.code(), Some(3), "{down:?}");
}

/// `lockctl --help` reads as a manual (issue 56): every command with what it shows and whether it changes anything,
/// the exit codes, and each command's own `--help` its options; `-h` is the short form.
#[test]
fn help_reads_as_a_manual() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_lockctl")).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    for command in ["list", "inspect", "force-release", "audit", "watch"] {
        let line =
            top.lines().find(|l| l.trim_start().starts_with(command)).unwrap_or_else(|| panic!("{command}: {top}"));
        assert!(line.trim_start().len() > command.len() + 20, "{command} is listed without saying what it does: {top}");
    }
    for says in ["Exit codes:", "0 done", "2 bad usage", "3 server unreachable", "--url", "--prefix", "--json"] {
        assert!(top.contains(says), "`lockctl --help` lacks {says:?}:\n{top}");
    }
    // What changes something says so; what only reads says that too.
    let force = help(&["force-release", "--help"]);
    for says in ["Delete", "keep its fencing counter", "Asks first", "--yes", "--owner"] {
        assert!(force.contains(says), "`lockctl force-release --help` lacks {says:?}:\n{force}");
    }
    let audit = help(&["audit", "--help"]);
    for says in ["Read-only", "SCAN", "never KEYS", "--max-keys", "--max-secs", "Exit 0", "7"] {
        assert!(audit.contains(says), "`lockctl audit --help` lacks {says:?}:\n{audit}");
    }
    for (command, says) in [("list", "SCAN"), ("inspect", "holders"), ("watch", "each change")] {
        let text = help(&[command, "--help"]);
        assert!(text.contains(says), "`lockctl {command} --help` lacks {says:?}:\n{text}");
    }
    assert_eq!(help(&["-h"]).lines().next(), top.lines().next(), "-h is not the short form of --help");
}
