//! `lockctl`: look at and free the locks of a Redis deployment, for the engineer on call.
//!
//! ```text
//! lockctl -u redis://127.0.0.1:6379 list
//! lockctl inspect orders/42 --json
//! lockctl force-release orders/42 --yes
//! lockctl watch orders/42
//! ```
//!
//! Exit codes: 0 done (for `inspect`: the lock is held); 1 `inspect` found the lock free, or `force-release` found
//! nothing to free; 2 bad usage; 3 the server could not be reached or refused; 4 `force-release` was not confirmed.

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
use lock_redis_rs::lock_core::{Holder, Inspection, Lock, LockError, LockKeys, LockStore, DEFAULT_PREFIX};
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
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done (inspect: held), 1 inspect: free / force-release: nothing to free, \
2 bad usage, 3 server unreachable or refused, 4 force-release not confirmed";

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
    /// Delete a lock whoever holds it, wake its waiters, keep its fencing counter. Asks first unless --yes.
    ForceRelease {
        /// The resource name.
        resource: String,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
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
        let mut message = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Failure { code, message }
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
    Ok(lock.with_key_prefix(cli.prefix.clone()).with_operation_timeout(Duration::from_millis(cli.timeout_ms)))
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
        Command::ForceRelease { resource, yes } => force_release(&cli, &lock, resource, *yes).await,
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
                "fence": state.fence,
                "awaited": state.awaited,
                "queued": state.queued,
            }),
            Err(err) => json!({ "error": err.to_string() }),
        })
        .collect();
    json!({
        "resource": seen.resource,
        "held": seen.is_held(),
        "holder": holder_json(seen.holder()),
        "fence": seen.fence(),
        "awaited": seen.awaited(),
        "queued": seen.queued(),
        "instances": instances,
    })
}

fn describe_holder(holder: Option<&Holder>) -> String {
    match holder {
        None => "free".to_owned(),
        Some(h) => {
            let who = h.label.as_deref().unwrap_or("(no label)");
            let owner = h.owner.as_deref().unwrap_or("foreign value");
            let ttl = h.ttl.map_or_else(|| "no TTL".to_owned(), |t| format!("{:.3}s left", t.as_secs_f64()));
            format!("held by {who} (owner {owner}, {ttl})")
        }
    }
}

fn print_inspection(cli: &Cli, seen: &Inspection) {
    if cli.json {
        out!("{}", inspection_json(seen));
        return;
    }
    out!("resource  {}", seen.resource);
    out!("state     {}", describe_holder(seen.holder()));
    out!("fence     {}", seen.fence().map_or_else(|| "-".to_owned(), |f| f.to_string()));
    let waiting = match (seen.awaited(), seen.queued()) {
        (_, q) if q > 0 => format!("{q} queued (fair)"),
        (true, _) => "yes (a try found it held since its last release)".to_owned(),
        (false, _) => "no".to_owned(),
    };
    out!("waiters   {waiting}");
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
    pattern.push_str("{*}");
    pattern
}

async fn list(cli: &Cli, lock: &Lock, limit: usize) -> Result<u8, Failure> {
    // Any instance names the keys (on a Redlock each holds the same names); every lock is then inspected on all.
    let url = urls(cli).into_iter().next().unwrap_or_default();
    let client = redis::Client::open(url.as_str())?;
    let mut conn =
        tokio::time::timeout(Duration::from_millis(cli.timeout_ms), client.get_multiplexed_async_connection())
            .await
            .map_err(|_| Failure { code: 3, message: "connecting timed out".to_owned() })??;
    let pattern = scan_pattern(&cli.prefix);
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
        names.extend(keys.iter().filter_map(|key| LockKeys::resource_of(&cli.prefix, key)));
        cursor = next;
        if cursor == 0 || names.len() >= limit {
            break;
        }
    }
    let mut rows = Vec::new();
    for name in names.iter().take(limit) {
        let seen = lock.inspect(name).await?;
        // A lock that expired between the SCAN and the inspection is not listed.
        if seen.states().any(|state| state.holder.is_some()) {
            rows.push(seen);
        }
    }
    if cli.json {
        out!("{}", Value::Array(rows.iter().map(inspection_json).collect()));
        return Ok(0);
    }
    out!("{:<32} {:<28} {:<9} {:>10} {:>18}", "RESOURCE", "HOLDER", "OWNER", "TTL", "FENCE");
    for seen in &rows {
        let holder = seen.holder().or_else(|| seen.states().find_map(|s| s.holder.as_ref()));
        let label = holder.and_then(|h| h.label.as_deref()).unwrap_or("-");
        let owner = holder.and_then(|h| h.owner.as_deref()).unwrap_or("-");
        let ttl = holder.and_then(|h| h.ttl).map_or_else(|| "-".to_owned(), |t| format!("{:.3}s", t.as_secs_f64()));
        let fence = seen.fence().map_or_else(|| "-".to_owned(), |f| f.to_string());
        out!("{:<32} {:<28} {:<9} {:>10} {:>18}", seen.resource, label, owner, ttl, fence);
    }
    Ok(0)
}

async fn force_release(cli: &Cli, lock: &Lock, resource: &str, yes: bool) -> Result<u8, Failure> {
    if !yes {
        let seen = lock.inspect(resource).await?;
        if !std::io::stdin().is_terminal() {
            say!("lockctl: refusing to force-release {resource:?} without --yes (stdin is not a terminal)");
            return Ok(4);
        }
        prompt!("Force-release {resource:?}, {}? Its holder is not told. [y/N] ", describe_holder(seen.holder()));
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).is_err() || !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("lockctl: not confirmed; nothing done");
            return Ok(4);
        }
    }
    let forced = lock.force_release(resource).await?;
    let previous = forced.previous().next();
    if cli.json {
        let failed: Vec<String> =
            forced.instances.iter().filter_map(|r| r.as_ref().err()).map(|e| e.to_string()).collect();
        out!(
            "{}",
            json!({ "resource": resource, "released": forced.released(), "previous": holder_json(previous), "errors": failed })
        );
    } else if forced.released() {
        out!("released {resource}, which was {}", describe_holder(previous));
    } else {
        out!("{resource} was not held; waiters were told to try again");
    }
    Ok(if forced.released() { 0 } else { 1 })
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
    let keys = LockKeys::new(&cli.prefix, resource)?;
    // Release notifications make a change show at once; polling covers grants (which announce nothing) and a
    // subscription that could not be made.
    let url = urls(cli).into_iter().next().unwrap_or_default();
    let mut messages = match redis::Client::open(url.as_str()) {
        Ok(client) => match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(keys.channel()).await {
                Ok(()) => Some(pubsub.into_on_message()),
                Err(_) => None,
            },
            Err(_) => None,
        },
        Err(_) => None,
    };
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
                let _ = tokio::time::timeout(pause, stream.next()).await;
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}
