//! The multi-holder primitives — a semaphore, a read-write lock and an election — as one model: a server keeps one
//! entry per holder, each with **its own expiry** on the server's clock, and grants by the primitive's rule.
//!
//! A client sends an acquire, which the server applies (or which is lost before it applied), and whose reply may
//! be lost after it applied; a client whose reply was lost retries **with the same token**, and the server answers
//! a token it already holds an entry for with that entry's grant, its expiry armed again from now (what the
//! semaphore's, the read-write lock's and the election's scripts do). A
//! holder renews its own entry (validity then counts from the renewal's start), releases it, or crashes and never
//! comes back. Validity is lock-core's [`valid_until`](lock_core::lease::valid_until) of the request's start; a
//! grant's fence is the acquire script's [`next_fence`].
//!
//! Properties (each `always` unless said):
//! - `within the limit`: at most the semaphore's limit of permits, one writer and no reader beside it, one leader,
//!   are believed held at once;
//! - `one grant per token`: a token never holds two entries (a retried acquire gets the same grant);
//! - `a dead holder costs one TTL`: a crashed holder's entry is gone from the server one TTL after its last renewal,
//!   whoever else renews;
//! - `fences increase`: each exclusive grant's fence (a leader's term, a writer's fence) is above every earlier
//!   one's, in the order the holders learnt of them;
//! - `all slots taken` (sometimes): the limit is reached, so the model is not vacuous;
//! - `observers see terms increase` (election, with observer reads): an observer never names a leader of a term
//!   below one it already named. Its reads are answered by the server at once but their replies may arrive in any
//!   order (a reply delayed past the next read's: what a read served by a lagging replica after a failover, or by
//!   another connection, gives); the observer drops a reply whose term is below the last it named, as
//!   [`Election::observe`](lock_core::election::Election::observe) does.

use stateright::{Model, Property};

use crate::{next_fence, Clock};

/// Which primitive the server's rule is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A semaphore of 2 permits, 3 clients.
    Semaphore,
    /// A read-write lock: client 0 writes, clients 1 and 2 read.
    RwLock,
    /// An election: 3 candidates, at most one leader, its term the fence.
    Election,
}

/// Permits of the semaphore.
pub const LIMIT: usize = 2;
const CLIENTS: usize = 3;

/// What the model checks, and which bugs it re-introduces.
#[derive(Clone, Copy, Debug)]
pub struct HoldersConfig {
    /// The primitive.
    pub kind: Kind,
    /// The TTL, in ticks.
    pub ttl_ticks: u8,
    /// The last tick.
    pub max_t: u8,
    /// Acquire attempts per client.
    pub tries: u8,
    /// Lost requests or replies in all.
    pub faults: u8,
    /// Crashed holders in all.
    pub crashes: u8,
    /// Bug: one expiry for the whole structure, pushed out by every holder's renewal (so a dead holder's entry
    /// lives as long as anyone renews).
    pub shared_expiry: bool,
    /// Bug: a retried acquire adds a second entry instead of returning the token's grant.
    pub fresh_grant_on_retry: bool,
    /// Bug: a retried acquire returns the token's grant but leaves its entry's expiry where the first try set it
    /// (the client counts the retry's validity from the retry's start).
    pub retry_keeps_expiry: bool,
    /// Bug: validity counted from when the reply arrived.
    pub validity_from_reply: bool,
    /// Reads of the leader by one observer (an election's [`observe`](lock_core::election::Election::observe)).
    pub observer_reads: u8,
    /// Bug: the observer names whatever a reply says, even a term below the last it named.
    pub observer_takes_stale: bool,
}

impl HoldersConfig {
    /// The engine as it is, for `kind`: TTL 2 ticks, 4 ticks, 1 try each, one lost request or reply, one crash.
    pub fn new(kind: Kind) -> Self {
        HoldersConfig {
            kind,
            ttl_ticks: 2,
            max_t: 4,
            tries: 1,
            faults: 1,
            crashes: 1,
            shared_expiry: false,
            fresh_grant_on_retry: false,
            retry_keeps_expiry: false,
            validity_from_reply: false,
            observer_reads: 0,
            observer_takes_stale: false,
        }
    }
}

