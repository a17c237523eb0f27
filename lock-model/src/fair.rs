//! The fair lock's queue: waiters hold places with tickets on the server, each place kept by its own heartbeats
//! (an expiry per waiter), and a release hands the lock to the live head.
//!
//! A client tries: the server grants the lock when it is free and nobody live is queued ahead, and otherwise gives
//! the client a place at the back (or keeps its place, its expiry armed again: every try is a heartbeat). A holder
//! releases with the fair release: the key goes to the live head with a fresh lease, recorded as that waiter's
//! grant, which its next try returns (validity counted from that try's start, the key's expiry armed again from
//! it). A waiter whose place expired (it paused past its heartbeats) takes a new place at the back on its next try.
//! A client may crash anywhere and never come back; the lock's key and a place both expire on the server's clock.
//!
//! A grant's reply may arrive late ([`FairConfig::late_replies`]): the server applied the grant, and the reply reaches
//! the waiter after the grant's validity ran out. The waiter then goes on waiting **with the same token** (its token
//! is its place in the line, drawn once per acquisition), so its next try can be granted under that token. A
//! give-back of the late grant, sent at once or resent any time later in the background (after a connection reset),
//! would compare that token and delete the later grant: [`FairConfig::give_back_queued_tries`] puts that rule of the
//! old engine back, and `one believer` catches it (review 4's two holders).
//!
//! Properties (each `always` unless said):
//! - `one believer`: at most one client believes it holds;
//! - `no grant to an expired place`: a release never hands the lock to a waiter whose place had expired (the class
//!   of etcd#19597, where a candidate whose own lease expired still became leader);
//! - `ticket order`: nobody is granted the lock while a live waiter with an earlier ticket is queued;
//! - `a hand-off` (sometimes): a release hands the lock to a waiter, so the queue is exercised;
//! - `every live client gets the lock` (eventually, with [`FairConfig::rounds`]): once the only fault is a crash,
//!   every client that does not crash holds the lock before time runs out: a dead holder or a dead waiter at the
//!   head of the queue costs its expiry, never the queue.
//!
//! Liveness needs fairness: with clients that may stop for any number of ticks, every path on which a client just
//! stops fails it. [`FairConfig::rounds`] is that fairness: every live client takes exactly one step per tick, but
//! for a bounded number of skipped steps (pauses, long enough to lose a place), and a client that held the lock
//! once and released it is done. Paths
//! are acyclic (time or a client's step moves every action forward), which is what stateright's `eventually` needs,
//! and the property reads flags kept in the state, so two paths joining at one state agree on it.

use stateright::{Model, Property};

use crate::Clock;

const CLIENTS: usize = 3;

/// What the fair-queue model checks, and which bugs it re-introduces.
#[derive(Clone, Copy, Debug)]
pub struct FairConfig {
    /// The lock's TTL, in ticks.
    pub ttl_ticks: u8,
    /// How long a place lasts without a heartbeat, in ticks.
    pub waiter_ttl_ticks: u8,
    /// The last tick.
    pub max_t: u8,
    /// Tries (each a heartbeat) per client.
    pub tries: u8,
    /// Crashes in all.
    pub crashes: u8,
    /// Bug: the release hands the lock to the first place in ticket order, live or not.
    pub grant_expired_places: bool,
    /// Bug: a try takes a free lock even when live waiters are queued (barging).
    pub barging: bool,
    /// Fairness for liveness: every live client takes exactly one step per tick, tries without a bound until it has
    /// held the lock, and is done once it released it.
    pub rounds: bool,
    /// With [`rounds`](Self::rounds): steps skipped in all (each a client paused for one tick; a pause longer than
    /// a place's TTL loses the place).
    pub pauses: u8,
    /// Bug: a place never expires (one expiry for the whole queue, renewed by whoever is alive: Redisson's shape).
    pub places_never_expire: bool,
    /// A grant's reply may be held back until after its validity (not with [`rounds`](Self::rounds): replies that
    /// are always late starve everyone, which is no property of the queue).
    pub late_replies: bool,
    /// Bug (the engine before review 4): a queued try whose grant arrived late gives it back under the waiter's
    /// token, and that give-back may run any time later (a resend after a reset).
    pub give_back_queued_tries: bool,
}

