//! Renewal against a real server: a frozen server, a key deleted behind the holder's back, and a watchdog that
//! stops at release, drop and cancellation — on tokio, and on smol/async-std when those features are on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use std::time::{Duration, Instant};

use lock_core::{Lock, LockKeys, LockOptions, LostReason, RenewPolicy};
use lock_redis_rs::RedisStoreBuilder;
use lock_testkit::runtime::sleep;
use lock_testkit::{RedisServer, Reply};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn lock_on(server: &RedisServer) -> Lock {
    Lock::new(RedisStoreBuilder::new(&server.url()).with_command_timeout(ms(200)).connect().await.unwrap())
}

fn renewing(ttl_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_auto_renew(RenewPolicy::default())
}

/// The server freezes (`SIGSTOP`) for longer than the TTL: the holder is told at its validity deadline, not when a
/// renewal call times out. The calls' bound (3 s) is far beyond the deadline (about 0.8 s after the freeze), so a
/// holder told by a timed-out renewal would be seconds late; the 300 ms margin is for a starved scheduler waking
/// the test late (the suite runs beside CPU-bound work on CI: 5 ms was seen missed by 0.6 ms there).
async fn frozen_server_reports_loss_by_the_deadline() {
    let mut server = RedisServer::start().unwrap();
    let store = RedisStoreBuilder::new(&server.url()).with_command_timeout(ms(3_000)).connect().await.unwrap();
    let lock = Lock::new(store).with_operation_timeout(ms(3_000));
    let g = lock.try_acquire("frozen", &renewing(600)).await.unwrap().unwrap();
    sleep(ms(250)).await; // one renewal done
    server.pause();
    let reason = g.lost_signal().lost().await;
    let told = Instant::now();
    let deadline = g.valid_until();
    server.resume();
    println!("frozen server: told ({reason}) {:?} before the deadline", deadline.saturating_duration_since(told));
    assert_eq!(reason, LostReason::RenewalFailed);
    assert!(told <= deadline + ms(300), "told {:?} after the deadline", told - deadline);
}

/// The key is deleted behind the holder's back: the next renewal finds it gone and the holder is told.
async fn deleted_key_is_lost_at_the_next_renewal() {
    let server = RedisServer::start().unwrap();
    let lock = lock_on(&server).await;
    let g = lock.try_acquire("deleted", &renewing(900)).await.unwrap().unwrap();
    server.command(&["DEL", g.keys().lock()]).unwrap();
    let t0 = Instant::now();
    assert_eq!(g.lost_signal().lost().await, LostReason::NotHeld);
    // Told by the next renewal (every 300 ms), not by the end of its validity (900 ms, which would say Expired).
    assert!(t0.elapsed() < ms(900), "noticed after {:?} (renewal every 300 ms)", t0.elapsed());
}

/// After release, drop or cancellation the watchdog is gone: the key never reappears with our token, and no
/// renewal task is left running.
async fn renewal_stops_at_release_drop_and_cancel() {
    let server = RedisServer::start().unwrap();
    let lock = lock_on(&server).await;
    for how in ["release", "drop", "cancel"] {
        let resource = format!("stops-{how}");
        let keys = LockKeys::new("wlp:", &resource).unwrap();
        let g = lock.try_acquire(&resource, &renewing(150)).await.unwrap().unwrap();
        let token = g.token().as_str().to_owned();
        sleep(ms(120)).await; // renewals under way
        match how {
            "release" => drop(g.release().await.unwrap()),
            "drop" => drop(g),
            _ => {
                // A holder cancelled mid-work: the future owning the guard is dropped.
                let work = async move {
                    let _g = g;
                    sleep(ms(10_000)).await;
                };
                let cut = futures_util::future::select(Box::pin(work), Box::pin(sleep(ms(20)))).await;
                drop(cut);
            }
        }
        let ours = Reply::Bulk(Some(token.clone().into_bytes()));
        // Drop and cancel release in the background: give that a moment.
        let t0 = Instant::now();
        while server.command(&["GET", keys.lock()]).unwrap() == ours {
            assert!(t0.elapsed() < ms(500), "{how}: the key was not released");
            sleep(ms(1)).await;
        }
        // Then sample for 4 renewal intervals: our token must never hold the key again (no late extension).
        let t0 = Instant::now();
        while t0.elapsed() < ms(200) {
            let value = server.command(&["GET", keys.lock()]).unwrap();
            assert_ne!(value, ours, "{how}: our key came back after {:?}", t0.elapsed());
            sleep(ms(5)).await;
        }
    }
    let t0 = Instant::now();
    while lock_core::backend::live_renewal_tasks() != 0 {
        assert!(t0.elapsed() < ms(2_000), "{} renewal tasks leaked", lock_core::backend::live_renewal_tasks());
        sleep(ms(10)).await;
    }
}

/// The renewal-task count is process-wide, so the per-runtime tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn renewal_on_tokio() {
    let _turn = serial();
    lock_testkit::runtime::tokio(async {
        frozen_server_reports_loss_by_the_deadline().await;
        deleted_key_is_lost_at_the_next_renewal().await;
        renewal_stops_at_release_drop_and_cancel().await;
    });
}

#[cfg(feature = "smol")]
#[test]
fn renewal_on_smol() {
    let _turn = serial();
    lock_testkit::runtime::smol(async {
        frozen_server_reports_loss_by_the_deadline().await;
        deleted_key_is_lost_at_the_next_renewal().await;
        renewal_stops_at_release_drop_and_cancel().await;
    });
}

#[cfg(feature = "async-std")]
#[test]
fn renewal_on_async_std() {
    let _turn = serial();
    lock_testkit::runtime::async_std(async {
        frozen_server_reports_loss_by_the_deadline().await;
        deleted_key_is_lost_at_the_next_renewal().await;
        renewal_stops_at_release_drop_and_cancel().await;
    });
}
