//! Counterexamples of the Redlock model replayed on the real engine: three scripted servers, and two clients, each a
//! `Lock::redlock` over all three. Each model action becomes one step: an attempt's request to each instance waits
//! at a gate, `Apply` lets that instance apply it and holds the reply, `Decide` delivers the replies the model's
//! client had (so the engine decides on exactly the model's answers, at the model's tick), a write-back waits for its
//! `WriteBack`, a request the engine left behind when it decided (an orphan: on the wire, its caller gone) is applied
//! with its own token and floor at `ApplyOrphan`, and a restart empties an instance (`FLUSHALL`) and refuses calls
//! until the next tick. Model ticks are real time; a lagging client clock is the scripted store's
//! [`with_clock_lag`](lock_testkit::scripted::ScriptedStore::with_clock_lag).
//!
//! The run is checked with the history checker (two holds at once is "one believer" broken) and the fences in the
//! order the engine decided its grants (the model's "fences increase").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::backend::AcquireRequest;
use lock_core::{Guard, Lock, LockKeys, LockOptions, LockStore, Token, DEFAULT_PREFIX};
use lock_model::redlock::{Action, Phase, RedlockConfig, RedlockModel, State, CLIENTS, NODES};
use lock_testkit::scripted::{Fault, Gate, Injected, Op, ScriptedServer};
use lock_testkit::{Checker, Hold};

mod support;

/// One model tick in real time (see `replay.rs`): what happens inside a tick never crosses an expiry or a validity
/// deadline the model put a tick away.
const TICK: Duration = Duration::from_millis(200);
/// The real TTL for the model's 2 ticks: half a tick short, so a key the model expires at `t + 2` is gone by then
/// and one it keeps at `t + 1` is still there, whatever the jitter inside a tick.
const TTL: Duration = Duration::from_millis(300);
/// Bounds nothing in a replay: every call waits at its gate until the schedule lets it through.
const PATIENT: Duration = Duration::from_secs(60);
const WITHIN: Duration = Duration::from_secs(10);

/// How each client's next calls of one instance are staged.
#[derive(Default)]
struct Plans {
    acquire: HashMap<usize, VecDeque<Fault>>,
    raise: HashMap<usize, VecDeque<Fault>>,
}

/// One instance: its server, whether it is restarting, and its staged calls.
struct Instance {
    server: ScriptedServer,
    down: Arc<AtomicBool>,
    plans: Arc<Mutex<Plans>>,
}

impl Instance {
    fn new() -> Self {
        let (server, down, plans) = (ScriptedServer::new(), Arc::new(AtomicBool::new(false)), Arc::default());
        let (refusing, rules): (Arc<AtomicBool>, Arc<Mutex<Plans>>) = (Arc::clone(&down), Arc::clone(&plans));
        server.rule(move |call| {
            let mut plans = rules.lock().unwrap();
            let staged = match call.op {
                Op::Acquire => plans.acquire.get_mut(&call.client).and_then(VecDeque::pop_front),
                Op::RaiseFence => plans.raise.get_mut(&call.client).and_then(VecDeque::pop_front),
                _ => None,
            };
            // A restarting instance applies nothing until the next tick; a staged call was planned with that known.
            staged.or_else(|| refusing.load(Ordering::SeqCst).then_some(Fault::FailBefore(Injected::Unavailable)))
        });
        Instance { server, down, plans }
    }
}

/// An attempt in flight: its task and, per instance, its request's and reply's gates.
struct Attempt {
    task: tokio::task::JoinHandle<lock_core::Result<Option<Guard>>>,
    request: Vec<Gate>,
    reply: Vec<Gate>,
    /// Instances whose answer the model's client has (applied, lost or refused): delivered at `Decide`.
    answered: Vec<bool>,
    /// Per instance, the write-back's gates when the schedule stages one.
    raise: Vec<Option<(Gate, Gate)>>,
}

#[derive(Default)]
struct Client {
    attempt: Option<Attempt>,
    guard: Option<(Guard, Instant)>,
}

/// What a replay saw.
#[derive(Debug)]
struct Replayed {
    /// Pairs of holds at once, by the holders' own validity.
    overlaps: usize,
    /// The fences of the engine's grants in the order it decided them.
    fences: Vec<u64>,
    /// At each decision of the schedule: (the model granted, the engine granted).
    decisions: Vec<(bool, bool)>,
    /// Write-backs the instances applied.
    write_backs: usize,
}

