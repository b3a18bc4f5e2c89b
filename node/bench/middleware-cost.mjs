// The middleware's own cost per request, without Redis and without HTTP: the Express
// middleware over stand-ins for Express's request and response, and the flow's driver
// (`decide`, what Hono and custom adapters call), each running a request through its steps
// over a client that answers every command at once with the reply the module gives; next to
// them, what an app sending the raw command by hand does (the words, the call, the reply's
// first field).
// CPU time per request, best of the rounds, WAVE requests in flight at once. `node
// bench/middleware-cost.mjs` (bounded: ROUNDS rounds of N requests); `node --cpu-prof
// bench/middleware-cost.mjs` shows where it goes.
import { rateLimit } from '../dist/esm/index.js';

const N = Number(process.env.N || 20_000);
const ROUNDS = Math.min(Number(process.env.ROUNDS || 5), 20);
const LIMIT = 1_000_000_000;

// What the module answers: RL.SLIDING (one limit) and RL.ALL (four).
const single = [1, LIMIT, LIMIT - 1, 0, 60_000];
const all = (n) => [1, 0, Array.from({ length: n }, () => [LIMIT, LIMIT - 1, 0, 60_000])];
const client = {
  call: (...words) => Promise.resolve(words[0] === 'RL.ALL' ? all(Number(words[1])) : single),
};

function middlewareOf(limits) {
  const rule = { name: 'bench', key: ['ip'], algorithm: 'sliding' };
  if (limits === 4) rule.limits = ['second', 'minute', 'hour', 'day'].map((w) => `${LIMIT}/${w}`);
  else Object.assign(rule, { limit: LIMIT, window_ms: 60_000 });
  const config = { key_prefix: 'rl', dimensions: [], hot: [], fleet: { membership: false }, rules: [rule] };
  return rateLimit({ client, config });
}

const headers = [
  ['Host', '127.0.0.1:8080'],
  ['User-Agent', 'wrk'],
  ['Accept', '*/*'],
];

function driver(limits) {
  const driver = middlewareOf(limits).driver;
  return async () => {
    const v = await driver.decide({ method: 'GET', path: '/', headers, peer: '127.0.0.1' });
    if (v.kind !== 'forward') throw new Error(`refused: ${v.status}`);
  };
}

/** The Express handler itself, over stand-ins for Express's request and response (what
 * `app.use(rateLimit(...))` runs per request, headers set included). */
function express(limits) {
  const handler = middlewareOf(limits);
  const rawHeaders = headers.flat();
  return () =>
    new Promise((resolve, reject) => {
      const req = { method: 'GET', originalUrl: '/', url: '/', rawHeaders, headers: {}, socket: { remoteAddress: '::ffff:127.0.0.1' } };
      const set = {};
      const res = {
        statusCode: 200,
        setHeader: (name, value) => void (set[name] = value),
        getHeaders: () => set,
        end: () => reject(new Error(`refused: ${res.statusCode}`)),
        on: () => undefined,
      };
      handler(req, res, (error) => (error ? reject(error) : resolve()));
    });
}

function raw(limits) {
  const args = [String(LIMIT), '60000'];
  const spec = ['SLIDING', String(LIMIT), '60000'];
  return async () => {
    const ip = '127.0.0.1';
    const r =
      limits === 4
        ? await client.call('RL.ALL', '4', `raw:{ip:${ip}}:1`, `raw:{ip:${ip}}:2`, `raw:{ip:${ip}}:3`, `raw:{ip:${ip}}:4`, ...spec, ...spec, ...spec, ...spec)
        : await client.call('RL.SLIDING', `raw:{ip:${ip}}`, ...args);
    if (r[0] !== 1) throw new Error('refused');
  };
}

// Requests in flight at once, as wrk's 32 connections: the middleware begins the requests
// of one turn of the event loop together and feeds the replies that come together in one
// call (WAVE=1: one request at a time, nothing to batch).
const WAVE = Math.max(1, Math.min(Number(process.env.WAVE || 32), 1000));

async function wave(f) {
  const inFlight = [];
  for (let j = 0; j < WAVE; j++) inFlight.push(f());
  await Promise.all(inFlight);
}

async function measure(f) {
  for (let i = 0; i < N / 10; i += WAVE) await wave(f); // warm up
  let best = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const c0 = process.cpuUsage();
    let n = 0;
    for (; n < N; n += WAVE) await wave(f);
    const c = process.cpuUsage(c0);
    best = Math.min(best, (c.user + c.system) / n);
  }
  return best;
}

console.log('| path | us of CPU per request |');
console.log('|---|---:|');
for (const limits of [1, 4]) {
  const what = limits === 1 ? 'one limit' : 'four limits';
  console.log(`| raw command, ${what} | ${(await measure(raw(limits))).toFixed(2)} |`);
  console.log(`| the Express middleware (stand-in request and response), ${what} | ${(await measure(express(limits))).toFixed(2)} |`);
  console.log(`| the flow's driver (\`decide\`, as Hono and custom adapters), ${what} | ${(await measure(driver(limits))).toFixed(2)} |`);
}
