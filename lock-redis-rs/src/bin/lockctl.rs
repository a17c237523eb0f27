//! `lockctl`: look at and free the locks of a Redis deployment, for the engineer on call.
//!
//! ```text
//! lockctl -u redis://127.0.0.1:6379 list
//! lockctl inspect orders/42 --json
//! lockctl force-release orders/42 --yes
//! lockctl watch orders/42
//! lockctl inspect config --rwlock        # a read-write lock (its keys live under the prefix + "rw:")
//! ```
//!
//! Every primitive's holders are shown: a lock's, a fair lock's, a job's run, an election's leader, a read-write
//! lock's writer and readers, a semaphore's permits with their slots; `force-release` frees any of them. `inspect`
//! also prints a name's record: an election's leader and term, a job's last run (who, when, how it ended).
//!
//! Exit codes: 0 done (for `inspect`: the lock is held); 1 `inspect` found the lock free, or `force-release` found
//! nothing to free; 2 bad usage; 3 the server could not be reached or refused; 4 `force-release` was not confirmed;
//! 5 `force-release` found another holder than the one shown (or given with `--owner`) and did nothing; 6
//! `force-release` could not free the lock on a quorum of instances (some failed, or still hold it).

use std::io::{BufRead, IsTerminal, Write};

/// Writes a line to stdout. A closed pipe (`lockctl list | head`) ends the output, never in a panic as `println!`
/// would.
macro_rules! out {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// A line to stderr (diagnostics, the confirmation's outcome), as [`out!`].
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// The confirmation question, on stderr without a newline.
macro_rules! prompt {
    ($($arg:tt)*) => {{
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, $($arg)*);
        let _ = stderr.flush();
    }};
}
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use lock_redis_rs::lock_core::{
    ExpectedHolder, Forced, ForcedRelease, Holder, HolderRole, Inspection, Lock, LockError, LockKeys, LockStore,
    DEFAULT_PREFIX,
};
use lock_redis_rs::redis;
use lock_redis_rs::RedisStore;
use serde_json::{json, Value};

/// Look at and free the locks of a Redis deployment (locks taken with lock-core and its backends).
#[derive(Parser, Debug)]
#[command(name = "lockctl", version, after_help = EXIT_CODES)]
struct Cli {
    /// Server URL (`redis://`, `rediss://` with the TLS feature). Repeat it for the instances of a Redlock
    /// (read and freed on each; the holder is the one a majority agrees on). Default: $REDIS_URL, else
    /// redis://127.0.0.1:6379.
    #[arg(short = 'u', long = "url", global = true)]
    urls: Vec<String>,
    /// Key prefix the locks were taken with.
    #[arg(long, global = true, default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Print JSON (one document, or one line per change for `watch`) instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Bound on each call to a server, in milliseconds.
    #[arg(long, global = true, default_value_t = 2_000)]
    timeout_ms: u64,
    /// The names are read-write locks' (`RwLock`), whose keys live under the prefix followed by `rw:`.
    #[arg(long, global = true)]
    rwlock: bool,
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done (inspect: held), 1 inspect: free / force-release: nothing to free, \
2 bad usage, 3 server unreachable or refused, 4 force-release not confirmed, 5 force-release: the holder changed, \
nothing done, 6 force-release: not freed on a quorum of instances";

/// `force-release` found another holder than the one expected and deleted nothing.
const EXIT_HOLDER_CHANGED: u8 = 5;
/// `force-release` left the lock held (or unknown) on too many instances for it to be free.
const EXIT_PARTIAL: u8 = 6;

#[derive(Subcommand, Debug)]
enum Command {
    /// Every held lock under the prefix, found with SCAN (never KEYS), with holder, TTL and fence.
    List {
        /// Stop after this many locks (SCAN visits the keyspace in steps; this bounds the work).
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
    },
    /// One lock: holder, remaining TTL, fencing counter, whether someone waits.
    Inspect {
        /// The resource name, as the application passes it.
        resource: String,
    },
    /// Delete a lock, wake its waiters, keep its fencing counter. Asks first unless --yes, and then deletes only
    /// the holder it showed: one that took the lock meanwhile is left alone (exit 5).
    ForceRelease {
        /// The resource name.
        resource: String,
        /// Do not ask for confirmation (needed when stdin is not a terminal). Without --owner it deletes whoever
        /// holds the lock.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Delete only the holder with this owner id (as `inspect` shows it); another holder is left alone.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Print each change of holder as it happens (release notifications, plus polling).
    Watch {
        /// The resource name.
        resource: String,
        /// Poll at least this often, in milliseconds.
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Exit after this many changes (the first state printed counts as one).
        #[arg(long)]
        changes: Option<u64>,
        /// Exit after this many seconds.
        #[arg(long)]
        for_secs: Option<u64>,
    },
}

/// A failure and the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl From<LockError> for Failure {
    fn from(err: LockError) -> Self {
        let code = if matches!(err, LockError::InvalidArgument(_)) { 2 } else { 3 };
        Failure { code, message: err.report().to_string() }
    }
}

impl From<redis::RedisError> for Failure {
    fn from(err: redis::RedisError) -> Self {
        Failure { code: 3, message: format!("redis: {err}") }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            say!("lockctl: cannot start the runtime: {err}");
            return ExitCode::from(3);
        }
    };
    // The binary's root: the only place it blocks, never inside async code.
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            say!("lockctl: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn urls(cli: &Cli) -> Vec<String> {
    if !cli.urls.is_empty() {
        return cli.urls.clone();
    }
    vec![std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())]
}

