// The wire test vectors run by the Node runner (vectors/run-vectors.js, written from the "Runner contract" of
// wire/README.md) against a throwaway redis-server, plus the contract's matching rules checked without a server.
// Run: cd interop/node && node --test test/
'use strict';

const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFile } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const RUNNER = path.join(__dirname, '..', 'vectors', 'run-vectors.js');
const { runVectors, match, parseJson, Mismatch, WIRE } = require(RUNNER);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// PING over a raw socket: true once the server answers +PONG.
function ping(port) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    const done = (ok) => { sock.destroy(); resolve(ok); };
    sock.setTimeout(1000, () => done(false));
    sock.on('error', () => done(false));
    sock.on('connect', () => sock.write('PING\r\n'));
    sock.on('data', (d) => { data += d; if (data.includes('\r\n')) done(data.startsWith('+PONG')); });
  });
}

class RedisServer {
  async start() {
    this.port = await freePort();
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wire-vectors-'));
    this.proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', this.dir], { stdio: 'ignore' });
    this.exited = new Promise((r) => this.proc.on('exit', r));
    this.url = `redis://127.0.0.1:${this.port}/0`;
    for (let i = 0; i < 200; i++) {
      if (await ping(this.port)) return;
      await sleep(50);
    }
    throw new Error('redis-server did not start');
  }
  async stop() {
    if (this.proc && this.proc.exitCode === null) {
      this.proc.kill('SIGTERM');
      await this.exited;
    }
    if (this.dir) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

function runCli(args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [RUNNER, ...args], { timeout: 60000 }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code : 0, stdout, stderr });
    });
  });
}

const VECTOR_FILES = fs.readdirSync(path.join(WIRE, 'vectors'))
  .filter((f) => f.endsWith('.json') && f !== 'names.json')
  .sort();

// ---- Matching, without a server ------------------------------------------------------------------------------------

const int = (n) => ({ k: 'int', v: BigInt(n) });
const str = (s) => ({ k: 'str', v: Buffer.from(s, 'utf8') });
const nil = { k: 'nil' };
const arr = (...v) => ({ k: 'arr', v });
const err = (v) => ({ k: 'err', v });
const j = (text) => parseJson(text);

function matches(want, got, ctx = { captures: new Map(), time: null }) {
  try {
    match(j(want), got, ctx);
    return true;
  } catch (e) {
    if (e instanceof Mismatch) return false;
    throw e;
  }
}

describe('runner contract: matching', () => {
  test('JSON integers are exact', () => {
    assert.equal(j('9007199254740993'), 9007199254740993n);
    assert.ok(matches('9007199254740993', int('9007199254740993')));
    assert.ok(!matches('9007199254740992', int('9007199254740993')));
  });
  test('integers and strings never match each other', () => {
    assert.ok(matches('1', int(1)));
    assert.ok(!matches('1', str('1')));
    assert.ok(!matches('"1"', int(1)));
    assert.ok(matches('"OK"', str('OK')));
    assert.ok(!matches('"ok"', str('OK')));
  });
  test('null is nil only; [] is the empty array only', () => {
    assert.ok(matches('null', nil));
    assert.ok(!matches('null', arr()));
    assert.ok(!matches('null', str('')));
    assert.ok(!matches('null', int(0)));
    assert.ok(matches('[]', arr()));
    assert.ok(!matches('[]', nil));
  });
  test('arrays match element by element, with matchers inside', () => {
    assert.ok(matches('[1, {"between": [9000, 10000]}, null]', arr(int(1), int(9500), nil)));
    assert.ok(!matches('[1, 2]', arr(int(1))));
    assert.ok(!matches('[1]', arr(int(1), int(2))));
  });
  test('between: both bounds included, integers only', () => {
    assert.ok(matches('{"between": [9000, 10000]}', int(9000)));
    assert.ok(matches('{"between": [9000, 10000]}', int(10000)));
    assert.ok(!matches('{"between": [9000, 10000]}', int(8999)));
    assert.ok(!matches('{"between": [9000, 10000]}', int(10001)));
    assert.ok(!matches('{"between": [9000, 10000]}', str('9500')));
  });
  test('between_server_time_us: within the TIME read around the step, both ends included', () => {
    const ctx = { captures: new Map(), time: [100n, 200n] };
    assert.ok(matches('{"between_server_time_us": true}', int(100), ctx));
    assert.ok(matches('{"between_server_time_us": true}', int(200), ctx));
    assert.ok(!matches('{"between_server_time_us": true}', int(201), ctx));
    assert.ok(!matches('{"between_server_time_us": true}', str('150'), ctx));
  });
  test('errors match only error_prefix, any and capture', () => {
    const e = err('WRONGTYPE fencing counter lock:{orders}:fence does not hold an integer');
    assert.ok(matches('{"error_prefix": "WRONGTYPE"}', e));
    assert.ok(!matches('{"error_prefix": "wrongtype"}', e));
    assert.ok(!matches('{"error_prefix": "ERR"}', e));
    assert.ok(matches('{"any": true}', e));
    assert.ok(matches('{"capture": "x"}', e));
    assert.ok(!matches('null', e));
    assert.ok(!matches('[{"any": true}]', e));
    assert.ok(!matches('{"error_prefix": "WRONGTYPE"}', str('WRONGTYPE')));
  });
  test('capture, eq and gt', () => {
    const ctx = { captures: new Map(), time: null };
    assert.ok(matches('[1, {"capture": "f1"}]', arr(int(1), int(41)), ctx));
    assert.ok(matches('{"eq": "f1"}', int(41), ctx));
    assert.ok(!matches('{"eq": "f1"}', str('41'), ctx));
    assert.ok(matches('{"gt": "f1"}', int(42), ctx));
    assert.ok(!matches('{"gt": "f1"}', int(41), ctx));
    assert.ok(!matches('{"gt": "nothing"}', int(42), ctx));
    assert.ok(matches('{"capture": "e"}', err('ERR x'), ctx));
    assert.ok(!matches('{"eq": "e"}', err('ERR x'), ctx));
    assert.ok(matches('{"capture": "s"}', str('41'), ctx));
    assert.ok(!matches('{"gt": "s"}', int(42), ctx));
  });
  test('unordered: the same elements in any order, no more, no fewer', () => {
    assert.ok(matches('{"unordered": ["a", "b"]}', arr(str('b'), str('a'))));
    assert.ok(matches('{"unordered": ["a", "b", "a"]}', arr(str('a'), str('a'), str('b'))));
    assert.ok(!matches('{"unordered": ["a"]}', arr(str('a'), str('b'))));
    assert.ok(!matches('{"unordered": ["a", "a"]}', arr(str('a'), str('b'))));
  });
  test('malformed matchers fail rather than pass', () => {
    assert.ok(!matches('{"any": true, "capture": "x"}', int(1)));
    assert.ok(!matches('{"anything": true}', int(1)));
    assert.ok(!matches('true', int(1)));
    assert.ok(!matches('0.0', int(0)));
    assert.ok(!matches('{"between": ["1", "9"]}', int(5)));
  });
});

