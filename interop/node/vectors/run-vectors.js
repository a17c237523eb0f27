#!/usr/bin/env node
// Runs the wire protocol's test vectors (wire/vectors/*.json but names.json) against a Redis server, as the
// "Runner contract" section of wire/README.md states it. Written from that section, not from check_vectors.py.
//
//   node interop/node/vectors/run-vectors.js [--case <id>]... [-v] [--wire <dir>] <redis-url> [file.json ...]
//
// <redis-url> is redis://[user:password@]host:port[/db]. Every case starts with FLUSHALL, which empties every
// database of that server. Prints one line per file, the failed cases under it, and a summary; exits 0 when every
// case passed, 1 when one failed, 2 when it could not run (usage, connection, an unreadable file).
//
// RESP2 through ioredis, which never negotiates RESP3. Replies are asked for as Buffers (callBuffer) with
// stringNumbers, so that bulk and status replies arrive as Buffers and integer replies as exact decimal strings:
// the two stay apart and no integer goes through a double. Integers in the vector files are parsed exactly too
// (parseJson below keeps every JSON integer as a BigInt).
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const WIRE = path.resolve(__dirname, '..', '..', '..', 'wire');

// Runner contract, "Steps": the plain commands a vector may send.
const COMMANDS = new Set([
  'SET', 'GET', 'DEL', 'EXISTS', 'TYPE', 'PTTL', 'PEXPIRE', 'INCRBY', 'HSET', 'HGET', 'HMGET', 'HGETALL', 'HDEL',
  'HLEN', 'HEXISTS', 'HINCRBY', 'ZADD', 'ZSCORE', 'ZRANGE', 'ZCARD', 'ZRANK', 'ZREM', 'RPUSH', 'LPUSH', 'LRANGE',
  'LLEN', 'TIME',
]);
const MAX_SLEEP_MS = 300n;
const STEP_KINDS = ['sleep_ms', 'command', 'script'];
const ERROR_MATCHERS = new Set(['error_prefix', 'any', 'capture']);

// ---- JSON with exact integers ------------------------------------------------------------------------------------

// A JSON number with a fraction or an exponent, kept as written: not a literal, only shown in reports.
class JsonFraction {
  constructor(text) { this.text = text; }
}

// JSON.parse maps every number to a double; the contract wants integers exact. Integers become BigInt, numbers with
// a fraction or an exponent JsonFraction, objects have no prototype.
function parseJson(text) {
  let i = 0;
  const fail = (why) => { throw new SyntaxError(`JSON: ${why} at offset ${i}`); };
  const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
  function value() {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = Object.create(null);
      ws();
      if (text[i] === '}') { i++; return obj; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('expected a member name');
        const key = string();
        ws();
        if (text[i++] !== ':') fail('expected ":"');
        if (Object.prototype.hasOwnProperty.call(obj, key)) fail(`duplicate member ${JSON.stringify(key)}`);
        obj[key] = value();
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return obj; }
        fail('expected "," or "}"');
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      ws();
      if (text[i] === ']') { i++; return arr; }
      for (;;) {
        arr.push(value());
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return arr; }
        fail('expected "," or "]"');
      }
    }
    if (c === '"') return string();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) fail('unexpected character');
    i += m[0].length;
    return m[2] || m[3] ? new JsonFraction(m[0]) : BigInt(m[0]);
  }
  function string() {
    const m = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(text.slice(i));
    if (!m) fail('bad string');
    i += m[0].length;
    return JSON.parse(m[0]);
  }
  const out = value();
  ws();
  if (i !== text.length) fail('trailing characters');
  return out;
}

// ---- Replies -----------------------------------------------------------------------------------------------------

// The contract's five kinds of reply: {k: 'int', v: BigInt}, {k: 'str', v: Buffer}, {k: 'nil'},
// {k: 'arr', v: [reply]}, {k: 'err', v: string}.
function isReplyError(x) {
  return x instanceof Error && x.name === 'ReplyError';
}

function toReply(raw) {
  if (raw === null || raw === undefined) return { k: 'nil' };
  if (Buffer.isBuffer(raw)) return { k: 'str', v: raw };
  if (typeof raw === 'string') {
    // With stringNumbers and Buffer replies, only an integer reply arrives as a JS string.
    if (!/^-?[0-9]+$/.test(raw)) throw new Error(`unexpected string reply ${JSON.stringify(raw)}`);
    return { k: 'int', v: BigInt(raw) };
  }
  if (Array.isArray(raw)) return { k: 'arr', v: raw.map(toReply) };
  if (isReplyError(raw)) return { k: 'err', v: raw.message };
  throw new Error(`unexpected reply ${String(raw)} (${typeof raw})`);
}

