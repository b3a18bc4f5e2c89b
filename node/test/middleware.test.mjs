// The Express middleware (5, and 4), the Fastify plugin and the Hono middleware on the request flow (the flow
// rl-gateway runs), on the module and on the Lua twin: a TOML of rules (one with two windows and a ban), a delay, a
// cost from a header settled after the response. Statuses, headers, problem bodies and the Redis keys;
// python/tests/test_one_flow.py compares the same app with rl-gateway request by request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express from 'express';
import express4 from 'express4';
import IORedis from 'ioredis';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { serve } from '@hono/node-server';
import { rateLimit, fastifyRateLimit, honoRateLimit, Limiter, policies } from '../dist/esm/index.js';
import { startServer, ROOT, PATIENT } from './harness.mjs';

// The configuration python/tests/test_one_flow.py reads too.
const CONFIG = (prefix) => `key_prefix = "${prefix}"\n${readFileSync(join(ROOT, 'testdata', 'flow', 'one_flow.toml'), 'utf8')}`;

const dir = mkdtempSync(join(tmpdir(), 'rl-express-'));
const servers = {};
before(async () => {
  servers.module = await startServer();
  servers.twin = await startServer({ module: false });
  servers.cluster = await startServer({ cluster: true });
});
after(() => {
  Object.values(servers).forEach((s) => s.stop());
  rmSync(dir, { recursive: true, force: true });
});

async function until(check, what) {
  const deadline = Date.now() + 5000;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, what);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** An Express app (5, or 4) behind the middleware: its base URL and how to close it. */
function onExpress(framework) {
  return async (client, config) => {
    const app = framework();
    app.use(rateLimit({ client, config, tiers: {}, limiterOptions: PATIENT }));
    app.post('/llm', (req, res) => res.set('x-tokens-used', '10').json({ ok: true }));
    app.use((req, res) => res.json({ ok: true, path: req.path }));
    const listener = app.listen(0, '127.0.0.1');
    await new Promise((r) => listener.once('listening', r));
    return { base: `http://127.0.0.1:${listener.address().port}`, close: () => listener.close(), normalizes: true };
  };
}

/** A Fastify app behind the plugin. */
async function onFastify(client, config) {
  const app = Fastify();
  await app.register(fastifyRateLimit, { client, config, tiers: {}, limiterOptions: PATIENT });
  app.post('/llm', (req, reply) => reply.header('x-tokens-used', '10').send({ ok: true }));
  app.all('/*', (req) => ({ ok: true, path: req.url }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { base: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close(), normalizes: false };
}

/** A Hono app on @hono/node-server behind the middleware. */
async function onHono(client, config) {
  const app = new Hono();
  app.use(honoRateLimit({ client, config, tiers: {}, limiterOptions: PATIENT }));
  app.post('/llm', (c) => c.json({ ok: true }, 200, { 'x-tokens-used': '10' }));
  app.all('*', (c) => c.json({ ok: true, path: c.req.path }));
  const listener = await new Promise((r) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => r(s));
  });
  return { base: `http://127.0.0.1:${listener.address().port}`, close: () => listener.close(), normalizes: false };
}

