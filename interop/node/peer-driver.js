#!/usr/bin/env node
// Peer driver: drives a REAL npm Redis-lock package over a JSON-lines protocol.
//
//   node peer-driver.js <peer> <redis_url>     peer: redlock | sesame | node-redisson
//
// One JSON request per stdin line, one JSON reply per stdout line; logs go to stderr.
// Requests are handled strictly one after another. See ../README.md for the protocol
// and for what each package does on the wire. This file only adapts the protocol to
// each package's public API; it never re-implements locking logic.
//
// Times are process.hrtime.bigint() (CLOCK_MONOTONIC on Linux) in ns, written as
// exact JSON integers (see emit()).
'use strict';

const readline = require('node:readline');

const nowNs = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const errText = (e) => `${(e && e.constructor && e.constructor.name) || 'Error'}: ${e && e.message}`;
const pkgVersion = (p) => require(`${p}/package.json`).version;
class NotHeldError extends Error {}

// The bench's hold: Node's own sleep, setTimeout, which counts whole ms from libuv's cached
// loop time and so can fire early (a 1 ms timer measured 26 us after a long await); sleep
// again until the monotonic clock says the deadline has passed.
async function holdUntil(deadlineNs) {
  for (;;) {
    const left = deadlineNs - nowNs();
    if (left <= 0n) return;
    await sleep(Math.ceil(Number(left) / 1e6));
  }
}

// Waiting (W > 0) for the two redlock flavours: the package retries `retryCount` times,
// `retryDelay` +- `retryJitter` ms apart; we choose retryCount so the retries span W.
function retrySettings(req, waitMs) {
  const retryDelay = req.retry_ms ?? 200; // package defaults: 200 ms +- 100 ms jitter
  const retryJitter = req.jitter_ms ?? 100;
  const retryCount = waitMs > 0 ? Math.ceil(waitMs / retryDelay) : 0;
  return { retryCount, retryDelay, retryJitter };
}

// ---- redlock 4.2.0 (with ioredis 4, installed under the alias "ioredis4") -------------
class RedlockPeer {
  constructor(url) {
    this.pkg = 'redlock';
    const Redis = require('ioredis4');
    this.Redlock = require('redlock');
    this.client = new Redis(url);
    this.lastClientError = null;
    // extend() retries with the *instance's* retryCount (default 10 x 200 ms), so extend
    // through an instance configured for exactly one attempt. release never retries in v4.
    this.oneShot = this.makeRedlock({ retryCount: 0 });
    this.instances = new Map(); // "retryCount/retryDelay/retryJitter" -> Redlock
  }
  makeRedlock(settings) {
    const rl = new this.Redlock([this.client], settings);
    // Redis errors (e.g. WRONGTYPE inside a script) only surface as this event; the
    // promise just fails with a generic LockError.
    rl.on('clientError', (e) => {
      this.lastClientError = errText(e);
      console.error('[peer redlock] clientError:', e.message);
    });
    return rl;
  }
  describe(name) {
    return {
      keys: [name], channels: [], lists: [],
      notes: 'String key = the resource name itself (no prefix), value = 16 random bytes as hex ' +
        '(32 chars), set by a Lua script (EXISTS then SET PX). Waiters retry every ' +
        'retryDelay +- retryJitter ms (default 200 +- 100), retryCount times (redlock.js).',
    };
  }
  newLock() { return { lock: null, extra: {} }; }
  async acquire(entry, name, ttlMs, waitMs, req) {
    // NB: lockWithOptions(..., {retryCount: 0}) would fall back to 10 (`0 || 10`), so
    // use an instance built with the wanted settings: one per distinct setting, kept,
    // as an application keeps its configured Redlock (construction hashes 3 scripts).
    const settings = retrySettings(req, waitMs);
    const key = `${settings.retryCount}/${settings.retryDelay}/${settings.retryJitter}`;
    let rl = this.instances.get(key);
    if (!rl) { rl = this.makeRedlock(settings); this.instances.set(key, rl); }
    try {
      entry.lock = await rl.lock(name, ttlMs);
      return { acquired: true };
    } catch (e) {
      if (e instanceof this.Redlock.LockError) return { acquired: false, error: errText(e) };
      throw e;
    }
  }
  async release(entry) {
    this.lastClientError = null;
    try {
      await entry.lock.unlock(); // rejects with LockError if the value does not match
    } catch (e) {
      if (this.lastClientError) e.message += ` (clientError: ${this.lastClientError})`;
      throw e;
    }
  }
  async extend(entry, ttlMs) {
    this.lastClientError = null;
    try {
      entry.lock = await this.oneShot.extend(entry.lock, ttlMs);
    } catch (e) {
      if (this.lastClientError) e.message += ` (clientError: ${this.lastClientError})`;
      throw e;
    }
    return {};
  }
  async close() { await this.client.quit().catch(() => {}); }
}

