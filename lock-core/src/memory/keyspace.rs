//! The in-memory store's data: Redis's commands that lock-core's scripts call, with Redis's replies and errors.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::seam::transport::Reply;

/// Redis's reply to a command on a key of another type.
pub(crate) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

/// How many commands between sweeps of expired keys (so abandoned keys do not accumulate).
const SWEEP_EVERY: u64 = 1024;

/// A Redis error reply (`WRONGTYPE …`, `ERR …`).
pub(crate) type CommandResult = std::result::Result<Reply, String>;

type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

/// A sorted set: member → score. Ranges sort by (score, member) on demand: the sets lock-core keeps (a fair
/// lock's waiters) are small, and this keeps one copy of every member.
type ZSet = BTreeMap<Vec<u8>, f64>;

/// A value of one of the types lock-core's scripts use.
#[derive(Clone, Debug)]
enum Value {
    Str(Vec<u8>),
    Hash(Hash),
    ZSet(ZSet),
    /// A list ([fenced writes](crate::fenced) append to the caller's lists).
    List(Vec<Vec<u8>>),
    /// A stream (fenced writes append to the caller's streams).
    Stream(Stream),
}

/// A stream's entries in ID order, and the last ID it gave out (Redis never hands out an ID twice, even after
/// the entry is gone).
#[derive(Clone, Debug, Default)]
struct Stream {
    entries: Vec<(StreamId, Vec<Vec<u8>>)>,
    last: StreamId,
}

/// A stream entry's ID: milliseconds of the server clock, and a sequence within the millisecond.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct StreamId {
    ms: u64,
    seq: u64,
}

