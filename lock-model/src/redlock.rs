//! A model of Redlock with quorum fencing and write-back, over every interleaving of its actions within small
//! bounds: two clients, three independent instances, quorum two.
//!
//! An acquire fans out one request per instance; each is applied (the acquire script: `SET NX PX` on the
//! instance's clock, and its counter to `max(counter + 1, floor)`), lost before it applied, or applied with its
//! reply lost. The client decides as soon as the outcome is known, as `lock-core`'s engine does: held once a
//! quorum granted, failed once a quorum is impossible; requests still in flight then are orphans that may still
//! reach their instance later. With a quorum it takes `t = max` of the granted counters and writes `t` back to the
//! granting instances below it, only where the key still holds its token; it holds only if a quorum holds `t` and
//! its validity (lock-core's [`valid_until`](lock_core::lease::valid_until) of the request's start) has not run
//! out. A failed attempt releases on every instance. The floor is the client's wall clock at the attempt's start
//! (one client's clock may lag, [`RedlockConfig::lagging_clock`]). An instance may restart, with or without
//! persistence.
//!
//! Properties: `one believer` (always), `fences increase` (always: every grant's fence is above every earlier
//! grant's), `no lost update` at the fenced resource (always), `a write lands` and `a quorum needs a write-back`
//! (sometimes: the write-back path is reached, so the model is not vacuous).

use std::time::Duration;

use stateright::{Model, Property, Representative};

use crate::{next_fence, Clock, TICK};

/// Instances.
pub const NODES: usize = 3;
/// The quorum: a majority of [`NODES`].
pub const QUORUM: usize = 2;
/// Clients.
pub const CLIENTS: usize = 2;

/// What the Redlock model checks, and which bugs it re-introduces.
#[derive(Clone, Copy, Debug)]
pub struct RedlockConfig {
    /// The lock's TTL, in ticks.
    pub ttl_ticks: u8,
    /// The last tick.
    pub max_t: u8,
    /// Acquire attempts of each client.
    pub tries: [u8; CLIENTS],
    /// Lost requests and lost replies in all (each bug found so far needs at most one).
    pub faults: u8,
    /// Instance restarts in all.
    pub restarts: u8,
    /// Whether an instance keeps its keys and counter across a restart (`appendfsync always`).
    pub persisted: bool,
    /// Ticks client 1's wall clock (the fencing floor it sends) lags real time.
    pub lagging_clock: u8,
    /// Bug: no write-back; the client uses `t = max` of its quorum's counters as they are.
    pub no_write_back: bool,
}

impl Default for RedlockConfig {
    /// The engine as it is: TTL 2 ticks, 3 ticks, 2 tries of client 0 and 1 of client 1, one lost request or
    /// reply, no restart, clocks in step.
    fn default() -> Self {
        RedlockConfig {
            ttl_ticks: 2,
            max_t: 3,
            tries: [2, 1],
            faults: 1,
            restarts: 0,
            persisted: false,
            lagging_clock: 0,
            no_write_back: false,
        }
    }
}

/// The model: [`RedlockConfig`] plus the instant the ticks count from.
#[derive(Clone, Debug)]
pub struct RedlockModel {
    /// What is checked.
    pub config: RedlockConfig,
    clock: Clock,
}

impl RedlockModel {
    /// The model of `config`.
    pub fn new(config: RedlockConfig) -> Self {
        RedlockModel { config, clock: Clock::new() }
    }

    /// The floor client `c` sends with the `nth` attempt of the run, started at tick `t`: its wall clock in µs
    /// (tick 0 is 1 s). A clock in µs tells attempts apart that a tick does not: `nth` orders the attempts of one
    /// tick as they started, a millisecond apart (well inside the tick). Not a microsecond apart: a counter's
    /// `+ 1` would then meet a later attempt's floor exactly, a coincidence a real clock does not make (between two
    /// attempts it moves by far more than the few grants in between), and the checker's shortest counterexamples
    /// leant on it: replayed on the engine with the write-back taken out, they kept fences increasing.
    fn floor(&self, c: usize, t: u8, nth: u8) -> u64 {
        let lag = if c == 1 { u64::from(self.config.lagging_clock) } else { 0 };
        (u64::from(t) + 10).saturating_sub(lag) * micros(TICK) + u64::from(nth) * 1_000
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// An acquisition's owner token: the client and its attempt.
pub type Token = (u8, u8);

/// One instance.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Node {
    /// The lock key: its token and its expiry, in ticks of real time (the instances' clocks run at real rate).
    pub key: Option<(Token, u8)>,
    /// The fencing counter.
    pub counter: u64,
    /// Restarting: applies nothing until the next tick.
    pub down: bool,
}

impl Node {
    fn holder(&self, t: u8) -> Option<Token> {
        self.key.filter(|(_, expires)| t < *expires).map(|(token, _)| token)
    }
}

/// What one instance answered an attempt.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answer {
    /// In flight.
    Pending,
    /// Granted, with the instance's counter.
    Granted(u64),
    /// Refused, lost, or lost after it applied.
    No,
}

