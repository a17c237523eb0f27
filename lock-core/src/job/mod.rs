//! The run-at-most-once job lock: of the replicas that fire the same scheduled job, one runs it and the others
//! skip it (ShedLock's job, without its traps).
//!
//! - **`at_most_for`** is the lock's TTL: a run whose process dies frees the job after it. Without keep-alive a run
//!   longer than that is *cancelled* when its lock is lost (its future is dropped at its next await point and
//!   [`JobLock::run`] returns [`LockError::Lost`]), rather than left running beside the next run.
//!   [`JobOptions::with_keep_alive`] renews the lock while the job runs (with a maximum hold).
//! - **`at_least_for`** keeps the lock after a short run, so a replica whose timer fires a little late does not run
//!   the same job again. It is measured **on the Redis server's clock from the start of the run**, so the
//!   replicas' clocks never enter (ShedLock measures it on each node's clock).
//! - **The finish is owner-checked** ([`JOB_FINISH`](crate::backend::scripts::JOB_FINISH)): a run that overran never deletes
//!   or prolongs the next run's lock (ShedLock's Redis provider does, by default).
//! - **Per-tick mode** ([`JobLock::run_tick`]): the same scheduled tick (an id the caller derives from the
//!   scheduled fire time, say `unix_secs / period`) never runs twice, whatever the durations.
//! - **The last run** (holder, start and finish on the server clock, outcome) stays readable:
//!   [`JobLock::last_run`].
//! - A dropped `run` future finishes its run in the background, recorded as `cancelled`.
//!
//! The job's lock is a plain lock key (`prefix{job}`, its fencing counter and release channel): a single lock on
//! the same name excludes the job and shares its fencing counter. The record lives in `prefix{job}:info` (no TTL:
//! one small hash per job, like the fencing counter), a tick in `prefix{job}:tick:<tick>` (with a TTL).
//!
//! Under another library's [`KeyLayout`](crate::KeyLayout) a job's lock key is that library's
//! ([`KeyLayout::shedlock`](crate::KeyLayout::shedlock) shares jobs with ShedLock), except under a layout whose
//! releases must tell the other library's waiters (python-redis-lock, Spring in `PUB_SUB` mode, Redisson): a job's
//! finish is its own script, which does not, so [`JobLock::run`] refuses those with
//! [`LockError::InvalidArgument`] before any I/O. A job does not wait, so nothing is lost: share such a name with a
//! [`Lock`] instead, whose release tells them.
//!
//! Over Redlock a start needs a majority, as a lock does, and `at_least_for` is kept by each instance's own clock.
//! A run is one try: replicas that fire at the same instant can split the instances so that none has a majority,
//! and then every replica skips that firing (never two run it). Use a single store (or Cluster, or Sentinel) for a
//! job whose every firing must run.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tracing::Instrument;

use crate::engine::lock::Lock;
use crate::engine::primitive::{announcer, Ask, Grant, Kind, Primitive};
use crate::engine::wait::Attempt;
use crate::error::{LockError, Result};
use crate::lost::LostSignal;
use crate::options::{validate_ttl, LockOptions, RenewPolicy, MAX_TTL};
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::seam::store::{LockStore, ReleaseOutcome};
use crate::seam::transport::{Call, Reply};
use crate::token::FencingToken;
use crate::token::Token;

pub use crate::holder::MAX_HOLDER_LABEL;

/// How a job runs: how long its lock lives, how long it is kept after a short run, renewal, fencing, and the
/// holder label the record shows.
///
/// ```
/// use lock_core::JobOptions;
/// use std::time::Duration;
///
/// // A job fired every 15 minutes that should never run twice in one period.
/// let opts = JobOptions::new(Duration::from_secs(14 * 60)).with_at_least_for(Duration::from_secs(14 * 60));
/// assert!(opts.validate().is_ok());
/// assert!(JobOptions::new(Duration::from_secs(1)).with_at_least_for(Duration::from_secs(2)).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use = "options do nothing until passed to a run"]
pub struct JobOptions {
    at_most_for: Duration,
    at_least_for: Duration,
    keep_alive: Option<RenewPolicy>,
    fencing: bool,
    holder: Option<String>,
    tick_retention: Option<Duration>,
}

impl JobOptions {
    /// Options with the given `at_most_for` (the lock's TTL), no `at_least_for`, no keep-alive, fencing on.
    pub fn new(at_most_for: Duration) -> Self {
        JobOptions {
            at_most_for,
            at_least_for: Duration::ZERO,
            keep_alive: None,
            fencing: true,
            holder: None,
            tick_retention: None,
        }
    }