impl StreamId {
    fn text(self) -> Vec<u8> {
        format!("{}-{}", self.ms, self.seq).into_bytes()
    }
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
    /// How far `TIME` was stepped back (a server whose clock was set back).
    clock_back: Duration,
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
            clock_back: Duration::ZERO,
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
        self.started_unix.saturating_add(now.saturating_duration_since(self.started)).saturating_sub(self.clock_back)
    }

    /// Steps `TIME` back by `by` (expiries run on the monotonic clock and are unaffected).
    pub(crate) fn step_clock_back(&mut self, by: Duration) {
        self.clock_back = self.clock_back.saturating_add(by);
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

    fn zset(&mut self, key: &[u8], now: Instant) -> Result<Option<&mut ZSet>, String> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry { value: Value::ZSet(z), .. }) => Ok(Some(z)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    fn list(&mut self, key: &[u8], now: Instant) -> Result<Option<&mut Vec<Vec<u8>>>, String> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry { value: Value::List(l), .. }) => Ok(Some(l)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    fn stream(&mut self, key: &[u8], now: Instant) -> Result<Option<&mut Stream>, String> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry { value: Value::Stream(s), .. }) => Ok(Some(s)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    /// `XADD key * field value …`: the only form lock-core's scripts send (the server picks the ID).
    fn xadd(&mut self, rest: &[Vec<u8>], now: Instant) -> CommandResult {
        let (Some(key), Some(id), pairs) = (rest.first(), rest.get(1), rest.get(2..).unwrap_or_default()) else {
            return Err(arity("XADD"));
        };
        if id.as_slice() != b"*" {
            return Err(SYNTAX.to_owned());
        }
        if pairs.is_empty() || pairs.len() % 2 != 0 {
            return Err(arity("XADD"));
        }
        let ms = u64::try_from(self.unix_now(now).as_millis()).unwrap_or(u64::MAX);
        if self.stream(key, now)?.is_none() {
            self.entries.insert(key.clone(), Entry { value: Value::Stream(Stream::default()), expires: None });
        }
        let stream = self.stream(key, now)?.ok_or_else(|| arity("XADD"))?;
        let id = if ms > stream.last.ms {
            StreamId { ms, seq: 0 }
        } else {
            let seq = stream.last.seq.checked_add(1).ok_or("ERR The stream has exhausted the last possible ID")?;
            StreamId { ms: stream.last.ms, seq }
        };
        stream.last = id;
        stream.entries.push((id, pairs.to_vec()));
        Ok(Reply::Bulk(id.text()))
    }

    /// The members of the sorted set under `key` in Redis's order: by score, then by member.
    fn ranked(&mut self, key: &[u8], now: Instant) -> Result<Vec<(Vec<u8>, f64)>, String> {
        let mut members: Vec<(Vec<u8>, f64)> =
            self.zset(key, now)?.map(|z| z.iter().map(|(m, s)| (m.clone(), *s)).collect()).unwrap_or_default();
        members.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        Ok(members)
    }

    /// The messages `PUBLISH` and `SPUBLISH` sent since the last call, as (channel, payload).
    pub(crate) fn take_published(&mut self) -> Vec<(String, Vec<u8>)> {
        std::mem::take(&mut self.published)
    }

    /// How many live keys expire: everything a lock or job holds (job records never expire; fencing counters, which
    /// outlive every hold by their idle expiry, are not counted).
    pub(crate) fn expiring_count(&self, now: Instant) -> usize {
        let counter = |key: &[u8]| key.ends_with(b":fence");
        self.entries.iter().filter(|(key, e)| !counter(key) && e.expires.is_some_and(|t| t > now)).count()
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
                    Some(Value::ZSet(_)) => "zset",
                    Some(Value::List(_)) => "list",
                    Some(Value::Stream(_)) => "stream",
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
            // A server restarting without persistence comes back with nothing, fencing counters included.
            "FLUSHALL" => {
                self.entries.clear();
                Ok(ok())
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
            "HEXISTS" => {
                let field = arg(1)?;
                let found = self.hash(arg(0)?, now)?.is_some_and(|h| h.contains_key(field));
                Ok(Reply::Int(i64::from(found)))
            }
            // Redisson's layout keeps a hold count in a hash field.
            "HINCRBY" => {
                let (key, field, by) = (arg(0)?, arg(1)?.to_vec(), int_arg(arg(2)?)?);
                if self.hash(key, now)?.is_none() {
                    self.entries.insert(key.to_vec(), Entry { value: Value::Hash(BTreeMap::new()), expires: None });
                }
                let hash = self.hash(key, now)?.ok_or_else(|| arity(&name))?;
                let current = match hash.get(&field) {
                    Some(value) => int_arg(value).map_err(|_| "ERR hash value is not an integer".to_owned())?,
                    None => 0,
                };
                let next = current.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
                hash.insert(field, next.to_string().into_bytes());
                Ok(Reply::Int(next))
            }
            "HLEN" => {
                let len = self.hash(arg(0)?, now)?.map_or(0, |h| h.len());
                Ok(Reply::Int(i64::try_from(len).unwrap_or(i64::MAX)))
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
            "RPUSH" => {
                let key = arg(0)?;
                if rest.len() < 2 {
                    return Err(arity(&name));
                }
                if self.list(key, now)?.is_none() {
                    self.entries.insert(key.to_vec(), Entry { value: Value::List(Vec::new()), expires: None });
                }
                let list = self.list(key, now)?.ok_or_else(|| arity(&name))?;
                list.extend(rest[1..].iter().cloned());
                Ok(Reply::Int(i64::try_from(list.len()).unwrap_or(i64::MAX)))
            }
            // python-redis-lock's layout signals its waiters through a list.
            "LPUSH" => {
                let key = arg(0)?;
                if rest.len() < 2 {
                    return Err(arity(&name));
                }
                if self.list(key, now)?.is_none() {
                    self.entries.insert(key.to_vec(), Entry { value: Value::List(Vec::new()), expires: None });
                }
                let list = self.list(key, now)?.ok_or_else(|| arity(&name))?;
                for value in &rest[1..] {
                    list.insert(0, value.clone());
                }
                Ok(Reply::Int(i64::try_from(list.len()).unwrap_or(i64::MAX)))
            }
            "LLEN" => {
                let len = self.list(arg(0)?, now)?.map_or(0, |l| l.len());
                Ok(Reply::Int(i64::try_from(len).unwrap_or(i64::MAX)))
            }
            "LRANGE" => {
                let (start, stop) = (int_arg(arg(1)?)?, int_arg(arg(2)?)?);
                let list = self.list(arg(0)?, now)?.cloned().unwrap_or_default();
                let len = i64::try_from(list.len()).unwrap_or(i64::MAX);
                let from_end = |i: i64| if i < 0 { len.saturating_add(i) } else { i };
                let (start, stop) = (from_end(start).max(0), from_end(stop).min(len.saturating_sub(1)));
                let range = usize::try_from(start).ok().zip(usize::try_from(stop).ok()).filter(|(a, b)| a <= b);
                let items = range.and_then(|(a, b)| list.get(a..=b)).unwrap_or_default();
                Ok(Reply::Array(items.iter().cloned().map(Reply::Bulk).collect()))
            }
            "XADD" => self.xadd(rest, now),
            "XLEN" => {
                let len = self.stream(arg(0)?, now)?.map_or(0, |s| s.entries.len());
                Ok(Reply::Int(i64::try_from(len).unwrap_or(i64::MAX)))
            }
            // Only the whole stream (`XRANGE key - +`): what tests read back.
            "XRANGE" => {
                if (arg(1)?, arg(2)?) != (b"-".as_slice(), b"+".as_slice()) || rest.len() != 3 {
                    return Err(SYNTAX.to_owned());
                }
                let entries = self.stream(arg(0)?, now)?.map(|s| s.entries.clone()).unwrap_or_default();
                let entry = |(id, fields): (StreamId, Vec<Vec<u8>>)| {
                    Reply::Array(vec![
                        Reply::Bulk(id.text()),
                        Reply::Array(fields.into_iter().map(Reply::Bulk).collect()),
                    ])
                };
                Ok(Reply::Array(entries.into_iter().map(entry).collect()))
            }
            "ZADD" => self.zadd(rest, now),
            "ZREM" => {
                let key = arg(0)?;
                let Some(z) = self.zset(key, now)? else { return Ok(Reply::Int(0)) };
                let removed = rest[1..].iter().filter(|m| z.remove(*m).is_some()).count();
                if z.is_empty() {
                    self.entries.remove(key);
                }
                Ok(Reply::Int(i64::try_from(removed).unwrap_or(i64::MAX)))
            }
            "ZSCORE" => {
                let member = arg(1)?;
                let score = self.zset(arg(0)?, now)?.and_then(|z| z.get(member).copied());
                Ok(score.map_or(Reply::Nil, |s| Reply::Bulk(score_text(s).into_bytes())))
            }
            "ZCARD" => {
                Ok(Reply::Int(self.zset(arg(0)?, now)?.map_or(0, |z| i64::try_from(z.len()).unwrap_or(i64::MAX))))
            }
            "ZRANK" => {
                let member = arg(1)?;
                let ranked = self.ranked(arg(0)?, now)?;
                let rank = ranked.iter().position(|(m, _)| m.as_slice() == member);
                Ok(rank.map_or(Reply::Nil, |r| Reply::Int(i64::try_from(r).unwrap_or(i64::MAX))))
            }
            "ZRANGE" => {
                let ranked = self.ranked(arg(0)?, now)?;
                let (start, stop) = (int_arg(arg(1)?)?, int_arg(arg(2)?)?);
                let scores = match rest.get(3) {
                    None => false,
                    Some(flag) if flag.eq_ignore_ascii_case(b"WITHSCORES") && rest.len() == 4 => true,
                    Some(_) => return Err(SYNTAX.to_owned()),
                };
                let len = i64::try_from(ranked.len()).unwrap_or(i64::MAX);
                let from = if start < 0 { (len + start).max(0) } else { start };
                let to = if stop < 0 { len + stop } else { stop.min(len - 1) };
                let picked = ranked.into_iter().enumerate().filter(|(i, _)| {
                    let i = i64::try_from(*i).unwrap_or(i64::MAX);
                    i >= from && i <= to
                });
                Ok(Reply::Array(picked.flat_map(|(_, m)| members_reply(m, scores)).collect()))
            }
            "ZRANGEBYSCORE" | "ZREMRANGEBYSCORE" => {
                let key = arg(0)?;
                let (min, max) = (score_bound(arg(1)?)?, score_bound(arg(2)?)?);
                if rest.len() != 3 {
                    return Err(SYNTAX.to_owned());
                }
                let inside = |s: f64| min.admits_above(s) && max.admits_below(s);
                if name == "ZREMRANGEBYSCORE" {
                    let Some(z) = self.zset(key, now)? else { return Ok(Reply::Int(0)) };
                    let before = z.len();
                    z.retain(|_, s| !inside(*s));
                    let removed = before - z.len();
                    if z.is_empty() {
                        self.entries.remove(key);
                    }
                    return Ok(Reply::Int(i64::try_from(removed).unwrap_or(i64::MAX)));
                }
                let ranked = self.ranked(key, now)?;
                Ok(Reply::Array(
                    ranked.into_iter().filter(|(_, s)| inside(*s)).flat_map(|m| members_reply(m, false)).collect(),
                ))
            }
            _ => Err(format!(
                "ERR unknown command '{name}' (the in-memory store implements what lock-core's scripts call)"
            )),
        }
    }

    /// `ZADD key [NX|XX] score member [score member …]`: the number of members added.
    fn zadd(&mut self, rest: &[Vec<u8>], now: Instant) -> CommandResult {
        let Some(key) = rest.first() else { return Err(arity("ZADD")) };
        let (mut nx, mut xx, mut at) = (false, false, 1);
        while let Some(flag) = rest.get(at) {
            match String::from_utf8_lossy(flag).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                _ => break,
            }
            at += 1;
        }
        let pairs = &rest[at..];
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Err(SYNTAX.to_owned());
        }
        if nx && xx {
            return Err("ERR XX and NX options at the same time are not compatible".to_owned());
        }
        let parsed = pairs
            .chunks(2)
            .map(|p| Ok((parse_score(&p[0]).ok_or("ERR value is not a valid float")?, p[1].clone())))
            .collect::<Result<Vec<_>, String>>()?;
        if self.zset(key, now)?.is_none() {
            if xx {
                return Ok(Reply::Int(0));
            }
            self.entries.insert(key.clone(), Entry { value: Value::ZSet(BTreeMap::new()), expires: None });
        }
        let z = self.zset(key, now)?.ok_or_else(|| arity("ZADD"))?;
        let mut added = 0;
        for (score, member) in parsed {
            let exists = z.contains_key(&member);
            if (nx && exists) || (xx && !exists) {
                continue;
            }
            added += usize::from(!exists);
            z.insert(member, score);
        }
        Ok(Reply::Int(i64::try_from(added).unwrap_or(i64::MAX)))
    }

    /// `SET key value [NX|XX] [PX ms|EX s|KEEPTTL] [GET]`.
    fn set(&mut self, rest: &[Vec<u8>], now: Instant) -> CommandResult {
        let (Some(key), Some(value)) = (rest.first(), rest.get(1)) else { return Err(arity("SET")) };
        let (mut nx, mut xx, mut ttl, mut keep_ttl, mut get) = (false, false, None, false, false);
        let mut options = rest[2..].iter();
        while let Some(option) = options.next() {
            match String::from_utf8_lossy(option).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "KEEPTTL" => keep_ttl = true,
                "GET" => get = true,
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
        if (nx && xx) || (keep_ttl && ttl.is_some()) {
            return Err(SYNTAX.to_owned());
        }
        // With GET, a key of another type is refused before anything is written, as Redis does.
        let old = if get { self.string(key, now)?.cloned() } else { None };
        let kept = self.live(key, now).map(|e| e.expires);
        let answer = |set: bool| match (get, old) {
            (true, Some(old)) => Reply::Bulk(old),
            (true, None) => Reply::Nil,
            (false, _) if set => ok(),
            (false, _) => Reply::Nil,
        };
        if (nx && kept.is_some()) || (xx && kept.is_none()) {
            return Ok(answer(false));
        }
        let expires = if keep_ttl { kept.flatten() } else { ttl.and_then(|t| now.checked_add(t)) };
        self.entries.insert(key.clone(), Entry { value: Value::Str(value.clone()), expires });
        Ok(answer(true))
    }
}

