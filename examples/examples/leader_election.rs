//! Leader election: three replicas of a toy service elect a leader, which writes heartbeats to a shared store
//! with its term; the store refuses a term lower than the highest it has seen (fencing). The leader's replica is
//! then killed, and the example prints the hand-over: who leads, with which term, and how long nobody led.
//!
//! ```text
//! cargo run -p examples --example leader_election
//! ```
//!
//! Backend choice, as the quickstart: `REDIS_URL` set → that server; else a throwaway local `redis-server` if one is
//! installed; else the in-memory backend. The program says which it used.
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{Election, ElectionOptions, LeaderContext};

/// The shared resource the leader writes to: it keeps the highest term it has seen and refuses lower ones.
#[derive(Default)]
struct FencedStore {
    highest_term: u64,
    accepted: Vec<(String, u64)>,
    refused: usize,
}

impl FencedStore {
    fn heartbeat(&mut self, replica: &str, term: u64) -> bool {
        if term < self.highest_term {
            self.refused += 1;
            return false;
        }
        self.highest_term = term;
        self.accepted.push((replica.to_owned(), term));
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = examples::Backend::choose();
    println!("backend: {}", backend.description());
    let lock = backend.lock().await?;
    let options = ElectionOptions::default()
        .with_lease(Duration::from_millis(1_500))
        .with_renew_deadline(Duration::from_millis(1_000))
        .with_retry_period(Duration::from_millis(200));
    let election = Election::new(lock, "toy-service/leader", options)?;
    let store = Arc::new(Mutex::new(FencedStore::default()));
    let started = Instant::now();
    let at = move || format!("{:>6.0} ms", started.elapsed().as_secs_f64() * 1e3);

    // An observer prints every change of leader (and "no leader").
    let observer = {
        let election = election.clone();
        tokio::spawn(async move {
            let mut changes = Box::pin(election.observe());
            while let Some(change) = changes.next().await {
                match change {
                    Ok(Some(leader)) => println!("{} observer: {} leads, term {}", at(), leader.id, leader.term),
                    Ok(None) => println!("{} observer: no leader", at()),
                    Err(err) => println!("{} observer: cannot tell ({err})", at()),
                }
            }
        })
    };

    let replicas: Vec<_> = (0..3)
        .map(|i| {
            let (election, store) = (election.clone(), store.clone());
            tokio::spawn(async move {
                let me = format!("replica-{i}");
                let work = |ctx: LeaderContext| {
                    let (me, store) = (me.clone(), store.clone());
                    async move {
                        while !ctx.lost.is_lost() {
                            let accepted =
                                store.lock().unwrap_or_else(|p| p.into_inner()).heartbeat(&me, ctx.term.get());
                            if !accepted {
                                println!("{me}: heartbeat with term {} refused", ctx.term);
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                };
                election.lead(&me, &format!("10.0.0.{i}:8080"), work).await
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let leader = election.leader().await?.ok_or("nobody was elected")?;
    let index: usize = leader.id.trim_start_matches("replica-").parse()?;
    println!("{} killing {} (term {})", at(), leader.id, leader.term);
    // Aborting the task drops its `lead()` future: the work stops and the leadership is resigned in the background.
    // (A crashed process would resign nothing; the others would then take over when its lease ends.)
    replicas[index].abort();
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let next = election.leader().await?.ok_or("nobody took over")?;
    for replica in &replicas {
        replica.abort();
    }
    observer.abort();
    let store = store.lock().unwrap_or_else(|p| p.into_inner());
    let leaders: Vec<String> =
        store.accepted.iter().map(|(who, term)| format!("{who}@{term}")).fold(Vec::new(), |mut v, s| {
            if v.last() != Some(&s) {
                v.push(s);
            }
            v
        });
    println!("{} leaders in the order the store saw them: {}", at(), leaders.join(" → "));
    println!("{} heartbeats accepted, {} refused", store.accepted.len(), store.refused);
    assert_ne!(next.id, leader.id, "the killed replica still leads");
    assert!(next.term > leader.term, "the new term is not higher");
    Ok(())
}
