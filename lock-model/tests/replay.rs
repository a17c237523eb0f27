//! Counterexamples of the single-server model replayed on the real engine: each model action becomes one step of
//! the testkit's scripted store (a request held at its gate, applied, its reply held or lost), model ticks become
//! real time, and the run is checked with the testkit's history checker and the fenced resource.
//!
//! A schedule found against a model with a re-introduced bug is a regression test for the engine: the engine as it
//! is passes it. FAULTS.md ("Model") records the same schedule failing on an engine with the bug put back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::fenced::FencedResource;
use lock_core::{Guard, Lock, LockError, LockKeys, LockOptions, LockStore, Token, DEFAULT_PREFIX};
use lock_model::single::{Action, Config, LockModel};
use lock_testkit::scripted::{Fault, Gate, Injected, Op, ScriptedServer};
use lock_testkit::{Checker, Hold};

mod support;

/// One model tick in real time: wide enough that what happens inside a tick (a few ms, more on a loaded machine)
/// never crosses an expiry or a validity deadline the model put a tick away.
const TICK: Duration = Duration::from_millis(200);
/// The real TTL for the model's 3 ticks: half a tick short, so a key the model expires at tick `t + 3` is gone by
/// then, and one it keeps at `t + 2` is still there, whatever the jitter inside a tick (up to half a tick).
const TTL: Duration = Duration::from_millis(500);
const DATA: &str = "{replay}:data";
const GUARD: &str = "{replay}:guard";

/// How the resource is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    /// Through a `FencedResource`.
    Fenced,
    /// Plain `GET` and `SET`.
    Plain,
}

/// What a replay saw.
#[derive(Debug)]
struct Replayed {
    /// Overlapping holds or fence regressions, by the holders' own validity.
    breaches: usize,
    /// Writes the resource accepted.
    accepted: i64,
    /// Its final count: below `accepted` when an update was lost.
    count: i64,
    /// Grants the real engine made.
    grants: usize,
    /// The fences the server granted, in the order it granted them (a grant whose reply was lost included): what the
    /// model's "fences increase" is about.
    fences: Vec<u64>,
}

impl Replayed {
    fn fence_regressed(&self) -> bool {
        support::fences_regressed(&self.fences)
    }
}

/// What the replay's server does when the model restarts it.
#[derive(Clone, Copy, Debug)]
enum Restart {
    /// Comes back empty (no persistence), its clock where it was.
    Empty,
    /// Comes back empty with its clock stepped back by this much.
    ClockBack(Duration),
    /// Comes back empty with its clock stepped back to the epoch: the time floor then lies below every earlier
    /// fence, and the counter alone (`counter + 1`, the floorless bug) decides.
    ClockToEpoch,
}

#[derive(Default)]
struct Client {
    attempt: Option<tokio::task::JoinHandle<lock_core::Result<Option<Guard>>>>,
    request: Gate,
    reply: Gate,
    applied: bool,
    guard: Option<(Guard, Instant)>,
    read: Option<i64>,
}

/// How the next acquire of each client is staged, and the tokens whose give-back is lost with their reply.
#[derive(Default)]
struct Plans {
    next: HashMap<usize, VecDeque<Fault>>,
    lost_give_backs: HashSet<Token>,
}

/// The next step of client `c` after position `from` among `of`.
fn next_of(actions: &[Action], from: usize, c: u8, of: &[fn(u8) -> Action]) -> Option<Action> {
    let wanted: Vec<Action> = of.iter().map(|make| make(c)).collect();
    actions.iter().skip(from + 1).find(|a| wanted.contains(a)).cloned()
}

