//! The Java locks (Redisson `RLock` and `RFencedLock`, Spring Integration's `RedisLockRegistry`, ShedLock's Redis
//! provider) against ours on a real redis-server, through their wire contracts: no JVM package can be fetched on
//! the machines this suite runs on (Maven Central is unreachable), so `interop/java/contracts.json` pins what each
//! one sends, read from its upstream sources (every fact cites its file, tag and lines in
//! `interop/java/CONTRACTS.md`), and these tests replay exactly those commands beside our lock:
//!
//! - the name vectors: the keys and channels each Java library derives from a name are our layout's;
//! - their holder (the state their acquire leaves) makes ours wait; their release sequence wakes ours: at once
//!   where they publish (Redisson, Spring's `PUB_SUB` mode), at our next poll where they do not;
//! - our holder fails their acquire's precondition, their release and renewal sequences leave it alone (their
//!   guard reads fail), and our release publishes what their waiters listen for;
//! - Redisson's fencing counter and ours are one increasing sequence, both ways;
//! - ShedLock's blind unlock (its default, `safeUpdate=false`) deleting our job's lock is reported as lost, and our
//!   finish never touches the next holder.
//!
//! A replayed sequence runs its guards (reads whose reply is the precondition) first and checks their replies, then
//! its writes in one `MULTI`/`EXEC`, as the library's script does them atomically.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking; figures are printed

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lock_core::{
    JobLock, JobOptions, JobOutcome, KeyLayout, Lock, LockError, LockKeys, LockOptions, ReleaseOutcome, RenewPolicy,
};
use lock_redis_rs::RedisStore;
use lock_testkit::{Connection, RedisServer, Reply};
use serde_json::Value;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn contracts() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/java/contracts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn connect(server: &RedisServer) -> Connection {
    Connection::open(server.addr(), ms(10_000)).unwrap()
}

