//! The lock model checked breadth-first over every interleaving within its bounds, and shown to have teeth: each
//! re-introduced bug, and each broken assumption, yields a counterexample.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use lock_model::{Config, LockModel};
use stateright::{Checker, Model};

mod support;

fn check(what: &str, config: Config) -> impl Checker<LockModel> {
    support::check(what, &config, || LockModel::new(config).checker().spawn_bfs().join())
}

fn find(what: &str, config: Config, properties: &[&'static str]) {
    support::find(what, &config, properties, |stop| {
        LockModel::new(config).checker().finish_when(stop).spawn_bfs().join()
    });
}

fn counterexample(checker: &impl Checker<LockModel>, property: &'static str) {
    support::counterexample(checker, property);
}

#[test]
fn the_engine_keeps_every_property() {
    let checker = check("the engine", Config::default());
    checker.assert_properties();
}

/// A duplicated acquire (resent after a broken connection, or by a redirection) that reaches the server after its
/// client gave up, released or tried again takes the key with that try's token: nobody believes it, no fence goes
/// backwards, the resource loses nothing; the lock is taken until the key's TTL. CI checks 6 ticks (9.3 M states);
/// `LOCK_MODEL_DEEP=1` the usual 8 (29 M).
#[test]
fn a_duplicated_acquire_costs_a_ttl_and_nothing_else() {
    let max_t = if support::deep() { 8 } else { 6 };
    check("a duplicated acquire", Config { duplicates: 1, max_t, ..Config::default() }).assert_properties();
}

#[test]
fn a_restart_without_persistence_frees_the_lock_but_fences_and_the_fenced_resource_hold() {
    let checker = check("one restart", Config { restarts: 1, ..Config::default() });
    counterexample(&checker, "one believer");
    checker.assert_no_discovery("no lost update");
    checker.assert_no_discovery("fences increase");
}

#[test]
fn validity_counted_from_the_reply_lets_two_clients_believe_they_hold() {
    find("validity from the reply", Config { validity_from_reply: true, ..Config::default() }, &["one believer"]);
}

#[test]
fn a_fence_without_the_time_floor_repeats_after_a_restart() {
    find("no fence floor", Config { no_fence_floor: true, restarts: 1, ..Config::default() }, &["fences increase"]);
}

#[test]
fn a_clock_stepped_back_at_a_restart_can_repeat_a_fence() {
    let config = Config { clock_regression: 1, restarts: 1, ..Config::default() };
    find("clock regression", config, &["fences increase"]);
}

#[test]
fn without_fencing_at_the_resource_a_paused_holder_loses_an_update() {
    let checker = check("unfenced resource", Config { fenced_resource: false, ..Config::default() });
    checker.assert_no_discovery("one believer");
    counterexample(&checker, "no lost update");
}

/// A failover to a replica the last grant had not reached frees the lock (two believers, as a restart without
/// persistence does), but fences still increase and the fenced resource loses nothing: the replica's counter is
/// older, and the time floor lifts it. CI checks 5 ticks (4.9 M states); `LOCK_MODEL_DEEP=1` the usual 8 (26 M, 7.4 M unique).
#[test]
fn a_failover_to_a_replica_without_the_key_frees_the_lock_but_fences_hold() {
    let max_t = if support::deep() { 8 } else { 5 };
    let checker = check("one failover", Config { failovers: 1, max_t, ..Config::default() });
    counterexample(&checker, "one believer");
    checker.assert_no_discovery("no lost update");
    checker.assert_no_discovery("fences increase");
}

/// A failover to a host whose clock is a tick behind, within a tick of the last grant: the floor is below that
/// grant's fence and the replica's counter had not seen it, so a fence repeats. The floor needs the failover to take
/// longer than the clocks differ (Sentinel's is seconds, NTP keeps hosts within milliseconds).
#[test]
fn a_failover_to_a_host_whose_clock_is_behind_can_repeat_a_fence() {
    find(
        "failover, clock behind",
        Config { failovers: 1, replica_behind: 1, ..Config::default() },
        &["fences increase"],
    );
}

/// A holder's clock that stalls (a suspended VM: `Instant` does not count suspend on Linux) counts less time than
/// passed, beyond any drift allowance: it believes past its key's expiry beside the next holder (the kept
/// counterexample, Kleppmann's case again), and the fenced resource refuses its writes. CI checks 6 ticks;
/// `LOCK_MODEL_DEEP=1` the usual 8 (8.1 M states).
#[test]
fn a_stalled_client_clock_believes_past_its_lease_but_the_fenced_resource_holds() {
    let max_t = if support::deep() { 8 } else { 6 };
    let checker = check("clock stall", Config { clock_stalls: 1, max_t, ..Config::default() });
    counterexample(&checker, "one believer");
    checker.assert_no_discovery("no lost update");
    checker.assert_no_discovery("fences increase");
}