async fn connect(cli: &Cli) -> Result<Lock, Failure> {
    let mut stores: Vec<std::sync::Arc<dyn LockStore>> = Vec::new();
    for url in urls(cli) {
        let store = tokio::time::timeout(Duration::from_millis(cli.timeout_ms), RedisStore::connect(&url))
            .await
            .map_err(|_| Failure { code: 3, message: format!("connecting timed out after {} ms", cli.timeout_ms) })??;
        stores.push(std::sync::Arc::new(store));
    }
    let lock = if stores.len() == 1 { Lock::from_arc(stores.remove(0)) } else { Lock::redlock(stores).build()? };
    Ok(lock.with_key_prefix(prefix(cli)).with_operation_timeout(Duration::from_millis(cli.timeout_ms)))
}

/// The prefix the names' keys live under: a read-write lock's are under the prefix followed by `rw:`.
fn prefix(cli: &Cli) -> String {
    if cli.rwlock {
        format!("{}rw:", cli.prefix)
    } else {
        cli.prefix.clone()
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let lock = connect(&cli).await?;
    match &cli.command {
        Command::List { limit } => list(&cli, &lock, *limit).await,
        Command::Inspect { resource } => {
            let seen = lock.inspect(resource).await?;
            print_inspection(&cli, &seen);
            Ok(if seen.is_held() { 0 } else { 1 })
        }
        Command::ForceRelease { resource, yes, owner } => {
            force_release(&cli, &lock, resource, *yes, owner.as_deref()).await
        }
        Command::Watch { resource, interval_ms, changes, for_secs } => {
            watch(&cli, &lock, resource, Duration::from_millis((*interval_ms).max(10)), *changes, *for_secs).await
        }
    }
}

fn holder_json(holder: Option<&Holder>) -> Value {
    match holder {
        Some(h) => json!({
            "owner": h.owner,
            "label": h.label,
            "ttl_ms": h.ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            "role": h.role.as_str(),
            "slots": h.slots,
        }),
        None => Value::Null,
    }
}

fn inspection_json(seen: &Inspection) -> Value {
    let instances: Vec<Value> = seen
        .instances
        .iter()
        .map(|state| match state {
            Ok(state) => json!({
                "holder": holder_json(state.holder.as_ref()),
                "shared": state.shared.iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
                "fence": state.fence,
                "awaited": state.awaited,
                "queued": state.queued,
                "record": record_json(&state.record),
            }),
            Err(err) => json!({ "error": err.to_string() }),
        })
        .collect();
    json!({
        "resource": seen.resource,
        "held": seen.is_held(),
        "holder": holder_json(seen.holder()),
        "shared": seen.shared().iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
        "fence": seen.fence(),
        "awaited": seen.awaited(),
        "queued": seen.queued(),
        "record": record_json(seen.record()),
        "instances": instances,
    })
}

/// A name's record (an election's leader, a job's last run) as a JSON object, `null` when it keeps none.
fn record_json(record: &[(String, String)]) -> Value {
    match record {
        [] => Value::Null,
        fields => Value::Object(fields.iter().map(|(field, value)| (field.clone(), json!(value))).collect()),
    }
}

fn describe_holder(holder: Option<&Holder>) -> String {
    match holder {
        None => "free".to_owned(),
        Some(h) => {
            let who = h.label.as_deref().unwrap_or("(no label)");
            let owner = h.owner.as_deref().unwrap_or("foreign value");
            let ttl = h.ttl.map_or_else(|| "no TTL".to_owned(), |t| format!("{:.3}s left", t.as_secs_f64()));
            let what = match h.role {
                HolderRole::Reader => "read by".to_owned(),
                HolderRole::Permit => {
                    let slots: Vec<String> = h.slots.iter().map(u32::to_string).collect();
                    format!("permit (slots {}) held by", slots.join(","))
                }
                _ => "held by".to_owned(),
            };
            format!("{what} {who} (owner {owner}, {ttl})")
        }
    }
}

fn print_inspection(cli: &Cli, seen: &Inspection) {
    if cli.json {
        out!("{}", inspection_json(seen));
        return;
    }
    out!("resource  {}", seen.resource);
    match (seen.holder(), seen.shared()) {
        (None, [_, ..]) => {}
        (holder, _) => out!("state     {}", describe_holder(holder)),
    }
    for shared in seen.shared() {
        out!("shared    {}", describe_holder(Some(shared)));
    }
    out!("fence     {}", seen.fence().map_or_else(|| "-".to_owned(), |f| f.to_string()));
    let waiting = match (seen.awaited(), seen.queued()) {
        (_, q) if q > 0 => format!("{q} queued (fair)"),
        (true, _) => "yes (a try found it held since its last release)".to_owned(),
        (false, _) => "no".to_owned(),
    };
    out!("waiters   {waiting}");
    if !seen.record().is_empty() {
        let fields: Vec<String> = seen.record().iter().map(|(field, value)| format!("{field}={value}")).collect();
        out!("record    {}", fields.join(" "));
    }
    if seen.instances.len() > 1 {
        for (i, state) in seen.instances.iter().enumerate() {
            match state {
                Ok(state) => out!("instance {i}  {}", describe_holder(state.holder.as_ref())),
                Err(err) => out!("instance {i}  error: {err}"),
            }
        }
    }
}

/// The SCAN pattern matching every lock key under `prefix`: the prefix with glob characters escaped, then `{*}`.
fn scan_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 4);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("{*}*");
    pattern
}

