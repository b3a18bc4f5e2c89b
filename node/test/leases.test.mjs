// Leases in the Express middleware (the `hot` dimensions and `[leases]`, as rl-gateway's and
// the Python middleware's): a hot key is served from batches taken with UPTO, so it costs
// Redis fewer commands than requests; a lease's unspent units go back after its lifetime
// (the middleware's timer); a request another dimension refuses spends nothing.
// On the module and on its Lua twin.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import express from 'express';
import IORedis from 'ioredis';
import { rateLimit, Limiter, policies } from '../dist/esm/index.js';
import { startServer, prefix as newPrefix, until, PATIENT } from './harness.mjs';

const GLOBAL = policies.sliding(1000, 60_000);

let server;
let twin;
before(async () => {
  server = await startServer();
  twin = await startServer({ module: false });
});
after(() => {
  server.stop();
  twin.stop();
});

function config(prefix, lifetimeMs, more = {}) {
  return {
    key_prefix: prefix,
    dimensions: ['global'],
    global: { limit: 1000, algorithm: 'sliding' },
    hot: ['global'],
    fleet: { membership: false },
    leases: { lifetime_ms: lifetimeMs, demand_ms: 2000 },
    ...more,
  };
}

/** An Express app behind the middleware: its base URL, the middleware, its client, close(). */
async function app(port, cfg) {
  const client = new IORedis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  const middleware = rateLimit({ client, config: cfg, limiterOptions: PATIENT });
  const web = express();
  web.use(middleware);
  web.use((req, res) => res.send('hi'));
  const listener = web.listen(0, '127.0.0.1');
  await new Promise((r) => listener.once('listening', r));
  return {
    base: `http://127.0.0.1:${listener.address().port}`,
    middleware,
    client,
    async close() {
      await middleware.close();
      listener.close();
      client.disconnect();
    },
  };
}

/** The limiter's commands the server ran so far: the module's, or the twin's scripts. Any
 * case: Redis keeps a module command's name as registered (cmdstat_RL.ALL), Valkey lowercases it. */
async function limiterCalls(client) {
  const info = (await client.info('commandstats')).toLowerCase();
  let calls = 0;
  for (const line of info.split('\r\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (m && (m[1].startsWith('rl.') || m[1] === 'evalsha' || m[1] === 'eval')) calls += Number(m[2]);
  }
  return calls;
}

/** The units left of `key` (a peek of one unit reads what would be left after it). */
async function remaining(client, key) {
  return (await new Limiter(client, PATIENT).peek(key, GLOBAL)).remaining + 1;
}

async function statuses(base, n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await fetch(base + '/')).status);
  return out;
}

for (const where of ['module', 'twin']) {
  const port = () => (where === 'module' ? server : twin).port;

  test(`a hot key served from a lease costs fewer limiter commands than requests (${where})`, async () => {
    const prefix = newPrefix().slice(0, -1);
    // The second batch is sized from the demand measured since the first take: one request
    // over the time between the two, which a loaded machine stretches. Ten minutes of demand
    // make any measure of at least a request a second ask for the largest lease (10% of 1000:
    // 100 units), so the batches no longer depend on how fast the requests came.
    const web = await app(port(), config(prefix, 60_000, { leases: { lifetime_ms: 60_000, demand_ms: 600_000 } }));
    try {
      assert.equal((await fetch(web.base + '/')).status, 200); // the first take (and the twin's loading)
      const before = await limiterCalls(web.client);
      assert.ok(before > 0, 'the first take is counted');
      assert.deepEqual(await statuses(web.base, 40), Array(40).fill(200));
      const sent = (await limiterCalls(web.client)) - before;
      const stats = web.middleware.driver.limiter.leaseStats;
      const counts = JSON.stringify({ sent, ...stats });
      assert.ok(sent < 5, `${sent} limiter commands for 40 requests: ${counts}`);
      // Every command after the first take was a take, and every request that took nothing
      // was served from a lease: nothing went to Redis the ordinary way.
      assert.equal(sent, stats.takes - 1, counts);
      assert.equal(stats.hits, 41 - stats.takes, counts);
      // Redis counted the units when the batches were taken: more than the 41 requests served
      // (a batch of 100 in at most 5 takes), exactly what the leases were granted.
      assert.ok(stats.granted > 41, counts);
      assert.equal(await remaining(web.client, `${prefix}:{global}`), 1000 - stats.granted, counts);
    } finally {
      await web.close();
    }
  });

  test(`a lease's unspent units are given back after its lifetime (${where})`, async () => {
    const prefix = newPrefix().slice(0, -1);
    const web = await app(port(), config(prefix, 200));
    try {
      assert.deepEqual(await statuses(web.base, 10), Array(10).fill(200));
      // The middleware's timer ends the lease and refunds what was not spent.
      assert.equal(await until(() => remaining(web.client, `${prefix}:{global}`), 990), 990, 'only the 10 requests served stay counted');
      const stats = web.middleware.driver.limiter.leaseStats;
      assert.ok(stats.hits > 0 && stats.refunded > 0 && stats.dropped === 0, JSON.stringify(stats));
    } finally {
      await web.close();
    }
  });

  test(`a request another dimension refuses spends nothing of the lease (${where})`, async () => {
    const prefix = newPrefix().slice(0, -1);
    const web = await app(port(), config(prefix, 200, { dimensions: ['ip', 'global'], ip: { limit: 3, algorithm: 'sliding' } }));
    try {
      assert.deepEqual(await statuses(web.base, 8), [200, 200, 200, 429, 429, 429, 429, 429]);
      assert.equal(await until(() => remaining(web.client, `${prefix}:{global}`), 997), 997, 'all or nothing: the refused requests took nothing');
      assert.ok(web.middleware.driver.limiter.leaseStats.takes > 0, 'the global key was served from a lease');
    } finally {
      await web.close();
    }
  });
}

for (const where of ['module', 'twin']) {
  test(`Limiter.checkAll serves a hot policy's key from a lease, all or nothing with the others (${where})`, async () => {
    const port = (where === 'module' ? server : twin).port;
    const prefix = newPrefix();
    const client = new IORedis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
    const limiter = new Limiter(client, { ...PATIENT, leases: { lifetimeMs: 60_000, demandMs: 2000 } });
    const hot = GLOBAL.withHot(true);
    const user = policies.sliding(3, 60_000);
    try {
      assert.equal(hot.hot, true);
      const allowed = [];
      for (let i = 0; i < 5; i++) {
        allowed.push((await limiter.checkAll([[`${prefix}g`, hot], [`${prefix}u`, user]])).allowed);
      }
      assert.deepEqual(allowed, [true, true, true, false, false]);
      const stats = limiter.leaseStats;
      assert.ok(stats.takes >= 1 && stats.hits >= 2, JSON.stringify(stats));
      await limiter.releaseLeases();
      assert.equal(await remaining(client, `${prefix}g`), 997, 'the refused calls took nothing; the lease went back');
    } finally {
      client.disconnect();
    }
  });
}
