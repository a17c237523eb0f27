//! Our lock and election against the real `etcdctl lock` and `etcdctl elect` (Debian's etcd-client 3.4.23), both
//! ways: each excludes the other, and each gets in when the other lets go.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lock_core::revision::{RevisionElection, RevisionLock};
use lock_core::{ElectionOptions, LockOptions, ReleaseOutcome};
use lock_testkit::EtcdServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fresh(what: &str) -> String {
    format!("{what}-{:08x}", rand::random::<u32>())
}

async fn lock(etcd: &EtcdServer) -> RevisionLock {
    RevisionLock::new(lock_etcd::EtcdStore::connect(&etcd.endpoints()).await.unwrap())
}

/// An `etcdctl` child whose stdout lines arrive on a channel.
struct Etcdctl {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Etcdctl {
    fn spawn(etcd: &EtcdServer, args: &[&str]) -> Self {
        let mut cmd = etcd.etcdctl_command(args).unwrap();
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Etcdctl { child, lines }
    }

    /// The next line within `within`, if any.
    fn line(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    /// SIGINT: `etcdctl lock` unlocks and `etcdctl elect` resigns, then they exit.
    fn interrupt(mut self) {
        #[allow(unsafe_code)]
        // SAFETY: a signal to our own child, not yet reaped.
        unsafe {
            libc::kill(libc::pid_t::try_from(self.child.id()).unwrap(), libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "etcdctl did not exit after SIGINT");
            std::thread::park_timeout(ms(10));
        }
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ours holds `N`: `etcdctl lock wlp/N` waits; when ours releases, it gets in (and prints its key, under the same
/// queue as ours).
#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_lock_waits_for_ours_and_gets_in_after_it() {
    let etcd = EtcdServer::shared().unwrap();
    let lock = lock(etcd).await;
    let name = fresh("ours-first");
    let queue = lock.queue(&name).unwrap();
    let guard = lock.acquire(&name, &LockOptions::new(ms(10_000))).await.unwrap();
    let etcdctl = Etcdctl::spawn(etcd, &["lock", queue.trim_end_matches('/')]);
    let waited = tokio::task::block_in_place(|| etcdctl.line(ms(1_500)));
    assert_eq!(waited, None, "etcdctl lock got in while ours held");
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let key = tokio::task::block_in_place(|| etcdctl.line(ms(5_000))).expect("etcdctl lock never got in");
    assert!(key.starts_with(&queue), "etcdctl's key {key} is outside our queue {queue}");
    assert!(released.elapsed() < ms(5_000));
    // While etcdctl holds, ours is refused.
    assert!(lock.try_acquire(&name, &LockOptions::new(ms(5_000))).await.unwrap().is_none());
    etcdctl.interrupt();
}

/// `etcdctl lock wlp/N` holds: ours is refused, waits, and gets in when etcdctl unlocks (SIGINT).
#[tokio::test(flavor = "multi_thread")]
async fn ours_waits_for_etcdctl_lock_and_gets_in_after_it() {
    let etcd = EtcdServer::shared().unwrap();
    let lock = lock(etcd).await;
    let name = fresh("etcdctl-first");
    let queue = lock.queue(&name).unwrap();
    let etcdctl = Etcdctl::spawn(etcd, &["lock", queue.trim_end_matches('/')]);
    let key = tokio::task::block_in_place(|| etcdctl.line(ms(10_000))).expect("etcdctl lock did not get in");
    assert!(key.starts_with(&queue));
    assert!(
        lock.try_acquire(&name, &LockOptions::new(ms(5_000))).await.unwrap().is_none(),
        "ours got in beside etcdctl"
    );
    let waiter = tokio::spawn({
        let (lock, name) = (lock.clone(), name.clone());
        async move { lock.acquire(&name, &LockOptions::new(ms(5_000)).with_wait(ms(10_000))).await }
    });
    tokio::time::sleep(ms(500)).await;
    assert!(!waiter.is_finished(), "ours got in while etcdctl held");
    let unlocked = Instant::now();
    tokio::task::block_in_place(|| etcdctl.interrupt());
    let guard = waiter.await.unwrap().unwrap();
    assert!(unlocked.elapsed() < ms(5_000), "ours took {:?} after etcdctl unlocked", unlocked.elapsed());
    guard.release().await.unwrap();
}

/// `etcdctl elect wlp/E proposal` leads: our observers see its value (named by its lease), our candidate is
/// refused and elected when etcdctl resigns; then `etcdctl elect -l` sees ours.
#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_elect_and_ours_take_turns() {
    let etcd = EtcdServer::shared().unwrap();
    let lock = lock(etcd).await;
    let name = fresh("elect");
    let queue = lock.queue(&name).unwrap();
    let options =
        ElectionOptions::default().with_lease(ms(4_000)).with_renew_deadline(ms(3_000)).with_retry_period(ms(1_000));
    let election = RevisionElection::new(lock.clone(), &name, options).unwrap();
    let etcdctl = Etcdctl::spawn(etcd, &["elect", queue.trim_end_matches('/'), "from-etcdctl"]);
    let key = tokio::task::block_in_place(|| etcdctl.line(ms(10_000))).expect("etcdctl elect was not elected");
    assert!(key.starts_with(&queue));
    let seen = election.leader().await.unwrap().expect("ours sees no leader");
    assert_eq!(seen.value, "from-etcdctl");
    assert_eq!(format!("{queue}{}", seen.id), key, "a foreign leader is named by its lease");
    assert!(election.try_campaign("ours", "from-rust").await.unwrap().is_none());
    let campaign = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("ours", "from-rust").await }
    });
    tokio::time::sleep(ms(500)).await;
    assert!(!campaign.is_finished(), "ours was elected beside etcdctl");
    tokio::task::block_in_place(|| etcdctl.interrupt());
    let leader = campaign.await.unwrap().unwrap();
    assert!(leader.term().get() > seen.term.get());
    let observer = Etcdctl::spawn(etcd, &["elect", "-l", queue.trim_end_matches('/')]);
    let observed_key = tokio::task::block_in_place(|| observer.line(ms(10_000))).expect("etcdctl saw no leader");
    let observed_value = tokio::task::block_in_place(|| observer.line(ms(5_000)));
    assert_eq!(observed_key, leader.key());
    assert_eq!(observed_value.as_deref(), Some("from-rust"));
    leader.resign().await.unwrap();
}