// ---- Every vector, against a redis-server of our own ----------------------------------------------------------------

describe('wire vectors against redis-server', () => {
  const srv = new RedisServer();
  before(() => srv.start());
  after(() => srv.stop());

  for (const file of VECTOR_FILES) {
    test(file, async () => {
      const full = path.join(WIRE, 'vectors', file);
      const doc = parseJson(fs.readFileSync(full, 'utf8'));
      const total = await runVectors({ url: srv.url, files: [full] });
      const [out] = total.files;
      assert.equal(out.error, null);
      assert.deepEqual(out.failures, []);
      assert.equal(out.cases, doc.cases.length, 'every case ran');
      assert.ok(out.cases > 0);
    });
  }

  test('command line: one line per file and a summary, exit 0', async () => {
    const { code, stdout } = await runCli([srv.url, path.join(WIRE, 'vectors', 'mutex.json'),
      path.join(WIRE, 'vectors', 'redlock.json')]);
    assert.equal(code, 0, stdout);
    const lines = stdout.trim().split('\n');
    assert.match(lines[0], /^mutex\.json \(mutex, protocol [0-9.]+\): \d+ cases passed/);
    assert.match(lines[1], /^redlock\.json \(redlock, protocol [0-9.]+\): \d+ cases passed/);
    assert.match(lines[2], /^\d+ passed, 0 failed/);
  });

  test('command line: a failing case, a missing script and a forbidden command exit 1', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wire-vectors-bad-'));
    try {
      const bad = path.join(dir, 'bad.json');
      fs.writeFileSync(bad, JSON.stringify({
        format: 1, protocol: 'x', primitive: 'mutex', cases: [
          { id: 'good', description: '', steps: [{ command: ['SET', 'k', 'v'], reply: 'OK' }] },
          { id: 'flushed', description: '', steps: [{ command: ['EXISTS', 'k'], reply: 0 }] },
          { id: 'wrong', description: '', steps: [{ command: ['INCRBY', 'n', '5'], reply: '5' }] },
          { id: 'no-script', description: '', steps: [{ script: 'no-such', keys: [], argv: [], reply: { any: true } }] },
          { id: 'forbidden', description: '', steps: [{ command: ['FLUSHDB'], reply: 'OK' }] },
        ],
      }));
      const { code, stdout } = await runCli([srv.url, bad]);
      assert.equal(code, 1, stdout);
      assert.match(stdout, /^bad\.json \(mutex, protocol x\): 3 of 5 cases FAILED/m);
      assert.match(stdout, /FAIL wrong: step 1 \(INCRBY n 5\)/);
      assert.match(stdout, /FAIL no-script: step 1: no script/);
      assert.match(stdout, /FAIL forbidden: step 1: FLUSHDB is not a command/);
      assert.match(stdout, /^2 passed, 3 failed/m);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

test('command line: no URL or no server exits 2', async () => {
  assert.equal((await runCli([])).code, 2);
  const port = await freePort(); // nothing listens there any more
  const { code, stderr } = await runCli([`redis://127.0.0.1:${port}`]);
  assert.equal(code, 2);
  assert.match(stderr, /cannot connect/);
});
