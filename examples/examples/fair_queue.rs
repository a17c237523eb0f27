//! Fair lock: waiters in several "pods" (each its own client, as separate processes would be) are served in the
//! order they arrived, and each release wakes only the pod whose waiter is next.
//!
//! ```text
//! cargo run -p examples --example fair_queue
//! ```
//!
//! Backend choice, as the quickstart: `REDIS_URL` set → that server; else a throwaway local `redis-server` if one is
//! installed; else the in-memory backend (one store shared by the pods). The program says which it used.
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockOptions;

const PODS: usize = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = examples::Backend::choose();
    println!("fair_queue: using {}", backend.description());
    let resource = format!("report-builder-{}", std::process::id());
    // Each waiter keeps its place with a heartbeat every second; a pod that dies loses its place after 3 s.
    let fair = LockOptions::new(Duration::from_secs(10))
        .with_wait(Duration::from_secs(30))
        .with_fair_queue(Duration::from_secs(3));

    let holder_lock = backend.lock().await?;
    let holder = holder_lock.acquire(&resource, &fair).await?;
    println!("the first pod holds {resource}; {PODS} more pods queue up one after another");

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut pods = Vec::new();
    for pod in 1..=PODS {
        let lock = backend.lock().await?;
        let (name, fair, served) = (resource.clone(), fair.clone(), served.clone());
        pods.push(tokio::spawn(async move {
            let guard = lock.acquire(&name, &fair).await?;
            println!("  pod {pod} granted, fencing token {:?}", guard.fence().await?);
            served.lock().map(|mut s| s.push(pod)).ok();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await?;
            Ok::<(), lock_core::LockError>(())
        }));
        // Wait until this pod's waiter holds its place, so the arrival order is the pod order.
        while holder_lock.fair_queue_len(&resource).await? < pod {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    println!("queue length: {}", holder_lock.fair_queue_len(&resource).await?);
    holder.release().await?;
    for pod in pods {
        pod.await??;
    }
    let served = served.lock().map(|s| s.clone()).unwrap_or_default();
    println!("served in order: {served:?}");
    println!("queue length after the run: {}", holder_lock.fair_queue_len(&resource).await?);
    Ok(())
}