// ---- @sesamecare-oss/redlock (maintained v5 fork, with ioredis 5) -----------------------
class SesamePeer {
  constructor(url) {
    this.pkg = '@sesamecare-oss/redlock';
    const Redis = require('ioredis');
    const { Redlock } = require('@sesamecare-oss/redlock');
    this.client = new Redis(url);
    this.redlock = new Redlock([this.client]);
    this.lastError = null;
    // The package swallows per-client errors (WRONGTYPE, ...) and only emits them here.
    this.redlock.on('error', (e) => {
      if (e && e.name !== 'ResourceLockedError') this.lastError = errText(e);
    });
  }
  describe(name) {
    return {
      keys: [name], channels: [], lists: [],
      notes: 'String key = the resource name itself (no prefix), value = 16 random bytes as hex ' +
        '(32 chars), set by a Lua script (pcall SELECT db, EXISTS, SET PX). Waiters retry every ' +
        'retryDelay +- retryJitter ms (default 200 +- 100), retryCount times (build/index.js, ' +
        'build/scripts.js).',
    };
  }
  newLock() { return { lock: null, extra: {} }; }
  async acquire(entry, name, ttlMs, waitMs, req) {
    try {
      entry.lock = await this.redlock.acquire([name], ttlMs, retrySettings(req, waitMs));
      return { acquired: true };
    } catch (e) {
      if (e && e.name === 'ExecutionError') return { acquired: false, error: errText(e) };
      throw e;
    }
  }
  // release/extend default to the instance's retryCount (10 x 200 ms) when they fail;
  // the driver asks for a single attempt so a lost lock is reported at once.
  async release(entry) {
    this.lastError = null;
    try {
      await this.redlock.release(entry.lock, { retryCount: 0 });
    } catch (e) {
      if (this.lastError) e.message += ` (client error: ${this.lastError})`;
      throw e;
    }
  }
  async extend(entry, ttlMs) {
    this.lastError = null;
    try {
      entry.lock = await this.redlock.extend(entry.lock, ttlMs, { retryCount: 0 });
    } catch (e) {
      if (this.lastError) e.message += ` (client error: ${this.lastError})`;
      throw e;
    }
    return {};
  }
  async close() { await this.client.quit().catch(() => {}); }
}

// ---- node-redisson 1.0.4 ("Redisson stand-in"; uses whatever `ioredis` resolves to) ----
class NodeRedissonPeer {
  constructor(url) {
    this.pkg = 'node-redisson';
    const { Redisson } = require('node-redisson');
    const u = new URL(url);
    const options = {
      host: u.hostname, port: Number(u.port || 6379),
      db: Number(u.pathname.slice(1) || 0),
      ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
      ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    };
    const watchdog = process.env.PEER_WATCHDOG_MS;
    this.redisson = new Redisson({
      redis: { options },
      ...(watchdog ? { lockWatchdogTimeout: BigInt(watchdog) } : {}),
    });
  }
  describe(name) {
    const lock = this.redisson.getLock(name);
    return {
      keys: [lock.name], channels: [lock.getChannelName()], lists: [],
      transient_keys: [lock.getUnlockLatchName('<uuid>')],
      notes: 'HASH key = the name itself (no prefix): field "<executorUUID>:<lockUUID>" -> re-entry ' +
        'count, PEXPIRE ttl. Unlock PUBLISHes "0" on the channel and SETs a per-unlock latch key ' +
        '(PX 10) that it DELs right after. Waiters SUBSCRIBE and sleep min(pttl, remaining wait). ' +
        'Channel braces: name wrapped in {} unless it STARTS with "{" (Java Redisson: unless it ' +
        'CONTAINS "{") (dist/locks/*.js, dist/executor/*.js).',
    };
  }
  newLock(name) { return { lock: this.redisson.getLock(name), extra: {} }; }
  async acquire(entry, name, ttlMs, waitMs) {
    // leaseTime <= 0 -> no lease: the package's watchdog keeps renewing (lockWatchdogTimeout).
    const acquired = await entry.lock.tryLock(waitMs, ttlMs > 0 ? ttlMs : -1);
    return { acquired };
  }
  async release(entry) {
    await entry.lock.unlock(); // throws RedissonLockError if this lock's field is absent
  }
  async extend(entry, ttlMs) {
    // node-redisson has no public extend(). Its watchdog renews with the package's own
    // registered script rRenewExpiration (HEXISTS field -> PEXPIRE); call that script.
    const lock = entry.lock;
    const r = await lock.commandExecutor.redis.rRenewExpiration(
      lock.name, ttlMs, lock.getClientName(lock.clientId));
    if (r !== 1) throw new NotHeldError('rRenewExpiration returned 0: our hash field is absent');
    return { via: 'rRenewExpiration (watchdog script)' };
  }
  async close() { await this.redisson.quit(); }
}

