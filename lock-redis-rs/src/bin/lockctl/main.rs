//! `lockctl`: look at and free the locks of a Redis deployment, for the engineer on call.
//!
//! ```text
//! lockctl -u redis://127.0.0.1:6379 list
//! lockctl inspect orders/42 --json
//! lockctl force-release orders/42 --yes
//! lockctl watch orders/42
//! ```
//!
//! Every primitive's holders are shown, without flags: a lock's, a fair lock's, a job's run, an election's leader, a
//! read-write lock's writer and readers, a semaphore's permits with their slots (each kept under the prefix, or the
//! prefix and `rw:` or `sem:`; see [`mod@spaces`]); `force-release` frees any of them. `inspect` also prints a name's
//! record: an election's leader and term, a job's last run (who, when, how it ended). Over a Redlock (`-u` repeated)
//! an instance that cannot be reached is shown with its error, and the others still answer.
//!
//! Exit codes: 0 done (for `inspect`: the lock is held; for `audit`: nothing found); 1 `inspect` found the lock free,
//! `force-release` found nothing to free, or `audit` found something; 2 bad usage; 3 the server could not be reached or refused; 4 `force-release` was not confirmed;
//! 5 `force-release` found another holder than the one shown (or given with `--owner`) and did nothing; 6
//! `force-release` could not free the lock on a quorum of instances (some failed, still hold it, or hold shares
//! taken since they were shown); 7 `audit` found nothing but stopped at its bound before the end of the keyspace.

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

mod audit;
mod shown;
mod spaces;
mod unreachable;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use lock_redis_rs::lock_core::{
    ExpectedHolder, ForcedRelease, Holder, HolderRole, Inspection, Lock, LockError, LockKeys, LockStore, DEFAULT_PREFIX,
};
use lock_redis_rs::redis;
use lock_redis_rs::RedisStore;
use serde_json::{json, Value};

use shown::{shown, url_shown};
use spaces::{kind, Space};

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
    /// Only the read-write locks (`RwLock`) of that name (every primitive is seen without it).
    #[arg(long, global = true)]
    rwlock: bool,
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done (inspect: held; audit: nothing found), 1 inspect: free / force-release: \
nothing to free / audit: findings, 2 bad usage, 3 server unreachable or refused, 4 force-release not confirmed, \
5 force-release: the holder changed, nothing done, 6 force-release: not freed on a quorum of instances, 7 audit: \
nothing found, but the scan stopped at a bound";

/// `force-release` found another holder than the one expected and deleted nothing.
const EXIT_HOLDER_CHANGED: u8 = 5;
/// `force-release` left the lock held (or unknown) on too many instances for it to be free.
const EXIT_PARTIAL: u8 = 6;