/// The model: [`HoldersConfig`] plus the instant the ticks count from.
#[derive(Clone, Debug)]
pub struct HoldersModel {
    /// What is checked.
    pub config: HoldersConfig,
    clock: Clock,
}

impl HoldersModel {
    /// The model of `config`.
    pub fn new(config: HoldersConfig) -> Self {
        HoldersModel { config, clock: Clock::new() }
    }

    fn writes(&self, c: usize) -> bool {
        self.config.kind != Kind::RwLock || c == 0
    }

    /// Whether client `c` holds alone when it holds: a leader, a writer (a permit shares with others).
    fn exclusive(&self, c: usize) -> bool {
        match self.config.kind {
            Kind::Semaphore => false,
            Kind::Election => true,
            Kind::RwLock => c == 0,
        }
    }
}

/// A holder's entry on the server.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Entry {
    /// Its token: the client and its attempt.
    pub token: (u8, u8),
    /// Its expiry, in ticks of the server's clock.
    pub expires: u8,
    /// The fence (term) it was granted with.
    pub fence: u64,
}

/// A client's phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Phase {
    /// Not holding.
    Idle,
    /// The request left at `started`.
    Sent {
        /// The tick it started.
        started: u8,
    },
    /// The server answered; the reply is on its way.
    Replied {
        /// The tick the request started.
        started: u8,
        /// The fence granted, `None` when refused.
        grant: Option<u64>,
    },
    /// The reply was lost after the server applied the request: the client retries with the same token.
    Unsure,
    /// Holding, trusted until `valid_ms`.
    Holding {
        /// The fence.
        fence: u64,
        /// The end of validity, in ms since tick 0.
        valid_ms: u64,
    },
    /// Crashed at tick `at`, never to act again.
    Crashed {
        /// The tick of its last renewal or grant.
        last: u8,
    },
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// Real time, in ticks (the server's clock).
    pub t: u8,
    /// The holders' entries.
    pub entries: Vec<Entry>,
    /// The fencing counter (an election's term).
    pub counter: u64,
    /// The clients' phases.
    pub clients: [Phase; CLIENTS],
    /// Each client's attempts so far.
    pub tries: [u8; CLIENTS],
    /// Lost requests and replies so far.
    pub faults: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// The highest fence an exclusive holder (a leader, a writer) was granted.
    pub last_exclusive: Option<u64>,
    /// An exclusive holder's fence was not above an earlier one's.
    pub fence_regressed: bool,
    /// The observer's reads so far.
    pub reads: u8,
    /// Replies to the observer's reads on their way: the leader's term each saw (`None`: no leader), sorted.
    pub replies: Vec<Option<u64>>,
    /// The last term the observer named.
    pub observed: Option<u64>,
    /// The observer named a term below one it had named.
    pub observed_regressed: bool,
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// Real time advances one tick.
    Tick,
    /// The client sends an acquire (or, unsure of its last one, resends it with the same token).
    Send(u8),
    /// The server applies it.
    Apply(u8),
    /// The request is lost before it applied.
    LoseRequest(u8),
    /// The server applies it and the reply is lost.
    LoseReply(u8),
    /// The reply arrives; the client decides.
    Decide(u8),
    /// The holder renews its entry.
    Renew(u8),
    /// The holder releases its entry.
    Release(u8),
    /// The holder crashes.
    Crash(u8),
    /// The observer reads the leader: the server answers at once, the reply is on its way.
    Read,
    /// A reply to one of the observer's reads arrives (any of those on their way).
    Observe(Option<u64>),
}

impl State {
    fn live(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(move |e| self.t < e.expires)
    }

    fn believes(&self, phase: &Phase) -> bool {
        let now_ms = u64::from(self.t) * 100;
        matches!(phase, Phase::Holding { valid_ms, .. } if now_ms < *valid_ms)
    }
}

fn index(c: u8) -> usize {
    usize::from(c)
}

