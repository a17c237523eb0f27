//! The Redlock model checked breadth-first over every interleaving within its bounds, and shown to have teeth.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use lock_model::redlock::{RedlockConfig, RedlockModel};
use stateright::{Checker, Model};

mod support;

fn check(what: &str, config: RedlockConfig) -> impl Checker<RedlockModel> {
    support::check(what, &config, || RedlockModel::new(config).checker().symmetry().spawn_dfs().join())
}

fn find(what: &str, config: RedlockConfig, properties: &[&'static str]) {
    support::find(what, &config, properties, |stop| {
        RedlockModel::new(config).checker().finish_when(stop).symmetry().spawn_dfs().join()
    });
}

use support::deep;

/// Clocks in step, client 0 trying twice: 17.3 M states (4.9 M unique), about 10 s.
#[test]
fn redlock_keeps_every_property() {
    let checker = check("redlock", RedlockConfig::default());
    checker.assert_properties();
}

/// A lagging client clock: its floors lag the fences already issued, so quorums disagree and the write-back runs.
/// The lagging client tries twice (its second quorum is where a missing write-back shows: 16.8 M states);
/// `LOCK_MODEL_DEEP=1` lets client 0 try twice too (851 M states, 208 M unique: 11 minutes).
#[test]
fn redlock_fences_increase_with_a_lagging_client_clock() {
    let tries = if deep() { [2, 2] } else { [1, 2] };
    let checker = check("lagging clock", RedlockConfig { lagging_clock: 3, tries, ..RedlockConfig::default() });
    checker.assert_properties();
}

/// The lagging client tries twice: its first quorum takes `t` from the one instance that saw a newer fence, and its
/// second meets the other instance that did at `t` again, while the lagging instance of both never learnt `t`.
#[test]
fn without_the_write_back_a_lagging_client_gets_an_older_fence() {
    let config = RedlockConfig { lagging_clock: 3, no_write_back: true, tries: [1, 2], ..RedlockConfig::default() };
    find("no write-back", config, &["fences increase"]);
}

/// The published Redlock limit, and what the model found beyond it: an instance that restarts empty inside the
/// holder's quorum can grant the lock again (two believers), and it can also repeat a fence. The floor is the
/// acquiring client's clock when its attempt *started*: an attempt that started before the holder's and reaches
/// the restarted instance late carries an older floor, so the restarted counter, and a quorum whose other instance
/// never saw the holder's fence, stay at or below it. Fences increase across such a restart only for attempts that
/// start after the earlier grant (FAULTS.md, "Model").
#[test]
fn an_instance_restarting_empty_inside_a_quorum_grants_twice_and_can_repeat_a_fence() {
    let restart = RedlockConfig { restarts: 1, tries: [1, 1], ..RedlockConfig::default() };
    find("restart", restart, &["one believer", "fences increase"]);
}

#[test]
fn an_instance_that_persists_keeps_the_lock_and_the_fences_across_a_restart() {
    let persisted = RedlockConfig { restarts: 1, persisted: true, tries: [1, 1], ..RedlockConfig::default() };
    let checker = check("restart, persisted", persisted);
    checker.assert_properties();
}
