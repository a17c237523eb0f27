// Self-test of peer-driver.js: each npm peer, driven through the protocol, against a
// throwaway redis-server. Run: cd interop/node && node --test test/
'use strict';

const { test, describe, before, after, beforeEach, afterEach } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const net = require('node:net');
const path = require('node:path');
const readline = require('node:readline');

const DRIVER = path.join(__dirname, '..', 'peer-driver.js');
const PINNED = { redlock: '4.2.0', sesame: '1.4.0', 'node-redisson': '1.0.4' };
const TTL = 10000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

class RedisServer {
  async start() {
    this.port = await freePort();
    this.proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1',
      '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    this.url = `redis://127.0.0.1:${this.port}/0`;
    for (let i = 0; i < 200; i++) {
      try { if (this.cmd('PING') === 'PONG') return; } catch (_) { /* not up yet */ }
      await sleep(50);
    }
    throw new Error('redis-server did not start');
  }
  cmd(...args) {
    return execFileSync('redis-cli', ['-p', String(this.port), ...args.map(String)], { encoding: 'utf8' }).trim();
  }
  stop() { this.proc.kill('SIGTERM'); }
}

// One driver child process; replies are queued as they arrive.
class Peer {
  constructor(peer, url) {
    this.proc = spawn(process.execPath, [DRIVER, peer, url], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.queue = []; this.waiters = [];
    readline.createInterface({ input: this.proc.stdout }).on('line', (l) => {
      const msg = JSON.parse(l);
      const w = this.waiters.shift();
      if (w) w(msg); else this.queue.push(msg);
    });
    this.exited = new Promise((r) => this.proc.on('exit', (code) => r(code)));
  }
  read(timeoutMs = 30000) {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('timeout waiting for driver reply')), timeoutMs);
      this.waiters.push((m) => { clearTimeout(t); resolve(m); });
    });
  }
  send(req) { this.proc.stdin.write(JSON.stringify(req) + '\n'); }
  call(req, timeoutMs) { this.send(req); return this.read(timeoutMs); }
  async close() { this.send({ op: 'quit' }); return this.exited; }
}

const srv = new RedisServer();
before(() => srv.start());
after(() => srv.stop());