/// The name whose holder `key` records: a lock key (a lock's, a fair lock's, a job's, an election's, a read-write
/// lock's writer), a semaphore's permits, a read-write lock's readers; `None` for the other keys of a name.
fn name_of(prefix: &str, key: &str) -> Option<String> {
    [Some(key), key.strip_suffix(":permits"), key.strip_suffix(":readers")]
        .into_iter()
        .flatten()
        .find_map(|candidate| LockKeys::resource_of(prefix, candidate))
}

async fn list(cli: &Cli, lock: &Lock, limit: usize) -> Result<u8, Failure> {
    // Any instance names the keys (on a Redlock each holds the same names); every lock is then inspected on all.
    let url = urls(cli).into_iter().next().unwrap_or_default();
    let client = redis::Client::open(url.as_str())?;
    let mut conn =
        tokio::time::timeout(Duration::from_millis(cli.timeout_ms), client.get_multiplexed_async_connection())
            .await
            .map_err(|_| Failure { code: 3, message: "connecting timed out".to_owned() })??;
    let prefix = prefix(cli);
    let pattern = scan_pattern(&prefix);
    let mut names = std::collections::BTreeSet::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut conn)
            .await?;
        names.extend(keys.iter().filter_map(|key| name_of(&prefix, key)));
        cursor = next;
        if cursor == 0 || names.len() >= limit {
            break;
        }
    }
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for name in names.iter().take(limit) {
        match lock.inspect(name).await {
            // A lock that expired between the SCAN and the inspection is not listed.
            Ok(seen) if seen.is_held() || seen.states().any(|state| state.holder.is_some()) => rows.push(seen),
            Ok(_) => {}
            // A key of another type under the prefix (written by something else) is reported, and the rest listed.
            Err(err @ LockError::WrongType { .. }) => skipped.push((name.clone(), err)),
            Err(err) => return Err(err.into()),
        }
    }
    for (name, err) in &skipped {
        say!("lockctl: skipped {name:?}: {}", err.report());
    }
    if cli.json {
        out!("{}", Value::Array(rows.iter().map(inspection_json).collect()));
        return Ok(0);
    }
    out!("{:<32} {:<28} {:<9} {:>10} {:>18}", "RESOURCE", "HOLDER", "OWNER", "TTL", "FENCE");
    for seen in &rows {
        let holder = seen.holder().or_else(|| seen.states().find_map(|s| s.holder.as_ref()));
        let shares = match seen.shared() {
            [] => None,
            [first, ..] if first.role == HolderRole::Permit => Some(format!("{} permits", seen.shared().len())),
            many => Some(format!("{} readers", many.len())),
        };
        let holder = holder.or_else(|| seen.shared().first());
        let label = shares.as_deref().or_else(|| holder.and_then(|h| h.label.as_deref())).unwrap_or("-");
        let owner = holder.and_then(|h| h.owner.as_deref()).unwrap_or("-");
        let ttl = holder.and_then(|h| h.ttl).map_or_else(|| "-".to_owned(), |t| format!("{:.3}s", t.as_secs_f64()));
        let fence = seen.fence().map_or_else(|| "-".to_owned(), |f| f.to_string());
        out!("{:<32} {:<28} {:<9} {:>10} {:>18}", seen.resource, label, owner, ttl, fence);
    }
    Ok(0)
}