async function run(server, prefix, serve = onExpress(express)) {
  const path = join(dir, `${prefix}.toml`);
  writeFileSync(path, CONFIG(prefix));
  const client = new IORedis(server.port, '127.0.0.1');
  const { base, close, normalizes } = await serve(client, path);
  const send = (method, url, headers = {}) => fetch(base + url, { method, headers });
  try {
    // Two windows: the first refusal is the minute's; each refusal is a strike, two ban.
    const login = [];
    for (let i = 0; i < 4; i++) login.push(await send('POST', '/login'));
    assert.deepEqual(login.map((r) => r.status), [200, 200, 429, 429]);
    assert.equal(login[0].headers.get('ratelimit-policy'), '"ip";q=100;w=60, "login-1m";q=2;w=60, "login-1h";q=5;w=3600');
    assert.equal(login[0].headers.get('ratelimit'), '"login-1m";r=1;t=30');
    assert.equal(login[0].headers.get('x-ratelimit-limit'), '2');
    assert.equal(login[0].headers.get('x-ratelimit-remaining'), '1');
    assert.ok(login[0].headers.get('x-request-id'));
    const refused = login[2];
    assert.equal(refused.headers.get('content-type'), 'application/problem+json');
    assert.equal(refused.headers.get('retry-after'), '30');
    const problem = await refused.json();
    assert.equal(problem.status, 429);
    assert.equal(problem.policy, 'login-1m');
    assert.equal(problem.dimension, 'login');
    assert.equal(problem.request_id, refused.headers.get('x-request-id'));
    const ban = `${prefix}:{ip:127.0.0.1}:r:login:ban`;
    await until(async () => (await client.exists(ban)) === 1, 'no ban');
    // Banned: refused for the ban's time, without a limiter call.
    const banned = await send('POST', '/login', { 'x-request-id': 'banned-1' });
    assert.equal(banned.status, 429);
    assert.ok(Number(banned.headers.get('retry-after')) > 60, banned.headers.get('retry-after'));
    assert.equal((await banned.json()).request_id, 'banned-1');
    // GET is no login: only the ip dimension.
    assert.equal((await send('GET', '/login')).status, 200);

    // The cost from a header, settled from the response's: 60 reserved, 10 used.
    const llm = await send('POST', '/llm', { 'x-max-tokens': '60' });
    assert.equal(llm.status, 200);
    assert.equal(llm.headers.get('x-ratelimit-remaining'), '40');
    const tokens = `${prefix}:{ip:127.0.0.1}:r:tokens`;
    // Settled off the response's path (on 'finish'): 50 of the 60 given back, soon.
    const looking = new Limiter(client, { denyCache: 0, ...PATIENT });
    const rule = policies.fromRate('gcra', 100, 3_600_000);
    await until(async () => (await looking.peek(tokens, rule, 80)).allowed, 'not settled');
    const after = await send('POST', '/llm', { 'x-max-tokens': '80' });
    assert.equal(after.status, 200, 'the 50 units given back let 80 more pass');
    assert.equal(after.headers.get('x-ratelimit-remaining'), '10');
    assert.equal((await send('POST', '/llm', { 'x-max-tokens': 'abc' })).status, 400);
    assert.equal(await client.exists(tokens), 1);

    // 1 per second: the second is held for its slot (booked with FORCE), then served. Its
    // look and its booking cover its two keys (the ip dimension's and the rule's) with one
    // RL.ALL each (PEEK, then FORCE), as every front end sends them: on the module, never
    // its algorithm's own command per key (RL.GCRA).
    const perKey = async () => Number(/cmdstat_rl\.gcra:calls=(\d+)/i.exec(await client.info('commandstats'))?.[1] ?? 0);
    const perKeyBefore = await perKey();
    const slow = [await send('GET', '/slow'), await send('GET', '/slow')];
    assert.deepEqual(slow.map((r) => r.status), [200, 200]);
    assert.equal((await perKey()) - perKeyBefore, 0, 'no command per key');
    assert.equal((await slow[1].json()).path, '/slow');

    // The application sees the path's normal form (Express; Fastify has routed already).
    if (normalizes) assert.equal((await (await send('GET', '//items/./1/')).json()).path, '/items/1');

    // The keys rl-gateway writes for the same requests (the top offenders once flushed).
    const minute = /:\{top\}:([^:]+):\d+$/;
    const keys = async () => (await client.keys(`${prefix}:*`)).map((k) => k.slice(prefix.length).replace(minute, ':{top}:$1:#')).sort();
    await until(async () => (await keys()).includes(':{top}:login:#'), 'no top offenders');
    const seen = (await keys()).filter((k) => k !== ':{ip:127.0.0.1}:r:burst');
    assert.deepEqual(seen, [
      ':{bans}',
      ':{ip:127.0.0.1}',
      ':{ip:127.0.0.1}:r:login:1h',
      ':{ip:127.0.0.1}:r:login:1m',
      ':{ip:127.0.0.1}:r:login:ban',
      ':{ip:127.0.0.1}:r:login:ban:level',
      ':{ip:127.0.0.1}:r:tokens',
      ':{top}:login:#',
    ]);
  } finally {
    await close();
    client.disconnect();
  }
}

