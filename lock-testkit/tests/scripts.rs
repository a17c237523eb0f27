//! lock-core's Lua scripts on a real redis-server, in the states a client cannot force through a store: a key that
//! vanished between two commands, fence counters in formats Lua reads as numbers but `INCRBY` refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use lock_core::backend::scripts::{self, parse_holder};
use lock_core::backend::AcquireReply;
use lock_testkit::{RedisServer, Reply};

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"))
}

fn eval(server: &RedisServer, script: &scripts::Script, keys: &[&str], args: &[&str]) -> Reply {
    let numkeys = keys.len().to_string();
    let mut command = vec!["EVAL", script.body(), numkeys.as_str()];
    command.extend_from_slice(keys);
    command.extend_from_slice(args);
    server.command(&command).unwrap()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap().as_int() == Some(1)
}

/// Finding 2: without fencing, acquire is `SET NX PX`, then `HOLDER` when the key was taken. A key that expired
/// or was released between the two is free, not "a value that is not a lock": the script says so (-2), and the
/// waiting loop tries again at once.
#[test]
fn holder_of_a_vanished_key_says_free() {
    let s = server();
    let reply = eval(&s, &scripts::HOLDER, &["wlp:{gone}", "wlp:{gone}:awaited"], &[]);
    assert_eq!(reply, Reply::Int(-2), "HOLDER on an absent key");
    assert_eq!(parse_holder(-2), AcquireReply::Held { ttl: Some(std::time::Duration::ZERO) });
    // A key of another type (another library's lock, a Redisson hash) holds the lock like a token: its TTL is
    // reported and the lock marked as awaited (issue 48; it was refused as `WRONGTYPE`).
    s.command(&["HSET", "wlp:{hash}", "f", "v"]).unwrap();
    s.command(&["PEXPIRE", "wlp:{hash}", "5000"]).unwrap();
    let foreign = eval(&s, &scripts::HOLDER, &["wlp:{hash}", "wlp:{hash}:awaited"], &[]).as_int().unwrap();
    assert!((1..=5000).contains(&foreign), "HOLDER over a hash: {foreign}");
    assert!(!exists(&s, "wlp:{gone}:awaited"), "marked a lock not held");
    s.command(&["SET", "wlp:{held}", "t", "PX", "5000"]).unwrap();
    let pttl = eval(&s, &scripts::HOLDER, &["wlp:{held}", "wlp:{held}:awaited"], &[]).as_int().unwrap();
    assert!((1..=5000).contains(&pttl), "{pttl}");
    // The held lock is marked as awaited, for longer than its holder may keep it without renewing.
    let marked = s.command(&["PTTL", "wlp:{held}:awaited"]).unwrap().as_int().unwrap();
    assert!(marked > pttl, "the release mark lives {marked} ms, the lock {pttl} ms");
}

/// Issue 21: the release mark is ours only when it holds our `"1"`; a key of another type under its name is
/// refused as `WRONGTYPE` by every try that would mark it, and left as it was.
#[test]
fn a_foreign_value_at_the_release_mark_is_refused_and_kept() {
    let s = server();
    s.command(&["SET", "wlp:{m}", "someone", "PX", "5000"]).unwrap();
    s.command(&["HSET", "wlp:{m}:awaited", "f", "v"]).unwrap();
    let holder = eval(&s, &scripts::HOLDER, &["wlp:{m}", "wlp:{m}:awaited"], &[]);
    let acquire =
        eval(&s, &scripts::ACQUIRE, &["wlp:{m}", "wlp:{m}:fence", "wlp:{m}:awaited"], &["token", "30000", "1"]);
    for reply in [holder, acquire] {
        assert!(reply.is_error() && reply.as_text().unwrap_or_default().contains("WRONGTYPE"), "{reply:?}");
    }
    assert_eq!(s.command(&["TYPE", "wlp:{m}:awaited"]).unwrap().as_text().as_deref(), Some("hash"));
}