const PEERS = { redlock: RedlockPeer, sesame: SesamePeer, 'node-redisson': NodeRedissonPeer };

// Exact integers for BigInt timestamps: JSON.stringify cannot do BigInt, so mark them
// as strings and strip the quotes afterwards.
function emit(obj) {
  const s = JSON.stringify(obj, (_k, v) => (typeof v === 'bigint' ? `__BIGINT__${v}` : v))
    .replace(/"__BIGINT__(-?\d+)"/g, '$1');
  process.stdout.write(s + '\n'); // synchronous for pipes and files on Linux
}

class Driver {
  constructor(peer) {
    this.peer = peer;
    // name -> {lock, depth}. While a name is held, a further acquire reuses the same
    // package object, so the package's own re-entrancy behaviour shows.
    this.held = new Map();
  }
  async _acquire(name, ttlMs, waitMs, req) {
    const existing = this.held.get(name);
    const entry = existing || { ...this.peer.newLock(name), depth: 0 };
    const before = entry.lock;
    const started = nowNs();
    const res = await this.peer.acquire(entry, name, ttlMs, waitMs || 0, req);
    const at = nowNs();
    if (res.acquired) {
      entry.depth += 1;
      this.held.set(name, entry);
    } else if (existing) {
      entry.lock = before;
    }
    const out = { acquired: !!res.acquired, started_ns: started, at_ns: at, ...entry.extra };
    if (!res.acquired && res.error) out.detail = res.error;
    return out;
  }
  async _release(name) {
    const entry = this.held.get(name);
    const started = nowNs();
    if (!entry) {
      return { released: false, error: `NotHeld: driver holds no lock named '${name}'`, started_ns: started, at_ns: started };
    }
    let error = null;
    try {
      await this.peer.release(entry);
    } catch (e) { // lost/stolen lock, WRONGTYPE, ... -> report, never crash
      error = errText(e);
    }
    const at = nowNs();
    entry.depth -= 1;
    if (entry.depth <= 0 || error !== null) this.held.delete(name);
    return { released: error === null, error, started_ns: started, at_ns: at };
  }

