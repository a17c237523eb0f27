//! The election cases every backend's [`DistributedElection`] passes, through
//! [`DistributedLock::election`](lock_core::DistributedLock::election) (on Redis, lock-core's `Election`; on etcd,
//! the `concurrency` recipe): one leader at a time, terms that strictly increase, `leader()` and `observe()` that
//! see the leader, its value and its resignation, a waiting candidate elected when the leader resigns, and bad input
//! refused before any I/O. Times scale with the subject ([`Subject::time_scale`](crate::Subject::time_scale)).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::StreamExt;
use lock_core::{DistributedElection, ElectionOptions, LockError, ReleaseOutcome};

use crate::checker::{Checker, Hold};
use crate::conformance::{ok, STARVED};
use crate::runtime::sleep;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("leader:{case}:{:016x}", rand::random::<u64>())
}

/// Quick elections: lease 600 ms, renew deadline 400 ms, retry period 100 ms, scaled.
fn options(s: &Subject) -> ElectionOptions {
    ElectionOptions::default().with_lease(s.ms(600)).with_renew_deadline(s.ms(400)).with_retry_period(s.ms(100))
}

fn election(s: &Subject, name: &str) -> Box<dyn DistributedElection> {
    ok(s.lock().election(name, options(s)), "election")
}

/// Four candidates campaign at once, each leading a short while then resigning, three times: never two leaders at
/// once (by their own validity), and every term above the one before.
pub async fn one_leader_at_a_time_and_terms_increase(s: &Subject) {
    let name = fresh("one");
    let checker = Arc::new(Checker::new());
    let candidates = (0..4).map(|i| {
        let (election, checker) = (election(s, &name), checker.clone());
        async move {
            let mut terms = Vec::new();
            for _ in 0..3 {
                let leader = ok(election.campaign(&format!("c{i}"), "v").await, "campaign");
                let start = Instant::now();
                sleep(Duration::from_millis(5)).await;
                let end = Instant::now().min(leader.valid_until());
                checker.record(Hold { owner: format!("c{i}"), fence: Some(leader.term().get()), start, end });
                terms.push(leader.term());
                assert_eq!(ok(leader.resign().await, "resign"), ReleaseOutcome::Released);
            }
            terms
        }
    });
    let terms: Vec<_> = join_all(candidates).await.into_iter().flatten().collect();
    let report = checker.report();
    assert_eq!(report.holds, 12);
    assert!(report.overlaps.is_empty(), "two leaders at once: {:?}", report.overlaps);
    assert!(report.fence_regressions.is_empty(), "terms went back: {:?}", report.fence_regressions);
    let mut sorted = terms.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), terms.len(), "a term was given twice: {terms:?}");
}

/// `leader()` names the leader, its value and its term; a proclamation changes the value; observers see the leader,
/// the new value, and nobody after the resignation; a second candidate's `try_campaign` is refused meanwhile.
pub async fn leader_and_observers_see_the_leader_and_its_value(s: &Subject) {
    let name = fresh("seen");
    let e = election(s, &name);
    assert!(ok(e.leader().await, "leader").is_none(), "nobody leads a new election");
    let mut observed = e.observe();
    let first = ok(observed.next().await.unwrap_or_else(|| panic!("observe ended")), "observe");
    assert!(first.is_none(), "an observer of a new election sees nobody: {first:?}");
    let leader = ok(e.campaign("replica-a", "10.0.0.7:9000").await, "campaign");
    let seen = ok(e.leader().await, "leader").unwrap_or_else(|| panic!("nobody leads after a campaign"));
    assert_eq!((seen.id.as_str(), seen.value.as_str(), seen.term), ("replica-a", "10.0.0.7:9000", leader.term()));
    let other = election(s, &name);
    assert!(ok(other.try_campaign("replica-b", "x").await, "try_campaign").is_none(), "a second leader");
    let next = ok(observed.next().await.unwrap_or_else(|| panic!("observe ended")), "observe");
    assert_eq!(next.map(|l| (l.id, l.value)), Some(("replica-a".to_owned(), "10.0.0.7:9000".to_owned())));
    ok(leader.proclaim("10.0.0.7:9001").await, "proclaim");
    let seen = ok(e.leader().await, "leader").map(|l| l.value);
    assert_eq!(seen.as_deref(), Some("10.0.0.7:9001"));
    let next = ok(observed.next().await.unwrap_or_else(|| panic!("observe ended")), "observe");
    assert_eq!(next.map(|l| l.value).as_deref(), Some("10.0.0.7:9001"));
    assert_eq!(ok(leader.resign().await, "resign"), ReleaseOutcome::Released);
    let next = ok(observed.next().await.unwrap_or_else(|| panic!("observe ended")), "observe");
    assert!(next.is_none(), "observers see nobody after the resignation: {next:?}");
}

/// A candidate waiting behind the leader is elected promptly when it resigns, with a higher term.
pub async fn a_waiting_candidate_is_elected_when_the_leader_resigns(s: &Subject) {
    let name = fresh("handover");
    let (a, b) = (election(s, &name), election(s, &name));
    let first = ok(a.campaign("a", "1").await, "campaign a");
    let first_term = first.term();
    let waiting = async {
        let leader = ok(b.campaign("b", "2").await, "campaign b");
        (Instant::now(), leader)
    };
    let resigning = async {
        sleep(s.ms(150)).await;
        let at = Instant::now();
        assert_eq!(ok(first.resign().await, "resign"), ReleaseOutcome::Released);
        at
    };
    let ((elected_at, second), resigned_at) = futures_util::future::join(waiting, resigning).await;
    assert!(elected_at >= resigned_at, "b was elected before a resigned");
    // A hand-over within the retry period (plus a starved scheduler), never the whole lease.
    let gap = elected_at - resigned_at;
    assert!(gap < s.ms(100) + STARVED, "b waited {gap:?} after the resignation");
    assert!(second.term() > first_term, "term {} after {first_term}", second.term());
    assert_eq!(ok(second.resign().await, "resign"), ReleaseOutcome::Released);
}

/// Bad ids and values are `InvalidArgument`, before any I/O (at once), and elect nobody.
pub async fn bad_candidates_are_refused_before_any_io(s: &Subject) {
    let name = fresh("bad");
    let e = election(s, &name);
    for (id, value) in [("", "v"), ("a\nb", "v"), ("ok", "line\nbreak")] {
        let t0 = Instant::now();
        let err = e.try_campaign(id, value).await.err();
        assert!(matches!(err, Some(LockError::InvalidArgument(_))), "{id:?}/{value:?}: {err:?}");
        assert!(t0.elapsed() < STARVED);
    }
    assert!(ok(e.leader().await, "leader").is_none());
    assert!(matches!(s.lock().election("", options(s)), Err(LockError::InvalidArgument(_))));
}