function showBytes(buf) {
  const text = buf.toString('utf8');
  return Buffer.from(text, 'utf8').equals(buf) ? JSON.stringify(text) : `<bytes ${buf.toString('hex')}>`;
}

function show(r) {
  switch (r.k) {
    case 'int': return r.v.toString();
    case 'str': return showBytes(r.v);
    case 'nil': return 'nil';
    case 'arr': return `[${r.v.map(show).join(', ')}]`;
    case 'err': return `error ${JSON.stringify(r.v)}`;
    default: return '?';
  }
}

// A vector value (matcher) back as JSON text, BigInts as plain integers.
function showJson(v) {
  if (typeof v === 'bigint') return v.toString();
  if (v instanceof JsonFraction) return v.text;
  if (Array.isArray(v)) return `[${v.map(showJson).join(', ')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v).map((key) => `${JSON.stringify(key)}: ${showJson(v[key])}`).join(', ')}}`;
  }
  return JSON.stringify(v);
}

function sameReply(a, b) {
  if (a.k !== b.k || a.k === 'err') return false; // a captured error equals nothing
  switch (a.k) {
    case 'int': return a.v === b.v;
    case 'str': return a.v.equals(b.v);
    case 'nil': return true;
    case 'arr': return a.v.length === b.v.length && a.v.every((x, i) => sameReply(x, b.v[i]));
    default: return false;
  }
}

// ---- Matching ----------------------------------------------------------------------------------------------------

class Mismatch extends Error {}

function isObject(m) {
  return m !== null && typeof m === 'object' && !Array.isArray(m) && !(m instanceof JsonFraction);
}

// Whether a matcher holds between_server_time_us at any depth.
function usesServerTime(m) {
  if (Array.isArray(m)) return m.some(usesServerTime);
  if (isObject(m)) {
    return Object.keys(m).some((key) => key === 'between_server_time_us' || usesServerTime(m[key]));
  }
  return false;
}

// Checks reply `got` against matcher `want`; throws Mismatch. ctx: {captures: Map, time: [t0, t1] | null}.
function match(want, got, ctx, where = 'reply') {
  const fail = (why) => { throw new Mismatch(`${where}: ${why} (expected ${showJson(want)}, got ${show(got)})`); };
  const op = isObject(want) ? Object.keys(want) : null;
  if (got.k === 'err' && !(op && op.length === 1 && ERROR_MATCHERS.has(op[0]))) fail('an error reply');

  if (op) {
    if (op.length !== 1) fail('a matcher object has exactly one member');
    const arg = want[op[0]];
    switch (op[0]) {
      case 'any':
        return;
      case 'capture':
        if (typeof arg !== 'string') fail('capture takes a name');
        ctx.captures.set(arg, got);
        return;
      case 'eq':
      case 'gt': {
        if (typeof arg !== 'string') fail(`${op[0]} takes a name`);
        if (!ctx.captures.has(arg)) fail(`nothing captured as ${JSON.stringify(arg)}`);
        const seen = ctx.captures.get(arg);
        if (op[0] === 'eq') {
          if (!sameReply(got, seen)) fail(`not equal to ${show(seen)} captured as ${JSON.stringify(arg)}`);
        } else if (!(got.k === 'int' && seen.k === 'int' && got.v > seen.v)) {
          fail(`not an integer greater than ${show(seen)} captured as ${JSON.stringify(arg)}`);
        }
        return;
      }
      case 'between': {
        if (!(Array.isArray(arg) && arg.length === 2 && arg.every((b) => typeof b === 'bigint'))) {
          fail('between takes two integers');
        }
        const [lo, hi] = arg;
        if (!(got.k === 'int' && lo <= got.v && got.v <= hi)) fail(`not an integer in [${lo}, ${hi}]`);
        return;
      }
      case 'between_server_time_us': {
        if (!ctx.time) fail('no server TIME read around the step');
        const [t0, t1] = ctx.time;
        if (!(got.k === 'int' && t0 <= got.v && got.v <= t1)) {
          fail(`not an integer within the server's TIME around the step [${t0}, ${t1}]`);
        }
        return;
      }
      case 'error_prefix': {
        if (typeof arg !== 'string') fail('error_prefix takes a string');
        const prefix = Buffer.from(arg, 'utf8');
        const text = got.k === 'err' ? Buffer.from(got.v, 'utf8') : null;
        if (!(text && text.subarray(0, prefix.length).equals(prefix))) {
          fail(`not an error starting with ${JSON.stringify(arg)}`);
        }
        return;
      }
      case 'unordered': {
        if (!Array.isArray(arg)) fail('unordered takes an array');
        if (got.k !== 'arr' || got.v.length !== arg.length) fail(`not an array of ${arg.length} elements`);
        const left = got.v.slice();
        for (const item of arg) {
          let taken = -1;
          for (let j = 0; j < left.length && taken < 0; j++) {
            const trial = { captures: new Map(ctx.captures), time: ctx.time };
            try {
              match(item, left[j], trial, where);
              ctx.captures = trial.captures;
              taken = j;
            } catch (e) {
              if (!(e instanceof Mismatch)) throw e;
            }
          }
          if (taken < 0) fail(`no element matches ${showJson(item)}`);
          left.splice(taken, 1);
        }
        return;
      }
      default:
        fail(`unknown matcher ${JSON.stringify(op[0])}`);
    }
  }
  if (Array.isArray(want)) {
    if (got.k !== 'arr' || got.v.length !== want.length) fail(`not an array of ${want.length} elements`);
    want.forEach((w, j) => match(w, got.v[j], ctx, `${where}[${j}]`));
    return;
  }
  if (typeof want === 'bigint') {
    if (!(got.k === 'int' && got.v === want)) fail('differs');
    return;
  }
  if (typeof want === 'string') {
    if (!(got.k === 'str' && got.v.equals(Buffer.from(want, 'utf8')))) fail('differs');
    return;
  }
  if (want === null) {
    if (got.k !== 'nil') fail('differs');
    return;
  }
  fail('not a literal (an integer, a string, null or an array) nor a matcher object');
}