    /// Keeps the lock until this long after the run started (server clock), even when the run finished earlier.
    /// At most `at_most_for`.
    pub fn with_at_least_for(mut self, at_least_for: Duration) -> Self {
        self.at_least_for = at_least_for;
        self
    }

    /// Renews the lock while the job runs (`at_most_for` becomes the TTL of each renewal; the policy's maximum hold
    /// caps the whole run).
    pub fn with_keep_alive(mut self, policy: RenewPolicy) -> Self {
        self.keep_alive = Some(policy);
        self
    }

    /// Turns fencing tokens on (the default) or off.
    pub fn with_fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Sets the label the job's record shows for this run (default: the host name, if the environment says it,
    /// and the process id). At most [`MAX_HOLDER_LABEL`] bytes.
    pub fn with_holder(mut self, label: impl Into<String>) -> Self {
        self.holder = Some(label.into());
        self
    }

    /// In [`JobLock::run_tick`], how long a tick is remembered (default: the larger of `at_most_for`,
    /// `at_least_for` and one minute). It must outlast the spread of the replicas' fire times for one tick.
    pub fn with_tick_retention(mut self, retention: Duration) -> Self {
        self.tick_retention = Some(retention);
        self
    }

    /// The lock's TTL.
    pub fn at_most_for(&self) -> Duration {
        self.at_most_for
    }

    /// How long after its start a run keeps the lock.
    pub fn at_least_for(&self) -> Duration {
        self.at_least_for
    }

    /// The holder label of this run.
    pub fn holder(&self) -> String {
        self.holder.clone().unwrap_or_else(|| crate::HolderLabel::process().as_str().to_owned())
    }

    fn tick_retention(&self) -> Duration {
        self.tick_retention.unwrap_or_else(|| self.at_most_for.max(self.at_least_for).max(Duration::from_secs(60)))
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an `at_most_for` outside the TTL range, an `at_least_for` longer than
    /// `at_most_for`, an empty or too long holder label or one with control characters, a tick retention shorter than `at_most_for` or longer than
    /// [`MAX_TTL`], or an invalid keep-alive policy.
    pub fn validate(&self) -> Result<()> {
        validate_ttl(self.at_most_for)?;
        if self.at_least_for > self.at_most_for {
            return Err(LockError::invalid("at_least_for must not exceed at_most_for"));
        }
        // The rule of every holder label (see `HolderLabel::new`): it is shown to operators.
        crate::HolderLabel::new(self.holder()).map_err(|_| {
            LockError::invalid(format!(
                "the holder label must be 1 to {MAX_HOLDER_LABEL} bytes without control characters"
            ))
        })?;
        let retention = self.tick_retention();
        if retention < self.at_most_for || retention > MAX_TTL {
            return Err(LockError::invalid("the tick retention must be in [at_most_for, MAX_TTL]"));
        }
        if let Some(policy) = &self.keep_alive {
            policy.validate(self.at_most_for)?;
        }
        Ok(())
    }
}

/// What [`JobLock::run`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobOutcome<T> {
    /// This replica ran the job.
    Ran {
        /// What the job returned.
        value: T,
        /// The run's fencing token (`None` when fencing was off).
        fencing_token: Option<FencingToken>,
        /// How long the run held the lock, by this process's clock.
        held: Duration,
    },
    /// Another run holds the job (or, in tick mode, this tick already ran): this replica did nothing.
    Skipped {
        /// The label of the run that holds the job, when the record names it.
        holder: Option<String>,
        /// How long the job stays locked (or the tick remembered), when the server said.
        locked_for: Option<Duration>,
    },
}

/// What a job's work gets to know about its run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JobContext {
    /// The run's fencing token, to pass to what the job writes (`None` when fencing is off).
    pub fencing_token: Option<FencingToken>,
    /// Turns lost if the run loses its lock (the work is also cancelled then).
    pub lost: LostSignal,
}

/// How a recorded run ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunOutcome {
    /// Still running (or its process died and never finished it; its lock then expired after `at_most_for`).
    Running,
    /// The work returned.
    Finished,
    /// The `run` future was dropped; the run was finished in the background.
    Cancelled,
    /// The run lost its lock while it ran (its work was cancelled).
    Lost,
    /// The work never ran: the start reached the server, but its reply was lost or came after the lock's validity,
    /// or the caller was cancelled before it arrived, and the start was given back. It kept neither `at_least_for`
    /// nor its tick, so the next firing runs.
    GivenBack,
    /// A value this version does not know.
    Other(String),
}