/// Finding 8: `ACQUIRE` checks the fence counter before any write, with the rule `INCRBY` applies: a counter Lua
/// would read as a number but `INCRBY` refuses ("1e3", "0x10", " 7", "7 ", "1.5", a value past 64 bits) fails the
/// script with `WRONGTYPE` and leaves no lock key behind. `RAISE_FENCE` and `FENCE` refuse them the same way.
#[test]
fn a_fence_counter_incrby_refuses_fails_before_any_write() {
    let s = server();
    for (i, bad) in ["1e3", "0x10", " 7", "7 ", "1.5", "99999999999999999999", "abc", ""].iter().enumerate() {
        let lock = format!("wlp:{{bad{i}}}");
        let fence = format!("wlp:{{bad{i}}}:fence");
        s.command(&["SET", &fence, bad]).unwrap();
        let mark = format!("wlp:{{bad{i}}}:awaited");
        let reply = eval(&s, &scripts::ACQUIRE, &[&lock, &fence, &mark], &["token", "30000", "1"]);
        let text = reply.as_text().unwrap_or_default();
        assert!(reply.is_error() && text.contains("WRONGTYPE"), "fence {bad:?}: {reply:?}");
        assert!(!exists(&s, &lock), "fence {bad:?}: the lock key was written before the check");
        s.command(&["SET", &lock, "token", "PX", "30000"]).unwrap();
        let raised = eval(&s, &scripts::RAISE_FENCE, &[&lock, &fence], &["token", "100"]);
        assert!(raised.is_error(), "raise-fence over {bad:?}: {raised:?}");
        let drawn = eval(&s, &scripts::FENCE, &[&lock, &fence], &["token"]);
        assert!(drawn.is_error(), "a draw on demand over {bad:?}: {drawn:?}");
        assert_eq!(s.command(&["GET", &fence]).unwrap().as_text().as_deref(), Some(*bad));
    }
    // Integers INCRBY takes still work, negative ones included.
    for (i, good) in ["7", "-3", "0"].iter().enumerate() {
        let lock = format!("wlp:{{good{i}}}");
        let fence = format!("wlp:{{good{i}}}:fence");
        s.command(&["SET", &fence, good]).unwrap();
        let reply =
            eval(&s, &scripts::ACQUIRE, &[&lock, &fence, &format!("{lock}:awaited")], &["token", "30000", "1", "5"]);
        assert!(matches!(reply, Reply::Array(ref r) if r.first() == Some(&Reply::Int(1))), "{good:?}: {reply:?}");
    }
}

/// Issue 21: `FENCE` (a token drawn on demand) advances the counter only while the lock key holds the caller's
/// token: a lock gone (0) or taken (-1, also by another library's lock of another type) leaves the counter as it
/// was, and a draw for the holder sets the counter to the server's clock floor first, then counts up.
#[test]
fn a_token_on_demand_is_drawn_only_by_the_holder() {
    let s = server();
    let (lock, fence) = ("wlp:{od}", "wlp:{od}:fence");
    let counter = |s: &RedisServer| s.command(&["GET", fence]).unwrap().as_text().and_then(|t| t.parse::<i64>().ok());
    s.command(&["SET", fence, "41"]).unwrap();
    assert_eq!(eval(&s, &scripts::FENCE, &[lock, fence], &["mine"]), Reply::Int(0), "a draw for a lock that is gone");
    s.command(&["SET", lock, "theirs", "PX", "30000"]).unwrap();
    assert_eq!(eval(&s, &scripts::FENCE, &[lock, fence], &["mine"]), Reply::Int(-1), "a draw for a taken lock");
    assert_eq!(counter(&s), Some(41), "a refused draw moved the counter");
    let first = eval(&s, &scripts::FENCE, &[lock, fence], &["theirs"]).as_int().unwrap();
    // Above 10^15: the server's clock in µs (about 1.8·10^15 in 2026), not 42.
    assert!(first > 1_000_000_000_000_000, "the clock floor: drew {first}");
    let second = eval(&s, &scripts::FENCE, &[lock, fence], &["theirs"]).as_int().unwrap();
    assert!(second > first, "{second} after {first}");
    s.command(&["DEL", lock]).unwrap();
    s.command(&["HSET", lock, "f", "v"]).unwrap();
    let refused = eval(&s, &scripts::FENCE, &[lock, fence], &["theirs"]);
    assert_eq!(refused, Reply::Int(-1), "a draw for a lock a hash holds");
    assert_eq!(counter(&s), Some(second), "a refused draw moved the counter");
}

