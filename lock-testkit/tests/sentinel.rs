//! The `RedisSentinel` fixture itself: start-up, promotion of the replica after the primary is killed, a swap of
//! roles by hand, cleanup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // sync tests fail by panicking

use std::time::{Duration, Instant};

use lock_testkit::{RedisSentinel, Reply};

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

/// `SET key value`, acknowledged by the replica (`WAIT` covers the writes of its own connection).
fn set_replicated(server: &lock_testkit::RedisServer, key: &str, value: &str) {
    let mut conn = lock_testkit::Connection::open(server.addr(), Duration::from_secs(5)).unwrap();
    assert_eq!(conn.command(&["SET", key, value]).unwrap(), Reply::Status("OK".into()));
    assert_eq!(conn.command(&["WAIT", "1", "1000"]).unwrap(), Reply::Int(1));
}

fn role(server: &lock_testkit::RedisServer) -> String {
    let Reply::Array(items) = server.command(&["ROLE"]).unwrap() else { panic!("ROLE") };
    items[0].as_text().unwrap()
}

/// A deployment starts with every Sentinel naming the primary, replicates, and is gone (processes and directories)
/// after drop.
#[test]
fn starts_replicates_and_dies_on_drop() {
    let started = Instant::now();
    let deployment = RedisSentinel::builder().with_service_name("locks").start().unwrap();
    println!("sentinel deployment ready in {:?}", started.elapsed());
    assert_eq!(deployment.service_name(), "locks");
    assert_eq!(deployment.sentinel_urls().len(), 3);
    let primary = deployment.primary().unwrap();
    let replica = deployment.replica().unwrap();
    assert_eq!(deployment.reported_primaries().unwrap(), vec![Some(primary.addr()); 3]);
    assert_eq!((role(primary).as_str(), role(replica).as_str()), ("master", "slave"));
    set_replicated(primary, "k", "v");
    assert_eq!(replica.command(&["GET", "k"]).unwrap().as_text().as_deref(), Some("v"));
    let servers: Vec<_> = [primary, replica].into_iter().chain(deployment.sentinels()).collect();
    let pids: Vec<u32> = servers.iter().map(|s| s.pid().unwrap()).collect();
    let dirs: Vec<_> = servers.iter().map(|s| s.dir().to_owned()).collect();
    drop(deployment);
    assert!(pids.iter().all(|&p| !alive(p)));
    assert!(dirs.iter().all(|d| !d.exists()));
}

/// Killing the primary promotes the replica, with the data it had.
#[test]
fn killed_primary_is_replaced_by_its_replica() {
    let mut deployment = RedisSentinel::start().unwrap();
    let replica = deployment.replica().unwrap().addr();
    set_replicated(deployment.primary().unwrap(), "k", "v");
    let t = Instant::now();
    let promoted = deployment.kill_primary_and_wait_for_promotion(Duration::from_secs(30)).unwrap();
    println!("kill primary -> replica promoted in {:?}", t.elapsed());
    assert_eq!(promoted, replica);
    let primary = deployment.primary().unwrap();
    assert_eq!(primary.addr(), promoted);
    assert_eq!(role(primary), "master");
    assert!(deployment.replica().is_none());
    assert!(deployment.node(0).is_none());
    assert_eq!(primary.command(&["GET", "k"]).unwrap().as_text().as_deref(), Some("v"));
    assert_eq!(primary.command(&["SET", "k", "w"]).unwrap(), Reply::Status("OK".into()));
    assert!(deployment.kill_primary_and_wait_for_promotion(Duration::from_secs(1)).is_err(), "nothing to promote");
}

/// Swapping roles by hand leaves a client of the old primary connected, and its next write gets READONLY.
#[test]
fn roles_swapped_by_hand_leave_old_clients_on_a_replica() {
    let mut deployment = RedisSentinel::start().unwrap();
    let mut old_client =
        lock_testkit::Connection::open(deployment.primary().unwrap().addr(), Duration::from_secs(5)).unwrap();
    assert_eq!(old_client.command(&["SET", "k", "v"]).unwrap(), Reply::Status("OK".into()));
    let replica = deployment.replica().unwrap().addr();
    let t = Instant::now();
    let promoted = deployment.swap_roles_by_hand(Duration::from_secs(20)).unwrap();
    println!("roles swapped by hand in {:?}", t.elapsed());
    assert_eq!(promoted, replica);
    assert_eq!(deployment.reported_primaries().unwrap(), vec![Some(promoted); 3]);
    let reply = old_client.command(&["SET", "k", "w"]).unwrap();
    assert!(matches!(&reply, Reply::Error(e) if e.starts_with("READONLY")), "{reply:?}");
    assert_eq!(role(deployment.replica().unwrap()), "slave");
    assert_eq!(deployment.primary().unwrap().command(&["GET", "k"]).unwrap().as_text().as_deref(), Some("v"));
}

/// The shared deployment is started once per process.
#[test]
fn shared_is_one_deployment() {
    let a = RedisSentinel::shared().unwrap();
    let b = RedisSentinel::shared().unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.reported_primaries().unwrap(), vec![Some(a.primary().unwrap().addr()); 3]);
}