test('express: statuses, headers, bodies and keys on the module', () => run(servers.module, 'xm'));
test('express: statuses, headers, bodies and keys on the Lua twin', () => run(servers.twin, 'xt'));
test('express 4: the same on the module', () => run(servers.module, 'x4', onExpress(express4)));
test('fastify: the same on the module', () => run(servers.module, 'fm', onFastify));
test('fastify: the same on the Lua twin', () => run(servers.twin, 'ft', onFastify));
test('hono: the same on the module', () => run(servers.module, 'hm', onHono));
test('hono: the same on the Lua twin', () => run(servers.twin, 'ht', onHono));

/** An Express app behind the middleware whose `/chat` reports its cost in `x-tokens-used` (`x-used`'s value). */
async function chatApp(client, config) {
  const app = express();
  app.use(rateLimit({ client, config, tiers: {}, limiterOptions: PATIENT }));
  app.get('/chat', (req, res) => {
    const used = req.get('x-used');
    if (used !== undefined) res.set('x-tokens-used', used);
    res.send('done');
  });
  const listener = app.listen(0, '127.0.0.1');
  await new Promise((r) => listener.once('listening', r));
  const base = `http://127.0.0.1:${listener.address().port}`;
  return { send: (headers) => fetch(`${base}/chat`, { headers }), close: () => listener.close() };
}

// Declared 1, used 5,000 against a fixed 1000/minute: the window would forget the debt at its
// end, so the subject is held for the rest of it and four more windows (as rl-gateway and
// Python hold it), with the module's RL.STATE and with the Lua twin's.
async function debtHold(server, prefix) {
  const config = {
    key_prefix: prefix,
    hot: [],
    dimensions: ['ip'],
    fleet: { membership: false },
    rules: [{ name: 'tokens', paths: ['/chat'], key: ['global'], limits: ['1000/minute'], algorithm: 'fixed', cost: 'header:x-max-tokens', settle: 'response-header:x-tokens-used' }],
  };
  const client = new IORedis(server.port, '127.0.0.1');
  const app = await chatApp(client, config);
  const ban = `${prefix}:{global}:r:tokens:ban`;
  try {
    assert.equal((await app.send({ 'x-max-tokens': '1', 'x-used': '5000' })).status, 200);
    // Settled off the response's path (on 'finish'): the hold follows, soon.
    await until(async () => (await client.pttl(ban)) > 0, 'no hold');
    const res = await app.send({ 'x-max-tokens': '1' });
    assert.equal(res.status, 429);
    const retry = Number(res.headers.get('retry-after'));
    assert.ok(retry >= 240 && retry <= 301, String(retry));
    const body = await res.json();
    assert.equal(body.banned, true);
    assert.match(body.detail, /held by rule 'tokens' until a settled overage is paid/);
    const hold = await client.pttl(ban);
    assert.ok(hold >= 240_000 && hold <= 301_000, String(hold));
  } finally {
    app.close();
    client.disconnect();
  }
}

test('a settled overage on a fixed window holds the subject until paid (module)', () => debtHold(servers.module, 'dm'));
test('a settled overage on a fixed window holds the subject until paid (Lua twin)', () => debtHold(servers.twin, 'dt'));

test('on a cluster, limits in different hash slots: one RL.ALL per slot, all or nothing', async () => {
  const prefix = 'cl';
  const config = {
    key_prefix: prefix,
    hot: [],
    dimensions: ['ip'],
    ip: { limit: 100 },
    fleet: { membership: false },
    rules: [{ name: 'everyone', key: ['global'], limit: 1, window_ms: 60_000 }],
  };
  const client = new IORedis.Cluster([{ host: '127.0.0.1', port: servers.cluster.port }]);
  const app = await chatApp(client, config);
  try {
    const statuses = [];
    for (let i = 0; i < 2; i++) statuses.push((await app.send({})).status);
    assert.deepEqual(statuses, [200, 429]);
    // The refused request's unit on the ip key (another slot than {global}) was given back.
    const ip = await new Limiter(client, { denyCache: 0, ...PATIENT }).peek(`${prefix}:{ip:127.0.0.1}`, policies.sliding(100, 60_000), 0);
    assert.equal(ip.remaining, 99);
  } finally {
    app.close();
    await client.quit();
  }
});

