// The limiter through every client library, on the module and on the Lua twin.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { Limiter, policies } from '../dist/esm/index.js';
import { startServer, prefix, PATIENT } from './harness.mjs';
import { standalone, clusters } from './clients.mjs';

const servers = {};
before(async () => {
  servers.module = await startServer();
  servers.twin = await startServer({ module: false });
  servers.cluster = await startServer({ cluster: true });
});
after(() => Object.values(servers).forEach((s) => s.stop()));

async function sequence(limiter, p) {
  const three = policies.sliding(3, 10_000);
  const seen = [];
  for (let i = 0; i < 4; i++) seen.push(await limiter.check(`${p}a`, three));
  assert.deepEqual(seen.map((d) => d.allowed), [true, true, true, false]);
  assert.deepEqual(seen.map((d) => d.remaining), [2, 1, 0, 0]);
  assert.equal(seen[3].source, 'redis');
  // A sliding window weighs the previous window in: the wait is at most two windows.
  assert.ok(seen[3].retryAfterMs > 0 && seen[3].retryAfterMs <= 20_000, JSON.stringify(seen[3]));
  assert.equal(seen[0].limit, 3);

  // All or nothing: the second key refuses, so the first takes nothing.
  const wide = policies.fixed(100, 60_000);
  const m = await limiter.checkAll([[`${p}b`, wide], [`${p}a`, three]]);
  assert.equal(m.allowed, false);
  assert.equal(m.deniedIndex, 1);
  assert.ok(m.retryAfterMs > 0);
  assert.equal((await limiter.peek(`${p}b`, wide)).remaining, 99, 'nothing taken on b');
  const ok = await limiter.checkAll([[`${p}b`, wide], [`${p}c`, three]], [5, 2]);
  assert.equal(ok.allowed, true);
  assert.deepEqual(ok.decisions.map((d) => d.remaining), [95, 1]);

  // A cost over the limit can never pass: retryAfterMs is null.
  const never = await limiter.check(`${p}d`, three, 4);
  assert.equal(never.allowed, false);
  assert.equal(never.retryAfterMs, null);

  // A batch, given back; a reservation settled both ways.
  // One token an hour: no refill between the calls, however slow the machine.
  const bucket = policies.tokenBucket(10, 1, 3_600_000);
  const g = await limiter.takeUpto(`${p}e`, bucket, 25);
  assert.equal(g.granted, 10);
  assert.equal(await limiter.refund(`${p}e`, bucket, 4), 4);
  assert.equal((await limiter.peekUpto(`${p}e`, bucket, 25)).granted, 4);
  const r = await limiter.settle(`${p}e`, bucket, 4, 1);
  assert.deepEqual(r, { kind: 'refunded', units: 3 });
  const c = await limiter.settle(`${p}e`, bucket, 1, 20);
  assert.equal(c.kind, 'charged');
  assert.equal(c.decision.remaining, 0);
  assert.equal((await limiter.check(`${p}e`, bucket)).allowed, false, 'in debt');
}

for (const mode of ['module', 'twin']) {
  for (const client of standalone) {
    test(`${client.name} on the ${mode}`, async () => {
      const c = await client.make(servers[mode].port);
      try {
        const limiter = new Limiter(c, { denyCache: 0, ...PATIENT });
        await sequence(limiter, prefix());
        assert.equal(limiter.route, mode === 'module' ? 'module' : 'lua');
      } finally {
        await client.close(c);
      }
    });
  }
}

for (const client of clusters) {
  test(`${client.name}`, async () => {
    const c = await client.make(servers.cluster.port);
    try {
      const limiter = new Limiter(c, { denyCache: 0, ...PATIENT });
      const p = `{${prefix()}}`;
      await sequence(limiter, p);
      // Keys in two slots ({a} and {b} hash apart): one RL.ALL per slot, all or nothing.
      const q = prefix();
      const [x, y, z] = [`{a}${q}x`, `{b}${q}y`, `{a}${q}z`];
      const one = policies.sliding(1, 60_000);
      const wide = policies.sliding(100, 60_000);
      assert.equal((await limiter.checkAll([[x, one], [y, one]])).allowed, true);
      const refused = await limiter.checkAll([[z, wide], [y, one]]);
      assert.deepEqual([refused.allowed, refused.deniedIndex], [false, 1]);
      assert.ok(refused.retryAfterMs > 0);
      assert.equal((await limiter.peek(z, wide, 0)).remaining, 100, 'the slot that took gave its unit back');
      // A slot whose call fails (its key holds a string: not a limiter): the call throws, and the slot that
      // took gives its unit back first.
      const s = `{b}${q}s`;
      await limiter.query(['SET', s, 'not a limiter'], s);
      await assert.rejects(limiter.checkAll([[z, wide], [s, wide]]), /not a redis-rl limiter/);
      assert.equal((await limiter.peek(z, wide, 0)).remaining, 100, 'the slot that took gave its unit back after the failure');
    } finally {
      await client.close(c);
    }
  });
}