/// A score as Redis prints it: integers without a fraction (the scores lock-core stores), others in full precision.
fn score_text(score: f64) -> String {
    if score.fract() == 0.0 && score.abs() < 1e17 {
        format!("{score:.0}")
    } else {
        format!("{score}")
    }
}

fn parse_score(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        other => other.parse::<f64>().ok().filter(|s| !s.is_nan()),
    }
}

/// One end of a `ZRANGEBYSCORE` interval: `(` makes it exclusive.
#[derive(Clone, Copy)]
struct Bound {
    score: f64,
    exclusive: bool,
}

impl Bound {
    fn admits_above(self, s: f64) -> bool {
        if self.exclusive {
            s > self.score
        } else {
            s >= self.score
        }
    }
    fn admits_below(self, s: f64) -> bool {
        if self.exclusive {
            s < self.score
        } else {
            s <= self.score
        }
    }
}

fn score_bound(text: &[u8]) -> Result<Bound, String> {
    let (exclusive, number) = match text.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, text),
    };
    let score = parse_score(number).ok_or("ERR min or max is not a float")?;
    Ok(Bound { score, exclusive })
}

fn members_reply((member, score): (Vec<u8>, f64), scores: bool) -> Vec<Reply> {
    let mut out = vec![Reply::Bulk(member)];
    if scores {
        out.push(Reply::Bulk(score_text(score).into_bytes()));
    }
    out
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
        // SET … GET answers the old value; KEEPTTL keeps the expiry; a hash is refused before any write.
        assert_eq!(run(&mut ks, &["RPUSH", "l", "a", "b"]), Ok(Reply::Int(2)));
        assert_eq!(run(&mut ks, &["RPUSH", "l", "c"]), Ok(Reply::Int(3)));
        let bulks = |items: &[&str]| Reply::Array(items.iter().map(|i| Reply::Bulk(i.as_bytes().to_vec())).collect());
        assert_eq!(run(&mut ks, &["LRANGE", "l", "0", "-1"]), Ok(bulks(&["a", "b", "c"])));
        assert_eq!(run(&mut ks, &["LRANGE", "l", "1", "1"]), Ok(bulks(&["b"])));
        assert_eq!(run(&mut ks, &["LRANGE", "l", "-2", "9"]), Ok(bulks(&["b", "c"])));
        assert_eq!(run(&mut ks, &["LRANGE", "l", "2", "1"]), Ok(bulks(&[])));
        assert_eq!(run(&mut ks, &["LRANGE", "nope", "0", "-1"]), Ok(bulks(&[])));
        assert_eq!(run(&mut ks, &["LLEN", "l"]), Ok(Reply::Int(3)));
        assert_eq!(run(&mut ks, &["TYPE", "l"]), Ok(Reply::Status("list".into())));
        assert_eq!(run(&mut ks, &["HSET", "hl", "f", "v"]), Ok(Reply::Int(1)));
        assert_eq!(run(&mut ks, &["RPUSH", "hl", "x"]), Err(WRONGTYPE.to_owned()));
        assert_eq!(run(&mut ks, &["GET", "l"]), Err(WRONGTYPE.to_owned()));
        // Streams: IDs increase within a millisecond too; a stream is its own type.
        let first = run(&mut ks, &["XADD", "st", "*", "f", "1"]);
        let second = run(&mut ks, &["XADD", "st", "*", "f", "2", "g", "3"]);
        let id = |r: &CommandResult| match r {
            Ok(Reply::Bulk(b)) => {
                let text = String::from_utf8_lossy(b).into_owned();
                let (ms, seq) = text.split_once('-').unwrap();
                (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
            }
            other => panic!("XADD: {other:?}"),
        };
        assert!(id(&first) < id(&second), "{first:?} then {second:?}");
        assert_eq!(run(&mut ks, &["XLEN", "st"]), Ok(Reply::Int(2)));
        assert_eq!(run(&mut ks, &["TYPE", "st"]), Ok(Reply::Status("stream".into())));
        assert_eq!(run(&mut ks, &["XADD", "st", "*", "f"]), Err(arity("XADD")));
        assert_eq!(run(&mut ks, &["XADD", "l", "*", "f", "v"]), Err(WRONGTYPE.to_owned()));
        assert_eq!(run(&mut ks, &["GET", "st"]), Err(WRONGTYPE.to_owned()));
        match run(&mut ks, &["XRANGE", "st", "-", "+"]) {
            Ok(Reply::Array(entries)) => {
                assert_eq!(entries.len(), 2);
                assert_eq!(entries[1], Reply::Array(vec![second.clone().unwrap(), bulks(&["f", "2", "g", "3"])]));
            }
            other => panic!("XRANGE: {other:?}"),
        }
        assert_eq!(run(&mut ks, &["SET", "g", "1", "PX", "5000"]), Ok(ok()));
        assert_eq!(run(&mut ks, &["SET", "g", "2", "KEEPTTL", "GET"]), Ok(Reply::Bulk(b"1".to_vec())));
        assert!(matches!(run(&mut ks, &["PTTL", "g"]), Ok(Reply::Int(t)) if t > 4000));
        assert_eq!(run(&mut ks, &["SET", "g", "3", "GET"]), Ok(Reply::Bulk(b"2".to_vec())));
        assert_eq!(run(&mut ks, &["PTTL", "g"]), Ok(Reply::Int(-1)));
        assert_eq!(run(&mut ks, &["SET", "new", "1", "NX", "GET"]), Ok(Reply::Nil));
        assert_eq!(run(&mut ks, &["SET", "new", "2", "NX", "GET"]), Ok(Reply::Bulk(b"1".to_vec())));
        run(&mut ks, &["HSET", "h2", "f", "v"]).ok();
        assert_eq!(run(&mut ks, &["SET", "h2", "1", "GET"]), Err(WRONGTYPE.to_owned()));
        assert_eq!(run(&mut ks, &["TYPE", "h2"]), Ok(Reply::Status("hash".to_owned())));
    }

    #[test]
    fn sorted_sets_answer_as_redis_does() {
        let mut ks = Keyspace::default();
        let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        assert_eq!(run(&mut ks, &["ZADD", "z", "2", "b", "1", "a", "2", "a2"]), Ok(Reply::Int(3)));
        assert_eq!(run(&mut ks, &["ZADD", "z", "NX", "9", "a"]), Ok(Reply::Int(0)));
        assert_eq!(run(&mut ks, &["ZADD", "z", "XX", "3", "nope"]), Ok(Reply::Int(0)));
        assert_eq!(run(&mut ks, &["ZSCORE", "z", "a"]), Ok(bulk("1")));
        assert_eq!(run(&mut ks, &["ZRANGE", "z", "0", "-1"]), Ok(Reply::Array(vec![bulk("a"), bulk("a2"), bulk("b")])));
        assert_eq!(
            run(&mut ks, &["ZRANGE", "z", "-1", "-1", "WITHSCORES"]),
            Ok(Reply::Array(vec![bulk("b"), bulk("2")]))
        );
        assert_eq!(run(&mut ks, &["ZRANGE", "z", "5", "9"]), Ok(Reply::Array(vec![])));
        assert_eq!(run(&mut ks, &["ZRANK", "z", "b"]), Ok(Reply::Int(2)));
        assert_eq!(run(&mut ks, &["ZRANK", "z", "x"]), Ok(Reply::Nil));
        assert_eq!(run(&mut ks, &["ZRANGEBYSCORE", "z", "-inf", "(2"]), Ok(Reply::Array(vec![bulk("a")])));
        assert_eq!(run(&mut ks, &["ZREMRANGEBYSCORE", "z", "2", "+inf"]), Ok(Reply::Int(2)));
        assert_eq!(run(&mut ks, &["ZCARD", "z"]), Ok(Reply::Int(1)));
        assert_eq!(run(&mut ks, &["TYPE", "z"]), Ok(Reply::Status("zset".into())));
        assert_eq!(run(&mut ks, &["GET", "z"]), Err(WRONGTYPE.to_owned()));
        assert_eq!(run(&mut ks, &["ZREM", "z", "a"]), Ok(Reply::Int(1)));
        assert_eq!(run(&mut ks, &["EXISTS", "z"]), Ok(Reply::Int(0)), "an emptied set is deleted");
        run(&mut ks, &["SET", "s", "v"]).ok();
        assert_eq!(run(&mut ks, &["ZADD", "s", "1", "a"]), Err(WRONGTYPE.to_owned()));
        assert_eq!(run(&mut ks, &["ZRANGE", "s", "0", "0"]), Err(WRONGTYPE.to_owned()));
    }

    #[test]
    fn a_restart_without_persistence_and_a_clock_stepped_back() {
        let mut ks = Keyspace::default();
        let now = Instant::now();
        let args = |a: &[&str]| a.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>();
        ks.exec(&args(&["SET", "k", "v", "PX", "10000"]), now).ok();
        ks.exec(&args(&["INCRBY", "fence", "7"]), now).ok();
        assert_eq!(ks.exec(&args(&["FLUSHALL"]), now), Ok(ok()));
        assert_eq!(ks.exec(&args(&["GET", "k"]), now), Ok(Reply::Nil));
        assert_eq!(ks.exec(&args(&["INCRBY", "fence", "1"]), now), Ok(Reply::Int(1)), "counters go too");
        let before = ks.unix_now(now);
        ks.step_clock_back(Duration::from_secs(60));
        assert_eq!(before.saturating_sub(ks.unix_now(now)), Duration::from_secs(60));
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