#[derive(Subcommand, Debug)]
enum Command {
    /// Every held name under the prefix, of every primitive, found with SCAN (never KEYS) on every instance, with
    /// its type, holder, TTL and fence.
    List {
        /// Stop after this many names (SCAN visits the keyspace in steps; this bounds the work).
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
    },
    /// One name: its type, holders, remaining TTL, fencing counter, whether someone waits.
    Inspect {
        /// The resource name, as the application passes it.
        resource: String,
    },
    /// Delete a name's holders, wake its waiters, keep its fencing counter. Asks first unless --yes, and then
    /// deletes only the holders it showed: one that took the lock, or a share taken, meanwhile is left alone.
    ForceRelease {
        /// The resource name.
        resource: String,
        /// Do not ask for confirmation (needed when stdin is not a terminal). Without --owner it deletes whoever
        /// holds the name.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Delete only the holder with this owner id (as `inspect` shows it); another holder is left alone.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Read-only look at a server shared with other libraries: a name held under two key layouts at once, a key of
    /// another type at a lock key, lock keys without expiry, keys under the prefix that no primitive writes, the
    /// protocol version keys' state and the eviction policy. Walks the keyspace with SCAN … COUNT (never KEYS),
    /// bounded in keys and time. Exit 0: nothing found; 1: findings; 7: nothing found, but the scan stopped at a
    /// bound.
    Audit {
        /// Read at most this many keys per server.
        #[arg(long, default_value_t = 1_000_000)]
        max_keys: usize,
        /// Spend at most this many seconds per server.
        #[arg(long, default_value_t = 30)]
        max_secs: u64,
        /// The COUNT of each SCAN step (keys the server visits per call).
        #[arg(long, default_value_t = 1_000)]
        scan_count: usize,
        /// Another library's raw key prefix to check names against (a Spring registry `reg` is `reg:`); repeat it.
        /// python-redis-lock, pottery, ShedLock's default environment and the plain layout are always checked.
        #[arg(long = "also-prefix")]
        also_prefix: Vec<String>,
    },
    /// Print each change of holders as it happens (release notifications, plus polling).
    Watch {
        /// The resource name.
        resource: String,
        /// Poll at least this often, in milliseconds.
        #[arg(long, default_value_t = 500)]
        interval_ms: u64,
        /// Exit after this many changes (the first state printed counts as one).
        #[arg(long)]
        changes: Option<u64>,
        /// Exit after this many seconds (a bound too far to reach is no bound).
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
        Failure { code, message: shown(&err.report().to_string()) }
    }
}

impl From<redis::RedisError> for Failure {
    fn from(err: redis::RedisError) -> Self {
        Failure { code: 3, message: shown(&format!("redis: {err}")) }
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

/// The servers, connected: one, or the instances of a Redlock, of which those that cannot be reached stand in with
/// their error (see [`mod@unreachable`]) so the others still answer. Fails only when none can be reached.
async fn connect(cli: &Cli) -> Result<Lock, Failure> {
    let bound = Duration::from_millis(cli.timeout_ms);
    let attempts = urls(cli).into_iter().map(|url| async move {
        let connected = match tokio::time::timeout(bound, RedisStore::connect(&url)).await {
            Ok(Ok(store)) => Ok(Arc::new(store) as Arc<dyn LockStore>),
            Ok(Err(err)) => Err(Failure::from(err)),
            Err(_) => Err(Failure { code: 3, message: format!("connecting timed out after {} ms", cli.timeout_ms) }),
        };
        (url, connected)
    });
    let mut stores: Vec<Arc<dyn LockStore>> = Vec::new();
    let mut first_failure = None;
    let mut reached = 0;
    for (url, connected) in futures_util::future::join_all(attempts).await {
        match connected {
            Ok(store) => {
                reached += 1;
                stores.push(store);
            }
            Err(failure) => {
                let why = format!("{}: {}", url_shown(&url), failure.message);
                stores.push(Arc::new(unreachable::Unreachable { why }));
                first_failure = first_failure.or(Some(failure));
            }
        }
    }
    if let (0, Some(failure)) = (reached, first_failure) {
        return Err(failure);
    }
    let lock = if stores.len() == 1 { Lock::from_arc(stores.remove(0)) } else { Lock::redlock(stores).build()? };
    Ok(lock.with_key_prefix(cli.prefix.clone()).with_operation_timeout(bound))
}

/// The spaces a command looks at: every one, or the read-write locks' with `--rwlock`.
fn spaces(cli: &Cli) -> &'static [Space] {
    if cli.rwlock {
        &[Space::Rw]
    } else {
        &Space::ALL
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    if let Command::Audit { max_keys, max_secs, scan_count, also_prefix } = &cli.command {
        let bounds = audit::Bounds {
            max_keys: (*max_keys).max(1),
            max_time: Duration::from_secs(*max_secs),
            count: (*scan_count).clamp(1, 100_000),
            call: Duration::from_millis(cli.timeout_ms),
        };
        return audit_all(&cli, also_prefix, bounds).await;
    }
    let lock = connect(&cli).await?;
    match &cli.command {
        Command::List { limit } => list(&cli, &lock, *limit).await,
        Command::Inspect { resource } => {
            let seen = inspect(&cli, &lock, resource).await?;
            print_inspection(&cli, &seen);
            Ok(if seen.is_held() { 0 } else { 1 })
        }
        Command::ForceRelease { resource, yes, owner } => {
            force_release(&cli, &lock, resource, *yes, owner.as_deref()).await
        }
        Command::Audit { .. } => Ok(0),
        Command::Watch { resource, interval_ms, changes, for_secs } => {
            watch(&cli, &lock, resource, Duration::from_millis((*interval_ms).max(10)), *changes, *for_secs).await
        }
    }
}

/// `audit` on every server: each one's report; the exit code is the worst (3 when one could not be reached).
async fn audit_all(cli: &Cli, also_prefix: &[String], bounds: audit::Bounds) -> Result<u8, Failure> {
    let mut code = 0;
    let mut reports = Vec::new();
    for url in urls(cli) {
        match audit::audit(&url, &cli.prefix, also_prefix, bounds).await {
            Ok(report) => {
                code = code.max(report.code());
                reports.push(report);
            }
            Err(failure) => {
                say!("lockctl: could not audit {}: {}", url_shown(&url), failure.message);
                code = code.max(failure.code);
            }
        }
    }
    // The worst code wins, but findings (1) outrank an incomplete clean scan (7) only by what they say: report 1.
    if reports.iter().any(|r| r.code() == 1) && code == audit::EXIT_INCOMPLETE {
        code = 1;
    }
    if cli.json {
        out!("{}", Value::Array(reports.iter().map(audit::Report::json).collect()));
    } else {
        for report in &reports {
            for line in report.lines() {
                out!("{line}");
            }
        }
    }
    Ok(code)
}

/// What one name looks like in one space.
struct Seen {
    space: Space,
    kind: &'static str,
    inspection: Inspection,
}

impl Seen {
    fn is_held(&self) -> bool {
        self.inspection.is_held()
    }

    /// Every holder shown for it: the lock key's holder on each instance, then the shares.
    fn holders(&self) -> impl Iterator<Item = &Holder> {
        let exclusive = self.inspection.states().filter_map(|state| state.holder.as_ref());
        exclusive.chain(self.inspection.shared())
    }
}

/// A name in every space a command looks at.
struct Named {
    resource: String,
    /// One per space, in [`Space::ALL`]'s order.
    spaces: Vec<Seen>,
}

impl Named {
    fn held(&self) -> impl Iterator<Item = &Seen> {
        self.spaces.iter().filter(|seen| seen.is_held() || seen.holders().next().is_some())
    }

    fn is_held(&self) -> bool {
        self.spaces.iter().any(Seen::is_held)
    }

    /// What is shown first: the first space held by anyone, else the first looked at.
    fn primary(&self) -> Option<&Seen> {
        self.held().next().or(self.spaces.first())
    }
}

/// `resource` in every space of `cli`, each space read with one script per instance.
async fn inspect(cli: &Cli, lock: &Lock, resource: &str) -> Result<Named, Failure> {
    let reads = spaces(cli).iter().map(|&space| async move {
        let seen = space.lock(lock, &cli.prefix).inspect(resource).await?;
        Ok::<_, LockError>(Seen { space, kind: kind(space, &seen), inspection: seen })
    });
    let spaces = futures_util::future::try_join_all(reads).await?;
    Ok(Named { resource: resource.to_owned(), spaces })
}

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

fn holder_json(holder: Option<&Holder>) -> Value {
    match holder {
        Some(h) => json!({
            "owner": h.owner,
            "foreign": h.foreign,
            "label": h.label,
            "ttl_ms": h.ttl.map(millis),
            "role": h.role.as_str(),
            "slots": h.slots,
        }),
        None => Value::Null,
    }
}

fn space_json(seen: &Seen) -> Value {
    let inspection = &seen.inspection;
    let instances: Vec<Value> = inspection
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
            Err(err) => json!({ "error": err.report().to_string() }),
        })
        .collect();
    json!({
        "resource": inspection.resource,
        "type": seen.kind,
        "held": inspection.is_held(),
        "holder": holder_json(inspection.holder()),
        "shared": inspection.shared().iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
        "fence": inspection.fence(),
        "awaited": inspection.awaited(),
        "queued": inspection.queued(),
        "record": record_json(inspection.record()),
        "instances": instances,
    })
}

/// A name as one JSON document: the fields of its first held space (as `inspect` printed before every space was
/// read), `held` over every space, and every held space under `primitives`.
fn named_json(named: &Named) -> Value {
    let mut doc = named.primary().map_or_else(|| json!({ "resource": named.resource }), space_json);
    doc["held"] = json!(named.is_held());
    doc["primitives"] = Value::Array(named.held().map(space_json).collect());
    doc
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
            let who = h.label.as_deref().map_or_else(|| "(no label)".to_owned(), shown);
            let owner = h.owner.as_deref().unwrap_or("-");
            let foreign = if h.foreign { ", written by another client" } else { "" };
            let ttl = h.ttl.map_or_else(
                || "no expiry: a crashed holder blocks this forever".to_owned(),
                |t| format!("{:.3}s left", t.as_secs_f64()),
            );
            let what = match h.role {
                HolderRole::Reader => "read by".to_owned(),
                HolderRole::Permit => {
                    let slots: Vec<String> = h.slots.iter().map(u32::to_string).collect();
                    format!("permit (slots {}) held by", slots.join(","))
                }
                _ => "held by".to_owned(),
            };
            format!("{what} {who} (owner {owner}{foreign}, {ttl})")
        }
    }
}