async fn replay(actions: &[Action], resource: Resource, restart: Restart) -> Replayed {
    let server = ScriptedServer::new();
    let plans = Arc::new(Mutex::new(Plans::default()));
    let rules = plans.clone();
    // A restarting server refuses what reaches it until the next tick (the model's `down`); a staged acquire waits
    // at its gate and is applied only after.
    let down = Arc::new(AtomicBool::new(false));
    let refusing = down.clone();
    server.rule(move |call| {
        let mut plans = rules.lock().unwrap();
        match call.op {
            Op::Release if refusing.load(Ordering::SeqCst) => Some(Fault::FailBefore(Injected::Unavailable)),
            Op::Acquire => {
                let fault = plans.next.get_mut(&call.client).and_then(VecDeque::pop_front)?;
                if matches!(fault, Fault::Staged { applied: true, lost: Some(_), .. }) {
                    plans.lost_give_backs.insert(call.token.clone());
                }
                Some(fault)
            }
            // The model's lost reply leaves the key to expire: the engine's give-back is lost too.
            Op::Release if plans.lost_give_backs.contains(&call.token) => {
                Some(Fault::FailBefore(Injected::Unavailable))
            }
            _ => None,
        }
    });
    let locks: Vec<Lock> =
        (0..2).map(|_| Lock::new(server.client()).with_operation_timeout(Duration::from_secs(60))).collect();
    // The resource is its own system: a restart of the lock's server leaves it as it was.
    let data: Arc<dyn LockStore> = Arc::new(lock_core::MemoryStore::new());
    let fenced = FencedResource::from_arc_with_guard(data.clone(), GUARD).unwrap();
    let mut clients: Vec<Client> = (0..2).map(|_| Client::default()).collect();
    let checker = Checker::new();
    let (mut accepted, mut grants, mut fences) = (0i64, 0usize, Vec::new());
    let keys = LockKeys::new(DEFAULT_PREFIX, "replay").unwrap();
    let mut last_counter: Option<u64> = None;
    let base = Instant::now();
    let mut tick = 0u32;
    for (i, action) in actions.iter().enumerate() {
        match action.clone() {
            Action::Tick => {
                tick += 1;
                tokio::time::sleep_until((base + TICK * tick).into()).await;
                down.store(false, Ordering::SeqCst);
            }
            Action::Send(c) => {
                let then = next_of(actions, i, c, &[Action::Apply, Action::Lose]);
                let applied = then == Some(Action::Apply(c));
                let lost = if applied {
                    next_of(actions, i, c, &[Action::Decide, Action::Lose]) == Some(Action::Lose(c))
                } else {
                    true
                };
                let client = &mut clients[usize::from(c)];
                client.request = Gate::new();
                client.reply = Gate::new();
                client.applied = false;
                let fault = Fault::Staged {
                    request: client.request.clone(),
                    applied,
                    reply: client.reply.clone(),
                    lost: lost.then_some(Injected::Unavailable),
                };
                plans.lock().unwrap().next.entry(usize::from(c)).or_default().push_back(fault);
                let lock = locks[usize::from(c)].clone();
                client.attempt = Some(tokio::spawn(async move {
                    lock.try_acquire("replay", &LockOptions::new(TTL).with_fencing_mode(lock_core::Fencing::OnAcquire))
                        .await
                }));
                assert!(client.request.wait_arrivals(1, Duration::from_secs(10)).await, "the acquire never came");
            }
            Action::Apply(c) => {
                let client = &mut clients[usize::from(c)];
                client.request.open();
                assert!(client.reply.wait_arrivals(1, Duration::from_secs(10)).await, "the acquire never applied");
                client.applied = true;
                // The counter moves only when the server grants: a new value is a grant's fence.
                let counter = server.memory().command(&["GET", keys.fence()]).and_then(|r| r.to_text_lossy());
                let counter = counter.and_then(|v| v.parse::<u64>().ok());
                if counter.is_some() && counter != last_counter {
                    fences.extend(counter);
                }
                last_counter = counter;
            }
            Action::Lose(c) | Action::Decide(c) => {
                let client = &mut clients[usize::from(c)];
                client.request.open();
                client.reply.open();
                let outcome = client.attempt.take().expect("an attempt in flight").await.unwrap();
                match (action, outcome) {
                    (Action::Decide(_), Ok(Some(guard))) => {
                        grants += 1;
                        client.guard = Some((guard, Instant::now()));
                    }
                    (Action::Decide(_), Ok(None) | Err(LockError::ValidityExhausted { .. })) => {}
                    (Action::Lose(_), Err(err)) if lock_testkit::scripted::is_injected(&err) => {}
                    (action, outcome) => panic!("{action:?}: {outcome:?}"),
                }
            }
            Action::Read(c) => {
                let client = &mut clients[usize::from(c)];
                // A correct client reads only while its lease is valid (the model reads only while it believes).
                let Some((guard, _)) = client.guard.as_ref().filter(|(g, _)| Instant::now() < g.valid_until()) else {
                    continue;
                };
                let fence = guard.fence().await.expect("fencing is on by default");
                let read = match resource {
                    Resource::Fenced => match fenced.get(fence, DATA).await {
                        Ok(value) => value,
                        Err(LockError::StaleFence { .. }) => continue,
                        Err(err) => panic!("fenced read: {err}"),
                    },
                    Resource::Plain => data
                        .call(lock_core::backend::Call::plain("read", "GET", &[DATA], &[]))
                        .await
                        .unwrap()
                        .reply
                        .to_text_lossy(),
                };
                client.read = Some(read.and_then(|v| v.parse().ok()).unwrap_or(0));
            }
            Action::Write(c) => {
                let client = &mut clients[usize::from(c)];
                let (Some(read), Some((guard, _))) = (client.read.take(), client.guard.as_ref()) else { continue };
                let fence = guard.fence().await.expect("fencing is on by default");
                let value = (read + 1).to_string();
                let written = match resource {
                    Resource::Fenced => match fenced.set(fence, DATA, &value).await {
                        Ok(()) => true,
                        Err(LockError::StaleFence { .. }) => false,
                        Err(err) => panic!("fenced write: {err}"),
                    },
                    Resource::Plain => {
                        let args = [value.as_str()];
                        data.call(lock_core::backend::Call::plain("write", "SET", &[DATA], &args)).await.unwrap();
                        true
                    }
                };
                accepted += i64::from(written);
            }
            Action::Release(c) => {
                let client = &mut clients[usize::from(c)];
                client.read = None;
                if let Some((guard, since)) = client.guard.take() {
                    checker.record(Hold { owner: format!("client {c}"), ..Hold::as_drawn(&guard, since) });
                    let _ = guard.release().await;
                }
            }
            // The scripted store cannot send a call twice, keep a replica, or stall the engine's monotonic clock.
            Action::Duplicate(_) | Action::ApplyCopy(_) | Action::Failover | Action::Stall(_) => {
                panic!("{action:?} is not replayed")
            }
            Action::Restart => {
                down.store(true, Ordering::SeqCst);
                server.memory().command(&["FLUSHALL"]).expect("FLUSHALL");
                last_counter = None;
                let back = match restart {
                    Restart::Empty => Duration::ZERO,
                    Restart::ClockBack(by) => by,
                    Restart::ClockToEpoch => match server.memory().command(&["TIME"]) {
                        Some(lock_core::backend::Reply::Array(parts)) => {
                            let secs = parts.first().and_then(lock_core::backend::Reply::to_text_lossy);
                            Duration::from_secs(secs.and_then(|s| s.parse().ok()).expect("TIME's seconds"))
                        }
                        other => panic!("TIME: {other:?}"),
                    },
                };
                server.memory().step_clock_back(back);
            }
        }
    }
    for client in &mut clients {
        if let Some((guard, since)) = client.guard.take() {
            checker.record(Hold::as_drawn(&guard, since));
        }
    }
    let report = checker.report();
    let count = data.call(lock_core::backend::Call::plain("count", "GET", &[DATA], &[])).await.unwrap().reply;
    let count = count.to_text_lossy().and_then(|v| v.parse().ok()).unwrap_or(0);
    Replayed { breaches: report.overlaps.len() + report.fence_regressions.len(), accepted, count, grants, fences }
}

