//! The fair queue's model checked over every interleaving within its bounds, and shown to have teeth.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and report

use std::time::Instant;

use lock_model::fair::{FairConfig, FairModel};
use stateright::{Checker, HasDiscoveries, Model};

fn check(what: &str, config: FairConfig) -> impl Checker<FairModel> {
    let t0 = Instant::now();
    let checker = FairModel::new(config).checker().spawn_bfs().join();
    println!(
        "{what}: {} states ({} unique) in {:?}, {config:?}",
        checker.state_count(),
        checker.unique_state_count(),
        t0.elapsed()
    );
    checker
}

/// Explores `config` until it finds a counterexample to every one of `properties` (a bug's teeth need no more).
fn find(what: &str, config: FairConfig, properties: &[&'static str]) -> impl Checker<FairModel> {
    let stop = HasDiscoveries::AllOf(properties.iter().copied().collect());
    let checker = FairModel::new(config).checker().finish_when(stop).spawn_bfs().join();
    println!("{what}: stopped after {} states, {config:?}", checker.state_count());
    for property in properties {
        counterexample(&checker, property);
    }
    checker
}

fn counterexample(checker: &impl Checker<FairModel>, property: &'static str) {
    let path = checker.assert_any_discovery(property);
    println!("  {property}: counterexample in {} steps: {:?}", path.clone().into_actions().len(), path.into_actions());
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
    let checker = check("barging", FairConfig { barging: true, ..FairConfig::default() });
    counterexample(&checker, "ticket order");
    checker.assert_no_discovery("one believer");
}