// ---- The server --------------------------------------------------------------------------------------------------

class ConnectionFailed extends Error {}

class Server {
  constructor(url) {
    const Redis = require('ioredis');
    this.client = new Redis(url, {
      lazyConnect: true,
      stringNumbers: true, // integer replies as exact decimal strings (bulk replies stay Buffers: see toReply)
      retryStrategy: () => null, // no reconnect: a lost connection ends the run
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      commandTimeout: 15000,
      connectionName: 'wire-vectors-node',
    });
    this.client.on('error', () => {}); // reported by the failing command
  }
  async connect() {
    try {
      await this.client.connect();
    } catch (e) {
      throw new ConnectionFailed(`cannot connect: ${e.message}`);
    }
  }
  // One command; its reply in the contract's model (an error reply is a reply, not an exception).
  async call(args) {
    let raw;
    try {
      raw = await this.client.callBuffer(...args);
    } catch (e) {
      if (isReplyError(e)) return { k: 'err', v: e.message };
      throw new ConnectionFailed(`${String(args[0])}: ${e.message}`);
    }
    return toReply(raw);
  }
  async timeUs() {
    const r = await this.call(['TIME']);
    if (!(r.k === 'arr' && r.v.length === 2 && r.v.every((x) => x.k === 'str' && /^[0-9]+$/.test(x.v.toString())))) {
      throw new Mismatch(`TIME replied ${show(r)}`);
    }
    return BigInt(r.v[0].v.toString()) * 1000000n + BigInt(r.v[1].v.toString());
  }
  async close() {
    try { await this.client.quit(); } catch (_) { this.client.disconnect(); }
  }
}

class Scripts {
  constructor(dir) {
    this.dir = dir;
    this.cache = new Map();
  }
  get(name) {
    if (!this.cache.has(name)) {
      const file = path.join(this.dir, `${name}.lua`);
      if (!/^[A-Za-z0-9_.-]+$/.test(name) || !fs.existsSync(file)) return null;
      const body = fs.readFileSync(file); // bytes as stored
      this.cache.set(name, { body, sha1: crypto.createHash('sha1').update(body).digest('hex') });
    }
    return this.cache.get(name);
  }
}

// ---- Running -----------------------------------------------------------------------------------------------------

function sleepAtLeast(ms) {
  const deadline = process.hrtime.bigint() + BigInt(ms) * 1000000n;
  return (async () => {
    for (;;) {
      const left = deadline - process.hrtime.bigint();
      if (left <= 0n) return;
      await new Promise((r) => setTimeout(r, Math.ceil(Number(left) / 1e6)));
    }
  })();
}

function isStringArray(v) {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}