fn counterexample(config: Config, property: &'static str) -> Vec<Action> {
    support::first_counterexample(LockModel::new(config), &config, property)
}

fn run(actions: &[Action], resource: Resource) -> Replayed {
    run_with(actions, resource, Restart::Empty)
}

fn run_with(actions: &[Action], resource: Resource, restart: Restart) -> Replayed {
    let replayed = lock_testkit::runtime::tokio(replay(actions, resource, restart));
    println!("  replayed with a {resource:?} resource, restart {restart:?}: {replayed:?}");
    replayed
}

/// The model's counterexample to "one believer" when validity is counted from the reply: a client whose request
/// was applied late trusts its grant past the key's expiry, beside the next holder. The engine counts validity from
/// the request's start, so on it the late grant is given back (or never trusted) and no two holds overlap.
#[test]
fn the_late_grant_schedule_overlaps_no_hold_on_the_engine() {
    let actions = counterexample(Config { validity_from_reply: true, ..Config::default() }, "one believer");
    let replayed = run(&actions, Resource::Fenced);
    assert_eq!(replayed.breaches, 0, "{replayed:?}");
    assert!(replayed.grants >= 2, "the schedule granted too little to test anything: {replayed:?}");
}

/// The model's counterexample to "no lost update" with an unfenced resource (Kleppmann's paused holder): replayed
/// with plain writes it loses an update on the real engine too (the schedule bites); through a `FencedResource` the
/// paused holder's write is refused and nothing is lost. Each `Decide` of the replay agrees with the model's.
#[test]
fn the_paused_holder_schedule_loses_an_update_only_without_the_fenced_resource() {
    let config = Config { fenced_resource: false, ..Config::default() };
    let actions = counterexample(config, "no lost update");
    let plain = run(&actions, Resource::Plain);
    assert!(
        plain.count < plain.accepted,
        "plain writes lost nothing: the replay did not follow the schedule: {plain:?}"
    );
    let fenced = run(&actions, Resource::Fenced);
    assert_eq!(fenced.count, fenced.accepted, "{fenced:?}");
    assert_eq!(fenced.breaches, 0, "{fenced:?}");
    // The engine granted exactly where the model did.
    let states = support::states_along(&LockModel::new(config), &actions);
    let holding = |c: &u8, state: &lock_model::single::State| {
        matches!(state.clients[usize::from(*c)].phase, lock_model::single::Phase::Holding { .. })
    };
    let model_grants =
        actions.iter().zip(&states[1..]).filter(|(a, s)| matches!(a, Action::Decide(c) if holding(c, s))).count();
    assert_eq!(
        (plain.grants, fenced.grants),
        (model_grants, model_grants),
        "the engine's grants differ from the model's"
    );
}