  op_describe(req) { return this.peer.describe(req.name); }
  op_acquire(req) { return this._acquire(req.name, req.ttl_ms, req.wait_ms, req); }
  op_release(req) { return this._release(req.name); }
  // None of the Node packages has a bulk cleanup (they delete only the keys they hold).
  op_cleanup(req) { return { cleanup: null }; }
  async op_extend(req) {
    const entry = this.held.get(req.name);
    if (!entry) return { extended: false, error: `NotHeld: driver holds no lock named '${req.name}'` };
    const started = nowNs();
    try {
      const extra = await this.peer.extend(entry, req.ttl_ms);
      return { extended: true, error: null, started_ns: started, at_ns: nowNs(), ...extra };
    } catch (e) {
      return { extended: false, error: errText(e), started_ns: started, at_ns: nowNs() };
    }
  }
  async op_cycles(req) {
    const redis = this.counterClient();
    let done = 0; let failed = 0; let failedReleases = 0;
    const events = [];
    for (let i = 0; i < req.n; i++) {
      const a = await this._acquire(req.name, req.ttl_ms, req.wait_ms, req);
      if (!a.acquired) { failed += 1; continue; }
      // Deliberately non-atomic read-modify-write: only the lock protects it.
      const v = Number((await redis.get(req.counter)) || 0);
      await redis.set(req.counter, String(v + 1));
      const r = await this._release(req.name);
      events.push([a.at_ns, r.started_ns, r.at_ns]);
      if (r.released) done += 1; else { failedReleases += 1; console.error('[peer] cycles: release failed:', r.error); }
    }
    return { done, failed_acquires: failed, failed_releases: failedReleases, events };
  }
  async op_hold(req) {
    const a = await this._acquire(req.name, req.ttl_ms, req.wait_ms, req);
    emit({ ok: true, ...a });
    if (!a.acquired) return null; // only one line when not acquired
    await sleep(req.hold_ms);
    const r = await this._release(req.name);
    return { released: r.released, error: r.error, release_started_ns: r.started_ns, release_done_ns: r.at_ns };
  }
  // acquire -> hold -> release cycles on one name until n cycles are done or duration_ms
  // has passed since the first cycle started (checked before each cycle). Goes through
  // _acquire/_release, i.e. the very package objects and settings of the acquire and
  // release ops. The protocol is in ../README.md ("bench").
  async op_bench(req) {
    const holdNs = BigInt(Math.round((req.hold_us || 0) * 1000));
    const budgetNs = BigInt(req.duration_ms) * 1000000n;
    let cycles = 0; let failed = 0; let failedReleases = 0; let releaseError = null;
    const acquireNs = []; const cycleNs = [];
    let start = null; let end = null;
    while (cycles < req.n) {
      const t0 = nowNs();
      if (start === null) start = t0;
      else if (t0 - start >= budgetNs) break;
      const a = await this._acquire(req.name, req.ttl_ms, req.wait_ms, req);
      const t1 = nowNs();
      if (!a.acquired) { failed += 1; end = t1; continue; }
      if (holdNs > 0n) await holdUntil(t1 + holdNs);
      const r = await this._release(req.name);
      const t2 = nowNs();
      end = t2;
      if (!r.released) { // the cycle still counts: it did acquire
        failedReleases += 1;
        if (releaseError === null) releaseError = r.error;
      }
      cycles += 1;
      acquireNs.push(Number(t1 - t0));
      cycleNs.push(Number(t2 - t0));
    }
    const reply = {
      cycles, failed, elapsed_ns: start === null ? 0 : Number(end - start),
      acquire_ns: acquireNs, cycle_ns: cycleNs,
    };
    if (failedReleases) Object.assign(reply, { failed_releases: failedReleases, release_error: releaseError });
    return reply;
  }
  counterClient() {
    // A plain client for the counter, separate from the lock's connection(s).
    if (!this._counter) {
      const Redis = require('ioredis');
      this._counter = new Redis(this.url);
    }
    return this._counter;
  }
}

async function main() {
  const [peerName, url] = process.argv.slice(2);
  if (!PEERS[peerName] || !url) {
    console.error(`usage: node peer-driver.js <${Object.keys(PEERS).join('|')}> <redis_url>`);
    process.exit(2);
  }
  const peer = new PEERS[peerName](url);
  const drv = new Driver(peer);
  drv.url = url;
  await drv.counterClient().ping();
  emit({
    ready: true, peer: peerName, version: pkgVersion(peer.pkg),
    ioredis_version: peerName === 'redlock' ? pkgVersion('ioredis4') : pkgVersion('ioredis'),
    runtime: `node ${process.version}`,
  });

  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const raw of rl) {
    const line = raw.trim();
    if (!line) continue;
    let req;
    try {
      req = JSON.parse(line);
      if (req.op === 'quit') break; // held locks are NOT released: they expire by TTL
      const handler = drv[`op_${req.op}`];
      if (typeof handler !== 'function') throw new Error(`unknown op '${req.op}'`);
      const reply = await handler.call(drv, req);
      if (reply !== null) emit({ ok: true, ...reply });
    } catch (e) {
      console.error('[peer] request failed:', line, e);
      emit({ ok: false, error: errText(e) });
    }
  }
  // Connections, watchdog timers and node-redisson's never-cleared wait timers would keep
  // the event loop alive, so exit explicitly.
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