/// The placeholders of one replay and their values.
#[derive(Default, Clone)]
struct Vars(HashMap<&'static str, String>);

impl Vars {
    fn with(mut self, name: &'static str, value: impl ToString) -> Self {
        self.0.insert(name, value.to_string());
        self
    }

    /// `template` with every `<placeholder>` replaced (text outside angle brackets, braces included, is literal).
    fn fill(&self, template: &str) -> String {
        let mut out = template.to_owned();
        for (name, value) in &self.0 {
            out = out.replace(&format!("<{name}>"), value);
        }
        assert!(!out.contains('<'), "an unfilled placeholder in {template:?} (have {:?})", self.0.keys());
        out
    }
}

fn command_of(step: &Value, vars: &Vars) -> Vec<String> {
    step.as_array().unwrap().iter().map(|arg| vars.fill(arg.as_str().unwrap())).collect()
}

fn send(conn: &mut Connection, args: &[String]) -> Reply {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    conn.command(&args).unwrap()
}

/// Whether `reply` is what the contract lists, where it lists a definite reply (`null`, a number, `OK`, or a
/// placeholder); descriptions such as `"subscriber count"` are not checked.
fn check_reply(expected: &Value, reply: &Reply, vars: &Vars, what: &str) {
    let matches = match expected {
        Value::Null => matches!(reply, Reply::Bulk(None)) || reply == &Reply::Array(vec![]),
        Value::Number(n) => reply.as_int() == n.as_i64(),
        Value::String(s) if s == "OK" => reply == &Reply::Status("OK".to_owned()),
        Value::String(s) if s.starts_with('<') && s.ends_with('>') => reply.as_text() == Some(vars.fill(s)),
        Value::String(s) if s.starts_with("not <") => {
            let holder = vars.fill(s.trim_start_matches("not "));
            reply.as_text() != Some(holder)
        }
        _ => true,
    };
    assert!(matches, "{what}: the contract says {expected}, the server answered {reply:?}");
}

/// Replays one of a contract's sequences: guards first (each reply checked), then the writes in one transaction,
/// then what runs after the script. Returns the writes' replies, in order.
fn replay(conn: &mut Connection, sequence: &Value, vars: &Vars, what: &str) -> Vec<Reply> {
    let steps = sequence.as_array().unwrap_or_else(|| panic!("{what}: no such sequence"));
    let role = |step: &Value| step.get("role").and_then(Value::as_str).unwrap_or("write").to_owned();
    for step in steps.iter().filter(|s| role(s) == "guard") {
        let reply = send(conn, &command_of(&step["cmd"], vars));
        check_reply(&step["reply"], &reply, vars, &format!("{what}: guard {}", step["cmd"]));
    }
    let writes: Vec<&Value> = steps.iter().filter(|s| role(s) == "write").collect();
    let mut replies = Vec::new();
    if !writes.is_empty() {
        assert_eq!(send(conn, &["MULTI".to_owned()]), Reply::Status("OK".to_owned()));
        for step in &writes {
            assert_eq!(send(conn, &command_of(&step["cmd"], vars)), Reply::Status("QUEUED".to_owned()), "{what}");
        }
        let Reply::Array(done) = send(conn, &["EXEC".to_owned()]) else { panic!("{what}: EXEC failed") };
        for (step, reply) in writes.iter().zip(&done) {
            check_reply(&step["reply"], reply, vars, &format!("{what}: {}", step["cmd"]));
        }
        replies = done;
    }
    for step in steps.iter().filter(|s| role(s) == "after_script") {
        send(conn, &command_of(&step["cmd"], vars));
    }
    replies
}

/// Whether a sequence's guards hold now (the library would go on to write).
fn guards_hold(conn: &mut Connection, sequence: &Value, vars: &Vars) -> bool {
    sequence.as_array().unwrap().iter().filter(|s| s.get("role").and_then(Value::as_str) == Some("guard")).all(|step| {
        let reply = send(conn, &command_of(&step["cmd"], vars));
        let expected = &step["reply"];
        match expected {
            Value::Null => matches!(reply, Reply::Bulk(None)),
            Value::Number(n) => reply.as_int() == n.as_i64(),
            Value::String(s) if s.starts_with('<') => reply.as_text() == Some(vars.fill(s)),
            _ => true,
        }
    })
}

fn uuid() -> String {
    let hex = format!("{:032x}", rand::random::<u128>());
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// Redisson's holder field `<uuid>:<threadId>` (the contract's `holder_field.regex`, without a regex engine).
fn is_redisson_field(field: &str) -> bool {
    let Some((id, thread)) = field.rsplit_once(':') else { return false };
    let thread = thread.strip_prefix('-').unwrap_or(thread);
    let dashes = [8, 13, 18, 23];
    id.len() == 36
        && id
            .char_indices()
            .all(|(i, c)| if dashes.contains(&i) { c == '-' } else { matches!(c, '0'..='9' | 'a'..='f') })
        && !thread.is_empty()
        && thread.chars().all(|c| c.is_ascii_digit())
}

async fn lock_on(server: &RedisServer, layout: KeyLayout) -> Lock {
    Lock::new(RedisStore::connect(&server.url()).await.unwrap()).with_layout(layout)
}

/// A subscriber to `channel` (or, with `pattern`, to channels matching it): the messages it gets, as (channel,
/// payload), read on a thread of its own.
fn subscribe(server: &RedisServer, channel: &str, pattern: bool) -> std::sync::mpsc::Receiver<(String, String)> {
    let mut conn = connect(server);
    let verb = if pattern { "PSUBSCRIBE" } else { "SUBSCRIBE" };
    conn.command(&[verb, channel]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(Reply::Array(parts)) = conn.read() {
            let texts: Vec<String> = parts.iter().filter_map(Reply::as_text).collect();
            let (channel, payload) = match texts.first().map(String::as_str) {
                Some("message") if texts.len() == 3 => (texts[1].clone(), texts[2].clone()),
                Some("pmessage") if texts.len() == 4 => (texts[2].clone(), texts[3].clone()),
                _ => continue,
            };
            if tx.send((channel, payload)).is_err() {
                break;
            }
        }
    });
    rx
}

/// How long our waiter took, over `rounds` hand-offs from a Java holder (set up by `hold`) to our waiting acquire
/// (woken by `release`), in ms, sorted. Each round waits until our waiter listens before the release runs.
async fn handoffs_to_us(
    server: &RedisServer,
    lock: &Lock,
    name: &str,
    rounds: usize,
    mut hold: impl FnMut(&mut Connection),
    mut release: impl FnMut(&mut Connection),
) -> Vec<f64> {
    let mut conn = connect(server);
    let mut times = Vec::new();
    for _ in 0..rounds {
        hold(&mut conn);
        let waiter = {
            let (lock, name) = (lock.clone(), name.to_owned());
            tokio::spawn(async move {
                let guard = lock.acquire(&name, &LockOptions::new(ms(30_000)).with_wait(ms(20_000))).await;
                (guard, Instant::now())
            })
        };
        // Our waiter tried once and waits (it holds nothing yet): give it a moment to register, then release.
        tokio::time::sleep(ms(30)).await;
        assert!(!waiter.is_finished(), "our acquire did not wait for the Java holder");
        let released = Instant::now();
        release(&mut conn);
        let (guard, acquired) = waiter.await.unwrap();
        let guard = guard.unwrap();
        times.push(acquired.saturating_duration_since(released).as_secs_f64() * 1e3);
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    times.sort_by(f64::total_cmp);
    times
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

/// A hand-off woken by a publication: a median within 50 ms, and every one far below the peer's fallback (a
/// Redisson waiter retries after the holder's PTTL, 30 s here; ours polls every second at the latest).
fn assert_prompt(times: &[f64], what: &str) {
    let (p50, p99) = (percentile(times, 0.5), percentile(times, 0.99));
    println!("{what}: hand-off to ours p50 {p50:.2} ms, p99 {p99:.2} ms ({} rounds)", times.len());
    assert!(p50 <= 50.0 && p99 < 900.0, "{what}: hand-off p50 {p50:.1} ms, p99 {p99:.1} ms");
}

#[test]
fn the_name_vectors_are_our_layouts_keys() {
    let contracts = contracts();
    let vectors = contracts["name_vectors"]["vectors"].as_array().unwrap();
    let settings = &contracts["name_vectors"]["settings"];
    let registry = settings["spring_registry_key"].as_str().unwrap();
    let env = settings["shedlock_env"].as_str().unwrap();
    assert!(vectors.len() >= 5, "the vectors are missing");
    for vector in vectors {
        let name = vector["name"].as_str().unwrap();
        let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, vector["name_utf8_hex"].as_str().unwrap(), "{name}: the vector's UTF-8 form");

        let redisson = LockKeys::for_layout(&KeyLayout::redisson(), "lock:", name).unwrap();
        let rlock = &vector["redisson_rlock"];
        assert_eq!(redisson.lock(), rlock["key"].as_str().unwrap(), "{name}: Redisson's lock key");
        assert_eq!(redisson.channel(), rlock["channel"].as_str().unwrap(), "{name}: Redisson's channel");
        let fenced = &vector["redisson_fenced_lock"];
        assert_eq!(redisson.fence(), fenced["token_key"].as_str().unwrap(), "{name}: RFencedLock's token counter");
        // node-redisson adds braces unless the name starts with `{` (Redisson: unless it contains one): a name with
        // `{` further in is on another channel there, and its waiters and ours do not hear each other.
        let node = &vector["node_redisson"];
        let shared = !name.contains('{') || name.starts_with('{');
        assert_eq!(node["channel_matches_redisson"].as_bool().unwrap(), shared, "{name}: node-redisson's channel");

        let spring = LockKeys::for_layout(&KeyLayout::spring(registry, true), "lock:", name).unwrap();
        let registry_vector = &vector["spring_redis_lock_registry"];
        assert_eq!(spring.lock(), registry_vector["key"].as_str().unwrap(), "{name}: Spring's key");
        assert_eq!(spring.channel(), registry_vector["pubsub_channel"].as_str().unwrap(), "{name}: Spring's channel");

        let shedlock = LockKeys::for_layout(&KeyLayout::shedlock(env), "lock:", name).unwrap();
        assert_eq!(shedlock.lock(), vector["shedlock_redis"]["key"].as_str().unwrap(), "{name}: ShedLock's key");
    }
}

/// Redisson's holder (the hash its acquire leaves, field `<uuid>:<threadId>`) makes our acquire wait, and its
/// release (delete, then `0` on its channel) wakes ours at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_holder_makes_ours_wait_and_its_release_wakes_ours() {
    let contracts = contracts();
    let rlock = &contracts["peers"]["redisson_rlock"];
    let server = RedisServer::start().unwrap();
    let lock = lock_on(&server, KeyLayout::redisson()).await;
    let name = "orders";
    let keys = LockKeys::for_layout(&KeyLayout::redisson(), "lock:", name).unwrap();
    let vars = Vars::default()
        .with("key", keys.lock())
        .with("channel", keys.channel())
        .with("field", format!("{}:1", uuid()))
        .with("lease_ms", 30_000)
        .with("internal_lease_ms", 30_000)
        .with("latch_px_ms", 18_000);
    let times = handoffs_to_us(
        &server,
        &lock,
        name,
        20,
        |conn| {
            let vars =
                vars.clone().with("latch", format!("redisson_unlock_latch:{{{name}}}:{}", uuid().replace('-', "")));
            for step in rlock["setup_commands"].as_array().unwrap() {
                send(conn, &command_of(step, &vars));
            }
            // Redisson's own acquire would now answer the holder's PTTL: the lock is Redisson's.
            assert_eq!(send(conn, &["HEXISTS".into(), vars.fill("<key>"), vars.fill("<field>")]).as_int(), Some(1));
        },
        |conn| {
            let vars =
                vars.clone().with("latch", format!("redisson_unlock_latch:{{{name}}}:{}", uuid().replace('-', "")));
            replay(conn, &rlock["release_sequences"]["full_release_hold_count_1"], &vars, "Redisson's unlock");
        },
    )
    .await;
    assert_prompt(&times, "Redisson RLock");
}

/// Our holder under Redisson's layout: Redisson's acquire precondition fails (it would wait on the PTTL), its
/// release and renewal guards fail (nothing written), and our release publishes `0` where its waiters listen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redissons_sequences_leave_our_holder_alone_and_our_release_wakes_its_waiters() {
    let contracts = contracts();
    let rlock = &contracts["peers"]["redisson_rlock"];
    let server = RedisServer::start().unwrap();
    let lock = lock_on(&server, KeyLayout::redisson()).await;
    let mut conn = connect(&server);
    let name = "invoices";
    let guard = lock.acquire(name, &LockOptions::new(ms(20_000))).await.unwrap();
    let key = guard.keys().lock().to_owned();
    let theirs = format!("{}:7", uuid());
    let vars = Vars::default()
        .with("key", &key)
        .with("channel", guard.keys().channel())
        .with("field", &theirs)
        .with("latch", format!("redisson_unlock_latch:{{{name}}}:{}", uuid().replace('-', "")))
        .with("internal_lease_ms", 30_000)
        .with("latch_px_ms", 18_000);

    // What Redisson reads: a hash, one field (ours, which no Redisson client can mistake for its own), a hold count
    // of 1, and a TTL.
    let fields = send(&mut conn, &["HGETALL".into(), key.clone()]);
    let Reply::Array(fields) = fields else { panic!("not a hash: {fields:?}") };
    let fields: Vec<String> = fields.iter().filter_map(Reply::as_text).collect();
    assert_eq!(fields.len(), 2, "one field: {fields:?}");
    assert!(!is_redisson_field(&fields[0]), "our field looks like a Redisson client's: {}", fields[0]);
    assert!(is_redisson_field(&theirs), "the contract's field shape");
    assert_eq!(fields[1], "1", "the hold count");
    let pttl = send(&mut conn, &["PTTL".into(), key.clone()]).as_int().unwrap();
    assert!((1..=20_000).contains(&pttl), "Redisson's acquire answers this PTTL and retries after it: {pttl}");
    // Redisson's acquire: "EXISTS == 0 or HEXISTS field == 1" is false, so it replies the PTTL and waits.
    assert_eq!(send(&mut conn, &["EXISTS".into(), key.clone()]).as_int(), Some(1));
    assert_eq!(send(&mut conn, &["HEXISTS".into(), key.clone(), theirs.clone()]).as_int(), Some(0));
    // Its unlock and renewal start from the same guard, which fails: they write nothing.
    assert!(!guards_hold(&mut conn, &rlock["release_sequences"]["full_release_hold_count_1"], &vars));
    assert!(!guards_hold(&mut conn, &rlock["renew"]["sequence"], &vars));
    assert!(guard.extend(ms(20_000)).await.is_ok(), "our hold changed");

    let messages = subscribe(&server, guard.keys().channel(), false);
    tokio::time::sleep(ms(50)).await; // the subscription is in place before the release below
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let (channel, payload) = messages.recv_timeout(ms(10_000)).expect("our release published nothing");
    let wake_up = &rlock["wake_up"];
    assert_eq!(channel, vars.fill(wake_up["channel"].as_str().unwrap()));
    assert_eq!(payload, wake_up["message"].as_str().unwrap(), "Redisson's waiters wake on this message");
    assert_eq!(send(&mut conn, &["EXISTS".into(), key]).as_int(), Some(0), "the hash outlived our release");
}