/// Whom a confirmed prompt expects: the holder it showed, "nobody" when it showed the lock free, anyone when what
/// it showed has no owner id to compare (a foreign value, or Redlock instances that disagree; each was listed).
fn expected_from(seen: &Inspection) -> ExpectedHolder {
    match (seen.holder(), seen.shared()) {
        (Some(Holder { owner: Some(owner), .. }), []) | (None, [Holder { owner: Some(owner), .. }]) => {
            ExpectedHolder::Owner(owner.clone())
        }
        (None, []) if seen.states().all(|state| state.holder.is_none()) => ExpectedHolder::Nobody,
        _ => ExpectedHolder::Anyone,
    }
}

async fn force_release(cli: &Cli, lock: &Lock, resource: &str, yes: bool, owner: Option<&str>) -> Result<u8, Failure> {
    let mut expected = match owner {
        Some(owner) => ExpectedHolder::Owner(owner.to_owned()),
        None => ExpectedHolder::Anyone,
    };
    if !yes {
        let seen = lock.inspect(resource).await?;
        if !std::io::stdin().is_terminal() {
            say!("lockctl: refusing to force-release {resource:?} without --yes (stdin is not a terminal)");
            return Ok(4);
        }
        if seen.instances.len() > 1 {
            print_inspection(cli, &seen);
        }
        let shown = match (seen.holder(), seen.shared()) {
            (None, [one]) => describe_holder(Some(one)),
            (None, [_, _, ..]) => format!("{} shared holders", seen.shared().len()),
            (holder, _) => describe_holder(holder),
        };
        prompt!("Force-release {resource:?}, {shown}? Its holders are not told. [y/N] ");
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).is_err() || !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("lockctl: not confirmed; nothing done");
            return Ok(4);
        }
        if owner.is_none() {
            expected = expected_from(&seen);
        }
    }
    let forced = lock.force_release_expecting(resource, &expected).await?;
    let code = if forced.is_free() {
        if forced.released() {
            0
        } else {
            1
        }
    } else if forced.holder_changed() {
        EXIT_HOLDER_CHANGED
    } else {
        EXIT_PARTIAL
    };
    if cli.json {
        out!("{}", forced_json(&forced, code));
        return Ok(code);
    }
    match code {
        0 => {
            for previous in forced.previous() {
                out!("released {resource}, which was {}", describe_holder(Some(previous)));
            }
        }
        1 => out!("{resource} was not held; waiters were told to try again"),
        EXIT_HOLDER_CHANGED => out!(
            "{resource} changed hands: it is {}, not the holder expected; nothing done",
            describe_holder(forced.kept().next())
        ),
        _ => out!(
            "{resource} is not free: freed on {} of {} instances, {} needed",
            forced
                .instances
                .iter()
                .filter(|o| matches!(o, Ok(Forced::Deleted(_) | Forced::DeletedSeveral(_) | Forced::Free)))
                .count(),
            forced.instances.len(),
            forced.quorum
        ),
    }
    if forced.instances.len() > 1 || code == EXIT_PARTIAL {
        for (i, outcome) in forced.instances.iter().enumerate() {
            match outcome {
                Ok(Forced::Deleted(holder)) => out!("instance {i}  released, was {}", describe_holder(Some(holder))),
                Ok(Forced::DeletedSeveral(holders)) => out!("instance {i}  released {} holders", holders.len()),
                Ok(Forced::Kept(holder)) => out!("instance {i}  left alone: {}", describe_holder(Some(holder))),
                Ok(_) => out!("instance {i}  free"),
                Err(err) => out!("instance {i}  error: {}", err.report()),
            }
        }
    }
    Ok(code)
}

