//! The `RedisCluster` fixture itself: forming, start-up time, failover, slot migration, cleanup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::disallowed_methods)] // sync tests fail by panicking

use std::time::{Duration, Instant};

use lock_testkit::{RedisCluster, Reply, SLOTS};

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

/// A 3-primary cluster forms, serves every slot, and is gone (processes and directories) after drop.
#[test]
fn three_primaries_form_and_die_on_drop() {
    let started = Instant::now();
    let cluster = RedisCluster::start().unwrap();
    println!("3-primary cluster ready in {:?}", started.elapsed());
    assert_eq!(cluster.urls().len(), 3);
    let view = cluster.view(0).unwrap();
    let served: u32 = view.iter().flat_map(|v| &v.slots).map(|&(a, b)| u32::from(b - a) + 1).sum();
    assert_eq!(served, u32::from(SLOTS));
    // Keys land on different primaries, and the hash tag pins a lock's keys together.
    let owners: std::collections::BTreeSet<usize> =
        (0..32).map(|i| cluster.primary_for_key(&format!("k{i}")).unwrap()).collect();
    assert_eq!(owners.len(), 3);
    assert_eq!(cluster.primary_for_key("{r}:a").unwrap(), cluster.primary_for_key("{r}:b").unwrap());
    let pids: Vec<u32> = (0..3).map(|i| cluster.node(i).unwrap().pid().unwrap()).collect();
    let dirs: Vec<_> = (0..3).map(|i| cluster.node(i).unwrap().dir().to_owned()).collect();
    drop(cluster);
    assert!(pids.iter().all(|&p| !alive(p)));
    assert!(dirs.iter().all(|d| !d.exists()));
}

/// With replicas: a coordinated `CLUSTER FAILOVER`, then a killed primary replaced by its replica; data written
/// through the old primary is readable on the new one after the coordinated switch.
#[test]
fn failover_and_kill_primary() {
    let started = Instant::now();
    let mut cluster = RedisCluster::builder().with_replicas(1).start().unwrap();
    println!("3+3 cluster ready in {:?}", started.elapsed());
    assert_eq!(cluster.len(), 6);
    assert_eq!(cluster.primaries().unwrap().len(), 3);

    let owner = cluster.primary_for_key("{f}").unwrap();
    assert_eq!(cluster.node(owner).unwrap().command(&["SET", "{f}", "1"]).unwrap(), Reply::Status("OK".into()));
    let replica = cluster.index_of(
        &cluster.view(0).unwrap().into_iter().find(|v| v.primary_id.as_deref() == cluster.node_id(owner)).unwrap().id,
    );
    let replica = replica.unwrap();
    let t = Instant::now();
    cluster.failover(replica, Duration::from_secs(20)).unwrap();
    println!("CLUSTER FAILOVER in {:?}", t.elapsed());
    assert_eq!(cluster.primary_for_key("{f}").unwrap(), replica);
    assert_eq!(cluster.node(replica).unwrap().command(&["GET", "{f}"]).unwrap().as_text().as_deref(), Some("1"));

    let t = Instant::now();
    let promoted = cluster.kill_primary_and_wait(replica, Duration::from_secs(30)).unwrap();
    println!("kill primary -> promoted in {:?}", t.elapsed());
    assert_eq!(promoted, owner);
    assert!(cluster.node(replica).is_none());
    assert_eq!(cluster.urls().len(), 5);
    assert_eq!(cluster.primary_for_key("{f}").unwrap(), owner);
}

/// A slot moves with its keys to another primary.
#[test]
fn migrate_slot_moves_keys() {
    let cluster = RedisCluster::start().unwrap();
    let from = cluster.primary_for_key("{m}").unwrap();
    let to = (from + 1) % 3;
    cluster.node(from).unwrap().command(&["SET", "{m}:x", "7"]).unwrap();
    let slot = cluster.node(0).unwrap().command(&["CLUSTER", "KEYSLOT", "{m}"]).unwrap().as_int().unwrap();
    cluster.migrate_slot(u16::try_from(slot).unwrap(), to).unwrap();
    assert_eq!(cluster.primary_for_key("{m}").unwrap(), to);
    assert_eq!(cluster.node(to).unwrap().command(&["GET", "{m}:x"]).unwrap().as_text().as_deref(), Some("7"));
    assert!(cluster.node(from).unwrap().command(&["GET", "{m}:x"]).unwrap().is_error());
    // MOVED
}

/// The shared cluster is started once per process.
#[test]
fn shared_is_one_cluster() {
    let a = RedisCluster::shared().unwrap();
    let b = RedisCluster::shared().unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.command_all(&["PING"]).unwrap().len(), 3);
}