impl Replayed {
    fn fence_regressed(&self) -> bool {
        support::fences_regressed(&self.fences)
    }
}

/// The first of `wanted` after position `from`, with its position.
fn next_among(actions: &[Action], from: usize, wanted: &[Action]) -> Option<(usize, Action)> {
    actions.iter().enumerate().skip(from + 1).find(|(_, a)| wanted.contains(a)).map(|(j, a)| (j, a.clone()))
}

/// A staged call: applied or not, its reply (or the refusal) lost when `lost`.
fn staged(request: &Gate, reply: &Gate, applied: bool, lost: bool) -> Fault {
    Fault::Staged {
        request: request.clone(),
        applied,
        reply: reply.clone(),
        lost: lost.then_some(Injected::Unavailable),
    }
}

async fn replay(config: RedlockConfig, actions: &[Action]) -> Replayed {
    // The model's states along the schedule: `states[i]` is the state action `i` starts from.
    let states: Vec<State> = support::states_along(&RedlockModel::new(config), actions);
    let instances: Vec<Instance> = (0..NODES).map(|_| Instance::new()).collect();
    let locks: Vec<Lock> = (0..CLIENTS)
        .map(|c| {
            let lag = if c == 1 { TICK * u32::from(config.lagging_clock) } else { Duration::ZERO };
            let stores = instances
                .iter()
                .map(|i| Arc::new(i.server.client().with_clock_lag(lag)) as Arc<dyn LockStore>)
                .collect();
            Lock::redlock(stores).with_instance_timeout(PATIENT).build().unwrap().with_operation_timeout(PATIENT)
        })
        .collect();
    let keys = LockKeys::new(DEFAULT_PREFIX, "replay").unwrap();
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| Client::default()).collect();
    let checker = Checker::new();
    let (mut fences, mut decisions) = (Vec::new(), Vec::new());
    let base = Instant::now();
    let mut tick = 0u32;
    for (i, action) in actions.iter().enumerate() {
        let before = &states[i];
        let down = |n: usize, at: usize| states[at].nodes[n].down;
        match action.clone() {
            Action::Tick => {
                tick += 1;
                tokio::time::sleep_until((base + TICK * tick).into()).await;
                for instance in &instances {
                    instance.down.store(false, Ordering::SeqCst);
                }
            }
            Action::Restart(n) => {
                let instance = &instances[usize::from(n)];
                instance.down.store(true, Ordering::SeqCst);
                if !config.persisted {
                    instance.server.memory().command(&["FLUSHALL"]).expect("FLUSHALL");
                }
            }
            Action::Send(c) => {
                let (request, reply): (Vec<Gate>, Vec<Gate>) = (0..NODES).map(|_| (Gate::new(), Gate::new())).unzip();
                for n in 0..NODES {
                    let n8 = u8::try_from(n).unwrap();
                    let wanted =
                        [Action::Apply(c, n8), Action::ApplyLost(c, n8), Action::Drop(c, n8), Action::Decide(c)];
                    let fault = match next_among(actions, i, &wanted) {
                        Some((j, Action::Apply(..))) => staged(&request[n], &reply[n], !down(n, j), down(n, j)),
                        Some((j, Action::ApplyLost(..))) => staged(&request[n], &reply[n], !down(n, j), true),
                        // Lost before it applied, or still on its way when the client decides (the engine drops it;
                        // the schedule may apply it later as an orphan).
                        _ => staged(&request[n], &reply[n], false, true),
                    };
                    instances[n].plans.lock().unwrap().acquire.entry(usize::from(c)).or_default().push_back(fault);
                }
                let lock = locks[usize::from(c)].clone();
                let task = tokio::spawn(async move {
                    lock.try_acquire("replay", &LockOptions::new(TTL).with_fencing_mode(lock_core::Fencing::OnAcquire))
                        .await
                });
                for gate in &request {
                    assert!(gate.wait_arrivals(1, WITHIN).await, "an acquire never left");
                }
                let answered = vec![false; NODES];
                let raise = vec![None; NODES];
                clients[usize::from(c)].attempt = Some(Attempt { task, request, reply, answered, raise });
            }
            Action::Apply(c, n) | Action::ApplyLost(c, n) | Action::Drop(c, n) => {
                let n = usize::from(n);
                let attempt = clients[usize::from(c)].attempt.as_mut().expect("an attempt in flight");
                attempt.answered[n] = true;
                if !matches!(action, Action::Drop(..)) && !down(n, i) {
                    attempt.request[n].open();
                    assert!(attempt.reply[n].wait_arrivals(1, WITHIN).await, "an acquire never applied");
                }
            }
            Action::Decide(c) => {
                let after = &states[i + 1].clients[usize::from(c)].phase;
                let attempt = clients[usize::from(c)].attempt.as_mut().expect("an attempt in flight");
                if let Phase::WritingBack { pending, .. } = after {
                    for n in (0..NODES).filter(|n| pending[*n]) {
                        let n8 = u8::try_from(n).unwrap();
                        let (j, _) = next_among(actions, i, &[Action::WriteBack(c, n8)]).expect("its write-back");
                        let (request, reply) = (Gate::new(), Gate::new());
                        let fault = staged(&request, &reply, !down(n, j), down(n, j));
                        instances[n].plans.lock().unwrap().raise.entry(usize::from(c)).or_default().push_back(fault);
                        attempt.raise[n] = Some((request, reply));
                    }
                }
                for n in (0..NODES).filter(|n| attempt.answered[*n]) {
                    attempt.request[n].open();
                    attempt.reply[n].open();
                }
                if !matches!(after, Phase::WritingBack { .. }) {
                    let granted = matches!(after, Phase::Holding { .. });
                    let engine = finish(&mut clients[usize::from(c)], &mut fences).await;
                    decisions.push((granted, engine));
                }
            }
            Action::WriteBack(c, n) => {
                let attempt = clients[usize::from(c)].attempt.as_ref().expect("an attempt in flight");
                let (request, reply) = attempt.raise[usize::from(n)].as_ref().expect("a staged write-back");
                assert!(request.wait_arrivals(1, WITHIN).await, "the engine wrote no fence back where the model did");
                request.open();
                reply.open();
            }
            Action::Confirm(c) => {
                let granted = matches!(states[i + 1].clients[usize::from(c)].phase, Phase::Holding { .. });
                let engine = finish(&mut clients[usize::from(c)], &mut fences).await;
                decisions.push((granted, engine));
            }
            Action::ApplyOrphan(o) => {
                let ((c, try_no), n, _) = before.orphans[usize::from(o)];
                let n = usize::from(n);
                if !down(n, i) {
                    // The request the engine dropped when it decided, as it was sent: its token and its floor.
                    let sent: Vec<_> = instances[n]
                        .server
                        .log()
                        .into_iter()
                        .filter(|l| l.call.op == Op::Acquire && l.call.client == usize::from(c))
                        .collect();
                    let sent = &sent[usize::from(try_no) - 1];
                    let token: Token = sent.call.token.clone();
                    let request = AcquireRequest {
                        keys: &keys,
                        token: &token,
                        ttl: TTL,
                        fencing: true,
                        fence_floor: sent.fence_floor,
                        replicas: None,
                        waiting_as: None,
                    };
                    LockStore::acquire(instances[n].server.memory(), request).await.expect("the orphan applied");
                }
            }
            Action::DropOrphan(_) => {}
            Action::Release(c) => {
                if let Some((guard, since)) = clients[usize::from(c)].guard.take() {
                    checker.record(Hold { owner: format!("client {c}"), ..Hold::as_drawn(&guard, since) });
                    let _ = guard.release().await;
                }
            }
        }
    }
    for (c, client) in clients.iter_mut().enumerate() {
        if let Some((guard, since)) = client.guard.take() {
            checker.record(Hold { owner: format!("client {c}"), ..Hold::as_drawn(&guard, since) });
        }
    }
    let write_backs = instances
        .iter()
        .map(|i| i.server.log().iter().filter(|l| l.call.op == Op::RaiseFence && l.applied).count())
        .sum();
    Replayed { overlaps: checker.report().overlaps.len(), fences, decisions, write_backs }
}