/// `RFencedLock`'s tokens and ours come from one counter and one increasing sequence, whoever acquires next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_fenced_tokens_and_ours_are_one_increasing_sequence() {
    let contracts = contracts();
    let fenced = &contracts["peers"]["redisson_fenced_lock"];
    assert_eq!(fenced["acquire"]["incr_on_failure"], false, "the contract this test replays");
    let server = RedisServer::start().unwrap();
    let lock = lock_on(&server, KeyLayout::redisson()).await;
    let mut conn = connect(&server);
    let name = "ledger";
    let keys = LockKeys::for_layout(&KeyLayout::redisson(), "lock:", name).unwrap();
    let vars = Vars::default()
        .with("key", keys.lock())
        .with("token_key", keys.fence())
        .with("channel", keys.channel())
        .with("field", format!("{}:1", uuid()))
        .with("lease_ms", 30_000)
        .with("internal_lease_ms", 30_000)
        .with("latch_px_ms", 18_000);
    // Their acquire, step by step as the contract lists it: INCR the counter, HINCRBY, PEXPIRE, in one script.
    let theirs = |conn: &mut Connection| -> i64 {
        assert_eq!(send(conn, &["EXISTS".into(), vars.fill("<key>")]).as_int(), Some(0), "the lock is free");
        assert_eq!(send(conn, &["MULTI".into()]), Reply::Status("OK".into()));
        for args in [
            vec!["INCR", "<token_key>"],
            vec!["HINCRBY", "<key>", "<field>", "1"],
            vec!["PEXPIRE", "<key>", "<lease_ms>"],
        ] {
            send(conn, &args.iter().map(|a| vars.fill(a)).collect::<Vec<_>>());
        }
        let Reply::Array(done) = send(conn, &["EXEC".into()]) else { panic!("EXEC") };
        let token = done[0].as_int().unwrap();
        let latch = format!("redisson_unlock_latch:{{{name}}}:{}", uuid().replace('-', ""));
        replay(
            conn,
            &fenced["release_sequences"]["full_release_hold_count_1"],
            &vars.clone().with("latch", latch),
            "unlock",
        );
        token
    };
    let mut last = 0_i64;
    for round in 0..5 {
        let t = theirs(&mut conn);
        assert!(t > last, "round {round}: Redisson's token {t} is not above {last}");
        let guard = lock.acquire(name, &LockOptions::new(ms(10_000))).await.unwrap();
        let ours = i64::try_from(guard.fence().await.ok().unwrap().get()).unwrap();
        assert!(ours > t, "round {round}: our token {ours} is not above Redisson's {t}");
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        last = ours;
    }
}