/// The guide's `ACL SETUSER` line (chapter 10, connecting in production) is exactly the rules the minimal-user tests
/// run with.
#[test]
fn the_guide_gives_the_tested_acl_line() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../lock-core/src/guide/10_connecting.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let rules = lock_testkit::server_cases::MINIMAL_ACL_RULES.replace(">secret", ">CHANGE-ME");
    let rules: Vec<&str> = rules.split_whitespace().collect();
    let line = format!("ACL SETUSER locker {}", rules.join(" "));
    assert!(readme.contains(&line), "the guide's chapter 10 lacks the tested line:\n{line}");
}

/// The election's and the operator's scripts check every key's type before any write: a foreign leader record,
/// fencing counter or queue is `WRONGTYPE`, nothing is written, and the foreign value is kept. A lock key of another
/// type is another library's lock: it holds the election, and the operator's scripts show it as a holder.
#[test]
fn election_and_admin_scripts_refuse_foreign_keys_before_any_write() {
    let s = server();
    let wrongtype = |reply: Reply, what: &str| {
        assert!(reply.is_error() && reply.as_text().unwrap_or_default().contains("WRONGTYPE"), "{what}: {reply:?}");
    };
    let elect_keys = ["wlp:{e}", "wlp:{e}:fence", "wlp:{e}:awaited", "wlp:{e}:info", "wlp:{e}:leader"];
    let elect_args = ["token", "30000", "", "id", "value", "origin", "0"];
    // A string where the leader record (a hash) belongs.
    s.command(&["SET", "wlp:{e}:info", "foreign"]).unwrap();
    wrongtype(eval(&s, &scripts::ELECT, &elect_keys, &elect_args), "elect over a foreign record");
    assert!(!exists(&s, "wlp:{e}"), "the lock key was written before the record's check");
    s.command(&["DEL", "wlp:{e}:info"]).unwrap();
    // A counter INCRBY would refuse.
    s.command(&["SET", "wlp:{e}:fence", "1e3"]).unwrap();
    wrongtype(eval(&s, &scripts::ELECT, &elect_keys, &elect_args), "elect over a foreign counter");
    assert!(!exists(&s, "wlp:{e}") && !exists(&s, "wlp:{e}:info"), "elect wrote before the counter's check");
    s.command(&["DEL", "wlp:{e}:fence"]).unwrap();
    // A hash where the lock key belongs: another library's lock, which holds the election.
    s.command(&["HSET", "wlp:{e}", "f", "v"]).unwrap();
    let elected = eval(&s, &scripts::ELECT, &elect_keys, &elect_args);
    assert!(matches!(&elected, Reply::Array(items) if items.first() == Some(&Reply::Int(0))), "{elected:?}");
    assert_eq!(
        s.command(&["TYPE", "wlp:{e}"]).unwrap().as_text().as_deref(),
        Some("hash"),
        "the foreign key was touched"
    );
    assert!(!exists(&s, "wlp:{e}:info"), "a record was written beside a foreign lock key");
    let admin = ["wlp:{e}", "wlp:{e}:fence", "wlp:{e}:awaited", "wlp:{e}:queue"];
    let shared = ["wlp:{e}:readers", "wlp:{e}:permits", "wlp:{e}:grants"];
    let inspect_keys = [admin.as_slice(), &shared, &["wlp:{e}:info"]].concat();
    let seen = eval(&s, &scripts::INSPECT, &inspect_keys, &[]);
    assert!(
        matches!(&seen, Reply::Array(items) if items.first().and_then(Reply::as_text).as_deref() == Some("type:hash")),
        "{seen:?}"
    );
    let forced = ["wlp:{e}", "wlp:{e}:released", "wlp:{e}:awaited", "wlp:{e}:queue"];

    // The holders that share a name: a foreign readers' set or semaphore key is refused, and kept, by both.
    s.command(&["DEL", "wlp:{e}"]).unwrap();
    let forced_keys = [forced.as_slice(), &shared, &["wlp:{e}:slots", "wlp:{e}:limit"]].concat();
    for foreign in ["wlp:{e}:readers", "wlp:{e}:permits", "wlp:{e}:grants"] {
        s.command(&["SET", foreign, "foreign"]).unwrap();
        if foreign != "wlp:{e}:grants" {
            wrongtype(eval(&s, &scripts::INSPECT, &inspect_keys, &[]), foreign);
        }
        wrongtype(eval(&s, &scripts::FORCE_RELEASE, &forced_keys, &["force-release", "0", "*"]), foreign);
        assert_eq!(s.command(&["GET", foreign]).unwrap().as_text().as_deref(), Some("foreign"), "{foreign} touched");
        s.command(&["DEL", foreign]).unwrap();
    }
    // The record an inspection reads (an election's leader, a job's last run) is a hash or nothing.
    s.command(&["SET", "wlp:{e}:info", "foreign"]).unwrap();
    wrongtype(eval(&s, &scripts::INSPECT, &inspect_keys, &[]), "inspect over a foreign record");
    assert_eq!(s.command(&["GET", "wlp:{e}:info"]).unwrap().as_text().as_deref(), Some("foreign"), "record touched");
}