/// The record of a job's last run ([`JobLock::last_run`]), with times on the server's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastRun {
    /// The run's holder label.
    pub holder: String,
    /// When it started.
    pub started: SystemTime,
    /// When it finished, if it did.
    pub finished: Option<SystemTime>,
    /// How it ended.
    pub outcome: RunOutcome,
}

/// How a run ends, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The start is given back before the work began: it keeps neither `at_least_for` nor the tick.
    GivenBack,
    Finished,
    Cancelled,
    Lost,
}

impl Ending {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ending::GivenBack => "given_back",
            Ending::Finished => "finished",
            Ending::Cancelled => "cancelled",
            Ending::Lost => "lost",
        }
    }
}

/// Runs scheduled jobs at most once across replicas ([module docs](crate::job)).
///
/// ```
/// use lock_core::{JobLock, JobOptions, JobOutcome, Lock, MemoryStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let jobs = JobLock::new(Lock::new(MemoryStore::new()));
/// let opts = JobOptions::new(Duration::from_secs(60)).with_at_least_for(Duration::from_secs(30));
/// // Every replica calls this when its timer fires; one runs the job.
/// match jobs.run("nightly-report", &opts, |ctx| async move { ctx.fencing_token.is_some() }).await? {
///     JobOutcome::Ran { value, .. } => assert!(value),
///     JobOutcome::Skipped { holder, .. } => println!("{holder:?} has it"),
///     _ => {}
/// }
/// // A replica firing a moment later skips it: the run keeps the job for at least 30 s.
/// let again = jobs.run("nightly-report", &opts, |_| async {}).await?;
/// assert!(matches!(again, JobOutcome::Skipped { .. }));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct JobLock {
    lock: Lock,
}

impl JobLock {
    /// Jobs on `lock`'s stores, under its key prefix and operation timeout.
    pub fn new(lock: Lock) -> Self {
        JobLock { lock }
    }

    /// The lock underneath.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Runs `work` if no other run holds `job`, else skips it: one try, no waiting.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] before any I/O for an empty name, bad options, or a lock whose
    /// [`KeyLayout`](crate::KeyLayout) must tell another library's waiters of releases (python-redis-lock's, Spring's
    /// in `PUB_SUB` mode, Redisson's: see the [module docs](self)); [`LockError::Lost`] when the
    /// run lost its lock while `work` ran (the work was dropped at its next await point); backend errors of the
    /// start as [`Lock::try_acquire`]'s. A failed finish is logged, not returned (the lock expires at its TTL).
    ///
    /// # Cancel safety
    /// Dropping the future drops the work at its current await point and finishes the run in the background,
    /// recorded as cancelled (the lock is kept until `at_least_for` after the start, or released). A start the
    /// dropped future may have made before its work began is given back: released at once, recorded as
    /// [`RunOutcome::GivenBack`], its tick forgotten.
    pub async fn run<T, F, Fut>(&self, job: &str, options: &JobOptions, work: F) -> Result<JobOutcome<T>>
    where
        F: FnOnce(JobContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let span = tracing::debug_span!("job.run", job, at_most_for = ?options.at_most_for);
        // Boxed: a run's state (the start's fan-out, the work, the finish) is large in debug builds, and callers'
        // futures are often polled whole on small thread stacks (`block_on` on a test thread).
        Box::pin(self.start_and_run(job, None, options, work).instrument(span)).await
    }

    /// Runs `work` for scheduled tick `tick` of `job`, unless that tick already ran (or runs) anywhere, or another
    /// run holds the job. Replicas must agree on the tick id: derive it from the *scheduled* fire time (for
    /// instance `unix_secs / period`), not from when the timer fired. A tick is remembered for the
    /// [tick retention](JobOptions::with_tick_retention); clock skew larger than the distance to a tick boundary
    /// can still make two replicas name different ticks.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    ///
    /// # Cancel safety
    /// As [`run`](Self::run): the tick stays remembered once the work started, and is forgotten when the start is
    /// given back before it.
    pub async fn run_tick<T, F, Fut>(
        &self,
        job: &str,
        tick: u64,
        options: &JobOptions,
        work: F,
    ) -> Result<JobOutcome<T>>
    where
        F: FnOnce(JobContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let span = tracing::debug_span!("job.run_tick", job, tick, at_most_for = ?options.at_most_for);
        Box::pin(self.start_and_run(job, Some(tick), options, work).instrument(span)).await
    }