for (const peerName of Object.keys(PINNED)) {
  describe(peerName, () => {
    let a; let b;
    beforeEach(async () => {
      srv.cmd('FLUSHALL');
      a = new Peer(peerName, srv.url); b = new Peer(peerName, srv.url);
      a.ready = await a.read(); b.ready = await b.read();
    });
    afterEach(async () => {
      assert.equal(await a.close(), 0);
      assert.equal(await b.close(), 0);
    });
    const keyOf = async (name) => (await a.call({ op: 'describe', name })).keys[0];

    test('ready line reports the pinned version', () => {
      assert.equal(a.ready.ready, true);
      assert.equal(a.ready.peer, peerName);
      assert.equal(a.ready.version, PINNED[peerName]);
    });

    test('describe', async () => {
      const d = await a.call({ op: 'describe', name: 'res' });
      assert.deepEqual(d.keys, ['res']);
      assert.deepEqual(d.channels, peerName === 'node-redisson' ? ['redisson_lock__channel:{res}'] : []);
    });

    test('acquire, extend, release', async () => {
      const key = await keyOf('r1');
      const r = await a.call({ op: 'acquire', name: 'r1', ttl_ms: 3000, wait_ms: 0 });
      assert.equal(r.acquired, true);
      assert.ok(r.started_ns <= r.at_ns);
      const pttl = Number(srv.cmd('PTTL', key));
      assert.ok(pttl > 0 && pttl <= 3000, `pttl ${pttl}`);
      const e = await a.call({ op: 'extend', name: 'r1', ttl_ms: 8000 });
      assert.equal(e.extended, true, JSON.stringify(e));
      const pttl2 = Number(srv.cmd('PTTL', key));
      assert.ok(pttl2 > 7000 && pttl2 <= 8000, `pttl ${pttl2}`);
      const rel = await a.call({ op: 'release', name: 'r1' });
      assert.equal(rel.released, true);
      assert.equal(rel.error, null);
      assert.equal(srv.cmd('EXISTS', key), '0');
    });

    test('two drivers exclude each other', async () => {
      assert.equal((await a.call({ op: 'acquire', name: 'x', ttl_ms: TTL, wait_ms: 0 })).acquired, true);
      assert.equal((await b.call({ op: 'acquire', name: 'x', ttl_ms: TTL, wait_ms: 0 })).acquired, false);
      const t0 = Date.now();
      assert.equal((await b.call({ op: 'acquire', name: 'x', ttl_ms: TTL, wait_ms: 1000 })).acquired, false);
      assert.ok(Date.now() - t0 >= 700, 'it really waited');
      assert.equal((await a.call({ op: 'release', name: 'x' })).released, true);
      assert.equal((await b.call({ op: 'acquire', name: 'x', ttl_ms: TTL, wait_ms: 0 })).acquired, true);
      assert.equal((await b.call({ op: 'release', name: 'x' })).released, true);
    });

    test('concurrent cycles are mutually exclusive', async () => {
      const req = { op: 'cycles', name: 'cyc', ttl_ms: TTL, wait_ms: 5000, counter: 'ctr', n: 25 };
      a.send(req); b.send(req);
      const [ra, rb] = await Promise.all([a.read(60000), b.read(60000)]);
      assert.equal(ra.done + rb.done, 50 - ra.failed_acquires - rb.failed_acquires);
      if (peerName !== 'node-redisson') { // see README: its waiter can give up early
        assert.equal(ra.failed_acquires + rb.failed_acquires, 0);
      }
      assert.equal(Number(srv.cmd('GET', 'ctr')), ra.done + rb.done); // no lost update
      // [acquired, release_started] spans must not overlap (both sides use CLOCK_MONOTONIC)
      const spans = [...ra.events, ...rb.events].map((e) => [e[0], e[1]]).sort((x, y) => (x[0] < y[0] ? -1 : 1));
      for (let i = 1; i < spans.length; i++) assert.ok(spans[i - 1][1] <= spans[i][0], 'critical sections overlap');
    });

    test('waiter acquires after release', async () => {
      assert.equal((await a.call({ op: 'acquire', name: 'w', ttl_ms: TTL, wait_ms: 0 })).acquired, true);
      b.send({ op: 'acquire', name: 'w', ttl_ms: TTL, wait_ms: 2000 });
      await sleep(300);
      const rel = await a.call({ op: 'release', name: 'w' });
      const got = await b.read();
      assert.equal(got.acquired, true);
      const latencyMs = Number(got.at_ns - rel.at_ns) / 1e6;
      // node-redisson is woken by PUBLISH on its channel; the redlocks poll (200 +- 100 ms).
      assert.ok(latencyMs < (peerName === 'node-redisson' ? 100 : 600), `latency ${latencyMs}`);
      assert.equal((await b.call({ op: 'release', name: 'w' })).released, true);
    });

    test('release of a stolen lock reports the error', async () => {
      const key = await keyOf('s');
      assert.equal((await a.call({ op: 'acquire', name: 's', ttl_ms: TTL, wait_ms: 0 })).acquired, true);
      if (peerName === 'node-redisson') {
        srv.cmd('DEL', key); srv.cmd('HSET', key, 'other:1', '1');
      } else {
        srv.cmd('SET', key, 'someone-else');
      }
      const rel = await a.call({ op: 'release', name: 's' });
      const expected = { redlock: 'LockError', sesame: 'ExecutionError', 'node-redisson': 'RedissonLockError' }[peerName];
      assert.equal(rel.released, false);
      assert.ok(rel.error.startsWith(`${expected}:`), rel.error);
      assert.equal((await a.call({ op: 'describe', name: 's' })).ok, true);
    });

    test('hold replies twice', async () => {
      a.send({ op: 'hold', name: 'h', ttl_ms: TTL, wait_ms: 0, hold_ms: 400 });
      const first = await a.read();
      assert.equal(first.acquired, true);
      assert.equal((await b.call({ op: 'acquire', name: 'h', ttl_ms: TTL, wait_ms: 0 })).acquired, false);
      const second = await a.read();
      assert.equal(second.released, true);
      assert.ok(second.release_started_ns - first.at_ns >= 400_000_000);
    });

    const bench = (peer, kw) => peer.call({
      op: 'bench', name: 'bn', ttl_ms: TTL, wait_ms: 0, hold_us: 0, n: 50, duration_ms: 20000, ...kw,
    }, 60000);

    test('bench: uncontended cycles', async () => {
      const r = await bench(a, { n: 50 });
      assert.equal(r.ok, true, JSON.stringify(r).slice(0, 300));
      assert.equal(r.cycles, 50);
      assert.equal(r.failed, 0);
      assert.equal(r.failed_releases, undefined);
      assert.equal(r.acquire_ns.length, 50);
      assert.equal(r.cycle_ns.length, 50);
      for (let i = 0; i < 50; i++) {
        assert.ok(Number.isInteger(r.acquire_ns[i]) && r.acquire_ns[i] > 0);
        assert.ok(Number.isInteger(r.cycle_ns[i]) && r.acquire_ns[i] <= r.cycle_ns[i]);
      }
      const sum = r.cycle_ns.reduce((x, y) => x + y, 0);
      assert.ok(sum <= r.elapsed_ns && r.elapsed_ns < sum + 1e9, `elapsed ${r.elapsed_ns}, sum ${sum}`);
      assert.equal(srv.cmd('EXISTS', await keyOf('bn')), '0'); // every cycle released
      assert.ok((await a.call({ op: 'release', name: 'bn' })).error.startsWith('NotHeld'));
    });

    test('bench: hold sleeps', async () => {
      const r = await bench(a, { n: 3, hold_us: 20000 });
      assert.equal(r.cycles, 3);
      for (let i = 0; i < 3; i++) assert.ok(r.cycle_ns[i] - r.acquire_ns[i] >= 19_000_000);
    });

    test('bench: duration caps the loop', async () => {
      const r = await bench(a, { n: 1e9, duration_ms: 300 });
      assert.equal(r.failed, 0);
      assert.ok(r.cycles > 10, `cycles ${r.cycles}`);
      assert.ok(r.elapsed_ns >= 300e6 && r.elapsed_ns < 1300e6, `elapsed ${r.elapsed_ns}`);
    });

    test('bench: a failed acquire counts and the loop goes on', async () => {
      assert.equal((await a.call({ op: 'acquire', name: 'bn', ttl_ms: TTL, wait_ms: 0 })).acquired, true);
      const r = await bench(b, { n: 5, duration_ms: 300 }); // W = 0: one try per cycle, each fails
      assert.equal(r.cycles, 0); // n counts successful cycles only
      assert.ok(r.failed > 5, `failed ${r.failed}`);
      assert.deepEqual(r.acquire_ns, []);
      assert.ok(r.elapsed_ns >= 300e6);
      assert.equal((await a.call({ op: 'release', name: 'bn' })).released, true);
    });

    test('bench: two drivers contend', async () => {
      const req = { op: 'bench', name: 'bc', ttl_ms: TTL, wait_ms: 5000, hold_us: 1000, n: 1e9, duration_ms: 500 };
      a.send(req); b.send(req);
      const [ra, rb] = await Promise.all([a.read(60000), b.read(60000)]);
      if (peerName !== 'node-redisson') { // see README: its waiter can give up early
        assert.equal(ra.failed + rb.failed, 0);
      }
      // A polling package may starve one side for the whole 500 ms, but that side's pending
      // acquire then wins once the other stops: both complete at least one cycle.
      assert.ok(ra.cycles >= 1 && rb.cycles >= 1, `cycles ${ra.cycles} / ${rb.cycles}`);
      for (const r of [ra, rb]) {
        for (let i = 0; i < r.cycles; i++) assert.ok(r.cycle_ns[i] - r.acquire_ns[i] >= 1e6);
      }
    });

    test('bad request keeps the driver running', async () => {
      assert.deepEqual(await a.call({ op: 'nope' }), { ok: false, error: "Error: unknown op 'nope'" });
      assert.equal((await a.call({ op: 'describe', name: 'k' })).ok, true);
    });
  });
}
