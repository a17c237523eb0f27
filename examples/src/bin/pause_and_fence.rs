//! The pause that breaks a lease lock, and the fence that makes it harmless, run for real (in the spirit of etcd's
//! `contrib/lock`): a storage process and two client processes on one lock.
//!
//! ```text
//! cargo run -p examples --bin pause_and_fence          # starts a throwaway redis-server
//! REDIS_URL=redis://HOST:PORT cargo run -p examples --bin pause_and_fence
//! ```
//!
//! Client 1 takes the lock (TTL 1 s), checks it still holds it, and sends its write; right then it is frozen by
//! `SIGSTOP` (a GC pause, a slow disk, a VM migration), so its write has not arrived. Its lease runs out; client 2
//! takes the lock and writes. Client 1 is thawed (`SIGCONT`) and its write arrives. Twice:
//! - **without the fence** the storage accepts every write: client 1's stale write lands over client 2's;
//! - **with the fence** each write carries the holder's fencing token and the storage refuses one below the highest
//!   it has seen: client 1's write, whose token is below client 2's, is refused.
//!
//! One binary in three roles (the demonstration starts itself as the storage and as each client):
//! `pause_and_fence storage`, `pause_and_fence client <redis-url> <storage-addr> <name> <fenced:0|1> <freeze:0|1>`.
// A demonstration narrates what it does.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{Lock, LockOptions};
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;

type Error = Box<dyn std::error::Error>;

/// The lock's TTL: client 1 is frozen for longer than this.
const TTL: Duration = Duration::from_millis(1_000);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("storage") => storage(),
        Some("client") => client(&args[1..]),
        None => demonstrate(),
        Some(other) => Err(format!("unknown role {other:?}: run it without arguments").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pause_and_fence: {err}");
            ExitCode::FAILURE
        }
    }
}

// ---- the storage ---------------------------------------------------------------------------------------------------

/// A storage that keeps one value and, when a write carries a fencing token, refuses one below the highest it has
/// accepted. Prints its port, then one line per write. Protocol: `WRITE <client> <token|-> <value>` → `OK` or
/// `REFUSED <why>`; `READ` → the value.
fn storage() -> Result<(), Error> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("port {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let state = Arc::new(Mutex::new((String::from("(empty)"), 0_u64)));
    for stream in listener.incoming() {
        let stream = stream?;
        let state = state.clone();
        std::thread::spawn(move || {
            if let Err(err) = serve(stream, &state) {
                eprintln!("storage: {err}");
            }
        });
    }
    Ok(())
}

fn serve(stream: TcpStream, state: &Mutex<(String, u64)>) -> Result<(), Error> {
    let mut out = stream.try_clone()?;
    for line in BufReader::new(stream).lines() {
        let line = line?;
        let mut parts = line.splitn(4, ' ');
        let reply = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("WRITE"), Some(client), Some(token), Some(value)) => {
                let mut state = state.lock().map_err(|_| "storage state poisoned")?;
                match token.parse::<u64>() {
                    Ok(token) if token < state.1 => {
                        println!("storage: REFUSED {client}'s write {value:?}: token {token} < {} seen", state.1);
                        format!("REFUSED token {token} is below {}", state.1)
                    }
                    parsed => {
                        if let Ok(token) = parsed {
                            state.1 = token;
                        }
                        println!("storage: accepted {client}'s write {value:?} (token {token})");
                        state.0 = value.to_owned();
                        "OK".to_owned()
                    }
                }
            }
            (Some("READ"), ..) => state.lock().map_err(|_| "storage state poisoned")?.0.clone(),
            _ => format!("ERR unknown request {line:?}"),
        };
        std::io::stdout().flush()?;
        writeln!(out, "{reply}")?;
    }
    Ok(())
}

fn request(addr: &str, line: &str) -> Result<String, Error> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(stream, "{line}")?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    Ok(reply.trim_end().to_owned())
}

// ---- a client ------------------------------------------------------------------------------------------------------

