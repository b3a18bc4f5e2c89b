// The drop-ins run the documented usage of rate-limiter-flexible's RateLimiterRedis and of
// express-rate-limit (README examples, with the store option), side by side with the real
// packages on the same server: same outcomes where the semantics agree.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { RedisStore } from 'rate-limit-redis';
import { RateLimiterRedis as FlexibleRedis } from 'rate-limiter-flexible';
import { RateLimiterRedis, RateLimiterRes, RedisRlStore } from '../dist/esm/index.js';
import { startServer, prefix, withinOneWindow, PATIENT } from './harness.mjs';

let server;
let redis;
before(async () => {
  server = await startServer();
  redis = new IORedis(server.port, '127.0.0.1', { enableOfflineQueue: false });
  await new Promise((r) => redis.once('ready', r));
});
after(() => {
  redis.disconnect();
  server.stop();
});

// rate-limiter-flexible's README "Basic Example" and its wiki's Redis example: consume
// resolves with a RateLimiterRes, rejects with one when there are not enough points.
// `options`: more of the limiter's own (ours: the tests' timeout).
async function basicExample(RateLimiter, keyPrefix, options = {}) {
  const opts = { storeClient: redis, points: 6, duration: 1, keyPrefix, ...options };
  const rateLimiter = new RateLimiter(opts);
  const outcomes = [];
  for (let i = 0; i < 4; i++) {
    await rateLimiter
      .consume('127.0.0.1', 2) // consume 2 points
      .then((rateLimiterRes) => outcomes.push(['resolved', rateLimiterRes.remainingPoints, rateLimiterRes.consumedPoints]))
      .catch((rejRes) => {
        if (rejRes instanceof Error) throw rejRes;
        const secs = Math.round(rejRes.msBeforeNext / 1000) || 1;
        outcomes.push(['rejected', rejRes.remainingPoints, secs]);
      });
  }
  return outcomes;
}

test('rate-limiter-flexible: the basic example gives the same outcomes', async () => {
  const p = prefix();
  // redis-rl's fixed window is aligned to the clock, rate-limiter-flexible's starts at the
  // first consume: the four calls of each share one window when they fit in one second.
  const ours = await withinOneWindow(1000, (i) => basicExample(RateLimiterRedis, `${p}ours${i}`, PATIENT));
  const theirs = await withinOneWindow(1000, (i) => basicExample(FlexibleRedis, `${p}theirs${i}`));
  assert.deepEqual(ours, theirs);
  assert.deepEqual(ours, [
    ['resolved', 4, 2],
    ['resolved', 2, 4],
    ['resolved', 0, 6],
    ['rejected', 0, 1],
  ]);
});

test('rate-limiter-flexible: penalty, reward, get, set, delete, block, blockDuration', async () => {
  const p = prefix();
  // A window of 10^9 s (aligned to the epoch as every fixed window): none turns during the test.
  const limiter = new RateLimiterRedis({ storeClient: redis, points: 5, duration: 1e9, keyPrefix: `${p}rl`, ...PATIENT });
  assert.equal(limiter.getKey('u'), `${p}rl:u`);
  assert.equal(await limiter.get('u'), null);
  const first = await limiter.consume('u');
  assert.ok(first instanceof RateLimiterRes);
  assert.deepEqual([first.remainingPoints, first.consumedPoints, first.isFirstInDuration], [4, 1, true]);
  assert.equal((await limiter.penalty('u', 2)).consumedPoints, 3);
  assert.equal((await limiter.reward('u', 1)).consumedPoints, 2);
  assert.equal((await limiter.get('u')).consumedPoints, 2);
  assert.equal((await limiter.set('u', 4)).consumedPoints, 4);
  assert.equal((await limiter.get('u')).remainingPoints, 1);
  assert.equal(await limiter.delete('u'), true);
  assert.equal(await limiter.get('u'), null);

  await limiter.block('v', 30);
  const blocked = await limiter.consume('v').catch((r) => r);
  assert.ok(blocked instanceof RateLimiterRes);
  assert.ok(blocked.msBeforeNext > 29_000 && blocked.msBeforeNext <= 30_000, String(blocked.msBeforeNext));
  assert.equal(await limiter.get('v'), null, 'a blocked consume takes nothing');

  const strict = new RateLimiterRedis({ storeClient: redis, points: 1, duration: 1, blockDuration: 20, keyPrefix: `${p}b`, ...PATIENT });
  // The second consume goes over only in the first's window (one second, clock-aligned).
  const [w, over] = await withinOneWindow(1000, async (i) => {
    await strict.consume(`w${i}`);
    return [`w${i}`, await strict.consume(`w${i}`).catch((r) => r)];
  });
  assert.equal(over.msBeforeNext, 20_000);
  await new Promise((r) => setTimeout(r, 1100)); // the window has passed, the block has not
  const still = await strict.consume(w).catch((r) => r);
  assert.ok(still instanceof RateLimiterRes && still.msBeforeNext > 15_000, String(still.msBeforeNext));
});

