//! The `RedisServer` fixture itself: ports, lifecycle, faults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::disallowed_methods)] // sync tests fail by panicking

use std::time::Duration;

use lock_testkit::{Persistence, RedisServer, Reply};

fn text(r: Reply) -> Option<String> {
    r.as_text()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

#[test]
fn starts_on_distinct_free_loopback_ports() {
    let a = RedisServer::start().unwrap();
    let b = RedisServer::start().unwrap();
    assert_ne!(a.port(), b.port());
    assert!(a.url().starts_with("redis://127.0.0.1:"));
    assert_eq!(text(a.command(&["PING"]).unwrap()).as_deref(), Some("PONG"));
    a.command(&["SET", "k", "v"]).unwrap();
    assert_eq!(b.command(&["GET", "k"]).unwrap(), Reply::Bulk(None), "servers must be independent");
}

#[test]
fn drop_kills_the_process() {
    let server = RedisServer::start().unwrap();
    let pid = server.pid().unwrap();
    assert!(alive(pid));
    drop(server);
    assert!(!alive(pid), "redis-server {pid} outlived its fixture");
}

#[test]
fn restart_without_persistence_loses_data() {
    let mut server = RedisServer::start().unwrap();
    server.command(&["SET", "k", "v"]).unwrap();
    server.restart().unwrap();
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Reply::Bulk(None));
}

#[test]
fn restart_with_appendfsync_always_keeps_data() {
    let mut server = RedisServer::builder().with_persistence(Persistence::AppendFsyncAlways).start().unwrap();
    server.command(&["SET", "k", "v"]).unwrap();
    server.restart().unwrap();
    assert_eq!(server.command(&["GET", "k"]).unwrap(), Reply::Bulk(Some(b"v".to_vec())));
}

#[test]
fn kill_makes_it_unreachable_and_pause_freezes_it() {
    let mut server = RedisServer::start().unwrap();
    server.pause();
    let addr = server.addr();
    let probe = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        s.write_all(b"PING\r\n").unwrap();
        let mut buf = [0u8; 16];
        s.read(&mut buf).is_err()
    });
    assert!(probe.join().unwrap(), "a paused server answered");
    server.resume();
    assert_eq!(text(server.command(&["PING"]).unwrap()).as_deref(), Some("PONG"));
    server.kill();
    assert!(server.command(&["PING"]).is_err());
    server.restart().unwrap();
    assert_eq!(text(server.command(&["PING"]).unwrap()).as_deref(), Some("PONG"));
}
