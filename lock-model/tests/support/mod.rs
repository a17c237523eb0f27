//! What every model test does: check a model over every interleaving, or until it finds a bug's counterexample,
//! and print what was explored. The caller says how to explore (breadth-first, or depth-first up to a symmetry).
#![allow(dead_code, clippy::print_stdout, clippy::expect_used)] // each test file uses part of it; it reports

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

/// Whether `LOCK_MODEL_DEEP` asks for the larger bounds (CI runs the smaller ones: its time budget).
pub fn deep() -> bool {
    std::env::var_os("LOCK_MODEL_DEEP").is_some()
}

/// Checks a model over every interleaving within its bounds: `explore` runs the checker to the end.
pub fn check<M, C>(what: &str, config: &dyn Debug, explore: impl FnOnce() -> C) -> C
where
    M: Model,
    C: Checker<M>,
{
    let t0 = Instant::now();
    let checker = explore();
    println!(
        "{what}: {} states ({} unique) in {:?}, {config:?}",
        checker.state_count(),
        checker.unique_state_count(),
        t0.elapsed()
    );
    checker
}

/// Explores until there is a counterexample to every one of `properties` (a bug's teeth need no more): `explore`
/// runs the checker with the stop condition it is given. Prints each counterexample.
pub fn find<M, C>(
    what: &str,
    config: &dyn Debug,
    properties: &[&'static str],
    explore: impl FnOnce(HasDiscoveries) -> C,
) where
    M: Model,
    M::State: Debug + Hash + Clone + PartialEq,
    M::Action: Debug + Clone + PartialEq,
    C: Checker<M>,
{
    let checker = explore(HasDiscoveries::AllOf(properties.iter().copied().collect()));
    println!("{what}: stopped after {} states, {config:?}", checker.state_count());
    for property in properties {
        counterexample(&checker, property);
    }
}

/// Asserts a counterexample to `property` and prints it.
pub fn counterexample<M, C>(checker: &C, property: &'static str)
where
    M: Model,
    M::State: Debug + Hash + Clone + PartialEq,
    M::Action: Debug + Clone + PartialEq,
    C: Checker<M>,
{
    let path = checker.assert_any_discovery(property);
    println!("  {property}: counterexample in {} steps: {:?}", path.clone().into_actions().len(), path.into_actions());
}

/// The shortest counterexample to `property` (breadth-first, stopping at the first one found), printed: the
/// schedule a replay drives the engine through.
pub fn first_counterexample<M>(model: M, config: &dyn Debug, property: &'static str) -> Vec<M::Action>
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Clone + PartialEq + Send + Sync,
    M::Action: Debug + Clone + PartialEq + Send + Sync,
{
    let stop = HasDiscoveries::AnyOf([property].into_iter().collect());
    let checker = model.checker().finish_when(stop).spawn_bfs().join();
    let actions = checker.discovery(property).expect("a counterexample").into_actions();
    println!("{property} ({config:?}): {} steps: {actions:?}", actions.len());
    actions
}

/// The states `model` passes through along `actions` (`[i]` is the one action `i` starts from), each action checked
/// to be one the model offers there: a schedule kept as a fixture cannot drift from the model.
pub fn states_along<M>(model: &M, actions: &[M::Action]) -> Vec<M::State>
where
    M: Model,
    M::Action: Debug + Clone + PartialEq,
{
    let mut states = model.init_states();
    states.truncate(1);
    for action in actions {
        let state = states.last().expect("an initial state");
        let mut offered = Vec::new();
        model.actions(state, &mut offered);
        assert!(offered.contains(action), "{action:?} is not a step of the model here");
        let next = model.next_state(state, action.clone()).expect("a step of the model");
        states.push(next);
    }
    states
}

/// Whether a fence, in the order the fences were granted, is not above every fence granted before it.
pub fn fences_regressed(fences: &[u64]) -> bool {
    fences.iter().enumerate().any(|(i, f)| fences[..i].iter().any(|earlier| earlier >= f))
}