/// The read-write lock's scripts check every key's type before any write: a foreign readers' set, writer queue,
/// heartbeat set or fencing counter is `WRONGTYPE` from each script, nothing is written (a reader is not added, an
/// expired reader is not purged, a writer is not set), and the foreign value is kept.
#[test]
fn read_write_lock_scripts_refuse_foreign_keys_before_any_write() {
    let s = server();
    let wrongtype = |reply: Reply, what: &str| {
        assert!(reply.is_error() && reply.as_text().unwrap_or_default().contains("WRONGTYPE"), "{what}: {reply:?}");
    };
    let (writer, readers, queue, beats) =
        ("wlp:rw:{n}", "wlp:rw:{n}:readers", "wlp:rw:{n}:queue", "wlp:rw:{n}:heartbeats");
    let (fence, channel, mark) = ("wlp:rw:{n}:fence", "wlp:rw:{n}:released", "wlp:rw:{n}:awaited");
    let read = |s: &RedisServer| {
        eval(s, &scripts::RW_READ, &[writer, readers, queue, beats, fence, mark], &["t", "30000", "1"])
    };
    let write = |s: &RedisServer| {
        let keys = [writer, fence, queue, beats, channel, mark, "wlp:rw:{n}:grants", readers];
        eval(s, &scripts::FAIR_ACQUIRE, &keys, &["t", "30000", "1", "", "3000", "1", "origin", "0", ""])
    };
    let common = [writer, readers, queue, beats, channel, mark];
    let release = |s: &RedisServer| eval(s, &scripts::RW_RELEASE, &common, &["t", "origin", "0"]);
    let extend = |s: &RedisServer| eval(s, &scripts::RW_EXTEND, &common, &["t", "30000", "1", "origin", "0"]);
    let state = |s: &RedisServer| eval(s, &scripts::RW_STATE, &[writer, readers, queue, beats], &[]);
    let every_script_refuses = |s: &RedisServer, foreign: &str| {
        let replies = [(read(s), "read"), (write(s), "write"), (release(s), "release"), (extend(s), "extend")];
        for (reply, what) in replies.into_iter().chain([(state(s), "state")]) {
            wrongtype(reply, &format!("{what} over {foreign}"));
        }
    };
    // An expired reader that a purge would remove, and a queued writer whose place has expired.
    s.command(&["ZADD", readers, "1", "old-reader"]).unwrap();
    for (foreign, setup) in [(queue, ["SET", queue, "x"]), (beats, ["SET", beats, "x"])] {
        s.command(&setup).unwrap();
        wrongtype(read(&s), &format!("read over a foreign {foreign}"));
        wrongtype(release(&s), &format!("release over a foreign {foreign}"));
        if foreign == queue {
            wrongtype(extend(&s), "extend over a foreign queue");
        }
        wrongtype(write(&s), &format!("write over a foreign {foreign}"));
        wrongtype(state(&s), &format!("state over a foreign {foreign}"));
        assert_eq!(
            s.command(&["ZCARD", readers]).unwrap().as_int(),
            Some(1),
            "{foreign}: a reader was purged or added"
        );
        assert!(!exists(&s, writer), "{foreign}: a writer was set");
        assert_eq!(
            s.command(&["GET", foreign]).unwrap().as_text().as_deref(),
            Some("x"),
            "the foreign value was touched"
        );
        s.command(&["DEL", foreign]).unwrap();
    }
    s.command(&["SET", fence, "1e3"]).unwrap();
    wrongtype(read(&s), "read over a foreign counter");
    wrongtype(write(&s), "write over a foreign counter");
    assert_eq!(s.command(&["ZCARD", readers]).unwrap().as_int(), Some(1), "a reader was purged or added");
    s.command(&["DEL", fence, readers]).unwrap();
    s.command(&["SET", readers, "x"]).unwrap();
    every_script_refuses(&s, "a foreign readers' set");
    assert!(!exists(&s, writer) && !exists(&s, queue), "a script wrote beside a foreign readers' set");
    s.command(&["DEL", readers]).unwrap();
    // A writer key of another type is another library's lock on that key: it holds the lock (issue 48), so a read
    // and a write are refused as "held", and nothing is written beside it.
    s.command(&["HSET", writer, "f", "v"]).unwrap();
    assert_eq!(read(&s), Reply::Array(vec![Reply::Int(0), Reply::Int(-1)]), "read over a foreign writer key");
    let written = write(&s);
    assert!(matches!(&written, Reply::Array(items) if items.first() == Some(&Reply::Int(0))), "{written:?}");
    assert!(!exists(&s, readers), "a reader was added beside a foreign writer key");
    assert_eq!(s.command(&["TYPE", writer]).unwrap().as_text().as_deref(), Some("hash"), "the writer key was touched");
}

