//! `lockctl audit`: a read-only look at a Redis shared with other libraries, for what breaks locks where two
//! tenants meet.
//!
//! It walks the keyspace with `SCAN … COUNT` (never `KEYS`), bounded by a number of keys and a time, reads the type
//! and expiry of every key that may be a lock key (in pipelines), and reports:
//!
//! - **held-twice**: one name held under this library's layout and under another library's at once (`wlp:{orders}`
//!   and python-redis-lock's `lock:orders`, say): the two services meant one lock and hold two, so both hold;
//! - **wrong-type**: a key of another type at one of this library's lock keys;
//! - **no-expiry**: a lock key without expiry (another library's lock taken without a timeout: a crashed holder
//!   blocks it for ever);
//! - **stray**: a key under the prefix that no primitive of this library writes;
//! - **version**: the prefix's version key missing, of another major version, or holding something that is not a
//!   version; on the default prefix, the old default prefix's version key holding a version (processes of an older
//!   release run beside this one: see the guide, chapter 8);
//! - **eviction**: an eviction policy that may evict held locks before their TTL (`maxmemory-policy` other than
//!   `noeviction`), or keys already evicted.
//!
//! Nothing is written. Exit codes: 0 nothing found over the whole keyspace; 1 findings; 3 a server could not be
//! reached; 7 nothing found, but the scan stopped at its bound before the end of the keyspace.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use lock_redis_rs::lock_core::namespace::{self, NativeKey, Space};
use lock_redis_rs::lock_core::{wire, KeyLayout, LockKeys, DEFAULT_PREFIX, LEGACY_PREFIX};
use lock_redis_rs::redis;
use serde_json::{json, Value};

use crate::shown::{shown, url_shown};
use crate::Failure;

/// The exit code of an audit that found nothing in what it could scan, but did not reach the end of the keyspace.
pub(crate) const EXIT_INCOMPLETE: u8 = 7;

/// How far an audit may go on one server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Keys read at most.
    pub(crate) max_keys: usize,
    /// Time spent at most.
    pub(crate) max_time: Duration,
    /// The `COUNT` of each `SCAN` step.
    pub(crate) count: usize,
    /// The bound on each call.
    pub(crate) call: Duration,
}

/// One thing the audit found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Finding {
    kind: &'static str,
    key: String,
    detail: String,
}

/// What the audit saw on one server.
pub(crate) struct Report {
    url: String,
    scanned: usize,
    complete: bool,
    elapsed: Duration,
    findings: Vec<Finding>,
    version: String,
    legacy: Option<String>,
    policy: Option<String>,
}

/// The other libraries' layouts whose lock key for a name is checked beside ours: each layout's name, and the layout.
fn peer_layouts(raw_prefixes: &[String]) -> Vec<(String, KeyLayout)> {
    let mut layouts = vec![
        ("plain (redis-py, node-redlock, redsync)".to_owned(), KeyLayout::plain()),
        ("python-redis-lock".to_owned(), KeyLayout::python_redis_lock()),
        ("pottery".to_owned(), KeyLayout::pottery()),
        ("shedlock (env default)".to_owned(), KeyLayout::shedlock("default")),
    ];
    layouts.extend(raw_prefixes.iter().map(|p| (format!("prefix {p:?}"), KeyLayout::prefixed(p.clone()))));
    layouts
}

/// The keys that may be another library's lock keys, by what they look like: `(layout, name)`.
fn peer_lock_key(key: &str) -> Option<(&'static str, &str)> {
    if let Some(name) = key.strip_prefix("lock:") {
        return Some(("python-redis-lock", name));
    }
    if let Some(name) = key.strip_prefix("redlock:") {
        return Some(("pottery", name));
    }
    let rest = key.strip_prefix("job-lock:")?;
    rest.split_once(':').map(|(_, name)| ("shedlock", name))
}