    async fn start_and_run<T, F, Fut>(
        &self,
        job: &str,
        tick: Option<u64>,
        options: &JobOptions,
        work: F,
    ) -> Result<JobOutcome<T>>
    where
        F: FnOnce(JobContext) -> Fut,
        Fut: Future<Output = T>,
    {
        options.validate()?;
        let keys = self.lock.keys_without_peer_release("a job lock", job)?;
        let retention = crate::seam::scripts::ttl_millis(options.tick_retention());
        let target = Arc::new(JobTarget {
            info: keys.aux(crate::namespace::Aux::Info),
            tick: tick.map(|t| (keys.aux(crate::namespace::Aux::Tick(t)), retention)),
            holder: options.holder(),
            at_least_ms: u64::try_from(options.at_least_for.as_millis()).unwrap_or(u64::MAX),
            // Until the work starts, any end of this run is a give-back of a start that never ran.
            ending: Mutex::new(Ending::GivenBack),
            keys: [keys],
        });
        let mut lock_options =
            LockOptions::new(options.at_most_for).with_wait(Duration::ZERO).with_fencing(options.fencing);
        if let Some(policy) = &options.keep_alive {
            lock_options = lock_options.with_auto_renew(policy.clone());
        }
        // The lock key carries the holder as a lock's does, so an operator's inspection names the run's holder.
        if let Ok(label) = crate::HolderLabel::new(options.holder()) {
            lock_options = lock_options.with_holder_label(label);
        }
        self.lock.check(&lock_options)?;
        let engine: Arc<dyn Primitive> = target.clone();
        let guard = match self.lock.try_take(&engine, &lock_options).await? {
            Attempt::Held { holder_ttl, holder, .. } => {
                tracing::debug!(job, ?holder, "job held elsewhere; skipped");
                return Ok(JobOutcome::Skipped { holder, locked_for: holder_ttl });
            }
            Attempt::Acquired(guard) => guard,
        };
        // From here the work runs: a run dropped now is cancelled, keeping `at_least_for` and the tick.
        target.end_as(Ending::Cancelled);
        let started = Instant::now();
        let lost = guard.lost_signal();
        // A job's token is drawn with the grant (see `Fencing::OnDemand`).
        let fencing_token = guard.drawn_fence();
        let ctx = JobContext { fencing_token, lost: lost.clone() };
        // The work is dropped (by `guard`) before the finish is sent.
        let output = lost.guard(work(ctx)).await;
        target.end_as(if output.is_ok() { Ending::Finished } else { Ending::Lost });
        let held = started.elapsed();
        if let Err(err) = guard.release_reports().await {
            tracing::warn!(job, error = %err.report(), "finishing the job failed; its lock expires at its TTL");
        }
        match output {
            Ok(value) => Ok(JobOutcome::Ran { value, fencing_token, held }),
            Err(reason) => {
                tracing::warn!(job, %reason, "job lost its lock while running; work cancelled");
                Err(LockError::Lost { resource: job.to_owned(), reason })
            }
        }
    }

    /// The record of `job`'s last run, `None` if it never ran. Over Redlock each instance keeps its own record; this
    /// reads every instance that answers and returns the latest start (a start that reached only a minority of
    /// the instances is recorded there as given back).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name; [`LockError::WrongType`] when the record's key holds
    /// something else; the last backend error when no instance answered.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn last_run(&self, job: &str) -> Result<Option<LastRun>> {
        let keys = self.lock.keys_without_peer_release("a job lock", job)?;
        let info = keys.aux(crate::namespace::Aux::Info);
        let (mut latest, mut answered, mut last_error) = (None::<LastRun>, false, None);
        for store in self.lock.stores() {
            let call_keys = [info.as_str()];
            let call = Call::plain("last-run", "HGETALL", &call_keys, &[]);
            match crate::rt::timeout("last-run", self.lock.operation_timeout(), store.call(call)).await {
                Ok(Ok(ran)) => {
                    answered = true;
                    if let Some(record) = parse_record(&ran.reply)? {
                        if latest.as_ref().is_none_or(|l| record.started > l.started) {
                            latest = Some(record);
                        }
                    }
                }
                Ok(Err(err @ LockError::WrongType { .. })) => return Err(err),
                Ok(Err(err)) | Err(err) => last_error = Some(err),
            }
        }
        match (answered, last_error) {
            (false, Some(err)) => Err(err),
            _ => Ok(latest),
        }
    }
}