fn print_inspection(cli: &Cli, named: &Named) {
    if cli.json {
        out!("{}", named_json(named));
        return;
    }
    out!("resource  {}", shown(&named.resource));
    let held: Vec<&Seen> = named.held().collect();
    if held.is_empty() {
        out!("state     free");
    }
    let shown_spaces = if held.is_empty() { named.primary().into_iter().collect() } else { held };
    for seen in shown_spaces {
        print_space(seen);
    }
}

fn print_space(seen: &Seen) {
    let inspection = &seen.inspection;
    out!("type      {}", seen.kind);
    match (inspection.holder(), inspection.shared()) {
        (None, [_, ..]) => {}
        (None, []) if !inspection.is_held() && inspection.states().all(|s| s.holder.is_none()) => {}
        (holder, _) => out!("state     {}", describe_holder(holder)),
    }
    for shared in inspection.shared() {
        out!("shared    {}", describe_holder(Some(shared)));
    }
    out!("fence     {}", inspection.fence().map_or_else(|| "-".to_owned(), |f| f.to_string()));
    let waiting = match (inspection.awaited(), inspection.queued()) {
        (_, q) if q > 0 => format!("{q} queued (fair)"),
        (true, _) => "yes (a try found it held since its last release)".to_owned(),
        (false, _) => "no".to_owned(),
    };
    out!("waiters   {waiting}");
    if !inspection.record().is_empty() {
        let fields: Vec<String> =
            inspection.record().iter().map(|(field, value)| format!("{}={}", shown(field), shown(value))).collect();
        out!("record    {}", fields.join(" "));
    }
    if inspection.instances.len() > 1 {
        for (i, state) in inspection.instances.iter().enumerate() {
            match state {
                Ok(state) => out!("instance {i}  {}", describe_holder(state.holder.as_ref())),
                Err(err) => out!("instance {i}  error: {}", shown(&err.report().to_string())),
            }
        }
    }
}

