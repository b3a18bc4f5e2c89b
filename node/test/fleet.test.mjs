// Fleet membership (`[fleet]`) in Node: limiters naming one fleet key count each other (an
// RL.CONCURRENCY lease each, renewed by `heartbeat()`), the Express middleware joins the
// fleet its configuration names from its own timer and leaves it on `close()`, and while Redis
// is unreachable the local fallback admits each limit divided by the live fleet size.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import express from 'express';
import IORedis from 'ioredis';
import Fastify from 'fastify';
import { rateLimit, fastifyRateLimit, Limiter } from '../dist/esm/index.js';
import { startServer, prefix as newPrefix, until, PATIENT } from './harness.mjs';

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

/** A limiter on its own client, a member of `key`'s fleet. */
function member(port, key) {
  const client = new IORedis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  return new Limiter(client, { fleet: { key, heartbeatMs: 100, ttlMs: 2000 }, ...PATIENT, breakerFailures: 1, breakerOpenMs: 60_000 });
}

/** An Express app behind the middleware with `[fleet]` membership on: its base URL, the
 * middleware, and how to close them. */
async function app(port, prefix, extra = {}) {
  const client = new IORedis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  const config = {
    key_prefix: prefix,
    hot: [],
    dimensions: ['ip'],
    failure_mode: 'local',
    fleet: { membership: true, heartbeat_ms: 100, ttl_ms: 2000 },
    ip: { limit: 10, window_ms: 3_600_000, algorithm: 'fixed' },
    ...extra,
  };
  const middleware = rateLimit({ client, config, limiterOptions: { ...PATIENT, breakerFailures: 1, breakerOpenMs: 60_000 } });
  const web = express();
  web.use(middleware);
  web.use((req, res) => res.json({ ok: true }));
  const listener = web.listen(0, '127.0.0.1');
  await new Promise((r) => listener.once('listening', r));
  return {
    base: `http://127.0.0.1:${listener.address().port}`,
    middleware,
    async close() {
      await middleware.close();
      listener.close();
      client.disconnect();
    },
  };
}

for (const where of ['module', 'twin']) {
  test(`two limiters on one fleet key count each other; one that leaves is no longer counted (${where})`, async () => {
    const port = where === 'module' ? server.port : twin.port;
    const key = `${newPrefix()}{fleet}`;
    const a = member(port, key);
    const b = member(port, key);
    try {
      assert.equal(a.fleetSize, null, 'unknown before a heartbeat');
      assert.equal(await until(async () => `${await a.heartbeat()} ${await b.heartbeat()}`, '2 2'), '2 2');
      assert.equal(a.route, where === 'module' ? 'module' : 'lua');
      await b.leaveFleet();
      assert.equal(await until(() => a.heartbeat(), 1), 1);
    } finally {
      a.client.disconnect();
      b.client.disconnect();
    }
  });
}

test('the Express middleware joins the fleet its [fleet] names, off the requests, and leaves it on close', async () => {
  const prefix = newPrefix().slice(0, -1);
  const web = await app(server.port, prefix);
  const other = member(server.port, `${prefix}:{fleet}`);
  try {
    assert.equal(web.middleware.driver.limiter.fleet.key, `${prefix}:{fleet}`);
    assert.equal(web.middleware.driver.limiter.fleet.divides, true, 'no static instances: it divides');
    // The first request starts the middleware's timer; it renews the membership on its own.
    assert.equal((await fetch(web.base + '/')).status, 200);
    assert.equal(await until(() => other.heartbeat(), 2), 2);
    assert.equal(await until(() => web.middleware.driver.limiter.fleetSize, 2), 2);
    await web.middleware.close();
    assert.equal(await until(() => other.heartbeat(), 1), 1, 'a closed middleware left the fleet');
  } finally {
    await web.close();
    other.client.disconnect();
  }
});

test('the Fastify plugin joins the fleet and leaves it on app.close()', async () => {
  const prefix = newPrefix().slice(0, -1);
  const client = new IORedis(server.port, '127.0.0.1');
  const web = Fastify();
  const other = member(server.port, `${prefix}:{fleet}`);
  try {
    const config = { key_prefix: prefix, hot: [], dimensions: ['ip'], fleet: { membership: true, heartbeat_ms: 100, ttl_ms: 2000 } };
    await web.register(fastifyRateLimit, { client, config, limiterOptions: PATIENT });
    web.get('/', () => 'ok');
    await web.ready();
    assert.equal((await web.inject({ method: 'GET', url: '/' })).statusCode, 200);
    assert.equal(await until(() => other.heartbeat(), 2), 2);
    await web.close();
    assert.equal(await until(() => other.heartbeat(), 1), 1, 'a closed app left the fleet');
  } finally {
    await web.close();
    client.disconnect();
    other.client.disconnect();
  }
});

test('a static instances is not replaced by the live fleet size', async () => {
  const prefix = newPrefix().slice(0, -1);
  const web = await app(server.port, prefix, { instances: 4 });
  try {
    assert.equal(web.middleware.driver.limiter.fleet.divides, false);
  } finally {
    await web.close();
  }
});

test('with Redis unreachable the middleware admits each limit divided by the live fleet size', async () => {
  const own = await startServer();
  const prefix = newPrefix().slice(0, -1);
  const web = await app(own.port, prefix);
  const other = member(own.port, `${prefix}:{fleet}`);
  try {
    assert.equal((await fetch(web.base + '/')).status, 200);
    assert.equal(await until(() => other.heartbeat(), 2), 2);
    assert.equal(await until(() => web.middleware.driver.limiter.fleetSize, 2), 2);
    own.stop();
    const statuses = [];
    for (let i = 0; i < 12; i++) statuses.push((await fetch(web.base + '/')).status);
    assert.equal(statuses.filter((s) => s === 200).length, 5, `10 shared by 2 live members: ${statuses}`);
    assert.equal(web.middleware.driver.limiter.breakerState, 'open', 'decided by the local fallback');
    assert.equal(web.middleware.driver.limiter.fleetSize, 2, 'failed heartbeats keep the last size');
  } finally {
    await web.close();
    other.client.disconnect();
    own.stop();
  }
});
