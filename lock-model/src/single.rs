//! The single-server lock with fencing and a fenced resource, over every interleaving of its actions within small
//! bounds.
//!
//! Real time runs in ticks of [`TICK`](crate::TICK). Two clients acquire one resource on one server, read it and write it back
//! (the Jepsen `lock-set` read-modify-write), and release. Requests and replies take any number of ticks (each is
//! its own action: send, apply on the server, decide on the client), and a reply may be lost. An acquire may be
//! duplicated (a client library resending it after a broken connection, a Cluster redirection): the copy reaches
//! the server whenever it does, even after its client gave up, released or tried again, and takes the key with that
//! try's token if it is free. The server may
//! restart without persistence (losing the key and the fencing counter), optionally with its clock stepped back, or
//! fail over to its replica (which has what was replicated to it, on a host whose clock may be behind). A client's
//! monotonic clock may stall for a tick (a suspended VM or laptop: Linux's `CLOCK_MONOTONIC`, which `Instant` reads,
//! does not count suspend), so it counts less time than passed: drift beyond any allowance.
//! A client may stop for any number of ticks anywhere (a GC pause): between its validity check and its read, or
//! between its read and its write.
//!
//! The arithmetic is lock-core's, not a copy: a grant is trusted until [`lock_core::lease::valid_until`] of the
//! instant the request *started*, exactly as the engine computes it. The fencing rule is the acquire script's
//! (`max(counter + 1, the server's clock in µs)`, [`next_fence`]); the fenced resource's rule is
//! [`FencedResource`](lock_core::FencedResource)'s (a write or read with a fence below the highest accepted is
//! refused, and records its fence otherwise).
//!
//! Properties (see [`LockModel::properties`](stateright::Model::properties)):
//! - `one believer` (always): at most one client believes it holds (holds a grant before its validity deadline);
//! - `no lost update` (always): the resource never accepts a write computed from a read that another accepted
//!   write has since overwritten;
//! - `fences increase` (always): every grant's fence is above every earlier grant's, across restarts;
//! - `a write lands` (sometimes): the model reaches an accepted write (it is not vacuous);
//! - `a paused holder acts` (sometimes): a client acts past its validity while another holds: Kleppmann's case,
//!   which no lease prevents and the fenced resource makes harmless;
//! - `a duplicate takes the key` (sometimes, with duplicates): a copy of an acquire takes the key nobody is told
//!   about (the cost: the lock stays taken until that key's TTL).
//!
//! [`Config`] switches re-introduce known bugs (validity counted from the reply instead of the request, no time
//! floor in the fencing counter, an unfenced resource) and the one assumption the fence floor rests on (the server's
//! clock never steps back across a restart); the tests show the checker finds each.

use stateright::{Model, Property};

use crate::{next_fence, Clock};

/// What the model checks, and which bugs it re-introduces.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The lock's TTL, in ticks.
    pub ttl_ticks: u8,
    /// The last tick.
    pub max_t: u8,
    /// Acquire attempts per client.
    pub tries: u8,
    /// Server restarts without persistence.
    pub restarts: u8,
    /// Ticks the server's clock steps back at a restart (0: it never does, the floor's assumption).
    pub clock_regression: u8,
    /// Bug: validity counted from when the reply arrived, not from when the request started.
    pub validity_from_reply: bool,
    /// Bug: the fencing counter without the time floor (`counter + 1` only).
    pub no_fence_floor: bool,
    /// The resource checks fences ([`FencedResource`](lock_core::FencedResource)); `false`: plain reads and writes.
    pub fenced_resource: bool,
    /// Acquires duplicated in the network, in all.
    pub duplicates: u8,
    /// Failovers to the replica, in all. Replication is asynchronous: the replica has the primary's state as of the
    /// last tick, so a failover loses what happened since.
    pub failovers: u8,
    /// Ticks the replica's host clock is behind the primary's.
    pub replica_behind: u8,
    /// Ticks a holder's clock may stall, in all (it counts less time than passed).
    pub clock_stalls: u8,
}