test('every request the flow began is answered and forgotten, an error reply too', async () => {
  const client = new IORedis(servers.module.port, '127.0.0.1');
  const prefix = 'pf';
  const app = express();
  const tiered = 'dimensions = ["api_key", "ip"]\n[tiers.free]\nlimits = ["100/minute"]';
  const path = join(dir, `${prefix}.toml`);
  writeFileSync(path, CONFIG(prefix).replace('dimensions = ["ip"]', tiered));
  const limit = rateLimit({ client, config: path, tiers: { k1: 'free' } });
  app.use(limit);
  app.use((req, res) => res.json({ ok: true }));
  const listener = app.listen(0, '127.0.0.1');
  await new Promise((r) => listener.once('listening', r));
  const send = (method, url, headers = {}) => fetch(`http://127.0.0.1:${listener.address().port}${url}`, { method, headers });
  try {
    const statuses = [];
    // Allowed, refused (then banned), held for a slot, settled, an API key's tier.
    for (let i = 0; i < 3; i++) statuses.push((await send('POST', '/login')).status);
    statuses.push((await send('GET', '/slow')).status, (await send('GET', '/slow')).status);
    statuses.push((await send('POST', '/llm', { 'x-max-tokens': '5' })).status);
    statuses.push((await send('GET', '/k', { 'x-api-key': 'k1' })).status);
    // The limiter's key of another type: the server's error reply is the application's error.
    await client.hset(`${prefix}:{ip:127.0.0.2}`, 'a', '1');
    await client.set(`${prefix}:{ip:127.0.0.1}`, 'x');
    statuses.push((await send('GET', '/items')).status);
    assert.deepEqual(statuses, [200, 200, 429, 200, 200, 200, 200, 500]);
    assert.equal(limit.driver.pendingRequests, 0);
  } finally {
    listener.close();
    client.disconnect();
  }
});

test('a bad configuration fails at start naming the file, the line and the field', () => {
  const path = join(dir, 'bad.toml');
  writeFileSync(path, 'dimensions = ["ip"]\n\n[[rules]]\nname = "a"\nkey = ["ip"]\nlimits = ["5/fortnight"]\n');
  const client = new IORedis({ lazyConnect: true });
  assert.throws(() => rateLimit({ client, config: path }), (e) => e.message.startsWith(`${path}:6: rules[0].limits`));
  assert.throws(() => rateLimit({ client, config: { dimensions: ["nope"] } }), /^Error: <object>:1: unknown variant `nope`/);
  client.disconnect();
});

test('Redis unavailable: the failure mode decides (closed: 503, open: served)', async () => {
  // A port nothing listens on: every call times out or fails to connect.
  const p = Number(execFileSync('python3', [join(ROOT, 'scripts', 'ports.py')], { encoding: 'utf8' }).trim());
  const client = new IORedis({ port: p, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false });
  client.on('error', () => undefined); // refused connections, expected here
  const answers = {};
  for (const mode of ['closed', 'open']) {
    const app = express();
    app.use(rateLimit({
      client,
      config: { key_prefix: 'down', hot: [], dimensions: ['ip'], failure_mode: mode, fleet: { membership: false } },
      limiterOptions: { timeoutMs: 200 },
    }));
    app.use((req, res) => res.json({ ok: true }));
    const listener = app.listen(0, '127.0.0.1');
    await new Promise((r) => listener.once('listening', r));
    const res = await fetch(`http://127.0.0.1:${listener.address().port}/items/1`);
    answers[mode] = [res.status, res.headers.get('content-type')];
    listener.close();
  }
  client.disconnect();
  assert.deepEqual(answers.closed, [503, 'application/problem+json']);
  assert.equal(answers.open[0], 200);
});

