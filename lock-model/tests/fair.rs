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