/// The SCAN pattern matching every holder key under `prefix` (any space): the prefix with glob characters escaped,
/// then `*{*}*`.
fn scan_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 5);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("*{*}*");
    pattern
}

/// The names under the prefix on the instance at `url`, by space, at most `limit`.
async fn scan(cli: &Cli, url: &str, limit: usize) -> Result<BTreeSet<(Space, String)>, Failure> {
    let client = redis::Client::open(url)?;
    let bound = Duration::from_millis(cli.timeout_ms);
    let mut conn = tokio::time::timeout(bound, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| Failure { code: 3, message: "connecting timed out".to_owned() })??;
    let pattern = scan_pattern(&cli.prefix);
    let mut names = BTreeSet::new();
    let mut cursor: u64 = 0;
    loop {
        let mut step = redis::cmd("SCAN");
        step.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1_000);
        let (next, keys): (u64, Vec<String>) = tokio::time::timeout(bound, step.query_async(&mut conn))
            .await
            .map_err(|_| Failure { code: 3, message: "SCAN timed out".to_owned() })??;
        let found = keys.iter().filter_map(|key| Space::name_of(&cli.prefix, key));
        names.extend(found.filter(|(space, _)| spaces(cli).contains(space)));
        cursor = next;
        if cursor == 0 || names.len() >= limit {
            return Ok(names);
        }
    }
}