/// A retried grant (the first reply lost, the same token sent again) gets the same grant with its TTL set again from
/// the retry: the caller's validity runs from the retry's request, so a key left with the first grant's remaining
/// PX would expire before the holder stops trusting it. Found by the schedule explorer on a fair writer whose grant
/// failed after it applied and was retried a heartbeat later; the job's and the election's retries likewise.
#[test]
fn a_retried_grant_lives_its_ttl_from_the_retry() {
    let s = server();
    let pttl = |key: &str| s.command(&["PTTL", key]).unwrap().as_int().unwrap_or(-2);
    let fair_keys = [
        "wlp:{f}",
        "wlp:{f}:fence",
        "wlp:{f}:queue",
        "wlp:{f}:heartbeats",
        "wlp:{f}:released",
        "wlp:{f}:awaited",
        "wlp:{f}:grants",
    ];
    let fair_args = ["t", "30000", "1", "", "3000", "1", "origin", "0", "3000 1"];
    let job_keys = ["wlp:{j}", "wlp:{j}:fence", "wlp:{j}:info"];
    let job_args = ["t", "30000", "1", "holder", "0"];
    let elect_keys = ["wlp:{e}", "wlp:{e}:fence", "wlp:{e}:awaited", "wlp:{e}:info", "wlp:{e}:leader"];
    let elect_args = ["t", "30000", "", "id", "value", "origin", "0"];
    for (script, keys, args) in [
        (&scripts::FAIR_ACQUIRE, &fair_keys[..], &fair_args[..]),
        (&scripts::JOB_START, &job_keys[..], &job_args[..]),
        (&scripts::ELECT, &elect_keys[..], &elect_args[..]),
    ] {
        let first = eval(&s, script, keys, args);
        // The first grant's PX has run down to 50 ms when the retry comes.
        s.command(&["PEXPIRE", keys[0], "50"]).unwrap();
        let retried = eval(&s, script, keys, args);
        let ints = |reply: &Reply| match reply {
            Reply::Array(items) => items.iter().map(Reply::as_int).collect::<Vec<_>>(),
            other => panic!("{}: {other:?}", script.name()),
        };
        assert_eq!(ints(&first).first(), Some(&Some(1)), "{}: {first:?}", script.name());
        assert_eq!(ints(&first).get(1), ints(&retried).get(1), "{}: another grant on retry", script.name());
        assert!(pttl(keys[0]) > 29_000, "{}: the retried grant kept {} ms", script.name(), pttl(keys[0]));
    }
    assert!(pttl("wlp:{e}:info") > 29_000, "the retried election's record kept its old TTL");
}