// A held request's look and booking (the request flow's peek and force steps): one RL.ALL
// each on the module (the twin's EVALSHA without it), every item with its own units, as the
// Python package's peek_all_units/force_all_units and the Rust client's.
for (const mode of ['module', 'twin']) {
  test(`peekAllUnits and forceAllUnits: one call each, each item's own units (${mode})`, async () => {
    const c = new IORedis(servers[mode].port, '127.0.0.1');
    try {
      const limiter = new Limiter(c, { denyCache: 0, ...PATIENT });
      const name = mode === 'module' ? 'rl\\.all' : 'evalsha';
      const calls = async () => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`, 'i').exec(await c.info('commandstats'))?.[1] ?? 0);
      const p = prefix();
      // A fixed window of 10^12 ms: none turns during the test (they are aligned to the clock).
      const [a, b] = [policies.sliding(10, 3_600_000), policies.fixed(3, 1e12)];
      const items = [[`{${p}}a`, a], [`{${p}}b`, b]];
      assert.equal((await limiter.peek(items[0][0], a, 0)).remaining, 10); // the wire chosen first
      let before = await calls();
      const looks = await limiter.peekAllUnits(items, [4, 5]);
      assert.equal((await calls()) - before, 1);
      assert.deepEqual(looks.map((d) => d.allowed), [true, false]);
      assert.equal((await limiter.peek(items[0][0], a, 0)).remaining, 10, 'a look takes nothing');
      before = await calls();
      const forced = await limiter.forceAllUnits(items, [12, 1]);
      assert.equal((await calls()) - before, 1);
      assert.deepEqual(forced.map((d) => [d.allowed, d.remaining]), [[true, 0], [true, 2]]);
      assert.equal((await limiter.peek(items[0][0], a, 1)).allowed, false, 'a is in debt');
      // A key that is not a limiter's: the call throws (a held request is refused then).
      const s = `{${p}}s`;
      await limiter.query(['SET', s, 'not a limiter'], s);
      await assert.rejects(limiter.forceAllUnits([items[1], [s, b]], [1, 1]), /not a redis-rl limiter/);
      assert.equal((await limiter.peek(items[1][0], b, 0)).remaining, 2, 'all or nothing: b took nothing');
    } finally {
      c.disconnect();
    }
  });
}

test('bad arguments throw before anything is sent, with the server\'s texts', async () => {
  assert.throws(() => policies.tokenBucket(10, 0, 100), /refill_tokens must be an integer between 1 and/);
  assert.throws(() => policies.sliding(1.5, 1000), /limit must be a whole number/);
  assert.throws(() => policies.of('leaky', 1, 2), /algorithm must be one of/);
  assert.throws(() => policies.gcra(10, 1000, { bursty: 2 }), /unexpected option/);
  assert.equal(policies.gcra(10, 1000, { burst: 3 }).limit, 3);
  assert.deepEqual(policies.gcra(10, 1000, 3).args, ['10', '1000', 'BURST', '3']);
  const c = new IORedis(servers.module.port, '127.0.0.1');
  try {
    const limiter = new Limiter(c, PATIENT);
    await assert.rejects(limiter.check('', policies.sliding(1, 1000)), /key must not be empty/);
    await assert.rejects(limiter.check('k', policies.sliding(1, 1000), -1), /cost must be an integer/);
    await assert.rejects(limiter.takeUpto('k', policies.log(5, 1000), 2), /does not take UPTO/);
  } finally {
    c.disconnect();
  }
});

test('failure modes decide when Redis cannot answer, then the breaker opens', async () => {
  const s = await startServer();
  const c = new IORedis(s.port, '127.0.0.1', { maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
  await new Promise((r) => c.once('ready', r));
  // Patient: the first call is Redis's to answer; the failures after the stop are refusals.
  const limiter = new Limiter(c, { ...PATIENT, breakerFailures: 2, breakerOpenMs: 60_000 });
  const p = prefix();
  assert.equal((await limiter.check(`${p}k`, policies.sliding(1, 60_000))).source, 'redis');
  // Unreachable from the moment the client has seen its connection end (no reconnection:
  // retryStrategy), rather than after a sleep that a loaded machine may outlast.
  const ended = new Promise((r) => c.once('end', r));
  s.stop();
  await ended;
  const open = await limiter.check(`${p}k`, policies.sliding(1, 60_000).onFailure('open'));
  assert.deepEqual([open.allowed, open.source], [true, 'fail_open']);
  const closed = await limiter.check(`${p}k`, policies.sliding(1, 60_000).onFailure('closed'));
  assert.deepEqual([closed.allowed, closed.source], [false, 'fail_closed']);
  assert.equal(limiter.breakerState, 'open');
  const local = policies.sliding(2, 60_000).onFailure('local');
  const seen = [];
  for (let i = 0; i < 3; i++) seen.push(await limiter.check(`${p}l`, local));
  assert.deepEqual(seen.map((d) => [d.allowed, d.source]), [[true, 'local'], [true, 'local'], [false, 'local']]);
  const all = await limiter.checkAll([[`${p}m`, local], [`${p}l`, local]]);
  assert.deepEqual([all.allowed, all.deniedIndex], [false, 1]);
  assert.equal((await limiter.peek(`${p}m`, local, 0)).remaining, 2, 'nothing taken locally on a denial');
  await assert.rejects(limiter.refund(`${p}k`, local, 1), /Redis was not called|closed|connection/i);
  c.disconnect();
});

test('shadow policies report and never deny; the deny cache answers for a denied key', async () => {
  const c = new IORedis(servers.module.port, '127.0.0.1');
  try {
    const limiter = new Limiter(c, PATIENT);
    const p = prefix();
    const shadow = policies.sliding(1, 60_000).withShadow(true);
    await limiter.check(`${p}s`, shadow);
    const d = await limiter.check(`${p}s`, shadow);
    assert.deepEqual([d.allowed, d.shadow], [true, true]);
    const m = await limiter.checkAll([[`${p}s`, shadow], [`${p}t`, policies.sliding(5, 60_000)]]);
    assert.equal(m.allowed, true);
    assert.equal(m.decisions[0].shadow, true);
    const one = policies.sliding(1, 60_000);
    await limiter.check(`${p}u`, one);
    assert.equal((await limiter.check(`${p}u`, one)).source, 'redis');
    assert.equal((await limiter.check(`${p}u`, one)).source, 'deny_cache');
  } finally {
    c.disconnect();
  }
});

// The limiter's timeout watches every call in flight with one timer (deadlines in the order
// the calls were sent): a call that never answers times out while the ones around it answer.
test('a call that gets no reply times out; the calls around it get theirs', async () => {
  const { Deadlines, TimeoutError } = await import('../dist/esm/deadline.js');
  const watch = new Deadlines(100);
  let answerLater;
  const results = await Promise.allSettled([
    watch.watch(new Promise(() => undefined)), // never answers
    watch.watch(Promise.resolve('second')),
    watch.watch(new Promise((r) => (answerLater = r))),
    watch.watch(Promise.reject(new Error('refused'))),
    (async () => {
      await new Promise((r) => setImmediate(r));
      answerLater('third');
      return watch.watch(new Promise(() => undefined)); // sent later, never answers either
    })(),
  ]);
  assert.ok(results[0].status === 'rejected' && results[0].reason instanceof TimeoutError, String(results[0].reason));
  assert.deepEqual(results[1], { status: 'fulfilled', value: 'second' });
  assert.deepEqual(results[2], { status: 'fulfilled', value: 'third' });
  assert.equal(results[3].reason.message, 'refused');
  assert.ok(results[4].status === 'rejected' && results[4].reason instanceof TimeoutError, String(results[4].reason));
});

test('a server that accepts but never answers: the failure mode decides each call', async () => {
  // A listener that reads and never writes: every command waits out the limiter's timeout.
  const net = await import('node:net');
  const sockets = new Set();
  const silent = net.createServer((s) => {
    sockets.add(s);
    s.on('data', () => undefined);
  });
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  // No ready check (it would wait for INFO's reply): commands go out once connected.
  const c = new IORedis(silent.address().port, '127.0.0.1', { maxRetriesPerRequest: 0, enableReadyCheck: false });
  c.on('error', () => undefined);
  try {
    const limiter = new Limiter(c, { timeoutMs: 100, breakerFailures: 1000 });
    const open = policies.sliding(5, 60_000).onFailure('open');
    const closed = policies.sliding(5, 60_000).onFailure('closed');
    const decided = await Promise.all([limiter.check('a', open), limiter.check('b', closed), limiter.check('c', open)]);
    assert.deepEqual(decided.map((d) => [d.allowed, d.source]), [[true, 'fail_open'], [false, 'fail_closed'], [true, 'fail_open']]);
  } finally {
    c.disconnect();
    for (const s of sockets) s.destroy();
    silent.close();
  }
});