/// Audits the server at `url` under `prefix`.
pub(crate) async fn audit(url: &str, prefix: &str, raw_prefixes: &[String], bounds: Bounds) -> Result<Report, Failure> {
    let started = Instant::now();
    let client = redis::Client::open(url)?;
    let mut conn = tokio::time::timeout(bounds.call, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| Failure { code: 3, message: "connecting timed out".to_owned() })??;
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    let complete = loop {
        let mut step = redis::cmd("SCAN");
        step.arg(cursor).arg("COUNT").arg(bounds.count);
        let (next, found): (u64, Vec<Vec<u8>>) = tokio::time::timeout(bounds.call, step.query_async(&mut conn))
            .await
            .map_err(|_| Failure { code: 3, message: "SCAN timed out".to_owned() })??;
        // A key that is not UTF-8 is nobody's lock key here (names are UTF-8).
        keys.extend(found.into_iter().filter_map(|k| String::from_utf8(k).ok()));
        cursor = next;
        if cursor == 0 {
            break true;
        }
        if keys.len() >= bounds.max_keys || started.elapsed() >= bounds.max_time {
            break false;
        }
    };
    keys.truncate(bounds.max_keys);
    let present: HashSet<&str> = keys.iter().map(String::as_str).collect();

    // The keys whose type and expiry tell something: ours (lock keys and every key under the prefix), and keys that
    // look like another library's lock key.
    let mut native: BTreeMap<&str, NativeKey> = BTreeMap::new();
    let mut findings = Vec::new();
    let mut typed: Vec<&str> = Vec::new();
    for key in &keys {
        match namespace::decode(prefix, key) {
            Some(decoded) => {
                if matches!(decoded, NativeKey::Resource { part: None, .. }) {
                    typed.push(key);
                }
                native.insert(key, decoded);
            }
            None if key.starts_with(prefix) => findings.push(Finding {
                kind: "stray",
                key: key.clone(),
                detail: "under the prefix, but not a key this library writes".to_owned(),
            }),
            None if peer_lock_key(key).is_some() => typed.push(key),
            None => {}
        }
    }
    let mut types: BTreeMap<&str, (String, i64)> = BTreeMap::new();
    for chunk in typed.chunks(500) {
        if started.elapsed() >= bounds.max_time.saturating_add(bounds.call) {
            break;
        }
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("TYPE").arg(*key).cmd("PTTL").arg(*key);
        }
        let replies: Vec<redis::Value> = tokio::time::timeout(bounds.call, pipe.query_async(&mut conn))
            .await
            .map_err(|_| Failure { code: 3, message: "TYPE/PTTL timed out".to_owned() })??;
        for (key, pair) in chunk.iter().zip(replies.chunks(2)) {
            let kind = match pair.first() {
                Some(redis::Value::SimpleString(t)) => t.clone(),
                Some(redis::Value::BulkString(t)) => String::from_utf8_lossy(t).into_owned(),
                _ => "unknown".to_owned(),
            };
            let pttl = match pair.get(1) {
                Some(redis::Value::Int(ms)) => *ms,
                _ => -2,
            };
            types.insert(key, (kind, pttl));
        }
    }

    for (key, (kind, pttl)) in &types {
        let ours = native.get(key);
        if let Some(NativeKey::Resource { space, .. }) = ours {
            // A semaphore's lock key is a name only; a lock's and a read-write lock's hold a token.
            if *space != Space::Semaphore && kind != "string" && kind != "none" {
                findings.push(Finding {
                    kind: "wrong-type",
                    key: (*key).to_owned(),
                    detail: format!("a {kind} sits at this library's lock key: it holds the lock for ever"),
                });
            }
        }
        if *pttl == -1 && kind != "none" {
            let whose = match ours {
                Some(_) => "this library's lock key".to_owned(),
                None => peer_lock_key(key).map_or_else(|| "a lock key".to_owned(), |(l, _)| format!("a {l} lock key")),
            };
            findings.push(Finding {
                kind: "no-expiry",
                key: (*key).to_owned(),
                detail: format!("{whose} without expiry: a crashed holder blocks it until it is deleted"),
            });
        }
    }

    // One name held under our layout and under another library's at once.
    let layouts = peer_layouts(raw_prefixes);
    for decoded in native.values() {
        let NativeKey::Resource { space: Space::Lock, resource, part: None } = decoded else { continue };
        for (layout_name, layout) in &layouts {
            let Ok(peer) = LockKeys::for_layout(layout, prefix, resource) else { continue };
            if present.contains(peer.lock()) {
                let ours = LockKeys::new(prefix, resource).map(|k| k.lock().to_owned()).unwrap_or_default();
                findings.push(Finding {
                    kind: "held-twice",
                    key: ours.clone(),
                    detail: format!(
                        "the name {} is held under this library's layout ({}) and under {layout_name} ({}) at once: \
                         two layouts are two locks, so both sides hold; give both sides one layout",
                        shown(&format!("{resource:?}")),
                        shown(&ours),
                        shown(peer.lock())
                    ),
                });
            }
        }
    }

    let version = version_state(&mut conn, prefix, bounds.call, &mut findings).await?;
    let legacy =
        if prefix == DEFAULT_PREFIX { Some(legacy_state(&mut conn, bounds.call, &mut findings).await?) } else { None };
    let policy = eviction(&mut conn, bounds.call, &mut findings).await;
    findings.sort();
    findings.dedup();
    Ok(Report {
        url: url_shown(url),
        scanned: keys.len(),
        complete,
        elapsed: started.elapsed(),
        findings,
        version,
        legacy,
        policy,
    })
}