async fn list(cli: &Cli, lock: &Lock, limit: usize) -> Result<u8, Failure> {
    // The union over every instance: over a Redlock a lock may be held on a quorum that leaves out the first.
    let mut names = BTreeSet::new();
    let mut unreached = Vec::new();
    for url in urls(cli) {
        match scan(cli, &url, limit).await {
            Ok(found) => names.extend(found),
            Err(failure) => unreached.push((url, failure)),
        }
    }
    if names.is_empty() {
        if let Some((_, failure)) = unreached.into_iter().next().filter(|_| urls(cli).len() == 1) {
            return Err(failure);
        }
    } else {
        for (url, failure) in &unreached {
            say!("lockctl: could not list {}: {}", url_shown(url), failure.message);
        }
    }
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for (space, name) in names.iter().take(limit) {
        match space.lock(lock, &cli.prefix).inspect(name).await {
            // A lock that expired between the SCAN and the inspection is not listed.
            Ok(seen) if seen.is_held() || seen.states().any(|state| state.holder.is_some()) => {
                rows.push(Seen { space: *space, kind: kind(*space, &seen), inspection: seen });
            }
            Ok(_) => {}
            // A key of another type under the prefix (written by something else) is reported, and the rest listed.
            Err(err @ LockError::WrongType { .. }) => skipped.push((name.clone(), err)),
            Err(err) => return Err(err.into()),
        }
    }
    for (name, err) in &skipped {
        say!("lockctl: skipped {}: {}", shown(&format!("{name:?}")), shown(&err.report().to_string()));
    }
    if cli.json {
        out!("{}", Value::Array(rows.iter().map(space_json).collect()));
        return Ok(0);
    }
    out!("{:<32} {:<10} {:<28} {:<9} {:>10} {:>18}", "RESOURCE", "TYPE", "HOLDER", "OWNER", "TTL", "FENCE");
    for seen in &rows {
        let inspection = &seen.inspection;
        let holder = inspection.holder().or_else(|| inspection.states().find_map(|s| s.holder.as_ref()));
        let shares = match inspection.shared() {
            [] => None,
            [first, ..] if first.role == HolderRole::Permit => Some(format!("{} permits", inspection.shared().len())),
            many => Some(format!("{} readers", many.len())),
        };
        let holder = holder.or_else(|| inspection.shared().first());
        let label = shares.or_else(|| holder.and_then(|h| h.label.as_deref()).map(shown));
        let owner = holder.and_then(|h| h.owner.as_deref()).unwrap_or("-");
        let ttl = match holder.map(|h| h.ttl) {
            Some(Some(ttl)) => format!("{:.3}s", ttl.as_secs_f64()),
            Some(None) => "no expiry".to_owned(),
            None => "-".to_owned(),
        };
        let fence = inspection.fence().map_or_else(|| "-".to_owned(), |f| f.to_string());
        let label = label.as_deref().unwrap_or("-");
        let resource = shown(&inspection.resource);
        out!("{resource:<32} {:<10} {label:<28} {owner:<9} {ttl:>10} {fence:>18}", seen.kind);
    }
    Ok(0)
}

/// Whom a confirmed prompt expects in one space: exactly the holders it showed there, on every instance (a lock
/// key's holder and every share), or nobody when it showed the space free. A holder taken or a share added since is
/// kept.
fn expected_from(seen: &Seen) -> ExpectedHolder {
    let ids: BTreeSet<String> = seen.holders().filter_map(|holder| holder.owner.clone()).collect();
    if ids.is_empty() {
        ExpectedHolder::Nobody
    } else {
        ExpectedHolder::Owners(ids.into_iter().collect())
    }
}

async fn force_release(cli: &Cli, lock: &Lock, resource: &str, yes: bool, owner: Option<&str>) -> Result<u8, Failure> {
    let named = inspect(cli, lock, resource).await?;
    // The spaces to free: those that showed a holder; with none held, the first (its waiters are told to try).
    let mut targets: Vec<&Seen> = named.held().collect();
    if targets.is_empty() {
        targets.extend(named.spaces.first());
    }
    let mut expected: Vec<ExpectedHolder> = targets
        .iter()
        .map(|_| owner.map_or(ExpectedHolder::Anyone, |id| ExpectedHolder::Owner(id.to_owned())))
        .collect();
    if !yes {
        if !std::io::stdin().is_terminal() {
            say!("lockctl: refusing to force-release {} without --yes (stdin is not a terminal)", shown(resource));
            return Ok(4);
        }
        let shown_holders: Vec<String> = targets
            .iter()
            .flat_map(|seen| seen.holders().map(move |h| format!("  {} {}", seen.kind, describe_holder(Some(h)))))
            .collect();
        if shown_holders.is_empty() {
            prompt!("{} is free. Tell its waiters to try again? [y/N] ", shown(resource));
        } else {
            say!("Force-release {}, whose holders are not told:", shown(resource));
            for line in &shown_holders {
                say!("{line}");
            }
            prompt!("Delete these {} holders (any taken since are kept)? [y/N] ", shown_holders.len());
        }
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).is_err() || !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("lockctl: not confirmed; nothing done");
            return Ok(4);
        }
        if owner.is_none() {
            expected = targets.iter().map(|seen| expected_from(seen)).collect();
        }
    }
    let mut outcomes = Vec::new();
    for (seen, expected) in targets.iter().zip(&expected) {
        let forced = seen.space.lock(lock, &cli.prefix).force_release_expecting(resource, expected).await?;
        outcomes.push((*seen, forced));
    }
    // Done when the name is free on a quorum; with `--owner`, when that holder is gone from a quorum (the others
    // were never asked for).
    let freed = outcomes.iter().all(|(_, forced)| match owner {
        None => forced.is_free(),
        Some(_) => {
            let failed = forced.instances.iter().filter(|outcome| outcome.is_err()).count();
            forced.instances.len() - failed >= forced.quorum
        }
    });
    let released = outcomes.iter().any(|(_, forced)| forced.previous().next().is_some());
    let changed = !released && outcomes.iter().any(|(_, forced)| forced.holder_changed());
    let code = match (freed, released, changed) {
        (true, true, _) => 0,
        (true, false, false) => 1,
        (_, false, true) => EXIT_HOLDER_CHANGED,
        _ => EXIT_PARTIAL,
    };
    if cli.json {
        out!("{}", forced_json(resource, &outcomes, code));
        return Ok(code);
    }
    for (seen, forced) in &outcomes {
        print_forced(resource, seen, forced, code);
    }
    Ok(code)
}

