//! Runs the wire protocol's test vectors (`wire/vectors/*.json`, see WIRE.md and `wire/README.md`) against any
//! store: each case from an empty database, each step a plain command or one of the engine's scripts, each reply
//! checked by the vector's matcher. The same vectors are run by `wire/check_vectors.py` and by the Python client's
//! tests, so every implementation is held to one set of steps.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Call, Reply};
use lock_core::{LockError, LockStore};
use serde_json::Value;

/// One vector file's outcome: the cases that failed, with why.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Cases run.
    pub cases: usize,
    /// `(file, case id, what went wrong)` for each failed case.
    pub failures: Vec<(String, String, String)>,
}

/// The commands a vector may use (the in-memory store implements these), as the `'static` names a [`Call`] takes.
const COMMANDS: &[&str] = &[
    "SET", "GET", "DEL", "EXISTS", "TYPE", "PTTL", "PEXPIRE", "INCRBY", "HSET", "HGET", "HMGET", "HGETALL", "HDEL",
    "HLEN", "HEXISTS", "HINCRBY", "ZADD", "ZSCORE", "ZRANGE", "ZCARD", "ZRANK", "ZREM", "RPUSH", "LPUSH", "LRANGE",
    "LLEN", "TIME",
];

/// Runs every `*.json` vector file in `dir` but `names.json` against `store`, which `flush` empties (a `FLUSHALL`
/// on a server of its own). Returns every failure; the caller asserts there are none.
///
/// # Panics
/// When `dir` cannot be read or a file is not a vector file (the vectors are part of the repository).
pub async fn run_dir(dir: &Path, store: Arc<dyn LockStore>) -> Outcome {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter(|path| path.file_name().is_some_and(|name| name != "names.json"))
        .collect();
    files.sort();
    let mut outcome = Outcome::default();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for case in file["cases"].as_array().unwrap_or_else(|| panic!("{name}: no cases")) {
            outcome.cases += 1;
            let id = case["id"].as_str().unwrap_or("?").to_owned();
            if let Err(why) = run_case(store.as_ref(), case).await {
                outcome.failures.push((name.clone(), id, why));
            }
        }
    }
    outcome
}

async fn run_case(store: &dyn LockStore, case: &Value) -> Result<(), String> {
    call(store, "FLUSHALL", &[]).await.map_err(|e| format!("FLUSHALL: {e}"))?;
    let mut captured: HashMap<String, Value> = HashMap::new();
    for (n, step) in case["steps"].as_array().ok_or("no steps")?.iter().enumerate() {
        if let Some(ms) = step.get("sleep_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            continue;
        }
        let before = server_time_us(store).await?;
        let reply = if let Some(name) = step.get("script").and_then(Value::as_str) {
            let script = lock_core::backend::scripts::ALL
                .iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| format!("step {n}: no script {name}"))?;
            let keys = strings(&step["keys"]);
            let argv = strings(&step["argv"]);
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            store.call(Call::script("vector", script, &keys, &argv)).await.map(|ran| ran.reply)
        } else {
            let command = strings(&step["command"]);
            let (name, rest) = command.split_first().ok_or_else(|| format!("step {n}: empty command"))?;
            let upper = name.to_ascii_uppercase();
            let name = COMMANDS.iter().find(|c| **c == upper).ok_or_else(|| format!("step {n}: command {upper}"))?;
            let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
            call(store, name, &rest).await
        };
        let after = server_time_us(store).await?;
        let expected = &step["reply"];
        let context = Context { before, after };
        let ok = match &reply {
            Ok(reply) => matches(expected, reply, &mut captured, context),
            Err(err) => error_matches(expected, err),
        };
        if !ok {
            return Err(format!("step {n} {}: expected {expected}, got {reply:?}", step_label(step)));
        }
    }
    Ok(())
}

fn step_label(step: &Value) -> String {
    step.get("script").map_or_else(|| step["command"].to_string(), |s| format!("script {s}"))
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect()).unwrap_or_default()
}

/// A plain command: the first argument routed as its key (every command a vector uses but `TIME` has one first).
async fn call(store: &dyn LockStore, name: &'static str, args: &[&str]) -> lock_core::Result<Reply> {
    let (keys, rest) = match args.split_first() {
        Some((key, rest)) => (vec![*key], rest),
        None => (vec![], args),
    };
    store.call(Call::plain("vector", name, &keys, rest)).await.map(|ran| ran.reply)
}

