//! A Python service and a Rust service on one lock: redis-py's `Lock` in a Python process and this library's lock
//! (under [`KeyLayout::plain`](lock_core::KeyLayout::plain), redis-py's key) each add 1 to one counter 500 times,
//! at once; the counter ends at exactly 1 000.
//!
//! ```text
//! interop/setup.sh                                   # a virtual environment with redis-py from PyPI (once)
//! cargo run -p examples --example with_python        # starts a throwaway redis-server
//! PYTHON=/usr/bin/python3 REDIS_URL=redis://HOST:PORT cargo run -p examples --example with_python
//! ```
// A demo narrates what it does.
#![allow(clippy::print_stdout)]

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
    let shared = examples::with_python::run(&url, "orders", 500).await?;
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