/// Spring's `RedisLockRegistry`: in its `PUB_SUB_LOCK` mode its unlock publishes the key, which wakes our waiter at
/// once, and ours publishes where its waiters listen; in its default `SPIN_LOCK` mode it publishes nothing and our
/// waiter sees its release at our next poll. Either way its guards fail against our holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_registry_releases_wake_ours_and_ours_wake_its_waiters() {
    let contracts = contracts();
    let spring = &contracts["peers"]["spring_redis_lock_registry"];
    let server = RedisServer::start().unwrap();
    let registry = "locks";
    for (pub_sub, sequence) in [(true, "pub_sub"), (false, "spin_script_fallback_or_7_0_and_older")] {
        let layout = KeyLayout::spring(registry, pub_sub);
        let lock = lock_on(&server, layout.clone()).await;
        let name = format!("report-{sequence}");
        let keys = LockKeys::for_layout(&layout, "lock:", &name).unwrap();
        let vars = Vars::default()
            .with("key", keys.lock())
            .with("registryKey", registry)
            .with("lockKey", &name)
            .with("clientId", uuid())
            .with("expire_ms", 60_000);
        let times = handoffs_to_us(
            &server,
            &lock,
            &name,
            10,
            |conn| {
                for step in spring["setup_commands"].as_array().unwrap() {
                    send(conn, &command_of(step, &vars));
                }
            },
            |conn| {
                replay(conn, &spring["release_sequences"][sequence], &vars, sequence);
            },
        )
        .await;
        if pub_sub {
            assert_prompt(&times, "Spring PUB_SUB_LOCK");
        } else {
            // Nothing announces it: our waiter's backoff finds it, within its longest delay (100 ms) and a margin.
            let p50 = percentile(&times, 0.5);
            println!("Spring SPIN_LOCK: hand-off to ours p50 {p50:.2} ms (by polling)");
            assert!(p50 <= 150.0, "Spring SPIN_LOCK: p50 {p50:.1} ms");
        }

        let guard = lock.acquire(&name, &LockOptions::new(ms(20_000))).await.unwrap();
        let mut conn = connect(&server);
        // Spring's acquire finds a value that is not its client id and answers nil; its unlock and renewal guards
        // fail; its value shape never matches ours.
        let value = send(&mut conn, &["GET".into(), vars.fill("<key>")]).as_text().unwrap();
        assert_ne!(value, vars.fill("<clientId>"));
        assert!(!guards_hold(&mut conn, &spring["release_sequences"][sequence], &vars));
        assert!(!guards_hold(&mut conn, &spring["renew_sequences"]["script_fallback"], &vars.clone().with("ms", 1)));
        let messages = subscribe(&server, &format!("{registry}-channel:*"), true);
        tokio::time::sleep(ms(50)).await;
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        if pub_sub {
            let (channel, payload) = messages.recv_timeout(ms(10_000)).expect("our release published nothing");
            let wake_up = &spring["wake_up"];
            assert_eq!(channel, vars.fill(wake_up["channel"].as_str().unwrap()));
            assert_eq!(payload, vars.fill(wake_up["message"].as_str().unwrap()), "Spring's waiters match this");
        } else {
            assert!(
                messages.recv_timeout(ms(300)).is_err(),
                "a release under the spin layout published on Spring's channel"
            );
        }
    }
}