/// Awaits a client's attempt: whether the engine granted (its guard and fence kept).
async fn finish(client: &mut Client, fences: &mut Vec<u64>) -> bool {
    let attempt = client.attempt.take().expect("an attempt in flight");
    match attempt.task.await.unwrap() {
        Ok(Some(guard)) => {
            fences.push(guard.fence().await.expect("fencing is on by default").get());
            client.guard = Some((guard, Instant::now()));
            true
        }
        Ok(None) => false,
        Err(err) => {
            println!("  an attempt failed: {err}");
            false
        }
    }
}

fn counterexample(config: RedlockConfig, property: &'static str) -> Vec<Action> {
    support::first_counterexample(RedlockModel::new(config), &config, property)
}

fn run(config: RedlockConfig, actions: &[Action]) -> Replayed {
    let replayed = lock_testkit::runtime::tokio(replay(config, actions));
    println!("  replayed: {replayed:?}");
    replayed
}

/// The published Redlock limit and what the model found beyond it, on the real engine: an instance restarts empty
/// inside client 0's quorum, and client 1, whose attempt starts after that restart, gets a quorum of its own. Both
/// hold at once, and client 0, which decides last, holds the lower fence (its floor is older). FAULTS.md and the
/// Redlock docs state both; this replay shows the engine does exactly what the model does, decision for decision.
#[test]
fn the_empty_restart_schedule_grants_twice_and_orders_fences_by_start_on_the_engine_too() {
    let config = RedlockConfig { restarts: 1, tries: [1, 1], ..RedlockConfig::default() };
    let actions = counterexample(config, "one believer");
    let replayed = run(config, &actions);
    assert!(replayed.decisions.iter().all(|(model, engine)| model == engine), "{replayed:?}");
    assert_eq!(replayed.decisions.iter().filter(|(_, engine)| *engine).count(), 2, "{replayed:?}");
    assert!(replayed.overlaps >= 1, "the two grants did not overlap: {replayed:?}");
    assert!(replayed.fence_regressed(), "the later decision did not hold the lower fence: {replayed:?}");
}