// The flow's usual answers name only what changed since its last one (the command's words,
// the headers' names and values): requests that alternate between rules of other headers,
// and a path no rule limits, each get their own whole command and headers.
test('the usual request: whole commands and headers when the answers name only what changed', async () => {
  const client = new IORedis(servers.module.port, '127.0.0.1');
  const sent = [];
  const spy = { call: (...words) => (sent.push(words), client.call(...words)) };
  const config = {
    key_prefix: 'sw',
    dimensions: [],
    hot: [],
    fleet: { membership: false },
    rules: [
      { name: 'a', paths: ['/a'], key: ['ip'], algorithm: 'sliding', limit: 1000, window_ms: 60_000 },
      { name: 'b', paths: ['/b'], key: ['ip'], limits: ['50/minute', '900/hour'] },
    ],
  };
  const headers = [['Host', 'x']];
  try {
    const { driver } = rateLimit({ client: spy, config, limiterOptions: PATIENT });
    const left = { '/a': 1000, '/b': 50 };
    for (const path of ['/a', '/a', '/b', '/free', '/a', '/b', '/b', '/free', '/free', '/a']) {
      const calls = sent.length;
      const v = await driver.decide({ method: 'GET', path, headers, peer: '10.0.0.7' });
      assert.equal(v.kind, 'forward', path);
      const got = Object.fromEntries(v.headers);
      assert.ok(v.headers.every(([n, value]) => !n.includes('\u0001') && !value.includes('\u0001')), path);
      if (path === '/free') {
        assert.deepEqual(Object.keys(got), ['x-request-id'], path);
        assert.equal(sent.length, calls, 'a path no rule limits sends nothing');
        continue;
      }
      left[path] -= 1;
      assert.equal(got['x-ratelimit-remaining'], String(left[path]), path);
      assert.equal(got['ratelimit-policy'], path === '/a' ? '"a";q=1000;w=60' : '"b-1m";q=50;w=60, "b-1h";q=900;w=3600', path);
      assert.equal(sent.length, calls + 1, path);
      const words = sent.at(-1);
      assert.ok(words.every((w) => w !== '\u0001'), `${path}: ${words}`);
      if (path === '/a') assert.deepEqual(words, ['RL.SLIDING', 'sw:{ip:10.0.0.7}:r:a', '1000', '60000']);
      else assert.equal(words[0], 'RL.ALL');
    }
    assert.equal(driver.pendingRequests, 0);
  } finally {
    client.disconnect();
  }
});

/** How many answers `Flow.beginMany` or `Flow.feedMany` gave (each after its length and a colon). */
function answersIn(answers) {
  let n = 0;
  for (let at = 0; at < answers.length; n++) {
    const colon = answers.indexOf(':', at);
    at = colon + 1 + Number(answers.slice(at, colon));
  }
  return n;
}

// Requests that come in one turn of the event loop are begun in one call, and replies that
// come together (one read of the client's socket) are fed in one: every request still gets
// its own command and headers, whole, whatever came before it in the batch (and whatever
// shape its reply has).

