// One Express 5 app of `bench/express.mjs`, in a process of its own so that its CPU time is
// its own: `node bench/express-app.mjs <variant> <limits: 1|4> <redis port>` (forked with an
// IPC channel). Every variant limits each request per client address with the same windows
// (one: 1e9 per minute; four: 1e9 per second, minute, hour and day: never refused, so every
// request costs the limiter's full path and the app's answer), on the same Redis through
// ioredis. Listens on an ephemeral loopback port and sends it to the parent; answers
// `cpu` messages with its process.cpuUsage().
import { randomUUID } from 'node:crypto';
import express from 'express';
import IORedis from 'ioredis';
import { rateLimit as expressRateLimit } from 'express-rate-limit';
import { RedisStore } from 'rate-limit-redis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import * as ours from '../dist/esm/index.js';

const [variant, limitsArg, redisPort] = process.argv.slice(2);
const four = limitsArg === '4';
const LIMIT = 1_000_000_000;
// The windows, in seconds.
const WINDOWS = four ? [1, 60, 3600, 86400] : [60];
const NAMES = { 1: 'second', 60: 'minute', 3600: 'hour', 86400: 'day' };

const redis = new IORedis(Number(redisPort), '127.0.0.1');
const app = express();
app.set('trust proxy', false);

function peer(req) {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

if (variant === 'redis-rl' || variant === 'redis-rl-other' || variant === 'redis-rl-draft') {
  // redis-rl-other: another build of the package (OTHER_DIST: its dist/esm/index.js), to
  // compare two builds in one run. redis-rl-draft: the draft's two headers alone
  // (`legacy_headers = false`), as the express-rate-limit app here sends.
  const { rateLimit } = variant === 'redis-rl-other' ? await import(process.env.OTHER_DIST) : ours;
  const rule = { name: 'bench', key: ['ip'], algorithm: 'sliding' };
  if (four) rule.limits = WINDOWS.map((s) => `${LIMIT}/${NAMES[s]}`);
  else Object.assign(rule, { limit: LIMIT, window_ms: WINDOWS[0] * 1000 });
  const config = { key_prefix: 'rl', dimensions: [], hot: [], fleet: { membership: false }, rules: [rule] };
  if (variant === 'redis-rl-draft') config.legacy_headers = false;
  app.use(rateLimit({ client: redis, config }));
} else if (variant === 'express-rate-limit') {
  // One middleware per window (express-rate-limit takes one window), each with its store.
  for (const s of WINDOWS) {
    app.use(
      expressRateLimit({
        windowMs: s * 1000,
        limit: LIMIT,
        standardHeaders: 'draft-8',
        legacyHeaders: false,
        store: new RedisStore({ sendCommand: (...args) => redis.call(...args), prefix: `erl:${s}:` }),
      }),
    );
  }
} else if (variant === 'rate-limiter-flexible') {
  const limiters = WINDOWS.map((s) => new RateLimiterRedis({ storeClient: redis, points: LIMIT, duration: s, keyPrefix: `rlf:${s}` }));
  app.use((req, res, next) => {
    const key = peer(req);
    Promise.all(limiters.map((l) => l.consume(key)))
      .then(() => next())
      .catch(() => res.status(429).end());
  });
} else if (variant === 'raw') {
  // The floor: the module's command sent by hand, its first field read.
  const args = [String(LIMIT), String(WINDOWS[0] * 1000)];
  const all = WINDOWS.flatMap((s) => ['SLIDING', String(LIMIT), String(s * 1000)]);
  app.use((req, res, next) => {
    const ip = peer(req);
    const sent = four
      ? redis.call('RL.ALL', '4', ...WINDOWS.map((s) => `raw:{ip:${ip}}:${s}`), ...all)
      : redis.call('RL.SLIDING', `raw:{ip:${ip}}`, ...args);
    sent.then(
      (r) => (r[0] === 1 ? next() : res.status(429).end()),
      () => res.status(503).end(),
    );
  });
} else if (variant === 'raw-headers') {
  // A second reference, not the goal's floor: the raw command plus the response headers the
  // middleware sends, set by hand from the reply (the draft-11 pair, the X-RateLimit-* three,
  // a request id), to show how much of the gap is the headers themselves.
  const args = [String(LIMIT), String(WINDOWS[0] * 1000)];
  const all = WINDOWS.flatMap((s) => ['SLIDING', String(LIMIT), String(s * 1000)]);
  const names = four ? WINDOWS.map((s) => `bench-${{ 1: '1s', 60: '1m', 3600: '1h', 86400: '1d' }[s]}`) : ['bench'];
  const policy = WINDOWS.map((s, i) => `"${names[i]}";q=${LIMIT};w=${s}`).join(', ');
  const last = names.length - 1;
  app.use((req, res, next) => {
    const ip = peer(req);
    const sent = four
      ? redis.call('RL.ALL', '4', ...WINDOWS.map((s) => `raw:{ip:${ip}}:${s}`), ...all)
      : redis.call('RL.SLIDING', `raw:{ip:${ip}}`, ...args);
    sent.then(
      (r) => {
        if (r[0] !== 1) return res.status(429).end();
        // The window that runs out last: [limit, remaining, retry, reset] (RL.ALL) or its fields.
        const [limit, remaining, , resetMs] = four ? r[2][last] : r.slice(1);
        const reset = String(Math.ceil(resetMs / 1000));
        res.setHeader('ratelimit-policy', policy);
        res.setHeader('x-ratelimit-limit', String(limit));
        res.setHeader('x-ratelimit-remaining', String(remaining));
        res.setHeader('x-ratelimit-reset', reset);
        res.setHeader('ratelimit', `"${names[last]}";r=${remaining};t=${reset}`);
        res.setHeader('x-request-id', randomUUID());
        next();
      },
      () => res.status(503).end(),
    );
  });
} else if (variant !== 'express') {
  throw new Error(`unknown variant ${variant}`);
}

app.get('/', (req, res) => res.send('ok'));

const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
process.on('message', (m) => {
  if (m === 'cpu') process.send({ cpu: process.cpuUsage() });
  if (m === 'stop') {
    server.close();
    redis.disconnect();
    process.exit(0);
  }
});
process.on('disconnect', () => process.exit(0));