impl HoldersModel {
    /// The acquire script: the token's own entry if it has one, else a grant by the primitive's rule.
    fn apply(&self, s: &mut State, c: u8) -> Option<u64> {
        let token = (c, s.tries.get(index(c)).copied().unwrap_or(0));
        s.entries.retain(|e| s.t < e.expires);
        if !self.config.fresh_grant_on_retry {
            let expires = s.t.saturating_add(self.config.ttl_ticks);
            if let Some(entry) = s.entries.iter_mut().find(|e| e.token == token) {
                // The retry's validity counts from its own start: its entry's expiry is armed again from now.
                if !self.config.retry_keeps_expiry {
                    entry.expires = expires;
                }
                return Some(entry.fence);
            }
        }
        let live = s.entries.len();
        let writer_live = s.entries.iter().any(|e| self.writes(index(e.token.0)));
        let free = match self.config.kind {
            Kind::Semaphore => live < LIMIT,
            Kind::Election => live == 0,
            Kind::RwLock if self.writes(index(c)) => live == 0,
            Kind::RwLock => !writer_live,
        };
        if !free {
            return None;
        }
        let fence = next_fence(s.counter, Some((u64::from(s.t) + 10) * 100_000));
        s.counter = fence;
        let expires = s.t.saturating_add(self.config.ttl_ticks);
        s.entries.push(Entry { token, expires, fence });
        if self.config.shared_expiry {
            for e in &mut s.entries {
                e.expires = expires;
            }
        }
        Some(fence)
    }
}