// Runs one case; returns {steps, sleeps} or throws Mismatch (the case failed) / ConnectionFailed.
async function runCase(server, scripts, kase, log) {
  const flushed = await server.call(['FLUSHALL']);
  if (flushed.k === 'err') throw new Mismatch(`FLUSHALL: ${show(flushed)}`);
  const ctx = { captures: new Map(), time: null };
  const steps = isObject(kase) ? kase.steps : undefined;
  if (!Array.isArray(steps)) throw new Mismatch('no steps array');
  let checked = 0;
  let sleeps = 0;
  for (let n = 1; n <= steps.length; n++) {
    const step = steps[n - 1];
    if (!isObject(step)) throw new Mismatch(`step ${n}: not an object`);
    const kinds = STEP_KINDS.filter((k) => k in step);
    if (kinds.length !== 1) {
      throw new Mismatch(`step ${n}: has ${kinds.length ? kinds.join(' and ') : 'none of sleep_ms, command, script'}`);
    }

    if (kinds[0] === 'sleep_ms') {
      const ms = step.sleep_ms;
      if (typeof ms !== 'bigint' || ms < 0n || ms > MAX_SLEEP_MS) {
        throw new Mismatch(`step ${n}: sleep_ms is not an integer from 0 to ${MAX_SLEEP_MS}`);
      }
      if (log) log(`    ${n}. sleep ${ms} ms`);
      await sleepAtLeast(Number(ms));
      sleeps++;
      continue;
    }

    let sends; // {first: the command, onNoscript: for a script, the EVAL to send once after NOSCRIPT}
    let what;
    if (kinds[0] === 'command') {
      const command = step.command;
      if (!isStringArray(command) || command.length === 0) {
        throw new Mismatch(`step ${n}: command is not a non-empty array of strings`);
      }
      if (!COMMANDS.has(command[0].toUpperCase())) {
        throw new Mismatch(`step ${n}: ${command[0]} is not a command vectors may use`);
      }
      what = command.join(' ');
      sends = { first: command, onNoscript: null };
    } else {
      const name = step.script;
      const keys = step.keys === undefined ? [] : step.keys;
      const argv = step.argv === undefined ? [] : step.argv;
      if (typeof name !== 'string') throw new Mismatch(`step ${n}: script is not a name`);
      if (!isStringArray(keys) || !isStringArray(argv)) {
        throw new Mismatch(`step ${n}: keys and argv are arrays of strings`);
      }
      const script = scripts.get(name);
      if (!script) throw new Mismatch(`step ${n}: no script wire/scripts/${name}.lua`);
      const tail = [String(keys.length), ...keys, ...argv];
      what = `${name} keys=${JSON.stringify(keys)} argv=${JSON.stringify(argv)}`;
      sends = { first: ['EVALSHA', script.sha1, ...tail], onNoscript: ['EVAL', script.body, ...tail] };
    }

    const timed = 'reply' in step && usesServerTime(step.reply);
    const t0 = timed ? await server.timeUs() : null;
    let reply = await server.call(sends.first);
    if (sends.onNoscript && reply.k === 'err' && reply.v.startsWith('NOSCRIPT')) {
      reply = await server.call(sends.onNoscript); // once, and this is the step's reply whatever it is
    }
    ctx.time = timed ? [t0, await server.timeUs()] : null;
    if (log) log(`    ${n}. ${what} -> ${show(reply)}`);
    checked++;
    if ('reply' in step) {
      try {
        match(step.reply, reply, ctx);
      } catch (e) {
        if (e instanceof Mismatch) throw new Mismatch(`step ${n} (${what}): ${e.message}`);
        throw e;
      }
    }
  }
  return { steps: checked, sleeps };
}

function vectorFiles(wireDir) {
  const dir = path.join(wireDir, 'vectors');
  return fs.readdirSync(dir)
    .filter((f) => f.endsWith('.json') && f !== 'names.json')
    .sort()
    .map((f) => path.join(dir, f));
}