/// Issue 19: a fair release grants the lock in its own step only to a live head that asked for grants, for the
/// head's lease, with a token above the counter; it skips heads whose heartbeat expired, only tells a head whose
/// heartbeat vanished or whose counter `INCRBY` would refuse (writing nothing for it), and a place taken over a
/// foreign value under the grants' name is refused before anything is written.
#[test]
fn a_fair_release_grants_only_a_live_head_that_asked() {
    let s = server();
    let keys = |r: &str| -> Vec<String> {
        ["", ":fence", ":queue", ":heartbeats", ":released", ":awaited", ":grants"]
            .iter()
            .map(|suffix| format!("wlp:{{{r}}}{suffix}"))
            .collect()
    };
    fn refs(keys: &[String]) -> Vec<&str> {
        keys.iter().map(String::as_str).collect()
    }
    let wait = |r: &str, token: &str, grant: &str| {
        let k = keys(r);
        eval(&s, &scripts::FAIR_ACQUIRE, &refs(&k), &[token, "30000", "1", "", "3000", "1", "o", "0", grant])
    };
    let release = |r: &str, token: &str| {
        let k = keys(r);
        let k = [&k[0], &k[2], &k[3], &k[4], &k[5], &k[1], &k[6]].map(String::as_str);
        eval(&s, &scripts::FAIR_RELEASE, &k, &[token, "o", "0"]).as_int()
    };
    let get = |key: &str| s.command(&["GET", key]).unwrap().as_text();
    let pttl = |key: &str| s.command(&["PTTL", key]).unwrap().as_int().unwrap_or(-2);

    // A holder, a head whose heartbeat expired, then a live head asking for a 700 ms lease with a token.
    assert!(matches!(wait("a", "holder", "30000 1"), Reply::Array(ref r) if r.first() == Some(&Reply::Int(1))));
    let held_fence = get("wlp:{a}:fence").unwrap().parse::<u64>().unwrap();
    wait("a", "dead", "30000 1");
    wait("a", "live", "700 1");
    s.command(&["ZADD", "wlp:{a}:heartbeats", "1", "dead"]).unwrap();
    assert_eq!(release("a", "holder"), Some(1));
    assert_eq!(get("wlp:{a}").as_deref(), Some("live"), "the live head was not granted");
    assert!((1..=700).contains(&pttl("wlp:{a}")), "granted for {} ms, not the head's lease", pttl("wlp:{a}"));
    assert!(get("wlp:{a}:fence").unwrap().parse::<u64>().unwrap() > held_fence, "no token drawn for the head");
    for set in ["wlp:{a}:queue", "wlp:{a}:heartbeats", "wlp:{a}:grants"] {
        assert!(!exists(&s, set), "{set} kept the granted and the dead head");
    }

    // A head that asked for no grant (a read-write writer's place), and one whose heartbeat vanished: told only.
    wait("b", "holder", "30000 1");
    wait("b", "writer", "");
    assert_eq!(release("b", "holder"), Some(1));
    assert_eq!(get("wlp:{b}"), None, "granted a head that asked only to be told");
    wait("c", "holder", "30000 1");
    wait("c", "vanished", "30000 1");
    s.command(&["DEL", "wlp:{c}:heartbeats"]).unwrap();
    assert_eq!(release("c", "holder"), Some(1));
    assert_eq!(get("wlp:{c}"), None, "granted a head whose heartbeat vanished");

    // A counter INCRBY would refuse: the head is told, the counter and the lock key stay as they were.
    wait("d", "holder", "30000 1");
    wait("d", "head", "30000 1");
    s.command(&["SET", "wlp:{d}:fence", "1e3"]).unwrap();
    assert_eq!(release("d", "holder"), Some(1));
    assert_eq!(get("wlp:{d}"), None);
    assert_eq!(get("wlp:{d}:fence").as_deref(), Some("1e3"));

    // A foreign value under the grants' name: a waiter's place is refused, and nothing is written.
    wait("e", "holder", "30000 1");
    s.command(&["SET", "wlp:{e}:grants", "x"]).unwrap();
    let refused = wait("e", "waiter", "30000 1");
    assert!(refused.is_error() && refused.as_text().unwrap_or_default().contains("WRONGTYPE"), "{refused:?}");
    assert!(!exists(&s, "wlp:{e}:queue") && !exists(&s, "wlp:{e}:heartbeats"), "a place written beside the refusal");
}