/// The model's counterexample to "fences increase" without the fencing counter's time floor: the server restarts
/// empty between two grants. On the engine the second grant's fence is above the first's (the floor is the
/// server's clock in µs); with the floor made useless (the clock stepped back to the epoch at the restart, so the
/// floor is below every earlier fence, as `counter + 1` alone would be) the same schedule gives a fence that
/// goes backwards.
#[test]
fn the_restart_schedule_keeps_fences_increasing_only_with_the_time_floor() {
    let config = Config { no_fence_floor: true, restarts: 1, ..Config::default() };
    let actions = counterexample(config, "fences increase");
    let engine = run_with(&actions, Resource::Fenced, Restart::Empty);
    assert!(engine.fences.len() >= 2, "the schedule granted too little to test anything: {engine:?}");
    assert!(!engine.fence_regressed(), "{engine:?}");
    let floorless = run_with(&actions, Resource::Fenced, Restart::ClockToEpoch);
    assert!(floorless.fence_regressed(), "the floorless replay kept fences increasing: {floorless:?}");
}

/// The model's counterexample to "fences increase" when the server's clock steps back at a restart (the one
/// assumption of the floor): replayed with the clock stepped back by the model's tick, the fence goes backwards on
/// the engine too; with the clock kept, it does not. The floor rests on the clock, and this is the measure of it.
#[test]
fn the_clock_regression_schedule_gives_a_lower_fence_on_the_engine_too() {
    let config = Config { clock_regression: 1, restarts: 1, ..Config::default() };
    let actions = counterexample(config, "fences increase");
    let kept = run_with(&actions, Resource::Fenced, Restart::Empty);
    assert!(kept.fences.len() >= 2, "the schedule granted too little to test anything: {kept:?}");
    assert!(!kept.fence_regressed(), "{kept:?}");
    let stepped = run_with(&actions, Resource::Fenced, Restart::ClockBack(TICK * 2));
    assert!(stepped.fence_regressed(), "the clock stepped back and fences still increased: {stepped:?}");
}
