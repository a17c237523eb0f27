//! A Python service and a Rust service on one lock: redis-py's `Lock` (or, with `--peer python-redis-lock`,
//! python-redis-lock's) in a Python process and this library's lock (under the package's key layout:
//! [`KeyLayout::plain`](lock_core::KeyLayout::plain) or
//! [`KeyLayout::python_redis_lock`](lock_core::KeyLayout::python_redis_lock)) each add 1 to one counter 500 times,
//! at once; the counter ends at exactly 1 000.
//!
//! ```text
//! interop/setup.sh                                   # a virtual environment with both packages from PyPI (once)
//! cargo run -p examples --example with_python        # starts a throwaway redis-server
//! cargo run -p examples --example with_python -- --peer python-redis-lock
//! PYTHON=/usr/bin/python3 REDIS_URL=redis://HOST:PORT cargo run -p examples --example with_python
//! ```
// A demo narrates what it does.
#![allow(clippy::print_stdout)]

use examples::with_python::Peer;
use lock_testkit::RedisServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the throwaway server (if any) alive until the end of `main`.
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start()?;
            println!("REDIS_URL not set; started redis-server on port {}", server.port());
            (server.url(), Some(server))
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let peer = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] | ["--peer", "redis-py"] => Peer::RedisPy,
        ["--peer", "python-redis-lock"] => Peer::PythonRedisLock,
        other => return Err(format!("usage: with_python [--peer redis-py|python-redis-lock], not {other:?}").into()),
    };
    println!("the Python side: {}", peer.name());
    let shared = examples::with_python::run(&url, peer, "orders", 500).await?;
    for line in &shared.python_said {
        println!("{line}");
    }
    println!(
        "rust: {} updates under our lock ({} found it held by Python); the counter: {}",
        shared.rust, shared.contended, shared.counter
    );
    assert_eq!(shared.counter, shared.rust + shared.python, "an update was lost");
    println!("no update lost: the two languages' locks exclude each other");
    Ok(())
}