impl Model for HoldersModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            t: 0,
            entries: Vec::new(),
            counter: 0,
            clients: [Phase::Idle, Phase::Idle, Phase::Idle],
            tries: [0; CLIENTS],
            faults: 0,
            crashes: 0,
            last_exclusive: None,
            fence_regressed: false,
            reads: 0,
            replies: Vec::new(),
            observed: None,
            observed_regressed: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.t < self.config.max_t {
            actions.push(Action::Tick);
        }
        let faults = state.faults < self.config.faults;
        if state.reads < self.config.observer_reads {
            actions.push(Action::Read);
        }
        let mut replies = state.replies.clone();
        replies.dedup();
        actions.extend(replies.into_iter().map(Action::Observe));
        for (c, phase) in (0u8..).zip(&state.clients) {
            let tries = state.tries.get(index(c)).copied().unwrap_or(0);
            match phase {
                Phase::Idle if tries < self.config.tries => actions.push(Action::Send(c)),
                Phase::Unsure => actions.push(Action::Send(c)),
                Phase::Sent { .. } => {
                    actions.push(Action::Apply(c));
                    if faults {
                        actions.extend([Action::LoseRequest(c), Action::LoseReply(c)]);
                    }
                }
                Phase::Replied { .. } => actions.push(Action::Decide(c)),
                Phase::Holding { .. } => {
                    actions.extend([Action::Renew(c), Action::Release(c)]);
                    if state.crashes < self.config.crashes {
                        actions.push(Action::Crash(c));
                    }
                }
                Phase::Idle | Phase::Crashed { .. } => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let t = last.t;
        match action {
            Action::Tick => s.t += 1,
            Action::Send(c) => {
                // A resend keeps the token; a new attempt draws the next one.
                if *last.clients.get(index(c))? == Phase::Idle {
                    *s.tries.get_mut(index(c))? += 1;
                }
                *s.clients.get_mut(index(c))? = Phase::Sent { started: t };
            }
            Action::Apply(c) | Action::LoseReply(c) => {
                let Phase::Sent { started } = *last.clients.get(index(c))? else { return None };
                let grant = self.apply(&mut s, c);
                let next = if matches!(action, Action::Apply(_)) {
                    Phase::Replied { started, grant }
                } else {
                    s.faults += 1;
                    Phase::Unsure
                };
                *s.clients.get_mut(index(c))? = next;
            }
            Action::LoseRequest(c) => {
                s.faults += 1;
                *s.clients.get_mut(index(c))? = Phase::Idle;
            }
            Action::Decide(c) => {
                let Phase::Replied { started, grant } = *last.clients.get(index(c))? else { return None };
                let from = if self.config.validity_from_reply { t } else { started };
                let valid_ms = self.clock.valid_until_ms(self.config.ttl_ticks, from);
                let token = (c, s.tries.get(index(c)).copied().unwrap_or(0));
                let next = match grant {
                    Some(fence) if u64::from(t) * 100 < valid_ms => {
                        if self.exclusive(index(c)) {
                            s.fence_regressed |= last.last_exclusive.is_some_and(|before| fence <= before);
                            s.last_exclusive = Some(last.last_exclusive.map_or(fence, |before| before.max(fence)));
                        }
                        Phase::Holding { fence, valid_ms }
                    }
                    Some(_) => {
                        s.entries.retain(|e| e.token != token);
                        Phase::Idle
                    }
                    None => Phase::Idle,
                };
                *s.clients.get_mut(index(c))? = next;
            }
            Action::Renew(c) => {
                let Phase::Holding { fence, .. } = *last.clients.get(index(c))? else { return None };
                let token = (c, s.tries.get(index(c)).copied().unwrap_or(0));
                let expires = t.saturating_add(self.config.ttl_ticks);
                let mine = s.entries.iter().any(|e| e.token == token && t < e.expires);
                let next = if mine {
                    for e in s.entries.iter_mut().filter(|e| self.config.shared_expiry || e.token == token) {
                        e.expires = expires;
                    }
                    Phase::Holding { fence, valid_ms: self.clock.valid_until_ms(self.config.ttl_ticks, t) }
                } else {
                    Phase::Idle
                };
                *s.clients.get_mut(index(c))? = next;
            }
            Action::Release(c) => {
                let token = (c, s.tries.get(index(c)).copied().unwrap_or(0));
                s.entries.retain(|e| e.token != token);
                *s.clients.get_mut(index(c))? = Phase::Idle;
            }
            Action::Read => {
                s.reads += 1;
                let leader = s.live().map(|e| e.fence).max();
                s.replies.push(leader);
                s.replies.sort_unstable();
            }
            Action::Observe(reply) => {
                let i = s.replies.iter().position(|r| *r == reply)?;
                s.replies.remove(i);
                if let Some(term) = reply {
                    let stale = s.observed.is_some_and(|named| term < named);
                    if !stale || self.config.observer_takes_stale {
                        s.observed_regressed |= stale;
                        s.observed = Some(term);
                    }
                }
            }
            Action::Crash(c) => {
                let token = (c, s.tries.get(index(c)).copied().unwrap_or(0));
                let granted = last.entries.iter().find(|e| e.token == token).map(|e| e.expires);
                let last_renewal = granted.map_or(t, |expires| expires.saturating_sub(self.config.ttl_ticks));
                s.crashes += 1;
                *s.clients.get_mut(index(c))? = Phase::Crashed { last: last_renewal };
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("within the limit", |m: &HoldersModel, s: &State| {
                let believers: Vec<usize> =
                    (0..CLIENTS).filter(|c| s.clients.get(*c).is_some_and(|p| s.believes(p))).collect();
                match m.config.kind {
                    Kind::Semaphore => believers.len() <= LIMIT,
                    Kind::Election => believers.len() <= 1,
                    Kind::RwLock => !believers.contains(&0) || believers.len() == 1,
                }
            }),
            Property::always("one grant per token", |_, s: &State| {
                let live: Vec<_> = s.live().map(|e| e.token).collect();
                live.iter().enumerate().all(|(i, a)| !live.iter().skip(i + 1).any(|b| a == b))
            }),
            Property::always("a dead holder costs one TTL", |m: &HoldersModel, s: &State| {
                (0u8..).zip(&s.clients).all(|(c, phase)| match phase {
                    Phase::Crashed { last } => {
                        let deadline = last.saturating_add(m.config.ttl_ticks);
                        s.t < deadline || !s.live().any(|e| e.token.0 == c)
                    }
                    _ => true,
                })
            }),
            Property::always("fences increase", |_, s: &State| !s.fence_regressed),
            Property::always("observers see terms increase", |_, s: &State| !s.observed_regressed),
            Property::sometimes("all slots taken", |m: &HoldersModel, s: &State| match m.config.kind {
                Kind::Semaphore => s.live().count() == LIMIT,
                Kind::RwLock => s.live().count() == 2 && s.live().all(|e| e.token.0 != 0),
                Kind::Election => s.live().count() == 1,
            }),
        ]
    }
}