fn print_forced(resource: &str, seen: &Seen, forced: &ForcedRelease, code: u8) {
    let resource = shown(resource);
    for previous in forced.previous() {
        out!("released {resource} ({}), which was {}", seen.kind, describe_holder(Some(previous)));
    }
    for kept in forced.kept() {
        out!("left alone in {resource} ({}): {}, not shown before", seen.kind, describe_holder(Some(kept)));
    }
    if forced.previous().next().is_none() && forced.kept().next().is_none() {
        out!("{resource} was not held; waiters were told to try again");
    }
    if forced.holder_changed() {
        out!(
            "{resource} changed hands: it is {}, not the holder expected; nothing done",
            describe_holder(forced.kept().next())
        );
    } else if !forced.is_free() {
        let free = forced.instances.iter().filter(|o| o.as_ref().is_ok_and(|f| f.is_free())).count();
        out!(
            "{resource} is not free: free on {free} of {} instances, {} needed",
            forced.instances.len(),
            forced.quorum
        );
    }
    if forced.instances.len() > 1 || code == EXIT_PARTIAL {
        for (i, outcome) in forced.instances.iter().enumerate() {
            match outcome {
                Ok(f) if !f.deleted.is_empty() => out!("instance {i}  released {} holders", f.deleted.len()),
                Ok(f) if !f.kept.is_empty() => out!("instance {i}  left alone: {}", describe_holder(f.kept.first())),
                Ok(_) => out!("instance {i}  free"),
                Err(err) => out!("instance {i}  error: {}", shown(&err.report().to_string())),
            }
        }
    }
}

fn forced_json(resource: &str, outcomes: &[(&Seen, ForcedRelease)], code: u8) -> Value {
    let previous: Vec<&Holder> = outcomes.iter().flat_map(|(_, forced)| forced.previous()).collect();
    let kept: Vec<&Holder> = outcomes.iter().flat_map(|(_, forced)| forced.kept()).collect();
    let errors: Vec<String> = outcomes
        .iter()
        .flat_map(|(_, forced)| forced.instances.iter().filter_map(|r| r.as_ref().err()))
        .map(|e| e.report().to_string())
        .collect();
    let primitives: Vec<Value> = outcomes
        .iter()
        .map(|(seen, forced)| {
            let instances: Vec<Value> = forced
                .instances
                .iter()
                .map(|outcome| match outcome {
                    Ok(f) => json!({
                        "outcome": if !f.deleted.is_empty() { "released" } else if f.kept.is_empty() { "free" } else { "kept" },
                        "released": f.deleted.iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
                        "kept": f.kept.iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
                    }),
                    Err(err) => json!({ "outcome": "error", "error": err.report().to_string() }),
                })
                .collect();
            json!({
                "type": seen.kind,
                "released": forced.released(),
                "free": forced.is_free(),
                "quorum": forced.quorum,
                "instances": instances,
            })
        })
        .collect();
    json!({
        "resource": resource,
        "released": code == 0,
        "free": outcomes.iter().all(|(_, forced)| forced.is_free()),
        "holder_changed": code == EXIT_HOLDER_CHANGED,
        "previous": holder_json(previous.first().copied()),
        "released_holders": previous.iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
        "holder": holder_json(kept.first().copied()),
        "kept_holders": kept.iter().map(|h| holder_json(Some(h))).collect::<Vec<_>>(),
        "quorum": outcomes.first().map(|(_, forced)| forced.quorum),
        "instances": outcomes.first().map(|(_, forced)| forced_instances(forced)).unwrap_or_default(),
        "primitives": primitives,
        "errors": errors,
        "exit_code": code,
    })
}

