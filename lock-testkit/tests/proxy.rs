//! The fault proxy: each fault does what it says, against a real server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::disallowed_methods)] // sync tests fail by panicking

use std::time::{Duration, Instant};

use lock_testkit::{send_command, Direction, FaultProxy, RedisServer, Reply};

const T: Duration = Duration::from_millis(500);

#[test]
fn forwards_and_adds_latency() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    assert_eq!(send_command(proxy.addr(), &["PING"], T).unwrap(), Reply::Status("PONG".into()));
    proxy.set_latency(Direction::ToClient, Duration::from_millis(80), Duration::from_millis(20));
    let t0 = Instant::now();
    send_command(proxy.addr(), &["PING"], T).unwrap();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(80) && took < Duration::from_millis(400), "{took:?}");
    proxy.heal();
    let t0 = Instant::now();
    send_command(proxy.addr(), &["PING"], T).unwrap();
    assert!(t0.elapsed() < Duration::from_millis(50));
}

#[test]
fn dropped_replies_are_applied_but_never_answered() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    proxy.drop_replies(true);
    assert!(send_command(proxy.addr(), &["SET", "k", "v"], Duration::from_millis(200)).is_err());
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Reply::Bulk(Some(b"v".to_vec())));
}

#[test]
fn blackhole_swallows_requests() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    proxy.blackhole(true);
    assert!(send_command(proxy.addr(), &["SET", "k", "v"], Duration::from_millis(200)).is_err());
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Reply::Bulk(None));
}

#[test]
fn cut_refuses_and_heal_restores() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    proxy.cut();
    assert!(send_command(proxy.addr(), &["PING"], Duration::from_millis(200)).is_err());
    proxy.heal();
    assert_eq!(send_command(proxy.addr(), &["PING"], T).unwrap(), Reply::Status("PONG".into()));
    assert!(proxy.connections_accepted() >= 1);
}

#[test]
fn reset_closes_open_connections() {
    use std::io::{Read, Write};
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let mut conn = std::net::TcpStream::connect(proxy.addr()).unwrap();
    conn.set_read_timeout(Some(T)).unwrap();
    conn.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 7];
    conn.read_exact(&mut buf).unwrap();
    proxy.reset_connections();
    std::thread::sleep(Duration::from_millis(50));
    let _ = conn.write_all(b"PING\r\n");
    let mut rest = Vec::new();
    let read = conn.read_to_end(&mut rest);
    assert!(read.is_err() || rest.is_empty(), "connection still answered after a reset: {rest:?}");
}

/// A proxy can be started from async code (a `#[tokio::test]`): starting one blocks on no future, so it does not
/// trip tokio's "runtime within a runtime" panic.
#[test]
fn starts_from_async_code() {
    let server = RedisServer::start().unwrap();
    let proxy = lock_testkit::runtime::tokio(async { FaultProxy::start(server.addr()).unwrap() });
    assert_eq!(send_command(proxy.addr(), &["PING"], T).unwrap(), Reply::Status("PONG".into()));
}