impl Default for Config {
    /// The engine as it is: TTL 3 ticks, 8 ticks, 2 tries each, no restart, fenced resource.
    fn default() -> Self {
        Config {
            ttl_ticks: 3,
            max_t: 8,
            tries: 2,
            restarts: 0,
            clock_regression: 0,
            validity_from_reply: false,
            no_fence_floor: false,
            fenced_resource: true,
            duplicates: 0,
            failovers: 0,
            replica_behind: 0,
            clock_stalls: 0,
        }
    }
}

/// The model: [`Config`] plus the instant the ticks count from.
#[derive(Clone, Debug)]
pub struct LockModel {
    /// What is checked.
    pub config: Config,
    clock: Clock,
}

impl LockModel {
    /// The model of `config`.
    pub fn new(config: Config) -> Self {
        LockModel { config, clock: Clock::new() }
    }
}

/// A client's phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Phase {
    /// Not holding; may try.
    Idle,
    /// The request left at `started`; the server has not applied it.
    Sent {
        /// The tick the request started.
        started: u8,
    },
    /// The server applied the request; the reply is on its way.
    Replied {
        /// The tick the request started.
        started: u8,
        /// The fence granted, `None` when refused.
        grant: Option<u64>,
    },
    /// Holding: trusted until `valid_ms`.
    Holding {
        /// The grant's fence.
        fence: u64,
        /// The end of validity, in ms since tick 0.
        valid_ms: u64,
    },
    /// Read the resource at `version`, about to write.
    Read {
        /// The grant's fence.
        fence: u64,
        /// The end of validity, in ms since tick 0.
        valid_ms: u64,
        /// The resource's version when read.
        version: u8,
    },
    /// Wrote, or was refused: only the release is left.
    Done,
}

/// One client.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// Attempts made.
    pub tries: u8,
    /// Ticks its clock is behind real time (it stalled).
    pub behind: u8,
}

impl Client {
    /// The tick its own clock reads at real tick `t`.
    fn local(&self, t: u8) -> u8 {
        t.saturating_sub(self.behind)
    }
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// Real time, in ticks.
    pub t: u8,
    /// The lock key: (the holder's token, expiry on the server's clock in ticks).
    pub key: Option<(Token, i16)>,
    /// The fencing counter.
    pub counter: u64,
    /// The server's clock minus real time, in ticks.
    pub offset: i16,
    /// Restarts so far; the server is down until the next tick after one.
    pub restarts: u8,
    /// Whether the server is down (restarting).
    pub down: bool,
    /// The clients.
    pub clients: Vec<Client>,
    /// The resource's guard: the highest fence it accepted.
    pub guard: u64,
    /// The resource's version: accepted writes so far.
    pub version: u8,
    /// A write computed from an overwritten read was accepted.
    pub lost_update: bool,
    /// The highest fence granted so far.
    pub last_grant: Option<u64>,
    /// A grant's fence was not above an earlier one's.
    pub fence_regressed: bool,
    /// Copies of acquires in the network (their tokens), sorted.
    pub orphans: Vec<Token>,
    /// Acquires duplicated so far.
    pub duplicates: u8,
    /// A copy of an acquire took the key.
    pub orphan_granted: bool,
    /// What the replica has: the key and the fencing counter as of the last tick.
    pub replica: (Option<(Token, i16)>, u64),
    /// Failovers so far.
    pub failovers: u8,
    /// Clock stalls so far.
    pub stalls: u8,
}

/// An owner token: the client and its try (each try has a fresh token, as the engine's acquisitions do).
pub type Token = (u8, u8);

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// Real time advances one tick (a restarting server comes back).
    Tick,
    /// The client sends an acquire.
    Send(u8),
    /// The server applies the client's acquire (`SET NX PX` and the fence).
    Apply(u8),
    /// The reply (or the request) is lost: the client gives up this try.
    Lose(u8),
    /// The reply arrives and the client decides (validity).
    Decide(u8),
    /// The client checks its validity and reads the resource.
    Read(u8),
    /// The client writes back what it read, plus its own element.
    Write(u8),
    /// The client releases (compare-and-delete).
    Release(u8),
    /// The server restarts without persistence.
    Restart,
    /// The network duplicates the client's acquire in flight.
    Duplicate(u8),
    /// A copy of an acquire reaches the server, with its try's token.
    ApplyCopy(Token),
    /// The replica becomes the primary.
    Failover,
    /// The client's clock stalls for a tick.
    Stall(u8),
}