async fn server_time_us(store: &dyn LockStore) -> Result<u64, String> {
    let reply = call(store, "TIME", &[]).await.map_err(|e| format!("TIME: {e}"))?;
    let Reply::Array(parts) = reply else { return Err(format!("TIME answered {reply:?}")) };
    let number = |i: usize| parts.get(i).and_then(text).and_then(|t| t.parse::<u64>().ok());
    match (number(0), number(1)) {
        (Some(s), Some(us)) => Ok(s.saturating_mul(1_000_000).saturating_add(us)),
        _ => Err(format!("TIME answered {parts:?}")),
    }
}

fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Reply::Status(s) => Some(s.clone()),
        _ => None,
    }
}

#[derive(Clone, Copy)]
struct Context {
    before: u64,
    after: u64,
}

fn as_int(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Int(n) => Some(*n),
        _ => None,
    }
}

/// A captured reply, as JSON, for `eq` and `gt`.
fn to_json(reply: &Reply) -> Value {
    match reply {
        Reply::Nil => Value::Null,
        Reply::Int(n) => Value::from(*n),
        Reply::Bulk(_) | Reply::Status(_) => Value::from(text(reply).unwrap_or_default()),
        Reply::Array(items) => Value::from(items.iter().map(to_json).collect::<Vec<_>>()),
        other => Value::from(format!("{other:?}")),
    }
}

fn matches(expected: &Value, reply: &Reply, captured: &mut HashMap<String, Value>, at: Context) -> bool {
    if let Value::Object(matcher) = expected {
        if let Some(range) = matcher.get("between").and_then(Value::as_array) {
            let (lo, hi) = (range.first().and_then(Value::as_i64), range.get(1).and_then(Value::as_i64));
            return matches!((as_int(reply), lo, hi), (Some(n), Some(lo), Some(hi)) if lo <= n && n <= hi);
        }
        if matcher.contains_key("between_server_time_us") {
            return as_int(reply).and_then(|n| u64::try_from(n).ok()).is_some_and(|n| at.before <= n && n <= at.after);
        }
        if let Some(name) = matcher.get("capture").and_then(Value::as_str) {
            captured.insert(name.to_owned(), to_json(reply));
            return true;
        }
        if let Some(name) = matcher.get("gt").and_then(Value::as_str) {
            let earlier = captured.get(name).and_then(Value::as_i64);
            return matches!((as_int(reply), earlier), (Some(n), Some(e)) if n > e);
        }
        if let Some(name) = matcher.get("eq").and_then(Value::as_str) {
            return captured.get(name).is_some_and(|v| *v == to_json(reply));
        }
        if matcher.contains_key("any") {
            return true;
        }
        if let Some(items) = matcher.get("unordered").and_then(Value::as_array) {
            let Reply::Array(got) = reply else { return false };
            let mut left: Vec<&Reply> = got.iter().collect();
            for item in items {
                let Some(i) = left.iter().position(|r| matches(item, r, captured, at)) else { return false };
                left.swap_remove(i);
            }
            return left.is_empty();
        }
        // An error matcher met a reply.
        return false;
    }
    match (expected, reply) {
        (Value::Null, Reply::Nil) => true,
        (Value::Null, Reply::Array(items)) => items.is_empty(),
        (Value::Number(n), Reply::Int(i)) => n.as_i64() == Some(*i),
        (Value::String(s), Reply::Bulk(_) | Reply::Status(_)) => text(reply).as_deref() == Some(s.as_str()),
        (Value::Array(items), Reply::Array(got)) => {
            items.len() == got.len() && items.iter().zip(got).all(|(e, r)| matches(e, r, captured, at))
        }
        _ => false,
    }
}

/// Whether an error reply is what `expected` (`{"error_prefix": …}`) names, as the store types it: `WRONGTYPE` is
/// [`LockError::WrongType`], `NOPERM` [`LockError::Auth`], and `ERR` (a script's or the server's plain error, whose
/// code clients strip from the message) a [`LockError::Backend`].
fn error_matches(expected: &Value, err: &LockError) -> bool {
    match expected.get("error_prefix").and_then(Value::as_str) {
        Some("WRONGTYPE") => matches!(err, LockError::WrongType { .. }),
        Some("NOPERM") => matches!(err, LockError::Auth { .. }),
        Some("ERR") => matches!(err, LockError::Backend { .. }),
        _ => false,
    }
}
