//! Read-write lock: replicas read a shared configuration together while one rewrites it now and then; a waiting
//! writer keeps new readers out, readers learn the epoch (the last write's fencing token) of what they read, and a
//! writer downgrades to a reader without letting another writer in.
//!
//! ```text
//! cargo run -p examples --example read_write
//! ```
//!
//! Backend choice, as the quickstart: `REDIS_URL` set → that server; else a throwaway local `redis-server` if one is
//! installed; else the in-memory backend. The program says which it used.
#![allow(clippy::print_stdout)] // an example talks to its user

use std::time::Duration;

use lock_core::{LockOptions, RwLock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = examples::Backend::choose();
    println!("read_write: using {}", backend.description());
    let name = format!("config-{}", std::process::id());
    let opts = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(30));
    // Each replica has its own client, as separate processes would.
    let config = RwLock::new(backend.lock().await?, &name)?;

    let first = config.read(&opts).await?;
    let second = RwLock::new(backend.lock().await?, &name)?.read(&opts).await?;
    println!("two readers hold {name} together, epoch {:?}", first.epoch().map(|e| e.get()));

    // A writer queues: from now on new readers wait behind it.
    let writer_side = RwLock::new(backend.lock().await?, &name)?;
    let writer = {
        let (writer_side, opts) = (writer_side.clone(), opts.clone());
        tokio::spawn(async move { writer_side.write(&opts).await })
    };
    while config.state().await?.waiting_writers == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let late = config.try_read(&opts).await?;
    println!("a writer waits; a new reader gets in: {}", late.is_some());

    first.release().await?;
    second.release().await?;
    let write = writer.await??;
    let token = write.fence().await?;
    println!("the readers left; the writer holds it with fencing token {token} and rewrites the config");

    // Keep reading what we just wrote, without letting another writer in between.
    let read = write.downgrade().await?;
    println!("downgraded: now a reader with epoch {:?} (the write's own token)", read.epoch().map(|e| e.get()));
    let other = config.read(&opts).await?;
    println!("another reader joins with epoch {:?}", other.epoch().map(|e| e.get()));
    other.release().await?;
    read.release().await?;
    println!("state after the run: {:?}", config.state().await?);
    Ok(())
}
