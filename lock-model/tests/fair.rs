//! The fair queue's model checked over every interleaving within its bounds, and shown to have teeth.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use lock_model::fair::{FairConfig, FairModel};
use stateright::{Checker, Model};

mod support;

fn check(what: &str, config: FairConfig) -> impl Checker<FairModel> {
    support::check(what, &config, || FairModel::new(config).checker().spawn_bfs().join())
}

fn find(what: &str, config: FairConfig, properties: &[&'static str]) {
    support::find(what, &config, properties, |stop| {
        FairModel::new(config).checker().finish_when(stop).spawn_bfs().join()
    });
}

#[test]
fn the_fair_queue_keeps_every_property() {
    check("fair queue", FairConfig::default()).assert_properties();
}

#[test]
fn handing_the_lock_to_an_expired_place_is_caught() {
    let config = FairConfig { grant_expired_places: true, ..FairConfig::default() };
    find("grant expired places", config, &["no grant to an expired place"]);
}

#[test]
fn a_newcomer_barging_past_the_queue_is_caught() {
    find("barging", FairConfig { barging: true, ..FairConfig::default() }, &["ticket order"]);
}

/// Liveness, with every live client acting once per tick: one client may crash anywhere (holding, queued at the
/// head, or between), and every other client still gets the lock before time runs out.
#[test]
fn every_live_client_gets_the_lock_when_a_holder_or_the_head_dies() {
    check("fair queue, liveness", FairConfig::liveness()).assert_properties();
}

/// A place without its own expiry (the queue kept alive by whoever is still waiting): a waiter that dies at the head
/// blocks everyone behind it, and the liveness property finds it.
#[test]
fn a_dead_waiter_whose_place_never_expires_starves_the_queue() {
    let config = FairConfig { places_never_expire: true, ..FairConfig::liveness() };
    find("places never expire", config, &["every live client gets the lock"]);
}

/// The liveness bound is not vacuous: with too few ticks for a dead holder's lease to run out and the queue to
/// move on, the same check finds a client left without the lock.
#[test]
fn with_too_few_ticks_the_liveness_check_fails() {
    let config = FairConfig { max_t: 5, ..FairConfig::liveness() };
    find("liveness over 5 ticks", config, &["every live client gets the lock"]);
}