impl Default for FairConfig {
    /// The engine as it is, every reply on time: TTL 2 ticks, places of 2 ticks, 5 ticks, 3 tries each, one crash.
    fn default() -> Self {
        FairConfig {
            ttl_ticks: 2,
            waiter_ttl_ticks: 2,
            max_t: 5,
            tries: 3,
            crashes: 1,
            grant_expired_places: false,
            barging: false,
            rounds: false,
            pauses: 0,
            places_never_expire: false,
            late_replies: false,
            give_back_queued_tries: false,
        }
    }
}

impl FairConfig {
    /// Late replies: the engine as it is with a grant's reply that may arrive after its validity, over 4 ticks with
    /// 2 tries each (a late grant, its waiter's next try and another client's fit; the default bounds with late
    /// replies take three times the default's states, which is [`deep`](Self::deep)'s).
    pub fn late() -> Self {
        FairConfig { late_replies: true, max_t: 4, tries: 2, ..FairConfig::default() }
    }

    /// The default bounds with late replies (`LOCK_MODEL_DEEP`: about a minute, optimised).
    pub fn deep() -> Self {
        FairConfig { late_replies: true, ..FairConfig::default() }
    }

    /// The liveness check: [`rounds`](Self::rounds) over 12 ticks (three holders, a crash's expiry, the pauses and
    /// the hand-offs fit), one crash and three skipped steps.
    pub fn liveness() -> Self {
        FairConfig { rounds: true, max_t: 12, pauses: 3, ..FairConfig::default() }
    }
}

/// The model: [`FairConfig`] plus the instant the ticks count from.
#[derive(Clone, Debug)]
pub struct FairModel {
    /// What is checked.
    pub config: FairConfig,
    clock: Clock,
}

impl FairModel {
    /// The model of `config`.
    pub fn new(config: FairConfig) -> Self {
        FairModel { config, clock: Clock::new() }
    }
}

/// A waiter's place.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Place {
    /// The client.
    pub client: u8,
    /// Its ticket.
    pub ticket: u8,
    /// When the place expires, in ticks of the server's clock.
    pub expires: u8,
}

/// A client's phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Phase {
    /// Not trying.
    Idle,
    /// Queued (or about to be): its next try is a heartbeat.
    Waiting,
    /// Granted on the server; the reply is on its way (it may arrive after `valid_ms`).
    Granting {
        /// The end of the grant's validity, in ms since tick 0.
        valid_ms: u64,
    },
    /// Holding, trusted until `valid_ms`.
    Holding {
        /// The end of validity, in ms since tick 0.
        valid_ms: u64,
    },
    /// Crashed: never acts again.
    Crashed,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// Real time, in ticks (the server's clock).
    pub t: u8,
    /// The lock key: its holder's token (client and acquisition) and expiry.
    pub key: Option<(Owner, u8)>,
    /// Each client's acquisition: its token is `(client, acquisition)`, drawn once per acquisition and kept by
    /// every try of it.
    pub acquisitions: [u8; CLIENTS],
    /// A give-back on its way (sent now, or resent later): compare-and-delete of this token.
    pub give_back: Option<Owner>,
    /// The queue's places.
    pub places: Vec<Place>,
    /// The next ticket.
    pub next_ticket: u8,
    /// The clients.
    pub clients: [Phase; CLIENTS],
    /// Tries so far, per client.
    pub tries: [u8; CLIENTS],
    /// Crashes so far.
    pub crashes: u8,
    /// Steps skipped so far.
    pub pauses: u8,
    /// A release handed the lock to an expired place.
    pub granted_expired: bool,
    /// Someone was granted while a live waiter with an earlier ticket was queued.
    pub out_of_order: bool,
    /// A release handed the lock to a waiter.
    pub handed_off: bool,
    /// With [`FairConfig::rounds`]: which clients took their step this tick.
    pub acted: [bool; CLIENTS],
    /// With [`FairConfig::rounds`]: which clients have held the lock.
    pub held: [bool; CLIENTS],
}

/// A token: the client and which of its acquisitions drew it.
pub type Owner = (u8, u8);

/// What can happen next.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// Real time advances one tick.
    Tick,
    /// The client tries (a heartbeat when it is queued).
    Try(u8),
    /// The client tries, and a grant's reply is held back (with [`FairConfig::late_replies`]).
    TryLate(u8),
    /// A held-back grant's reply reaches its client.
    Reply(u8),
    /// The give-back on its way reaches the server.
    GiveBack,
    /// The holder releases, handing the lock to the live head.
    Release(u8),
    /// The client crashes.
    Crash(u8),
    /// The client skips its step this tick (with [`FairConfig::rounds`]).
    Pause(u8),
}

impl State {
    fn key_owner(&self) -> Option<Owner> {
        self.key.filter(|(_, expires)| self.t < *expires).map(|(owner, _)| owner)
    }

