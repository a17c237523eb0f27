//! The in-memory store's data: Redis's commands that lock-core's scripts call, with Redis's replies and errors.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::transport::Reply;

/// Redis's reply to a command on a key of another type.
pub(crate) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

/// How many commands between sweeps of expired keys (so abandoned keys do not accumulate).
const SWEEP_EVERY: u64 = 1024;

/// A Redis error reply (`WRONGTYPE …`, `ERR …`).
pub(crate) type CommandResult = std::result::Result<Reply, String>;

type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

/// A value of one of the types lock-core's scripts use.
#[derive(Clone, Debug)]
enum Value {
    Str(Vec<u8>),
    Hash(Hash),
}

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    expires: Option<Instant>,
}

/// The keys, their expiries, and the messages published since the last [`Keyspace::take_published`].
#[derive(Debug)]
pub(crate) struct Keyspace {
    entries: HashMap<Vec<u8>, Entry>,
    published: Vec<(String, Vec<u8>)>,
    /// The server clock: wall time at creation plus monotonic time since (so `TIME` never steps back).
    started: Instant,
    started_unix: Duration,
    commands: u64,
}

impl Default for Keyspace {
    fn default() -> Self {
        Keyspace {
            entries: HashMap::new(),
            published: Vec::new(),
            started: Instant::now(),
            // The wall clock only as the origin of `TIME` (what a server reports); every expiry is monotonic.
            #[allow(clippy::disallowed_methods)]
            started_unix: SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default(),
            commands: 0,
        }
    }
}

fn int_arg(arg: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(arg).ok().and_then(|s| s.parse::<i64>().ok()).ok_or_else(|| NOT_AN_INTEGER.to_owned())
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(u64::try_from(n).unwrap_or(0))
}

fn ok() -> Reply {
    Reply::Status("OK".to_owned())
}

fn arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{}' command", name.to_ascii_lowercase())
}

impl Keyspace {
    /// The server clock, as `TIME` reports it.
    pub(crate) fn unix_now(&self, now: Instant) -> Duration {
        self.started_unix.saturating_add(now.saturating_duration_since(self.started))
    }

