//! The SQL recipe of `lock_core::fenced` on SQLite, with fences from a real lock: every interleaving of three
//! holders that each believe they hold (the older ones paused past their leases) adding to one balance loses no
//! acknowledged add through the fenced statements, and some interleaving loses one without them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use examples::fenced_sql::Accounts;
use lock_core::{FencingToken, Lock, LockError, LockOptions, MemoryStore};
use lock_testkit::fenced_conformance::interleavings;

async fn fences(n: usize) -> Vec<FencingToken> {
    let lock = Lock::new(MemoryStore::new());
    let mut fences = Vec::new();
    for _ in 0..n {
        let guard = lock.acquire("accounts/alice", &LockOptions::new(Duration::from_secs(5))).await.unwrap();
        fences.push(guard.fence().await.expect("fencing is on by default"));
        guard.release().await.unwrap();
    }
    fences
}

/// Runs one interleaving: each holder reads then writes balance + 10. Returns (adds acknowledged, final balance,
/// writes refused).
fn run(order: &[usize], fences: &[FencingToken], fenced: bool) -> (i64, i64, usize) {
    let accounts = Accounts::in_memory().unwrap();
    accounts.open("alice", 100).unwrap();
    let mut read: Vec<Option<Option<i64>>> = vec![None; fences.len()];
    let (mut acknowledged, mut refused) = (0, 0);
    for &holder in order {
        match read[holder].take() {
            None => {
                let seen = if fenced {
                    match accounts.read(fences[holder], "alice") {
                        Ok(balance) => Some(balance),
                        Err(LockError::StaleFence { .. }) => None,
                        Err(err) => panic!("read: {err}"),
                    }
                } else {
                    Some(accounts.balance("alice").unwrap())
                };
                read[holder] = Some(seen);
            }
            Some(None) => refused += 1,
            Some(Some(balance)) => {
                let written = if fenced {
                    match accounts.write(fences[holder], "alice", balance + 10) {
                        Ok(()) => true,
                        Err(LockError::StaleFence { presented, current }) => {
                            assert!(presented < current);
                            false
                        }
                        Err(err) => panic!("write: {err}"),
                    }
                } else {
                    accounts.write_unfenced("alice", balance + 10).unwrap();
                    true
                };
                if written {
                    acknowledged += 1;
                } else {
                    refused += 1;
                }
            }
        }
    }
    (acknowledged, accounts.balance("alice").unwrap(), refused)
}

#[tokio::test]
async fn fenced_statements_lose_no_add_in_any_interleaving_and_plain_ones_do() {
    let fences = fences(3).await;
    let orders = interleavings(&[2, 2, 2]);
    assert_eq!(orders.len(), 90);
    let (mut refused, mut losing) = (0, 0);
    for order in &orders {
        let (acknowledged, balance, stale) = run(order, &fences, true);
        assert_eq!(balance, 100 + 10 * acknowledged, "order {order:?}: an acknowledged add was lost");
        refused += stale;
        let (acknowledged, balance, _) = run(order, &fences, false);
        if balance < 100 + 10 * acknowledged {
            losing += 1;
        }
    }
    assert!(refused > 0, "no interleaving refused a stale holder: the case proves nothing");
    assert!(losing > 0, "no interleaving lost an add without fences: the workload does not bite");
}

#[test]
fn a_refusal_names_the_newer_fence_and_bad_input_is_typed() {
    let accounts = Accounts::in_memory().unwrap();
    accounts.open("bob", 1).unwrap();
    accounts.write(FencingToken::new(9), "bob", 2).unwrap();
    match accounts.read(FencingToken::new(4), "bob") {
        Err(LockError::StaleFence { presented: 4, current: 9 }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(accounts.write(FencingToken::new(9), "nobody", 1), Err(LockError::InvalidArgument(_))));
    assert!(matches!(accounts.read(FencingToken::new(u64::MAX), "bob"), Err(LockError::InvalidArgument(_))));
    assert_eq!(accounts.balance("bob").unwrap(), 2);
}