/// The model's counterexample to "fences increase" without the write-back, with client 1's clock 3 ticks behind:
/// its floor lies below the fence its quorum's other instance already gave out, so `t = max` of its quorum's
/// counters is only safe once written back. On the engine (which writes back) the same schedule, orphans and all,
/// keeps fences increasing and never has two holders; the write-backs it ran are what the model's bug leaves out.
#[test]
fn the_lagging_clock_schedule_keeps_fences_increasing_on_the_engine() {
    let config = RedlockConfig { lagging_clock: 3, no_write_back: true, tries: [1, 2], ..RedlockConfig::default() };
    let actions = counterexample(config, "fences increase");
    let replayed = run(config, &actions);
    assert!(replayed.fences.len() >= 2, "the schedule granted too little to test anything: {replayed:?}");
    assert!(!replayed.fence_regressed(), "{replayed:?}");
    assert_eq!(replayed.overlaps, 0, "{replayed:?}");
    assert!(replayed.write_backs >= 1, "no quorum disagreed, so the schedule tested no write-back: {replayed:?}");
}

/// The same bug's counterexample as a full breadth-first run of the model first reports it (21 steps): two requests
/// the engine dropped when it decided reach their instances later (`ApplyOrphan`), each with its own token and the
/// floor it was sent with. Kept as a fixture (the full run takes a minute), and checked to be a path of the model
/// that breaks "fences increase" without the write-back, so it cannot drift from the model.
const WITH_ORPHANS: &[Action] = &[
    Action::Send(1),
    Action::Send(0),
    Action::Apply(0, 1),
    Action::Apply(0, 2),
    Action::Decide(0),
    Action::Release(0),
    Action::Apply(1, 0),
    Action::Apply(1, 2),
    Action::Decide(1),
    Action::Release(1),
    Action::Send(1),
    Action::Apply(1, 0),
    Action::ApplyLost(1, 2),
    Action::Tick,
    Action::Apply(1, 1),
    Action::ApplyOrphan(1),
    Action::Decide(1),
    Action::Tick,
    Action::ApplyOrphan(0),
    Action::Tick,
    Action::Release(1),
];

#[test]
fn the_lagging_clock_schedule_with_late_orphans_keeps_fences_increasing_on_the_engine() {
    let config = RedlockConfig { lagging_clock: 3, no_write_back: true, tries: [1, 2], ..RedlockConfig::default() };
    let states = support::states_along(&RedlockModel::new(config), WITH_ORPHANS);
    assert!(
        states.last().is_some_and(|s| s.fence_regressed),
        "the fixture no longer breaks the model without the write-back"
    );
    let replayed = run(config, WITH_ORPHANS);
    assert!(replayed.fences.len() >= 2, "the schedule granted too little to test anything: {replayed:?}");
    assert!(!replayed.fence_regressed(), "{replayed:?}");
    assert_eq!(replayed.overlaps, 0, "{replayed:?}");
    assert!(replayed.write_backs >= 1, "no quorum disagreed, so the schedule tested no write-back: {replayed:?}");
}