    /// The live entry under `key`, dropping it if expired.
    fn live(&mut self, key: &[u8], now: Instant) -> Option<&mut Entry> {
        if self.entries.get(key).is_some_and(|e| e.expires.is_some_and(|t| t <= now)) {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    fn string(&mut self, key: &[u8], now: Instant) -> Result<Option<&mut Vec<u8>>, String> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry { value: Value::Str(s), .. }) => Ok(Some(s)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    fn hash(&mut self, key: &[u8], now: Instant) -> Result<Option<&mut Hash>, String> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry { value: Value::Hash(h), .. }) => Ok(Some(h)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    /// The messages `PUBLISH` and `SPUBLISH` sent since the last call, as (channel, payload).
    pub(crate) fn take_published(&mut self) -> Vec<(String, Vec<u8>)> {
        std::mem::take(&mut self.published)
    }

    /// How many live keys expire: everything a lock or job holds (fencing counters and job records never expire and
    /// are not counted).
    pub(crate) fn expiring_count(&self, now: Instant) -> usize {
        self.entries.values().filter(|e| e.expires.is_some_and(|t| t > now)).count()
    }

    /// The remaining time-to-live of `key`, if it exists and expires.
    pub(crate) fn ttl(&mut self, key: &[u8], now: Instant) -> Option<Duration> {
        self.live(key, now).and_then(|e| e.expires).map(|t| t.saturating_duration_since(now))
    }

    /// Runs one command (`args[0]` is its name), as Redis would.
    pub(crate) fn exec(&mut self, args: &[Vec<u8>], now: Instant) -> CommandResult {
        self.commands += 1;
        if self.commands.is_multiple_of(SWEEP_EVERY) {
            self.entries.retain(|_, e| e.expires.is_none_or(|t| t > now));
        }
        let Some((name, rest)) = args.split_first() else {
            return Err("ERR Please specify at least one argument for this redis lib call".to_owned());
        };
        let name = String::from_utf8_lossy(name).to_ascii_uppercase();
        let arg = |i: usize| rest.get(i).map(Vec::as_slice).ok_or_else(|| arity(&name));
        match name.as_str() {
            "GET" => Ok(self.string(arg(0)?, now)?.map_or(Reply::Nil, |s| Reply::Bulk(s.clone()))),
            "SET" => self.set(rest, now),
            "DEL" => {
                let removed = rest.iter().filter(|k| self.live(k, now).is_some() && self.entries.remove(*k).is_some());
                Ok(Reply::Int(i64::try_from(removed.count()).unwrap_or(i64::MAX)))
            }
            "EXISTS" => {
                let found = rest.iter().filter(|k| self.live(k, now).is_some()).count();
                Ok(Reply::Int(i64::try_from(found).unwrap_or(i64::MAX)))
            }
            "TYPE" => Ok(Reply::Status(
                match self.live(arg(0)?, now).map(|e| &e.value) {
                    None => "none",
                    Some(Value::Str(_)) => "string",
                    Some(Value::Hash(_)) => "hash",
                }
                .to_owned(),
            )),
            "PEXPIRE" | "PEXPIREAT" => {
                let at = int_arg(arg(1)?)?;
                let expires = if name == "PEXPIRE" {
                    now.checked_add(ms(at))
                } else {
                    let unix = self.unix_now(now);
                    now.checked_add(ms(at).saturating_sub(unix))
                };
                Ok(Reply::Int(match self.live(arg(0)?, now) {
                    Some(entry) => {
                        entry.expires = expires.or(entry.expires);
                        1
                    }
                    None => 0,
                }))
            }
            "PTTL" => Ok(Reply::Int(match self.live(arg(0)?, now) {
                None => -2,
                Some(Entry { expires: None, .. }) => -1,
                Some(Entry { expires: Some(t), .. }) => {
                    i64::try_from(t.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX)
                }
            })),
            "INCR" | "INCRBY" => {
                let by = if name == "INCR" { 1 } else { int_arg(arg(1)?)? };
                let key = arg(0)?;
                let current = match self.string(key, now)? {
                    Some(s) => int_arg(s)?,
                    None => 0,
                };
                let next = current.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
                let text = next.to_string().into_bytes();
                match self.string(key, now)? {
                    Some(s) => *s = text,
                    None => {
                        self.entries.insert(key.to_vec(), Entry { value: Value::Str(text), expires: None });
                    }
                }
                Ok(Reply::Int(next))
            }
            "TIME" => {
                let t = self.unix_now(now);
                Ok(Reply::Array(vec![
                    Reply::Bulk(t.as_secs().to_string().into_bytes()),
                    Reply::Bulk(t.subsec_micros().to_string().into_bytes()),
                ]))
            }
            "PUBLISH" | "SPUBLISH" => {
                let channel = String::from_utf8_lossy(arg(0)?).into_owned();
                self.published.push((channel, arg(1)?.to_vec()));
                Ok(Reply::Int(0))
            }
            "HSET" => {
                let key = arg(0)?;
                let pairs = &rest[1..];
                if pairs.is_empty() || pairs.len() % 2 != 0 {
                    return Err(arity(&name));
                }
                if self.hash(key, now)?.is_none() {
                    self.entries.insert(key.to_vec(), Entry { value: Value::Hash(BTreeMap::new()), expires: None });
                }
                let hash = self.hash(key, now)?.ok_or_else(|| arity(&name))?;
                let added = pairs.chunks(2).filter(|p| hash.insert(p[0].clone(), p[1].clone()).is_none()).count();
                Ok(Reply::Int(i64::try_from(added).unwrap_or(i64::MAX)))
            }
            "HGET" => {
                let field = arg(1)?;
                Ok(self.hash(arg(0)?, now)?.and_then(|h| h.get(field).cloned()).map_or(Reply::Nil, Reply::Bulk))
            }
            "HMGET" => {
                let hash = self.hash(arg(0)?, now)?;
                let field = |f: &Vec<u8>| hash.as_ref().and_then(|h| h.get(f)).cloned().map_or(Reply::Nil, Reply::Bulk);
                Ok(Reply::Array(rest[1..].iter().map(field).collect()))
            }
            "HGETALL" => {
                let hash = self.hash(arg(0)?, now)?.cloned().unwrap_or_default();
                Ok(Reply::Array(hash.into_iter().flat_map(|(k, v)| [Reply::Bulk(k), Reply::Bulk(v)]).collect()))
            }
            "HDEL" => {
                let key = arg(0)?;
                let Some(hash) = self.hash(key, now)? else { return Ok(Reply::Int(0)) };
                let removed = rest[1..].iter().filter(|f| hash.remove(*f).is_some()).count();
                if hash.is_empty() {
                    self.entries.remove(key);
                }
                Ok(Reply::Int(i64::try_from(removed).unwrap_or(i64::MAX)))
            }
            _ => Err(format!(
                "ERR unknown command '{name}' (the in-memory store implements what lock-core's scripts call)"
            )),
        }
    }

    /// `SET key value [NX|XX] [PX ms|EX s]`.
    fn set(&mut self, rest: &[Vec<u8>], now: Instant) -> CommandResult {
        let (Some(key), Some(value)) = (rest.first(), rest.get(1)) else { return Err(arity("SET")) };
        let (mut nx, mut xx, mut ttl) = (false, false, None);
        let mut options = rest[2..].iter();
        while let Some(option) = options.next() {
            match String::from_utf8_lossy(option).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                unit @ ("PX" | "EX") => {
                    let n = int_arg(options.next().ok_or(SYNTAX)?)?;
                    if n <= 0 {
                        return Err("ERR invalid expire time in 'set' command".to_owned());
                    }
                    let n = ms(n);
                    ttl = Some(if unit == "EX" { n.saturating_mul(1000) } else { n });
                }
                _ => return Err(SYNTAX.to_owned()),
            }
        }
        let exists = self.live(key, now).is_some();
        if (nx && exists) || (xx && !exists) {
            return Ok(Reply::Nil);
        }
        let expires = ttl.and_then(|t| now.checked_add(t));
        self.entries.insert(key.clone(), Entry { value: Value::Str(value.clone()), expires });
        Ok(ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ks: &mut Keyspace, args: &[&str]) -> CommandResult {
        ks.exec(&args.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>(), Instant::now())
    }

    #[test]
    fn commands_answer_as_redis_does() {
        let mut ks = Keyspace::default();
        assert_eq!(run(&mut ks, &["SET", "k", "v", "NX", "PX", "1000"]), Ok(ok()));
        assert_eq!(run(&mut ks, &["SET", "k", "w", "NX", "PX", "1000"]), Ok(Reply::Nil));
        assert_eq!(run(&mut ks, &["GET", "k"]), Ok(Reply::Bulk(b"v".to_vec())));
        assert!(matches!(run(&mut ks, &["PTTL", "k"]), Ok(Reply::Int(n)) if n > 900 && n <= 1000));
        assert_eq!(run(&mut ks, &["INCRBY", "f", "5"]), Ok(Reply::Int(5)));
        assert_eq!(run(&mut ks, &["PTTL", "f"]), Ok(Reply::Int(-1)));
        assert_eq!(run(&mut ks, &["HSET", "h", "a", "1"]), Ok(Reply::Int(1)));
        assert_eq!(run(&mut ks, &["GET", "h"]), Err(WRONGTYPE.to_owned()));
        assert_eq!(run(&mut ks, &["INCRBY", "k", "1"]), Err(NOT_AN_INTEGER.to_owned()));
        assert_eq!(run(&mut ks, &["TYPE", "h"]), Ok(Reply::Status("hash".into())));
        assert_eq!(run(&mut ks, &["DEL", "k", "h", "nope"]), Ok(Reply::Int(2)));
        assert_eq!(run(&mut ks, &["PTTL", "k"]), Ok(Reply::Int(-2)));
        assert!(run(&mut ks, &["SET", "k", "v", "PX", "0"]).is_err());
        assert!(run(&mut ks, &["EVAL"]).is_err());
    }

    #[test]
    fn keys_expire() {
        let mut ks = Keyspace::default();
        let now = Instant::now();
        let args = |a: &[&str]| a.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>();
        ks.exec(&args(&["SET", "k", "v", "PX", "10"]), now).ok();
        assert_eq!(ks.exec(&args(&["GET", "k"]), now + Duration::from_millis(11)), Ok(Reply::Nil));
        assert_eq!(ks.expiring_count(now + Duration::from_millis(11)), 0);
    }
}