fn forced_json(forced: &ForcedRelease, code: u8) -> Value {
    let instances: Vec<Value> = forced
        .instances
        .iter()
        .map(|outcome| match outcome {
            Ok(Forced::Deleted(holder)) => json!({ "outcome": "released", "holder": holder_json(Some(holder)) }),
            Ok(Forced::DeletedSeveral(holders)) => json!({
                "outcome": "released",
                "holders": holders.iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
            }),
            Ok(Forced::Kept(holder)) => json!({ "outcome": "kept", "holder": holder_json(Some(holder)) }),
            Ok(_) => json!({ "outcome": "free" }),
            Err(err) => json!({ "outcome": "error", "error": err.report().to_string() }),
        })
        .collect();
    let errors: Vec<String> =
        forced.instances.iter().filter_map(|r| r.as_ref().err()).map(|e| e.report().to_string()).collect();
    json!({
        "resource": forced.resource,
        "released": forced.released(),
        "free": forced.is_free(),
        "holder_changed": forced.holder_changed(),
        "previous": holder_json(forced.previous().next()),
        "released_holders": forced.previous().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
        "holder": holder_json(forced.kept().next()),
        "quorum": forced.quorum,
        "instances": instances,
        "errors": errors,
        "exit_code": code,
    })
}

async fn watch(
    cli: &Cli,
    lock: &Lock,
    resource: &str,
    interval: Duration,
    changes: Option<u64>,
    for_secs: Option<u64>,
) -> Result<u8, Failure> {
    let started = Instant::now();
    let until = for_secs.map(|s| started + Duration::from_secs(s));
    let keys = LockKeys::new(&prefix(cli), resource)?;
    // Release notifications make a change show at once; polling covers grants (which announce nothing) and a
    // subscription that could not be made.
    let url = urls(cli).into_iter().next().unwrap_or_default();
    let bound = Duration::from_millis(cli.timeout_ms);
    let mut messages = subscribe(&url, keys.channel(), bound).await;
    let mut last: Option<(bool, Option<String>, Option<u64>)> = None;
    let mut seen_changes: u64 = 0;
    loop {
        let seen = lock.inspect(resource).await?;
        let now = (seen.is_held(), seen.holder().and_then(|h| h.owner.clone()), seen.fence());
        if last.as_ref() != Some(&now) {
            let at = started.elapsed().as_secs_f64();
            if cli.json {
                let mut line = inspection_json(&seen);
                line["at_s"] = json!(at);
                out!("{line}");
            } else {
                out!("+{at:.3}s {resource}: {}", describe_holder(seen.holder()));
            }
            let _ = std::io::stdout().flush();
            last = Some(now);
            seen_changes = seen_changes.saturating_add(1);
            if changes.is_some_and(|n| seen_changes >= n) {
                return Ok(0);
            }
        }
        let mut pause = interval;
        if let Some(until) = until {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            pause = pause.min(left);
        }
        match messages.as_mut() {
            Some(stream) => {
                if let Ok(None) = tokio::time::timeout(pause, stream.next()).await {
                    // The subscription's connection ended: poll on the interval until a new one is made (an ended
                    // stream answers at once, and reading it again would spin).
                    messages = None;
                }
            }
            None => {
                tokio::time::sleep(pause).await;
                messages = subscribe(&url, keys.channel(), bound).await;
            }
        }
    }
}

/// A stream of the messages on `channel`, `None` when the subscription cannot be made within `bound` (the caller
/// polls instead, and tries again later).
async fn subscribe(
    url: &str,
    channel: &str,
    bound: Duration,
) -> Option<impl futures_util::Stream<Item = redis::Msg> + Unpin> {
    let client = redis::Client::open(url).ok()?;
    let subscribed = async {
        let mut pubsub = client.get_async_pubsub().await.ok()?;
        pubsub.subscribe(channel).await.ok()?;
        Some(pubsub.into_on_message())
    };
    tokio::time::timeout(bound, subscribed).await.ok().flatten()
}
