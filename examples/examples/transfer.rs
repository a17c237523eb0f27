//! Multi-resource lock: money moves between accounts, each transfer holding both accounts at once (all or
//! nothing), while an auditor locks single accounts. Transfers list their accounts in any order; none deadlocks,
//! the total never changes, and each account's ledger only accepts writes with a fencing token newer than the
//! last it saw.
//!
//! ```text
//! cargo run -p examples --example transfer
//! ```
//!
//! Backend choice, as the quickstart: `REDIS_URL` set → that server; else a throwaway local `redis-server` if one is
//! installed; else the in-memory backend. The program says which it used.
#![allow(clippy::print_stdout)] // an example talks to its user

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{FencingToken, LockOptions};

const ACCOUNTS: usize = 5;
const TRANSFERS: usize = 40;
const WORKERS: usize = 4;

/// Each account's balance and the newest fencing token its ledger accepted (the ledger lives "elsewhere").
#[derive(Default)]
struct Ledgers {
    accounts: Mutex<HashMap<String, (i64, Option<FencingToken>)>>,
}

impl Ledgers {
    fn balance(&self, account: &str) -> i64 {
        self.accounts.lock().map(|a| a.get(account).map_or(0, |e| e.0)).unwrap_or(0)
    }

    /// Adds `amount`, unless `fence` is older than one the ledger has seen (a holder that paused past its lease).
    fn add(&self, account: &str, amount: i64, fence: Option<FencingToken>) -> bool {
        let Ok(mut accounts) = self.accounts.lock() else { return false };
        let entry = accounts.entry(account.to_owned()).or_insert((100, None));
        if fence.is_some() && fence < entry.1 {
            return false;
        }
        *entry = (entry.0 + amount, fence.or(entry.1));
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = examples::Backend::choose();
    println!("backend: {}", backend.description());
    let lock = backend.lock().await?;
    let ledgers = Arc::new(Ledgers::default());
    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("account/{i}")).collect();
    for account in &accounts {
        ledgers.add(account, 0, None);
    }
    let opts = LockOptions::new(Duration::from_secs(5)).with_wait(Duration::from_secs(10));
    let workers = (0..WORKERS).map(|w| {
        let (lock, ledgers, accounts, opts) = (lock.clone(), ledgers.clone(), accounts.clone(), opts.clone());
        tokio::spawn(async move {
            for t in 0..TRANSFERS / WORKERS {
                // Opposite orders on purpose: the set is taken in one atomic step, so order cannot deadlock.
                let (from, to) = if (w + t) % 2 == 0 {
                    (w % ACCOUNTS, (w + t + 1) % ACCOUNTS)
                } else {
                    ((w + t + 1) % ACCOUNTS, w % ACCOUNTS)
                };
                if from == to {
                    continue;
                }
                let (from, to) = (&accounts[from], &accounts[to]);
                lock.with_all(&[from.as_str(), to.as_str()], &opts, |ctx| {
                    let ledgers = ledgers.clone();
                    async move {
                        let fence =
                            |account: &str| ctx.fencing_tokens.iter().find(|(r, _)| r == account).and_then(|e| e.1);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let debited = ledgers.add(from, -10, fence(from));
                        let credited = ledgers.add(to, 10, fence(to));
                        assert!(debited && credited, "a ledger refused a current token");
                    }
                })
                .await?;
            }
            Ok::<_, lock_core::LockError>(())
        })
    });
    let audits = {
        let (lock, ledgers, accounts) = (lock.clone(), ledgers.clone(), accounts.clone());
        tokio::spawn(async move {
            for round in 0..10 {
                let account = &accounts[round % ACCOUNTS];
                let guard = lock.acquire(account, &LockOptions::new(Duration::from_secs(5))).await?;
                println!("audit: {account} holds {}", ledgers.balance(account));
                guard.release().await?;
            }
            Ok::<_, lock_core::LockError>(())
        })
    };
    for worker in workers {
        worker.await??;
    }
    audits.await??;
    let total: i64 = accounts.iter().map(|a| ledgers.balance(a)).sum();
    println!("{TRANSFERS} transfers done; total {total} (started at {})", 100 * ACCOUNTS);
    assert_eq!(total, 100 * i64::try_from(ACCOUNTS)?, "money appeared or vanished");
    Ok(())
}