/// ShedLock's Redis provider: its holder makes our job skip; its safe unlock (`safeUpdate=true`) frees the job; its
/// acquire fails against our run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shedlock_holder_skips_our_job_and_its_safe_unlock_frees_it() {
    let contracts = contracts();
    let shedlock = &contracts["peers"]["shedlock_redis"];
    let server = RedisServer::start().unwrap();
    let jobs = JobLock::new(lock_on(&server, KeyLayout::shedlock("default")).await);
    let mut conn = connect(&server);
    let keys = LockKeys::for_layout(&KeyLayout::shedlock("default"), "lock:", "nightly").unwrap();
    let vars = shedlock_vars(keys.lock(), "host-a");
    for step in shedlock["setup_commands"].as_array().unwrap() {
        send(&mut conn, &command_of(step, &vars));
    }
    let options = JobOptions::new(ms(10_000));
    let skipped = jobs.run("nightly", &options, |_| async {}).await.unwrap();
    assert!(matches!(skipped, JobOutcome::Skipped { .. }), "our job ran beside ShedLock's: {skipped:?}");
    replay(&mut conn, &shedlock["release_sequences"]["unlock_safeUpdate_true_lockAtLeast_passed"], &vars, "unlock");

    // ShedLock's acquire while our run holds the job.
    let acquire = command_of(&shedlock["acquire"]["cmd"], &shedlock_vars(keys.lock(), "host-b"));
    let addr = server.addr();
    let outcome = jobs
        .run("nightly", &options, |_| async move {
            let mut conn = Connection::open(addr, ms(10_000)).unwrap();
            send(&mut conn, &acquire)
        })
        .await
        .unwrap();
    let JobOutcome::Ran { value, .. } = outcome else {
        panic!("our job did not run once ShedLock unlocked: {outcome:?}")
    };
    assert_eq!(value, Reply::Bulk(None), "ShedLock acquired the job while ours ran");
}