/// GET of a key, or its type when it is not a string.
async fn read(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    bound: Duration,
) -> Result<Result<Option<Vec<u8>>, String>, Failure> {
    let timed_out = |what: &str| Failure { code: 3, message: format!("{what} timed out") };
    let mut type_of = redis::cmd("TYPE");
    type_of.arg(key);
    let kind: String =
        tokio::time::timeout(bound, type_of.query_async(conn)).await.map_err(|_| timed_out("TYPE"))??;
    match kind.as_str() {
        "none" => Ok(Ok(None)),
        "string" => {
            let mut get = redis::cmd("GET");
            get.arg(key);
            let value = tokio::time::timeout(bound, get.query_async(conn)).await.map_err(|_| timed_out("GET"))??;
            Ok(Ok(value))
        }
        _ => Ok(Err(kind)),
    }
}

async fn version_state(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    bound: Duration,
    findings: &mut Vec<Finding>,
) -> Result<String, Failure> {
    let key = wire::key(prefix);
    let state = match read(conn, &key, bound).await? {
        Ok(None) => "absent (written by the next acquisition)".to_owned(),
        Ok(Some(value)) => match std::str::from_utf8(&value) {
            Ok(found) if wire::compatible(found) => found.to_owned(),
            Ok(found) if wire::is_version(found) => {
                findings.push(Finding {
                    kind: "version",
                    key: key.clone(),
                    detail: format!("protocol version {found}: this release speaks {} and refuses it", wire::VERSION),
                });
                found.to_owned()
            }
            _ => {
                findings.push(Finding {
                    kind: "version",
                    key: key.clone(),
                    detail: format!("a string of {} bytes that is not a version: a key that is not ours", value.len()),
                });
                "foreign".to_owned()
            }
        },
        Err(kind) => {
            findings.push(Finding {
                kind: "version",
                key: key.clone(),
                detail: format!("a {kind} sits at the version key: a key that is not ours"),
            });
            format!("a {kind}")
        }
    };
    Ok(state)
}