    fn key_holder(&self) -> Option<u8> {
        self.key_owner().map(|(c, _)| c)
    }

    fn owner(&self, c: u8) -> Option<Owner> {
        Some((c, *self.acquisitions.get(index(c))?))
    }

    /// The fair release of the key, by whoever deletes it: the key goes to the live head with a fresh lease.
    fn hand_off(&mut self, config: &FairConfig) {
        let t = self.t;
        self.key = None;
        let candidates: Vec<&Place> =
            if config.grant_expired_places { self.places.iter().collect() } else { self.live_places().collect() };
        if let Some(head) = candidates.iter().min_by_key(|p| p.ticket).map(|p| (*p).clone()) {
            self.granted_expired |= t >= head.expires;
            self.note_grant(head.client);
            let owner = (head.client, self.acquisitions.get(index(head.client)).copied().unwrap_or(0));
            self.key = Some((owner, t.saturating_add(config.ttl_ticks)));
            self.handed_off = true;
        }
    }

    fn live_places(&self) -> impl Iterator<Item = &Place> {
        self.places.iter().filter(move |p| self.t < p.expires)
    }

    /// With [`FairConfig::rounds`]: the client has held the lock and released it.
    fn done(&self, c: usize) -> bool {
        self.held.get(c).copied().unwrap_or(false) && self.clients.get(c) == Some(&Phase::Idle)
    }

    /// With [`FairConfig::rounds`]: every client that can act took its step this tick.
    fn round_over(&self) -> bool {
        (0..CLIENTS).all(|c| {
            self.acted.get(c).copied().unwrap_or(true) || self.done(c) || self.clients.get(c) == Some(&Phase::Crashed)
        })
    }

    fn believes(&self, phase: &Phase) -> bool {
        let now_ms = u64::from(self.t) * 100;
        matches!(phase, Phase::Holding { valid_ms } if now_ms < *valid_ms)
    }

    /// Records a grant to `c`: out of order if a live place with an earlier ticket than `c`'s (or any, when `c`
    /// has none) is queued.
    fn note_grant(&mut self, c: u8) {
        let mine = self.places.iter().find(|p| p.client == c).map(|p| p.ticket);
        let ahead = self.live_places().any(|p| p.client != c && mine.is_none_or(|m| p.ticket < m));
        self.out_of_order |= ahead;
    }
}

fn index(c: u8) -> usize {
    usize::from(c)
}