/// Takes the lock, checks it holds it, sends its write (slowly), and releases: what a careful client does, and
/// still not enough without a fence.
fn client(args: &[String]) -> Result<(), Error> {
    let [url, storage, name, fenced, freeze] = args else {
        return Err("usage: pause_and_fence client <redis-url> <storage-addr> <name> <fenced:0|1> <freeze:0|1>".into());
    };
    let (fenced, freeze) = (fenced == "1", freeze == "1");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let lock = Lock::new(RedisStore::connect(url).await?);
        let options = LockOptions::new(TTL).with_wait(Duration::from_secs(10));
        let guard = lock.acquire("demo/record", &options).await?;
        let token = guard.fence().await?.get();
        println!("{name}: acquired the lock, fencing token {token}");
        // The check a careful client makes before it writes: still valid, not lost.
        if guard.is_lost() || Instant::now() >= guard.valid_until() {
            return Err(format!("{name}: lost the lock before writing").into());
        }
        println!("{name}: the lock is still mine; sending my write");
        std::io::stdout().flush()?;
        // The write is on its way, and the process freezes right here, at the worst moment (it stops itself, so the
        // demonstration needs no timing luck): the lease runs out while it is stopped.
        if freeze {
            let status = Command::new("kill").args(["-STOP", &std::process::id().to_string()]).status()?;
            if !status.success() {
                return Err("kill -STOP failed".into());
            }
        }
        let sent = if fenced { token.to_string() } else { "-".to_owned() };
        let reply = request(storage, &format!("WRITE {name} {sent} written by {name}"))?;
        println!("{name}: the storage answered {reply:?}");
        println!("{name}: released: {:?}", guard.release().await?);
        Ok::<(), Error>(())
    })
}

// ---- the demonstration ---------------------------------------------------------------------------------------------

/// When the demonstration started: every narrated line shows the time since.
static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn say(line: &str) {
    let ms = STARTED.get_or_init(Instant::now).elapsed().as_millis();
    println!("{ms:>6} ms  {line}");
}

/// A child whose stdout lines are forwarded (and kept), so the narration interleaves as it happens.
struct Narrated {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Narrated {
    fn spawn(args: &[&str]) -> Result<Narrated, Error> {
        let mut child = Command::new(std::env::current_exe()?).args(args).stdout(Stdio::piped()).spawn()?;
        let stdout: ChildStdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                say(&format!("  {line}"));
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Narrated { child, lines })
    }

    /// Waits for a line containing `text` (bounded), returning it.
    fn wait_for(&self, text: &str) -> Result<String, Error> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).map_err(|_| format!("no line with {text:?} within 30 s"))?;
            if line.contains(text) {
                return Ok(line);
            }
        }
    }

    /// Waits until the process is stopped (Linux: `/proc/<pid>/stat` says `T`; elsewhere a short pause).
    #[allow(clippy::disallowed_methods)] // the driver is a plain thread: no async runtime to block
    fn wait_stopped(&self) -> Result<(), Error> {
        let stat = format!("/proc/{}/stat", self.child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match std::fs::read_to_string(&stat) {
                // The state follows the command name in parentheses.
                Ok(text) if text.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')) => return Ok(()),
                Ok(_) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(200));
                    return Ok(());
                }
            }
        }
        Err("the client did not stop within 30 s".into())
    }

    fn signal(&self, signal: &str) -> Result<(), Error> {
        let status = Command::new("kill").args([signal, &self.child.id().to_string()]).status()?;
        if !status.success() {
            return Err(format!("kill {signal} failed").into());
        }
        Ok(())
    }
}

impl Drop for Narrated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn demonstrate() -> Result<(), Error> {
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start()?;
            (server.url(), Some(server))
        }
    };
    let mut outcomes = Vec::new();
    STARTED.get_or_init(Instant::now);
    for fenced in [false, true] {
        println!();
        println!("== {} ==", if fenced { "with the fence" } else { "without the fence" });
        let storage = Narrated::spawn(&["storage"])?;
        let port = storage.wait_for("port ")?.trim_start_matches("port ").to_owned();
        let addr = format!("127.0.0.1:{port}");
        let flag = if fenced { "1" } else { "0" };

        let first = Narrated::spawn(&["client", &url, &addr, "client-1", flag, "1"])?;
        first.wait_for("sending my write")?;
        first.wait_stopped()?;
        say("* client-1 frozen (SIGSTOP) as it sends its write; its lease runs out");
        let mut second = Narrated::spawn(&["client", &url, &addr, "client-2", flag, "0"])?;
        second.wait_for("released")?;
        second.child.wait()?;
        say("* client-1 thawed (SIGCONT): its write arrives");
        first.signal("-CONT")?;
        first.wait_for("released")?;
        let value = request(&addr, "READ")?;
        let landed = value.contains("client-1");
        let verdict = if landed { "the stale write LANDED" } else { "the stale write was refused" };
        say(&format!("* the storage holds {value:?}: {verdict}"));
        println!("RESULT fenced={fenced} stale_write={}", if landed { "landed" } else { "refused" });
        outcomes.push((fenced, landed));
    }
    if outcomes != [(false, true), (true, false)] {
        return Err(format!("unexpected outcomes {outcomes:?}").into());
    }
    Ok(())
}