test('rate-limiter-flexible: a store that fails rejects with an Error', async () => {
  const s = await startServer();
  const c = new IORedis(s.port, '127.0.0.1', { maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
  await new Promise((r) => c.once('ready', r));
  const ended = new Promise((r) => c.once('end', r)); // no reconnection: retryStrategy
  s.stop();
  await ended;
  const limiter = new RateLimiterRedis({ storeClient: c, points: 1, duration: 1 });
  const e = await limiter.consume('k').catch((r) => r);
  assert.ok(e instanceof Error, String(e));
  c.disconnect();
});

// express-rate-limit's README usage, with the store option.
async function expressApp(store, limit) {
  const app = express();
  const limiter = rateLimit({
    windowMs: 15 * 60 * 1000, // 15 minutes
    limit, // Limit each IP to `limit` requests per window
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    store,
  });
  app.use(limiter);
  app.get('/', (_req, res) => res.send('ok'));
  const listener = await new Promise((resolve) => {
    const l = app.listen(0, '127.0.0.1', () => resolve(l));
  });
  const url = `http://127.0.0.1:${listener.address().port}/`;
  const seen = [];
  for (let i = 0; i < 4; i++) {
    const r = await fetch(url);
    seen.push([r.status, r.headers.get('ratelimit')]);
    await r.text();
  }
  listener.close();
  return seen;
}

test('express-rate-limit: the README usage with RedisRlStore answers as with rate-limit-redis', async () => {
  const p = prefix();
  const theirs = await expressApp(new RedisStore({ sendCommand: (...args) => redis.call(...args), prefix: `${p}theirs:` }), 3);
  // RedisRlStore's window is aligned to the clock's quarter hours, rate-limit-redis's starts
  // at the first hit: the four requests share one window when they fit in one quarter hour.
  const ours = await withinOneWindow(15 * 60 * 1000, (i) => expressApp(new RedisRlStore({ client: redis, prefix: `${p}ours${i}:`, ...PATIENT }), 3));
  assert.deepEqual(ours.map((s) => s[0]), [200, 200, 200, 429]);
  assert.deepEqual(ours.map((s) => s[0]), theirs.map((s) => s[0]));
  // Remaining counts in the draft-8 RateLimit header: 2, 1, 0, 0.
  assert.deepEqual(ours.map((s) => /r=(\d+)/.exec(s[1])[1]), ['2', '1', '0', '0']);
  assert.deepEqual(ours.map((s) => /r=(\d+)/.exec(s[1])[1]), theirs.map((s) => /r=(\d+)/.exec(s[1])[1]));
});

test('express-rate-limit: get, decrement and resetKey', async () => {
  const p = prefix();
  const store = new RedisRlStore({ client: redis, prefix: p, ...PATIENT });
  store.init({ windowMs: 60_000, limit: 5 });
  assert.equal(await store.get('ip'), undefined);
  assert.equal((await store.increment('ip')).totalHits, 1);
  assert.equal((await store.increment('ip')).totalHits, 2);
  await store.decrement('ip');
  assert.equal((await store.get('ip')).totalHits, 1);
  await store.resetKey('ip');
  assert.equal(await store.get('ip'), undefined);
  assert.throws(() => new RedisRlStore({ client: redis }).init({ windowMs: 1000, limit: () => 5 }), /must be a number/);
});