test('requests and replies that come together: each request its own headers', async () => {
  const client = new IORedis(servers.module.port, '127.0.0.1');
  // Holds every reply until all the calls are in, then answers them in one go, in order.
  const held = [];
  const N = 24;
  // Every other reply with its integers as strings (as a client may give them): read as
  // the others are, wherever they sit in the batch.
  const textual = (r) => (Array.isArray(r) ? r.map(textual) : typeof r === 'number' ? String(r) : r);
  let calls = 0;
  const spy = {
    call: (...words) =>
      new Promise((resolve, reject) => {
        const shape = calls++ % 2 === 0 ? (r) => r : textual;
        held.push(client.call(...words).then((r) => () => resolve(shape(r)), (e) => () => reject(e)));
        if (held.length === N) Promise.all(held.splice(0)).then((answers) => answers.forEach((answer) => answer()));
      }),
  };
  const config = {
    key_prefix: 'tg',
    dimensions: [],
    hot: [],
    fleet: { membership: false },
    rules: [
      { name: 'a', paths: ['/a'], key: ['ip'], algorithm: 'sliding', limit: 1000, window_ms: 60_000 },
      { name: 'b', paths: ['/b'], key: ['ip'], limits: ['50/minute', '900/hour'] },
      { name: 'c', paths: ['/c'], key: ['ip'], algorithm: 'sliding', limit: 2, window_ms: 60_000 },
    ],
  };
  try {
    const { driver } = rateLimit({ client: spy, config, limiterOptions: PATIENT });
    const batches = [];
    const begun = [];
    const flow = driver['flow'];
    const feedMany = flow.feedMany.bind(flow);
    flow.feedMany = (...args) => {
      const answers = feedMany(...args);
      batches.push(answersIn(answers));
      return answers;
    };
    const beginMany = flow.beginMany.bind(flow);
    flow.beginMany = (requests, now) => (begun.push(requests), beginMany(requests, now));
    // Allowed on two rules, not limited, and four on a rule of two: refused in the same batches.
    const paths = Array.from({ length: N + 1 }, (_, i) => ['/a', '/b', '/a', '/free', '/b'][i % 5]).filter((p, i) => p !== '/free' || i < 10);
    paths.splice(5, 0, '/c', '/c');
    paths.splice(15, 0, '/c', '/c');
    assert.equal(paths.filter((p) => p !== '/free').length, N);
    // Requests of none, one and two headers (a request id of their own); a line feed in a
    // header value (an adapter of its own may hand one over) shifts no other request's words.
    // A request id of a request's own is kept when sane; any other request gets a new one.
    const headersOf = (i) => [[['X-Odd', 'a\nb\nc'], ['X-Request-Id', `not sane ${i}`]], [['Host', 'x']], [['Host', 'x'], ['X-Request-Id', `id-${i}`]]][i % 3];
    const verdicts = await Promise.all(paths.map((path, i) => driver.decide({ method: 'GET', path, headers: headersOf(i), peer: '10.0.0.8' })));
    assert.equal(begun.length, 1, 'one call begins them all');
    assert.deepEqual(batches, [N], 'one call feeds them all');
    const remaining = { '/a': [], '/b': [], '/c': [] };
    const newIds = new Set();
    verdicts.forEach((v, i) => {
      const path = paths[i];
      if (path === '/c' && i > 6) {
        assert.equal(v.kind, 'respond', `${path} ${i}`);
        assert.equal(v.status, 429);
        return assert.equal(Object.fromEntries(v.headers)['ratelimit-policy'], '"c";q=2;w=60');
      }
      assert.equal(v.kind, 'forward', `${path} ${i}`);
      assert.ok(v.headers.every(([n, value]) => !n.includes('\u0001') && !value.includes('\u0001')), path);
      const got = Object.fromEntries(v.headers);
      if (i % 3 === 2) assert.equal(got['x-request-id'], `id-${i}`);
      else assert.match(got['x-request-id'], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      assert.equal(v.requestId, got['x-request-id']);
      newIds.add(got['x-request-id']);
      if (path === '/free') return assert.deepEqual(Object.keys(got), ['x-request-id']);
      const policy = { '/a': '"a";q=1000;w=60', '/b': '"b-1m";q=50;w=60, "b-1h";q=900;w=3600', '/c': '"c";q=2;w=60' }[path];
      assert.equal(got['ratelimit-policy'], policy, path);
      assert.equal(got['x-ratelimit-limit'], { '/a': '1000', '/b': '50', '/c': '2' }[path], path);
      remaining[path].push(Number(got['x-ratelimit-remaining']));
    });
    assert.equal(newIds.size, verdicts.filter((v) => v.kind === 'forward').length, 'one id per request');
    // Each request saw its own count: every value once, from the limit down.
    for (const [path, limit] of [['/a', 1000], ['/b', 50], ['/c', 2]]) {
      const seen = remaining[path].sort((x, y) => y - x);
      assert.deepEqual(seen, seen.map((_, i) => limit - 1 - i), path);
    }
    assert.equal(driver.pendingRequests, 0);
  } finally {
    client.disconnect();
  }
});

// Answers are counted in UTF-16 code units, as JavaScript reads them: paths beyond ASCII
// (two units for an emoji) in one batch leave every other answer where it is.
test('a batch of paths beyond ASCII: each request its own path and headers', async () => {
  const client = { call: async (...w) => (w[0] === 'RL.ALL' ? [1, 0, [[10, 9, 0, 60_000]]] : [1, 10, 9, 0, 60_000]) };
  const config = { key_prefix: 'u8', dimensions: [], hot: [], fleet: { membership: false }, rules: [{ name: 'a', key: ['ip'], algorithm: 'sliding', limit: 10, window_ms: 60_000 }] };
  const { driver } = rateLimit({ client, config });
  const paths = ['/é', '/😀/x', '/plain', '/日本', '/a/../😀'];
  const verdicts = await Promise.all(paths.map((path, i) => driver.decide({ method: 'GET', path, headers: [['X-Note', 'ü😀']], peer: `10.0.0.${i}` })));
  assert.deepEqual(verdicts.map((v) => v.path), ['/é', '/😀/x', '/plain', '/日本', '/😀']);
  for (const v of verdicts) {
    assert.equal(v.kind, 'forward');
    assert.equal(Object.fromEntries(v.headers)['ratelimit-policy'], '"a";q=10;w=60');
    assert.equal(v.requestId.length, 36);
  }
});

// The bookings of one batch go to Redis in one write: the client's socket is corked while
// they are sent and uncorked after (ioredis and iovalkey), every request answered.
test('a batch of requests through Express: one write to Redis, each request its own count', async () => {
  const client = new IORedis(servers.module.port, '127.0.0.1');
  await client.ping();
  const config = {
    key_prefix: 'ck',
    dimensions: [],
    hot: [],
    fleet: { membership: false },
    rules: [{ name: 'a', key: ['ip'], algorithm: 'sliding', limit: 1000, window_ms: 60_000 }],
  };
  try {
    const handler = rateLimit({ client, config, limiterOptions: PATIENT });
    const writes = [];
    const write = client.stream.write.bind(client.stream);
    const writev = client.stream._writev.bind(client.stream);
    client.stream.write = (...args) => (writes.push(client.stream.writableCorked), write(...args));
    client.stream._writev = (chunks, cb) => (writes.push(`writev ${chunks.length}`), writev(chunks, cb));
    const N = 12;
    const done = Array.from({ length: N }, () => {
      const set = {};
      const req = { method: 'GET', originalUrl: '/x', url: '/x', rawHeaders: ['Host', 'x'], headers: {}, socket: { remoteAddress: '10.1.2.3' } };
      const res = { statusCode: 200, setHeader: (n, v) => void (set[n] = v), getHeaders: () => set, end: () => undefined, on: () => undefined };
      // Express calls the middleware for each request as it is read: all in one turn here.
      return new Promise((resolve, reject) => handler(req, res, (e) => (e ? reject(e) : resolve(set))));
    });
    const answers = await Promise.all(done);
    assert.deepEqual(
      answers.map((h) => Number(h['x-ratelimit-remaining'])).sort((a, b) => b - a),
      Array.from({ length: N }, (_, i) => 999 - i),
    );
    assert.deepEqual(writes, [...Array(N).fill(1), `writev ${N}`], 'written while corked, then at once');
    assert.equal(client.stream.writableCorked, 0);
  } finally {
    client.disconnect();
  }
});

// The request's strings cross into the addon in one text per batch, into the memory of a
// request forwarded before: long ones and ones beyond ASCII arrive whole and in their
// places, on the usual way and on the way step by step (an API key's tier to look up).
test('long and non-ASCII strings of a request reach the flow whole', async () => {
  const LIMIT = 1_000_000;
  const sent = [];
  const answer = (words) =>
    words[0] === 'RL.ALL' ? [1, 0, Array.from({ length: Number(words[1]) }, () => [LIMIT, LIMIT - 1, 0, 60_000])] : [1, LIMIT, LIMIT - 1, 0, 60_000];
  const client = { call: (...words) => (sent.push(words), Promise.resolve(answer(words))) };
  const looked = [];
  const config = { key_prefix: 'ls', hot: [], fleet: { membership: false }, dimensions: ['api_key', 'endpoint'], endpoint: { limit: LIMIT }, tiers: { free: { limit: LIMIT } } };
  const { driver } = rateLimit({ client, config, tiers: (k) => (looked.push(k), 'free') });
  const route = `/ü/${'é'.repeat(200)}`;
  const pad = ['X-Pad', `${'é'.repeat(300)}\u{1F600}`];
  const trace = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const usual = await driver.decide({ method: 'GET', path: '/x', headers: [pad, ['traceparent', trace]], peer: '10.0.0.9', route });
  assert.equal(usual.kind, 'forward');
  assert.ok(usual.traceparent.startsWith('00-4bf92f3577b34da6a3ce929d0e0e4736-'), usual.traceparent);
  assert.ok(sent.at(-1).includes(`ls:{ip:10.0.0.9}:ep:${route}`), String(sent.at(-1)));
  // The next request is read into the last one's memory: nothing of it stays (its trace,
  // its route).
  const plain = await driver.decide({ method: 'GET', path: '/x', headers: [['Host', 'h']], peer: '10.0.0.9' });
  assert.equal(plain.kind, 'forward');
  assert.ok(!plain.traceparent.startsWith('00-4bf92f3577b34da6a3ce929d0e0e4736-'), plain.traceparent);
  assert.ok(sent.at(-1).includes('ls:{ip:10.0.0.9}:ep:<unmatched>'), String(sent.at(-1)));
  const key = `k-${'x'.repeat(150)}`;
  const tiered = await driver.decide({ method: 'GET', path: '/x', headers: [pad, ['X-Api-Key', key]], peer: '10.0.0.9', route });
  assert.equal(tiered.kind, 'forward');
  assert.deepEqual(looked, [key]);
  assert.ok(sent.at(-1).includes(`ls:{k:5e2b97b0905f1457}:ep:${route}`), String(sent.at(-1)));
  assert.equal(driver.pendingRequests, 0);
});

// `Flow.begin` (one request, its strings as arguments of their own)
// and `Flow.beginMany` (the middleware's batches, one string) read the same request alike:
// long strings, characters beyond ASCII, a 4-byte one at the end of a header.
test('Flow.begin and Flow.beginMany read the same request alike', () => {
  const native = createRequire(import.meta.url)('../redis-rl.linux-x64-gnu.node');
  const config = { key_prefix: 'bb', hot: [], fleet: { membership: false }, dimensions: ['endpoint'], endpoint: { limit: 1000 } };
  const route = `/ü/${'é'.repeat(200)}`;
  const headers = ['X-Pad', `${'é'.repeat(300)}\u{1F600}`, 'Host', 'h'];
  const command = (answer) => answer.split('\n').slice(1).join('\n');
  const one = native.Flow.fromJson(JSON.stringify(config), '<object>', []);
  const many = native.Flow.fromJson(JSON.stringify(config), '<object>', []);
  for (const flow of [one, many]) flow.bind(new native.Core({}), false);
  for (const [path, r] of [['/x', route], [`/${'ß'.repeat(100)}`, null]]) {
    const single = one.begin('GET', path, headers.join('\n'), '10.0.0.9', 'rid-1', r, 1);
    const batched = many.beginMany(['GET', path, '10.0.0.9', 'rid-1', r ?? '', String(headers.length), ...headers].join('\n'), 1);
    const answer = batched.slice(batched.indexOf(':') + 1);
    assert.equal(command(single), command(answer));
    assert.ok(single.includes(`bb:{ip:10.0.0.9}:ep:${r ?? '<unmatched>'}`), single);
  }
});

test('legacy_headers = false: RateLimit and RateLimit-Policy alone, on an answer and on a refusal', async () => {
  const client = new IORedis(servers.module.port, '127.0.0.1');
  const config = {
    key_prefix: 'lh',
    legacy_headers: false,
    dimensions: [],
    hot: [],
    fleet: { membership: false },
    rules: [{ name: 'one', key: ['ip'], algorithm: 'sliding', limit: 1, window_ms: 60_000 }],
  };
  try {
    const { driver } = rateLimit({ client, config, limiterOptions: PATIENT });
    const request = { method: 'GET', path: '/', headers: [['Host', 'x']], peer: '10.0.0.9' };
    const allowed = await driver.decide(request);
    const refused = await driver.decide(request);
    assert.equal(allowed.kind, 'forward');
    assert.deepEqual(allowed.headers.map(([n]) => n), ['ratelimit-policy', 'ratelimit', 'x-request-id']);
    assert.equal(refused.kind, 'respond');
    assert.equal(refused.status, 429);
    assert.ok(refused.headers.every(([n]) => !n.startsWith('x-ratelimit')), JSON.stringify(refused.headers));
    assert.ok(refused.headers.some(([n, v]) => n === 'ratelimit' && /^"one";r=0;t=\d+$/.test(v)), JSON.stringify(refused.headers));
  } finally {
    client.disconnect();
  }
});
