//! A fenced resource for fault tests: a counter that accepts a write only with a fencing token at least as high
//! as any it has seen, and reports lost updates. It lives in its own `redis-server` (not one of the lock's), so
//! workers in any process can use it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::resp::{self, Reply};
use crate::server::{RedisServer, ServerError};

const WRITE: &str = r#"
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = tonumber(ARGV[1])
if fence > 0 and fence < highest then
  return 0
end
if fence > highest then
  redis.call('SET', KEYS[2], ARGV[1])
end
local current = redis.call('GET', KEYS[1]) or '0'
redis.call('SET', KEYS[1], ARGV[3])
if current ~= ARGV[2] then
  return 2
end
return 1
"#;

const TIMEOUT: Duration = Duration::from_secs(5);

/// The resource a fault test's workers protect with the lock. Fencing token 0 means "unfenced" (always accepted).
#[derive(Debug)]
pub struct FencedCounter {
    server: RedisServer,
}

/// A worker's connection to the counter (by address, from any process).
#[derive(Debug)]
pub struct CounterClient {
    conn: resp::Connection,
}

impl FencedCounter {
    /// Starts the resource's own server.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub fn start() -> Result<Self, ServerError> {
        Ok(FencedCounter { server: RedisServer::start()? })
    }

    /// A client for a worker in this process.
    ///
    /// # Errors
    /// When the resource's server cannot be reached.
    pub fn client(&self) -> Result<CounterClient, ServerError> {
        CounterClient::connect(self.server.addr())
    }

    /// The address to pass to worker processes (`CounterClient::at`).
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }
}

impl CounterClient {
    /// Connects to the counter at `addr`.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub fn connect(addr: SocketAddr) -> Result<Self, ServerError> {
        Ok(CounterClient { conn: resp::Connection::open(addr, TIMEOUT)? })
    }

    /// The current value.
    ///
    /// # Errors
    /// I/O errors talking to the resource's server.
    pub fn read(&mut self) -> Result<u64, ServerError> {
        match self.conn.command(&["GET", "counter"])? {
            Reply::Bulk(Some(v)) => Ok(String::from_utf8_lossy(&v).parse().unwrap_or(0)),
            _ => Ok(0),
        }
    }

    /// Writes `new`, claiming the value read was `expected`, with fencing token `fence` (0 = unfenced).
    ///
    /// # Errors
    /// I/O errors, or an unexpected reply.
    pub fn write(&mut self, fence: u64, expected: u64, new: u64) -> Result<WriteOutcome, ServerError> {
        let (fence, expected, new) = (fence.to_string(), expected.to_string(), new.to_string());
        let reply = self.conn.command(&["EVAL", WRITE, "2", "counter", "highest", &fence, &expected, &new])?;
        match reply.as_int() {
            Some(1) => Ok(WriteOutcome::Accepted),
            Some(0) => Ok(WriteOutcome::Rejected),
            Some(2) => Ok(WriteOutcome::LostUpdate),
            _ => Err(ServerError::Protocol(format!("{reply:?}"))),
        }
    }
}

/// The protected resource's verdict on one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Accepted, and the value it read was still current.
    Accepted,
    /// Rejected: a higher fencing token had already written.
    Rejected,
    /// Accepted, but someone else had written since this writer read: a lost update.
    LostUpdate,
}