/// A record as `HGETALL` returns it; `None` for no record.
fn parse_record(reply: &Reply) -> Result<Option<LastRun>> {
    let Reply::Array(items) = reply else {
        return Err(LockError::backend(format!("unexpected reply to HGETALL: {reply:?}")));
    };
    let field = |name: &str| {
        items
            .chunks(2)
            .find(|pair| pair.first().and_then(Reply::as_text) == Some(name))
            .and_then(|pair| pair.get(1).and_then(Reply::as_text).map(str::to_owned))
    };
    let Some(started_ms) = field("started_ms").and_then(|s| s.parse::<u64>().ok()) else { return Ok(None) };
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let outcome = match field("outcome").as_deref() {
        Some("running") | None => RunOutcome::Running,
        Some("finished") => RunOutcome::Finished,
        Some("cancelled") => RunOutcome::Cancelled,
        Some("lost") => RunOutcome::Lost,
        Some("given_back") => RunOutcome::GivenBack,
        Some(other) => RunOutcome::Other(other.to_owned()),
    };
    Ok(Some(LastRun {
        holder: field("holder").unwrap_or_default(),
        started: at(started_ms),
        finished: field("finished_ms").and_then(|s| s.parse::<u64>().ok()).map(at),
        outcome,
    }))
}

/// One run's acquisition: started and finished by the job scripts instead of the mutex's.
#[derive(Debug)]
pub(crate) struct JobTarget {
    keys: [LockKeys; 1],
    /// The key of the job's record (`prefix{job}:info`).
    info: String,
    /// Tick mode: the tick's key and its TTL in ms.
    tick: Option<(String, u64)>,
    /// This run's holder label.
    holder: String,
    /// `at_least_for` in ms.
    at_least_ms: u64,
    /// How the run ends, as its record will say (a run dropped before it set this was cancelled).
    ending: Mutex<Ending>,
}

impl JobTarget {
    /// Sets how the run ends (what its finish records).
    fn end_as(&self, ending: Ending) {
        *self.ending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = ending;
    }
}

impl JobTarget {
    /// [`JOB_START`](crate::backend::scripts::JOB_START).
    async fn acquire_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.keys[0];
        let ttl = crate::seam::scripts::ttl_millis(ask.ttl).to_string();
        let at_least = self.at_least_ms.to_string();
        let tick_ttl = self.tick.as_ref().map(|(_, ttl)| ttl.to_string()).unwrap_or_default();
        let mut call_keys = vec![keys.lock(), keys.fence(), self.info.as_str()];
        call_keys.extend(self.tick.as_ref().map(|(key, _)| key.as_str()));
        let args =
            [ask.token.as_str(), &ttl, ask.fencing_flag(), &self.holder, &at_least, &tick_ttl, keys.fence_idle()];
        let call =
            Call::script("acquire", &crate::seam::scripts::JOB_START, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let unexpected = || LockError::backend(format!("unexpected reply to the job-start script: {:?}", ran.reply));
        let Reply::Array(items) = &ran.reply else { return Err(unexpected()) };
        let int = |i: usize| items.get(i).and_then(Reply::as_int);
        let grant = match int(0) {
            Some(1) => Grant::Acquired { fences: smallvec::smallvec![int(1).and_then(|f| u64::try_from(f).ok())] },
            Some(0) => Grant::Held {
                index: 0,
                ttl: int(1).and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
                holder: items.get(2).and_then(Reply::as_text).map(str::to_owned),
                place: None,
            },
            _ => return Err(unexpected()),
        };
        ask.check_replicas(&ran, &grant)?;
        Ok(grant)
    }

    /// [`JOB_FINISH`](crate::backend::scripts::JOB_FINISH): owner-checked, keeping the lock for `at_least_for`.
    async fn release_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
        let keys = &self.keys[0];
        let ending = *self.ending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (origin, sharded) = announcer(store);
        let mut call_keys = vec![keys.lock(), self.info.as_str(), keys.channel()];
        call_keys.extend(self.tick.as_ref().map(|(key, _)| key.as_str()));
        let args = [token.as_str(), ending.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &crate::seam::scripts::JOB_FINISH, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            // Kept until `at_least_for` has passed: released, as far as this run is concerned.
            Some(2) => Ok(smallvec::smallvec![ReleaseOutcome::Released]),
            Some(code) => Ok(smallvec::smallvec![crate::seam::scripts::parse_release(code)?]),
            None => Err(LockError::backend(format!("unexpected reply to the job-finish script: {:?}", ran.reply))),
        }
    }
}

#[async_trait]
impl Primitive for JobTarget {
    crate::engine::primitive::scripted_calls!(acquire, mutex_extend, release);

    fn kind(&self) -> Kind {
        Kind::Job
    }

    fn resources(&self) -> &[LockKeys] {
        &self.keys
    }
}