impl State {
    fn server_now(&self) -> i16 {
        i16::from(self.t) + self.offset
    }

    fn key_holder(&self) -> Option<Token> {
        self.key.filter(|(_, expires)| self.server_now() < *expires).map(|(token, _)| token)
    }

    /// The token of the client's current try.
    fn token(&self, c: u8) -> Option<Token> {
        self.clients.get(usize::from(c)).map(|client| (c, client.tries))
    }

    /// `SET NX PX` with `token` and the fence: the fence when granted.
    fn grant(&mut self, token: Token, config: &Config) -> Option<u64> {
        if self.key_holder().is_some() {
            return None;
        }
        let now = self.server_now();
        let floor = (!config.no_fence_floor).then(|| u64::try_from(now).unwrap_or(0) * 100_000);
        let fence = next_fence(self.counter, floor);
        self.counter = fence;
        self.key = Some((token, now + i16::from(config.ttl_ticks)));
        if self.last_grant.is_some_and(|last| fence <= last) {
            self.fence_regressed = true;
        }
        self.last_grant = Some(self.last_grant.map_or(fence, |last| last.max(fence)));
        Some(fence)
    }

    fn believes(&self, client: &Client) -> bool {
        let now_ms = u64::from(client.local(self.t)) * 100;
        matches!(client.phase, Phase::Holding { valid_ms, .. } | Phase::Read { valid_ms, .. } if now_ms < valid_ms)
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            t: 0,
            key: None,
            counter: 0,
            offset: 0,
            restarts: 0,
            down: false,
            clients: vec![Client { phase: Phase::Idle, tries: 0, behind: 0 }; 2],
            guard: 0,
            version: 0,
            lost_update: false,
            last_grant: None,
            fence_regressed: false,
            orphans: Vec::new(),
            duplicates: 0,
            orphan_granted: false,
            replica: (None, 0),
            failovers: 0,
            stalls: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.t < self.config.max_t {
            actions.push(Action::Tick);
        }
        if !state.down && state.restarts < self.config.restarts {
            actions.push(Action::Restart);
        }
        if !state.down {
            actions.extend(state.orphans.iter().copied().map(Action::ApplyCopy));
        }
        if !state.down && state.failovers < self.config.failovers {
            actions.push(Action::Failover);
        }
        for (i, client) in state.clients.iter().enumerate() {
            let c = u8::try_from(i).unwrap_or(u8::MAX);
            match client.phase {
                Phase::Idle if client.tries < self.config.tries => actions.push(Action::Send(c)),
                Phase::Sent { .. } => {
                    if !state.down {
                        actions.push(Action::Apply(c));
                    }
                    actions.push(Action::Lose(c));
                    if state.duplicates < self.config.duplicates {
                        actions.push(Action::Duplicate(c));
                    }
                }
                Phase::Replied { .. } => {
                    actions.push(Action::Decide(c));
                    actions.push(Action::Lose(c));
                }
                Phase::Holding { .. } => {
                    if state.believes(client) {
                        actions.push(Action::Read(c));
                    }
                    actions.push(Action::Release(c));
                    if state.stalls < self.config.clock_stalls {
                        actions.push(Action::Stall(c));
                    }
                }
                Phase::Read { .. } => actions.push(Action::Write(c)),
                Phase::Done => actions.push(Action::Release(c)),
                Phase::Idle => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.t += 1;
                s.down = false;
                if self.config.failovers > 0 {
                    s.replica = (s.key, s.counter);
                }
            }
            Action::Restart => {
                s.key = None;
                s.counter = 0;
                s.restarts += 1;
                s.down = true;
                s.offset -= i16::from(self.config.clock_regression);
            }
            Action::Send(c) => {
                let client = s.clients.get_mut(usize::from(c))?;
                client.tries += 1;
                client.phase = Phase::Sent { started: client.local(last.t) };
            }
            Action::Apply(c) => {
                let Phase::Sent { started } = last.clients.get(usize::from(c))?.phase else { return None };
                let grant = s.grant(last.token(c)?, &self.config);
                s.clients.get_mut(usize::from(c))?.phase = Phase::Replied { started, grant };
            }
            Action::Duplicate(c) => {
                s.duplicates += 1;
                s.orphans.push(last.token(c)?);
                s.orphans.sort_unstable();
            }
            Action::Failover => {
                (s.key, s.counter) = s.replica;
                s.failovers += 1;
                s.down = true;
                s.offset -= i16::from(self.config.replica_behind);
            }
            Action::Stall(c) => {
                s.stalls += 1;
                let client = s.clients.get_mut(usize::from(c))?;
                client.behind = client.behind.saturating_add(1);
            }
            Action::ApplyCopy(token) => {
                let i = s.orphans.iter().position(|o| *o == token)?;
                s.orphans.remove(i);
                s.orphan_granted |= s.grant(token, &self.config).is_some();
            }
            Action::Lose(c) => s.clients.get_mut(usize::from(c))?.phase = Phase::Idle,
            Action::Decide(c) => {
                let Phase::Replied { started, grant } = last.clients.get(usize::from(c))?.phase else { return None };
                let now = last.clients.get(usize::from(c))?.local(last.t);
                let from = if self.config.validity_from_reply { now } else { started };
                let valid_ms = self.clock.valid_until_ms(self.config.ttl_ticks, from);
                s.clients.get_mut(usize::from(c))?.phase = match grant {
                    Some(fence) if u64::from(now) * 100 < valid_ms => Phase::Holding { fence, valid_ms },
                    // Granted too late to be trusted: given back (compare-and-delete).
                    Some(_) => {
                        if s.key_holder() == last.token(c) {
                            s.key = None;
                        }
                        Phase::Idle
                    }
                    None => Phase::Idle,
                };
            }
            Action::Read(c) => {
                let Phase::Holding { fence, valid_ms } = last.clients.get(usize::from(c))?.phase else { return None };
                let refused = self.config.fenced_resource && fence < s.guard;
                if self.config.fenced_resource && !refused {
                    s.guard = s.guard.max(fence);
                }
                s.clients.get_mut(usize::from(c))?.phase =
                    if refused { Phase::Done } else { Phase::Read { fence, valid_ms, version: s.version } };
            }
            Action::Write(c) => {
                let Phase::Read { fence, version, .. } = last.clients.get(usize::from(c))?.phase else { return None };
                let refused = self.config.fenced_resource && fence < s.guard;
                if !refused {
                    if version != s.version {
                        s.lost_update = true;
                    }
                    s.version = s.version.saturating_add(1);
                    s.guard = s.guard.max(fence);
                }
                s.clients.get_mut(usize::from(c))?.phase = Phase::Done;
            }
            Action::Release(c) => {
                if s.key_holder() == last.token(c) && !s.down {
                    s.key = None;
                }
                s.clients.get_mut(usize::from(c))?.phase = Phase::Idle;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("one believer", |_, s: &State| s.clients.iter().filter(|c| s.believes(c)).count() <= 1),
            Property::always("no lost update", |_, s: &State| !s.lost_update),
            Property::always("fences increase", |_, s: &State| !s.fence_regressed),
            Property::sometimes("a write lands", |_, s: &State| s.version > 0),
            Property::sometimes("a paused holder acts", |_, s: &State| {
                let late = s.clients.iter().any(|c| matches!(c.phase, Phase::Read { .. }) && !s.believes(c));
                late && s.clients.iter().any(|c| s.believes(c))
            }),
        ];
        if self.config.duplicates > 0 {
            properties.push(Property::sometimes("a duplicate takes the key", |_, s: &State| s.orphan_granted));
        }
        properties
    }
}