/// A ShedLock node's placeholders: its value shape (`ADDED:<time>@<host>:<uuid>`), its key, its lease.
fn shedlock_vars(key: &str, host: &str) -> Vars {
    Vars::default()
        .with("key", key)
        .with("value", format!("ADDED:2026-12-06T03:00:00.000Z@{host}:{}", uuid()))
        .with("lockAtMostFor_ms", 60_000)
        .with("ms_until_lockAtMostUntil", 60_000)
}

/// ShedLock's default unlock (`safeUpdate=false`) is a blind `DEL`: from an overrunning ShedLock node it deletes
/// our run's lock. Our keep-alive reports the loss (the run ends `Lost`, never quietly), and our finish leaves the
/// next holder's lock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedlocks_blind_unlock_of_our_job_is_reported_lost_and_the_next_holder_kept() {
    let contracts = contracts();
    let shedlock = &contracts["peers"]["shedlock_redis"];
    let server = RedisServer::start().unwrap();
    let jobs = JobLock::new(lock_on(&server, KeyLayout::shedlock("default")).await);
    let keys = LockKeys::for_layout(&KeyLayout::shedlock("default"), "lock:", "sync").unwrap();
    let next = shedlock_vars(keys.lock(), "host-c");
    let blind = shedlock["release_sequences"]["unlock_safeUpdate_false_lockAtLeast_passed"].clone();
    let acquire = command_of(&shedlock["acquire"]["cmd"], &next);
    let at_most_for = ms(1_500);
    let options = JobOptions::new(at_most_for).with_keep_alive(RenewPolicy::default());
    let addr = server.addr();
    let started = Instant::now();
    let run = jobs
        .run("sync", &options, |_| async move {
            let mut conn = Connection::open(addr, ms(10_000)).unwrap();
            // Another node's overrunning run unlocks blindly; a third node takes the job.
            replay(&mut conn, &blind, &Vars::default().with("key", &acquire[1]), "blind unlock");
            assert_eq!(send(&mut conn, &acquire), Reply::Status("OK".into()), "the third node did not get the job");
            // Our work would go on for long: the loss must end it.
            tokio::time::sleep(ms(60_000)).await;
        })
        .await;
    assert!(matches!(run, Err(LockError::Lost { .. })), "the deleted lock was not reported: {run:?}");
    // Found at the next renewal: within one renewal interval (a third of the TTL) and a margin a slow machine survives.
    assert!(started.elapsed() < at_most_for * 10, "the loss took {:?} to be seen", started.elapsed());
    let mut conn = connect(&server);
    let value = send(&mut conn, &["GET".into(), keys.lock().to_owned()]).as_text();
    assert_eq!(value, Some(next.fill("<value>")), "our finish touched the next holder's lock");
}