impl Model for FairModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            t: 0,
            key: None,
            acquisitions: [0; CLIENTS],
            give_back: None,
            places: Vec::new(),
            next_ticket: 0,
            clients: [Phase::Idle, Phase::Idle, Phase::Idle],
            tries: [0; CLIENTS],
            crashes: 0,
            pauses: 0,
            granted_expired: false,
            out_of_order: false,
            handed_off: false,
            acted: [false; CLIENTS],
            held: [false; CLIENTS],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let rounds = self.config.rounds;
        if state.t < self.config.max_t && (!rounds || state.round_over()) {
            actions.push(Action::Tick);
        }
        if state.give_back.is_some() {
            actions.push(Action::GiveBack);
        }
        let late = self.config.late_replies && !rounds;
        for (c, phase) in (0u8..).zip(&state.clients) {
            let tries = state.tries.get(index(c)).copied().unwrap_or(0);
            if rounds && (state.acted.get(index(c)).copied().unwrap_or(true) || state.done(index(c))) {
                continue;
            }
            match phase {
                Phase::Idle | Phase::Waiting if rounds || tries < self.config.tries => {
                    actions.push(Action::Try(c));
                    if late {
                        actions.push(Action::TryLate(c));
                    }
                }
                Phase::Granting { .. } => actions.push(Action::Reply(c)),
                Phase::Holding { .. } => actions.push(Action::Release(c)),
                _ => {}
            }
            if *phase != Phase::Crashed && *phase != Phase::Idle && state.crashes < self.config.crashes {
                actions.push(Action::Crash(c));
            }
            if rounds && *phase != Phase::Crashed && state.pauses < self.config.pauses {
                actions.push(Action::Pause(c));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let t = last.t;
        if self.config.rounds {
            match action {
                Action::Tick => s.acted = [false; CLIENTS],
                Action::GiveBack => {}
                Action::Try(c)
                | Action::TryLate(c)
                | Action::Reply(c)
                | Action::Release(c)
                | Action::Crash(c)
                | Action::Pause(c) => {
                    *s.acted.get_mut(index(c))? = true;
                }
            }
        }
        match action {
            Action::Tick => s.t += 1,
            Action::Try(c) | Action::TryLate(c) => {
                let held_back = matches!(action, Action::TryLate(_));
                if !self.config.rounds {
                    *s.tries.get_mut(index(c))? += 1;
                }
                if s.clients.get(index(c)) == Some(&Phase::Idle) {
                    // A new acquisition draws a new token; the tries of one acquisition share it.
                    let acquisition = s.acquisitions.get_mut(index(c))?;
                    *acquisition = acquisition.checked_add(1)?;
                }
                let me = s.owner(c)?;
                let expires = if self.config.places_never_expire {
                    u8::MAX
                } else {
                    t.saturating_add(self.config.waiter_ttl_ticks)
                };
                let mine = s.places.iter().position(|p| p.client == c);
                let granted =
                    |valid_ms| if held_back { Phase::Granting { valid_ms } } else { Phase::Holding { valid_ms } };
                let phase = if s.key_owner() == Some(me) {
                    // The lock was handed to us (or an earlier try's grant is still ours): our grant. The key is
                    // armed again from this try.
                    s.key = Some((me, t.saturating_add(self.config.ttl_ticks)));
                    s.places.retain(|p| p.client != c);
                    granted(self.clock.valid_until_ms(self.config.ttl_ticks, t))
                } else {
                    let head = s.live_places().min_by_key(|p| p.ticket).map(|p| p.client);
                    let free = s.key_holder().is_none() && (self.config.barging || head.is_none() || head == Some(c));
                    if free {
                        s.note_grant(c);
                        s.key = Some((me, t.saturating_add(self.config.ttl_ticks)));
                        s.places.retain(|p| p.client != c);
                        granted(self.clock.valid_until_ms(self.config.ttl_ticks, t))
                    } else {
                        match mine {
                            // A live place: the heartbeat keeps it.
                            Some(i) if s.places.get(i).is_some_and(|p| t < p.expires) => {
                                s.places.get_mut(i)?.expires = expires;
                            }
                            // No place, or an expired one: a new place at the back.
                            _ => {
                                s.places.retain(|p| p.client != c);
                                let ticket = s.next_ticket;
                                s.next_ticket = s.next_ticket.saturating_add(1);
                                s.places.push(Place { client: c, ticket, expires });
                            }
                        }
                        Phase::Waiting
                    }
                };
                if self.config.rounds && matches!(phase, Phase::Holding { .. }) {
                    *s.held.get_mut(index(c))? = true;
                }
                *s.clients.get_mut(index(c))? = phase;
            }
            Action::Reply(c) => {
                let Some(Phase::Granting { valid_ms }) = s.clients.get(index(c)).cloned() else { return None };
                let phase = if u64::from(t) * 100 < valid_ms {
                    Phase::Holding { valid_ms }
                } else {
                    // Too late to be trusted. The waiter goes on waiting under the same token; the grant is left
                    // to its next try (or the key's expiry), never given back under a token it will be granted
                    // again with: `engine/give_back.rs::may_give_back`.
                    if self.config.give_back_queued_tries && s.give_back.is_none() {
                        s.give_back = s.owner(c);
                    }
                    Phase::Waiting
                };
                *s.clients.get_mut(index(c))? = phase;
            }
            Action::GiveBack => {
                let token = s.give_back.take()?;
                if s.key_owner() == Some(token) {
                    s.hand_off(&self.config);
                }
            }
            Action::Release(c) => {
                if s.key_owner() == s.owner(c) && s.key_owner().is_some() {
                    s.hand_off(&self.config);
                }
                *s.clients.get_mut(index(c))? = Phase::Idle;
            }
            Action::Pause(_) => s.pauses += 1,
            Action::Crash(c) => {
                s.crashes += 1;
                *s.clients.get_mut(index(c))? = Phase::Crashed;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("one believer", |_, s: &State| s.clients.iter().filter(|p| s.believes(p)).count() <= 1),
            Property::always("no grant to an expired place", |_, s: &State| !s.granted_expired),
            Property::always("ticket order", |_, s: &State| !s.out_of_order),
            Property::sometimes("a hand-off", |_, s: &State| s.handed_off),
        ];
        if self.config.rounds {
            properties.push(Property::eventually("every live client gets the lock", |_, s: &State| {
                s.held.iter().zip(&s.clients).all(|(held, phase)| *held || *phase == Phase::Crashed)
            }));
        }
        properties
    }
}