/// A client's phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Phase {
    /// Not holding.
    Idle,
    /// Requests out to every instance since tick `started`.
    Acquiring {
        /// The tick the attempt started.
        started: u8,
        /// The fencing floor the requests carry.
        floor: u64,
        /// Each instance's answer.
        answers: [Answer; NODES],
    },
    /// A quorum granted; writing `t` back to the instances below it.
    WritingBack {
        /// The tick the attempt started.
        started: u8,
        /// The quorum's largest counter.
        t: u64,
        /// Instances known to hold `t`.
        at_t: u8,
        /// Write-backs not yet answered.
        pending: [bool; NODES],
    },
    /// Holding, trusted until `valid_ms`.
    Holding {
        /// The fence.
        fence: u64,
        /// The end of validity, in ms since tick 0.
        valid_ms: u64,
    },
}

/// One client.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// Attempts made (the current attempt's token is `(client, tries)`).
    pub tries: u8,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// Real time, in ticks.
    pub t: u8,
    /// The instances.
    pub nodes: [Node; NODES],
    /// Restarts so far.
    pub restarts: u8,
    /// Lost requests and replies so far.
    pub faults: u8,
    /// Attempts started so far.
    pub sends: u8,
    /// The clients.
    pub clients: [Client; CLIENTS],
    /// Requests a decided attempt left in flight: (token, instance, floor).
    pub orphans: Vec<(Token, u8, u64)>,
    /// The highest fence granted so far.
    pub last_grant: Option<u64>,
    /// A grant's fence was not above an earlier one's.
    pub fence_regressed: bool,
    /// Some quorum needed a write-back.
    pub wrote_back: bool,
}

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// Real time advances one tick (restarting instances come back).
    Tick,
    /// The client starts an attempt: a request to every instance.
    Send(u8),
    /// Instance `n` applies the client's request and the reply arrives.
    Apply(u8, u8),
    /// The request to instance `n` is lost before it applied.
    Drop(u8, u8),
    /// Instance `n` applies the request; the reply is lost.
    ApplyLost(u8, u8),
    /// An orphan request reaches its instance.
    ApplyOrphan(u8),
    /// An orphan request is lost.
    DropOrphan(u8),
    /// The client decides on its answers.
    Decide(u8),
    /// The write-back to instance `n` is applied (where the key still holds the token) or fails.
    WriteBack(u8, u8),
    /// The write-backs are answered: hold, or give back.
    Confirm(u8),
    /// The client releases on every instance.
    Release(u8),
    /// Instance `n` restarts.
    Restart(u8),
}

impl State {
    fn believes(&self, client: &Client) -> bool {
        let now_ms = u64::from(self.t) * millis(TICK);
        matches!(client.phase, Phase::Holding { valid_ms, .. } if now_ms < valid_ms)
    }

    /// `SET NX PX` and the counter on instance `n`, for `token`: the counter when granted.
    fn apply(&mut self, n: usize, token: Token, floor: u64, ttl_ticks: u8) -> Option<u64> {
        let t = self.t;
        let node = self.nodes.get_mut(n)?;
        if node.down || node.holder(t).is_some() {
            return None;
        }
        node.counter = next_fence(node.counter, Some(floor));
        node.key = Some((token, t.saturating_add(ttl_ticks)));
        Some(node.counter)
    }