fn forced_instances(forced: &ForcedRelease) -> Value {
    Value::Array(
        forced
            .instances
            .iter()
            .map(|outcome| match outcome {
                Ok(f) if !f.deleted.is_empty() => {
                    json!({ "outcome": "released", "holder": holder_json(f.deleted.first()) })
                }
                Ok(f) if !f.kept.is_empty() => json!({ "outcome": "kept", "holder": holder_json(f.kept.first()) }),
                Ok(_) => json!({ "outcome": "free" }),
                Err(err) => json!({ "outcome": "error", "error": err.report().to_string() }),
            })
            .collect(),
    )
}

/// What `watch` compares to tell a change: per space, whether held, who holds the lock key, the shares' owners,
/// and the fence.
type WatchState = Vec<(bool, Option<String>, BTreeSet<String>, Option<u64>)>;

fn watch_state(named: &Named) -> WatchState {
    named
        .spaces
        .iter()
        .map(|seen| {
            let inspection = &seen.inspection;
            let shares = inspection.shared().iter().filter_map(|h| h.owner.clone()).collect();
            (inspection.is_held(), inspection.holder().and_then(|h| h.owner.clone()), shares, inspection.fence())
        })
        .collect()
}

fn describe_named(named: &Named) -> String {
    let held: Vec<String> = named
        .held()
        .map(|seen| {
            let inspection = &seen.inspection;
            let mut parts: Vec<String> = inspection.holder().map(|h| describe_holder(Some(h))).into_iter().collect();
            parts.extend(inspection.shared().iter().map(|h| describe_holder(Some(h))));
            format!("{}: {}", seen.kind, parts.join("; "))
        })
        .collect();
    if held.is_empty() {
        "free".to_owned()
    } else {
        held.join(" | ")
    }
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
    // A bound past what the clock can count is no bound.
    let until = for_secs.and_then(|s| started.checked_add(Duration::from_secs(s)));
    let channels = spaces(cli)
        .iter()
        .map(|space| Ok(LockKeys::new(&space.prefix(&cli.prefix), resource)?.channel().to_owned()))
        .collect::<Result<Vec<String>, LockError>>()?;
    // Release notifications make a change show at once; polling covers grants (which announce nothing) and a
    // subscription that could not be made.
    let url = urls(cli).into_iter().next().unwrap_or_default();
    let bound = Duration::from_millis(cli.timeout_ms);
    let mut messages = subscribe(&url, &channels, bound).await;
    let mut last: Option<WatchState> = None;
    let mut seen_changes: u64 = 0;
    loop {
        let named = inspect(cli, lock, resource).await?;
        let now = watch_state(&named);
        if last.as_ref() != Some(&now) {
            let at = started.elapsed().as_secs_f64();
            if cli.json {
                let mut line = named_json(&named);
                line["at_s"] = json!(at);
                out!("{line}");
            } else {
                out!("+{at:.3}s {}: {}", shown(resource), describe_named(&named));
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
                messages = subscribe(&url, &channels, bound).await;
            }
        }
    }
}

/// A stream of the messages on `channels`, `None` when the subscription cannot be made within `bound` (the caller
/// polls instead, and tries again later).
async fn subscribe(
    url: &str,
    channels: &[String],
    bound: Duration,
) -> Option<impl futures_util::Stream<Item = redis::Msg> + Unpin> {
    let client = redis::Client::open(url).ok()?;
    let subscribed = async {
        let mut pubsub = client.get_async_pubsub().await.ok()?;
        for channel in channels {
            pubsub.subscribe(channel).await.ok()?;
        }
        Some(pubsub.into_on_message())
    };
    tokio::time::timeout(bound, subscribed).await.ok().flatten()
}