// Runs the files against the server at url. Returns {files: [{file, primitive, protocol, cases, passed, failures,
// steps, sleeps, error}], passed, failed, steps, sleeps}. print(line) receives the report lines.
async function runVectors({ url, files, wireDir = WIRE, only = null, verbose = false, print = () => {} }) {
  const list = files && files.length ? files : vectorFiles(wireDir);
  const docs = list.map((file) => {
    let doc;
    try {
      doc = parseJson(fs.readFileSync(file, 'utf8'));
    } catch (e) {
      throw new ConnectionFailed(`${file}: ${e.message}`); // could not run (exit 2)
    }
    return { file, doc };
  });
  const server = new Server(url);
  await server.connect();
  const scripts = new Scripts(path.join(wireDir, 'scripts'));
  const total = { files: [], passed: 0, failed: 0, steps: 0, sleeps: 0 };
  let protocol = null;
  try {
    for (const { file, doc } of docs) {
      const name = path.basename(file);
      const out = {
        file: name, primitive: null, protocol: null, cases: 0, passed: 0, failures: [], steps: 0, sleeps: 0, error: null,
      };
      total.files.push(out);
      const problems = [];
      if (!isObject(doc)) problems.push('not a JSON object');
      else {
        if (doc.format !== 1n) problems.push(`format ${showJson(doc.format)}, this runner reads format 1`);
        if (typeof doc.protocol !== 'string') problems.push('no protocol');
        else if (protocol !== null && doc.protocol !== protocol) {
          problems.push(`protocol ${doc.protocol}, other files ${protocol}`);
        }
        if (!Array.isArray(doc.cases)) problems.push('no cases');
        out.primitive = typeof doc.primitive === 'string' ? doc.primitive : null;
        out.protocol = typeof doc.protocol === 'string' ? doc.protocol : null;
        if (protocol === null && out.protocol) protocol = out.protocol;
      }
      if (problems.length) {
        out.error = problems.join('; ');
        total.failed++;
        print(`${name}: FAIL, ${out.error}`);
        continue;
      }
      const lines = [];
      for (const kase of doc.cases) {
        const id = isObject(kase) && typeof kase.id === 'string' ? kase.id : '?';
        if (only && !only.includes(id)) continue;
        out.cases++;
        const log = verbose ? (l) => lines.push(l) : null;
        try {
          const { steps, sleeps } = await runCase(server, scripts, kase, log);
          out.passed++;
          out.steps += steps;
          out.sleeps += sleeps;
          if (verbose) lines.push(`  ok   ${id}`);
        } catch (e) {
          if (!(e instanceof Mismatch)) throw e;
          out.failures.push({ id, why: e.message });
          lines.push(`  FAIL ${id}: ${e.message}`);
        }
      }
      total.passed += out.passed;
      total.failed += out.failures.length;
      total.steps += out.steps;
      total.sleeps += out.sleeps;
      const verdict = out.failures.length
        ? `${out.failures.length} of ${out.cases} cases FAILED`
        : `${out.passed} cases passed`;
      print(`${name} (${out.primitive}, protocol ${out.protocol}): ${verdict}, ${out.steps} steps, ${out.sleeps} sleeps`);
      for (const l of lines) print(l);
    }
  } finally {
    await server.close();
  }
  return total;
}

// ---- Command line ------------------------------------------------------------------------------------------------

const USAGE = 'usage: run-vectors.js [--case <id>]... [-v] [--wire <dir>] '
  + '<redis://[user:password@]host:port[/db]> [file.json ...]';

function parseArgs(argv) {
  const opts = { url: null, files: [], only: null, verbose: false, wireDir: WIRE };
  for (let j = 0; j < argv.length; j++) {
    const a = argv[j];
    if (a === '--case') {
      if (j + 1 >= argv.length) throw new Error('--case needs an id');
      (opts.only = opts.only || []).push(argv[++j]);
    } else if (a === '--wire') {
      if (j + 1 >= argv.length) throw new Error('--wire needs a directory');
      opts.wireDir = path.resolve(argv[++j]);
    } else if (a === '-v' || a === '--verbose') {
      opts.verbose = true;
    } else if (a === '-h' || a === '--help') {
      opts.help = true;
    } else if (a.startsWith('-')) {
      throw new Error(`unknown option ${a}`);
    } else if (opts.url === null) {
      if (!/^rediss?:\/\//.test(a)) throw new Error(`${a} is not a redis:// URL`);
      opts.url = a;
    } else {
      opts.files.push(path.resolve(a));
    }
  }
  if (!opts.help && opts.url === null) throw new Error('no Redis URL');
  return opts;
}

async function main(argv) {
  let opts;
  try {
    opts = parseArgs(argv);
  } catch (e) {
    console.error(`${e.message}\n${USAGE}`);
    return 2;
  }
  if (opts.help) {
    console.log(USAGE);
    return 0;
  }
  const started = process.hrtime.bigint();
  let total;
  try {
    total = await runVectors({ ...opts, print: (l) => console.log(l) });
  } catch (e) {
    if (e instanceof ConnectionFailed) {
      console.error(e.message);
      return 2;
    }
    throw e;
  }
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(`${total.passed} passed, ${total.failed} failed (${total.files.length} files, `
    + `${total.steps} command and script steps, ${total.sleeps} sleeps, ${secs.toFixed(1)} s)`);
  return total.failed ? 1 : 0;
}

module.exports = { runVectors, match, parseJson, toReply, usesServerTime, Mismatch, COMMANDS, WIRE };

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => { process.exitCode = code; },
    (e) => { console.error(e && e.stack ? e.stack : String(e)); process.exitCode = 2; },
  );
}