async fn legacy_state(
    conn: &mut redis::aio::MultiplexedConnection,
    bound: Duration,
    findings: &mut Vec<Finding>,
) -> Result<String, Failure> {
    let key = wire::key(LEGACY_PREFIX);
    Ok(match read(conn, &key, bound).await? {
        Ok(Some(value)) => match std::str::from_utf8(&value) {
            Ok(found) if wire::is_version(found) => {
                findings.push(Finding {
                    kind: "version",
                    key,
                    detail: format!(
                        "processes of an older release hold their locks under {LEGACY_PREFIX:?} (version {found}): \
                         locks on the default prefix refuse to run beside them until the old prefix is set"
                    ),
                });
                format!("in use ({found})")
            }
            _ => "another library's key (not ours)".to_owned(),
        },
        Ok(None) => "absent".to_owned(),
        Err(kind) => format!("a {kind} (not ours)"),
    })
}

/// The eviction policy, when the ACL lets us read it; a policy that may evict held locks is a finding, and so are
/// keys already evicted.
async fn eviction(
    conn: &mut redis::aio::MultiplexedConnection,
    bound: Duration,
    findings: &mut Vec<Finding>,
) -> Option<String> {
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("maxmemory-policy");
    let asked = config.query_async::<Vec<String>>(conn);
    let policy = tokio::time::timeout(bound, asked).await.ok()?.ok()?.get(1).cloned()?;
    if policy != "noeviction" {
        findings.push(Finding {
            kind: "eviction",
            key: "maxmemory-policy".to_owned(),
            detail: format!(
                "{policy}: under memory pressure the server may delete held lock keys before their TTL{}",
                if policy.starts_with("allkeys") { ", and fencing counters" } else { "" }
            ),
        });
    }
    let mut stats = redis::cmd("INFO");
    stats.arg("stats");
    let info = stats.query_async::<String>(conn);
    if let Ok(Ok(info)) = tokio::time::timeout(bound, info).await {
        let evicted =
            info.lines().find_map(|l| l.strip_prefix("evicted_keys:")).and_then(|n| n.trim().parse::<u64>().ok());
        if let Some(evicted) = evicted.filter(|n| *n > 0) {
            findings.push(Finding {
                kind: "eviction",
                key: "evicted_keys".to_owned(),
                detail: format!("{evicted} keys were evicted since the server started"),
            });
        }
    }
    Some(policy)
}

impl Report {
    /// The exit code: 0 clean and complete, 1 findings, [`EXIT_INCOMPLETE`] clean but incomplete.
    pub(crate) fn code(&self) -> u8 {
        match (self.findings.is_empty(), self.complete) {
            (false, _) => 1,
            (true, true) => 0,
            (true, false) => EXIT_INCOMPLETE,
        }
    }

    pub(crate) fn json(&self) -> Value {
        let findings: Vec<Value> =
            self.findings.iter().map(|f| json!({"kind": f.kind, "key": f.key, "detail": f.detail})).collect();
        json!({
            "server": self.url,
            "scanned_keys": self.scanned,
            "complete": self.complete,
            "elapsed_ms": u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX),
            "version_key": self.version,
            "old_default_prefix": self.legacy,
            "maxmemory_policy": self.policy,
            "findings": findings,
        })
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "server {}: {} keys scanned in {:.2} s{}",
            self.url,
            self.scanned,
            self.elapsed.as_secs_f64(),
            if self.complete { " (the whole keyspace)" } else { " (stopped at a bound: not the whole keyspace)" }
        )];
        lines.push(format!("version key: {}", shown(&self.version)));
        if let Some(legacy) = &self.legacy {
            lines.push(format!("old default prefix {LEGACY_PREFIX:?}: {}", shown(legacy)));
        }
        lines.push(format!(
            "maxmemory-policy: {}",
            self.policy.as_deref().map_or("unknown (not readable)".to_owned(), shown)
        ));
        if self.findings.is_empty() {
            lines.push("nothing found".to_owned());
        }
        let kinds: BTreeSet<&str> = self.findings.iter().map(|f| f.kind).collect();
        for kind in kinds {
            for f in self.findings.iter().filter(|f| f.kind == kind) {
                lines.push(format!("{:<11} {}  {}", f.kind, shown(&f.key), f.detail));
            }
        }
        lines
    }
}