/// Review finding 13: a candidacy given back before its election request arrived (the `ELECT` delayed on another
/// connection) is remembered for one lease, and the late `ELECT` elects nobody and writes no record: observers
/// never see a leader that gave its candidacy up. A leader's own resignation still frees the election for the next
/// candidate at once.
#[test]
fn an_election_given_back_before_it_arrived_elects_nobody() {
    let s = server();
    let keys = ["wlp:{e}", "wlp:{e}:fence", "wlp:{e}:awaited", "wlp:{e}:info", "wlp:{e}:leader", "wlp:{e}:given-back"];
    let resign_keys = [keys[0], keys[3], "wlp:{e}:released", keys[2], keys[4], keys[5]];
    let ghost = "0123456789abcdef0123456789abcdef";
    let resigned = eval(&s, &scripts::RESIGN, &resign_keys, &[ghost, "origin", "0", "30000"]);
    assert_eq!(resigned, Reply::Int(0), "the give-back found nothing to resign");
    let late = eval(&s, &scripts::ELECT, &keys, &[ghost, "30000", "", "ghost", "v", "origin", "0"]);
    assert_eq!(late, Reply::Array(vec![Reply::Int(0), Reply::Int(-2)]), "the late election was granted");
    assert!(!exists(&s, keys[0]) && !exists(&s, keys[3]), "the late election left a key or a record");
    let leader = eval(&s, &scripts::LEADER, &[keys[0], keys[3]], &[]);
    assert!(matches!(&leader, Reply::Array(items) if items.is_empty()), "observers see a leader: {leader:?}");
    let remembered = s.command(&["PTTL", keys[5]]).unwrap().as_int().unwrap();
    assert!((1..=30_000).contains(&remembered), "the give-back is remembered for {remembered} ms");

    let real = "fedcba9876543210fedcba9876543210";
    let elected = eval(&s, &scripts::ELECT, &keys, &[real, "30000", "", "real", "v", "origin", "0"]);
    assert!(matches!(&elected, Reply::Array(items) if items.first() == Some(&Reply::Int(1))), "{elected:?}");
    assert_eq!(eval(&s, &scripts::RESIGN, &resign_keys, &[real, "origin", "0", "30000"]), Reply::Int(1));
    let next = "00000000000000000000000000000001";
    let again = eval(&s, &scripts::ELECT, &keys, &[next, "30000", "", "next", "v", "origin", "0"]);
    assert!(matches!(&again, Reply::Array(items) if items.first() == Some(&Reply::Int(1))), "{again:?}");
}