    fn release_everywhere(&mut self, token: Token) {
        let t = self.t;
        for node in self.nodes.iter_mut().filter(|n| !n.down) {
            if node.holder(t) == Some(token) {
                node.key = None;
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn token(c: u8, client: &Client) -> Token {
    (c, client.tries)
}

impl Model for RedlockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node { key: None, counter: 0, down: false };
        let client = Client { phase: Phase::Idle, tries: 0 };
        vec![State {
            t: 0,
            nodes: [node.clone(), node.clone(), node],
            restarts: 0,
            faults: 0,
            sends: 0,
            clients: [client.clone(), client],
            orphans: Vec::new(),
            last_grant: None,
            fence_regressed: false,
            wrote_back: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.t < self.config.max_t {
            actions.push(Action::Tick);
        }
        for (n, node) in (0u8..).zip(&state.nodes) {
            if !node.down && state.restarts < self.config.restarts {
                actions.push(Action::Restart(n));
            }
        }
        for (i, _) in (0u8..).zip(&state.orphans) {
            actions.push(Action::ApplyOrphan(i));
            if state.faults < self.config.faults {
                actions.push(Action::DropOrphan(i));
            }
        }
        for (c, client) in (0u8..).zip(&state.clients) {
            match &client.phase {
                Phase::Idle if client.tries < self.config.tries.get(usize::from(c)).copied().unwrap_or(0) => {
                    actions.push(Action::Send(c))
                }
                Phase::Idle => {}
                Phase::Acquiring { answers, .. } => {
                    for (n, answer) in (0u8..).zip(answers) {
                        if *answer == Answer::Pending {
                            actions.push(Action::Apply(c, n));
                            if state.faults < self.config.faults {
                                actions.extend([Action::Drop(c, n), Action::ApplyLost(c, n)]);
                            }
                        }
                    }
                    let granted = answers.iter().filter(|a| matches!(a, Answer::Granted(_))).count();
                    let pending = answers.iter().filter(|a| **a == Answer::Pending).count();
                    if granted >= QUORUM || granted + pending < QUORUM {
                        actions.push(Action::Decide(c));
                    }
                }
                Phase::WritingBack { pending, .. } => {
                    for (n, p) in (0u8..).zip(pending) {
                        if *p {
                            actions.push(Action::WriteBack(c, n));
                        }
                    }
                    if !pending.iter().any(|p| *p) {
                        actions.push(Action::Confirm(c));
                    }
                }
                Phase::Holding { .. } => actions.push(Action::Release(c)),
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let ttl = self.config.ttl_ticks;
        match action {
            Action::Tick => {
                s.t += 1;
                for node in &mut s.nodes {
                    node.down = false;
                }
            }
            Action::Restart(n) => {
                let node = s.nodes.get_mut(usize::from(n))?;
                if !self.config.persisted {
                    node.key = None;
                    node.counter = 0;
                }
                node.down = true;
                s.restarts += 1;
            }
            Action::Send(c) => {
                let floor = self.floor(usize::from(c), last.t, last.sends);
                s.sends += 1;
                let client = s.clients.get_mut(usize::from(c))?;
                client.tries += 1;
                client.phase = Phase::Acquiring { started: last.t, floor, answers: [Answer::Pending; NODES] };
            }
            Action::Apply(c, n) | Action::ApplyLost(c, n) | Action::Drop(c, n) => {
                let client = last.clients.get(usize::from(c))?;
                let Phase::Acquiring { started, floor, mut answers } = client.phase else { return None };
                if !matches!(action, Action::Apply(..)) {
                    s.faults += 1;
                }
                let answer = match action {
                    Action::Apply(..) => {
                        s.apply(usize::from(n), token(c, client), floor, ttl).map_or(Answer::No, Answer::Granted)
                    }
                    Action::ApplyLost(..) => {
                        s.apply(usize::from(n), token(c, client), floor, ttl);
                        Answer::No
                    }
                    _ => Answer::No,
                };
                *answers.get_mut(usize::from(n))? = answer;
                s.clients.get_mut(usize::from(c))?.phase = Phase::Acquiring { started, floor, answers };
            }
            Action::ApplyOrphan(i) | Action::DropOrphan(i) => {
                let (token, n, floor) = s.orphans.remove(usize::from(i));
                if matches!(action, Action::ApplyOrphan(_)) {
                    s.apply(usize::from(n), token, floor, ttl);
                } else {
                    s.faults += 1;
                }
            }
            Action::Decide(c) => {
                let client = last.clients.get(usize::from(c))?;
                let Phase::Acquiring { started, floor, answers } = client.phase else { return None };
                let token = token(c, client);
                for (n, answer) in (0u8..).zip(&answers) {
                    if *answer == Answer::Pending {
                        s.orphans.push((token, n, floor));
                    }
                }
                let granted: Vec<(usize, u64)> = answers
                    .iter()
                    .enumerate()
                    .filter_map(|(n, a)| if let Answer::Granted(f) = a { Some((n, *f)) } else { None })
                    .collect();
                let now_ms = u64::from(last.t) * millis(TICK);
                let t = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
                let phase =
                    if granted.len() < QUORUM || now_ms >= self.clock.valid_until_ms(self.config.ttl_ticks, started) {
                        s.release_everywhere(token);
                        Phase::Idle
                    } else if self.config.no_write_back {
                        let at_t = u8::try_from(granted.len()).unwrap_or(u8::MAX);
                        Phase::WritingBack { started, t, at_t, pending: [false; NODES] }
                    } else {
                        let mut pending = [false; NODES];
                        for (n, f) in &granted {
                            *pending.get_mut(*n)? = *f < t;
                        }
                        let at_t = u8::try_from(granted.iter().filter(|(_, f)| *f == t).count()).unwrap_or(u8::MAX);
                        s.wrote_back |= pending.iter().any(|p| *p);
                        Phase::WritingBack { started, t, at_t, pending }
                    };
                s.clients.get_mut(usize::from(c))?.phase = phase;
                if matches!(s.clients.get(usize::from(c))?.phase, Phase::WritingBack { pending, .. } if pending == [false; NODES])
                {
                    return self.next_state(&s, Action::Confirm(c));
                }
            }
            Action::WriteBack(c, n) => {
                let client = last.clients.get(usize::from(c))?;
                let Phase::WritingBack { started, t, mut at_t, mut pending } = client.phase else { return None };
                let token = token(c, client);
                let now = last.t;
                let node = s.nodes.get_mut(usize::from(n))?;
                if !node.down && node.holder(now) == Some(token) {
                    node.counter = node.counter.max(t);
                    at_t = at_t.saturating_add(1);
                }
                *pending.get_mut(usize::from(n))? = false;
                s.clients.get_mut(usize::from(c))?.phase = Phase::WritingBack { started, t, at_t, pending };
            }
            Action::Confirm(c) => {
                let client = last.clients.get(usize::from(c))?;
                let Phase::WritingBack { started, t, at_t, .. } = client.phase else { return None };
                let valid_ms = self.clock.valid_until_ms(self.config.ttl_ticks, started);
                let now_ms = u64::from(last.t) * millis(TICK);
                let phase = if usize::from(at_t) >= QUORUM && now_ms < valid_ms {
                    if s.last_grant.is_some_and(|before| t <= before) {
                        s.fence_regressed = true;
                    }
                    s.last_grant = Some(s.last_grant.map_or(t, |before| before.max(t)));
                    Phase::Holding { fence: t, valid_ms }
                } else {
                    s.release_everywhere(token(c, client));
                    Phase::Idle
                };
                s.clients.get_mut(usize::from(c))?.phase = phase;
            }
            Action::Release(c) => {
                let client = last.clients.get(usize::from(c))?;
                s.release_everywhere(token(c, client));
                s.clients.get_mut(usize::from(c))?.phase = Phase::Idle;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one believer", |_, s: &State| s.clients.iter().filter(|c| s.believes(c)).count() <= 1),
            Property::always("fences increase", |_, s: &State| !s.fence_regressed),
            Property::sometimes("a grant", |_, s: &State| s.last_grant.is_some()),
            Property::sometimes("a quorum needs a write-back", |_, s: &State| s.wrote_back),
        ]
    }
}

/// The instances are interchangeable: a state and its copy with the instances renumbered behave alike, so the
/// checker visits one of them (symmetry reduction). The representative orders the instances by everything that
/// concerns each (its key and counter, every client's answer or write-back from it, the orphans bound to it);
/// instances that tie are identical, so the order is canonical.
impl Representative for State {
    fn representative(&self) -> Self {
        let column = |n: usize| {
            let per_client: Vec<(Option<Answer>, Option<bool>)> = self
                .clients
                .iter()
                .map(|c| match &c.phase {
                    Phase::Acquiring { answers, .. } => (answers.get(n).copied(), None),
                    Phase::WritingBack { pending, .. } => (None, pending.get(n).copied()),
                    _ => (None, None),
                })
                .collect();
            let mut orphans: Vec<(Token, u64)> =
                self.orphans.iter().filter(|o| usize::from(o.1) == n).map(|(t, _, f)| (*t, *f)).collect();
            orphans.sort_unstable();
            (self.nodes.get(n).cloned(), per_client, orphans)
        };
        let mut order: Vec<usize> = (0..NODES).collect();
        order.sort_by_cached_key(|n| column(*n));
        // order[new] = old; where[old] = new.
        let mut at = [0u8; NODES];
        for (new, old) in order.iter().enumerate() {
            if let Some(slot) = at.get_mut(*old) {
                *slot = u8::try_from(new).unwrap_or(u8::MAX);
            }
        }
        let mut out = self.clone();
        for (new, old) in order.iter().enumerate() {
            if let (Some(slot), Some(node)) = (out.nodes.get_mut(new), self.nodes.get(*old)) {
                *slot = node.clone();
            }
        }
        for (client, before) in out.clients.iter_mut().zip(&self.clients) {
            match (&mut client.phase, &before.phase) {
                (Phase::Acquiring { answers, .. }, Phase::Acquiring { answers: old, .. }) => {
                    for (new, o) in order.iter().enumerate() {
                        if let (Some(slot), Some(a)) = (answers.get_mut(new), old.get(*o)) {
                            *slot = *a;
                        }
                    }
                }
                (Phase::WritingBack { pending, .. }, Phase::WritingBack { pending: old, .. }) => {
                    for (new, o) in order.iter().enumerate() {
                        if let (Some(slot), Some(p)) = (pending.get_mut(new), old.get(*o)) {
                            *slot = *p;
                        }
                    }
                }
                _ => {}
            }
        }
        for orphan in &mut out.orphans {
            orphan.1 = at.get(usize::from(orphan.1)).copied().unwrap_or(orphan.1);
        }
        out.orphans.sort_unstable();
        out
    }
}
