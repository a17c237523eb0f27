//! The multi-holder primitives' model checked over every interleaving within its bounds, and shown to have teeth.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use lock_model::holders::{HoldersConfig, HoldersModel, Kind};
use stateright::{Checker, Model};

mod support;

fn check(what: &str, config: HoldersConfig) -> impl Checker<HoldersModel> {
    support::check(what, &config, || HoldersModel::new(config).checker().spawn_bfs().join())
}

fn find(what: &str, config: HoldersConfig, properties: &[&'static str]) {
    support::find(what, &config, properties, |stop| {
        HoldersModel::new(config).checker().finish_when(stop).spawn_bfs().join()
    });
}

#[test]
fn every_multi_holder_primitive_keeps_every_property() {
    for kind in [Kind::Semaphore, Kind::RwLock, Kind::Election] {
        check(&format!("{kind:?}"), HoldersConfig::new(kind)).assert_properties();
    }
}

#[test]
fn one_expiry_for_the_whole_structure_keeps_a_dead_holder_while_others_renew() {
    for kind in [Kind::Semaphore, Kind::RwLock] {
        find(
            &format!("{kind:?}, shared expiry"),
            HoldersConfig { shared_expiry: true, ..HoldersConfig::new(kind) },
            &["a dead holder costs one TTL"],
        );
    }
}

#[test]
fn a_retry_that_is_granted_afresh_holds_two_entries() {
    let config = HoldersConfig { fresh_grant_on_retry: true, ..HoldersConfig::new(Kind::Semaphore) };
    find("fresh grant on retry", config, &["one grant per token"]);
}

#[test]
fn validity_counted_from_the_reply_lets_too_many_believe() {
    for kind in [Kind::Semaphore, Kind::RwLock, Kind::Election] {
        let config = HoldersConfig { validity_from_reply: true, ..HoldersConfig::new(kind) };
        find(&format!("{kind:?}, validity from the reply"), config, &["within the limit"]);
    }
}

/// What the model found first, before it knew that the scripts re-arm a retried entry's expiry: a retry answered
/// with the first try's grant but not its expiry lets the retrying client trust the permit past the server's
/// expiry, and a third client takes it (three believers of two permits).
#[test]
fn a_retry_that_keeps_the_first_tries_expiry_lets_too_many_believe() {
    let config = HoldersConfig { retry_keeps_expiry: true, ..HoldersConfig::new(Kind::Semaphore) };
    find("retry keeps the expiry", config, &["within the limit"]);
}

/// The election with an observer: no lost messages or crashes (the candidates' side is checked above), two reads.
fn observed() -> HoldersConfig {
    HoldersConfig { observer_reads: 2, faults: 0, crashes: 0, ..HoldersConfig::new(Kind::Election) }
}

/// An election with an observer whose two reads' replies may arrive in either order: the observer never names a
/// term below one it named, because it drops a reply older than what it has shown.
#[test]
fn an_election_observer_never_sees_a_term_go_backwards() {
    let config = observed();
    check("election with an observer", config).assert_properties();
}

/// An observer that names whatever a late reply says shows an earlier leader after a later one.
#[test]
fn an_observer_that_takes_a_stale_reply_sees_a_term_go_backwards() {
    let config = HoldersConfig { observer_takes_stale: true, ..observed() };
    find("observer takes stale replies", config, &["observers see terms increase"]);
}
