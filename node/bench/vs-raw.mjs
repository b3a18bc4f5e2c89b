// The package against the floor, through ioredis on one server with the module: each round
// sends N requests, 32 in flight, as (a) the raw command by hand (`redis.call('RL.SLIDING',
// ...)`, reading the reply's fields), (b) `limiter.check`, (c) four limits by hand in one
// `RL.ALL`, (d) `limiter.checkAll` of the same four; rounds interleaved. Prints requests/s
// and Node's CPU time per request (user + system) per variant: the median of the rounds.
// Bounded: ROUNDS x N requests per variant. `node bench/vs-raw.mjs` (RL_SERVER picks the server).
import IORedis from 'ioredis';
import { Limiter, policies } from '../dist/esm/index.js';
import { startServer } from '../test/harness.mjs';

const N = Number(process.env.N || 20_000);
const ROUNDS = Number(process.env.ROUNDS || 5);
const server = await startServer();
const redis = new IORedis(server.port, '127.0.0.1');
// No timeout: on a loaded machine a reply later than the default 50 ms would be decided by
// the failure mode, which is not what is measured here.
const limiter = new Limiter(redis, { denyCache: 0, timeoutMs: 0 });
const big = policies.sliding(1_000_000_000, 60_000);
const args = big.args;
const keys = (i) => [0, 1, 2, 3].map((k) => `b:${k}:${i & 4095}`);

const variants = {
  'raw RL.SLIDING (ioredis.call)': async (i) => {
    const r = await redis.call('RL.SLIDING', `b:${i & 4095}`, ...args);
    return r[0] === 1;
  },
  'limiter.check': async (i) => (await limiter.check(`b:${i & 4095}`, big)).allowed,
  'raw RL.ALL of four (ioredis.call)': async (i) => {
    const ks = keys(i);
    const r = await redis.call('RL.ALL', '4', ...ks, 'SLIDING', ...args, 'SLIDING', ...args, 'SLIDING', ...args, 'SLIDING', ...args);
    return r[0] === 1;
  },
  'limiter.checkAll of four': async (i) => (await limiter.checkAll(keys(i).map((k) => [k, big]))).allowed,
};

async function round(f) {
  let next = 0;
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < N) {
        const i = next++;
        if (!(await f(i))) throw new Error('denied');
      }
    }),
  );
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  return { rps: N / s, cpuUs: (c.user + c.system) / N };
}

const results = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
for (const f of Object.values(variants)) await round(f); // warm up
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, f] of Object.entries(variants)) results[name].push(await round(f));
}
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`| variant | requests/s | Node CPU per request (us) |`);
console.log(`|---|---:|---:|`);
for (const [name, rs] of Object.entries(results)) {
  console.log(`| ${name} | ${Math.round(median(rs.map((x) => x.rps)))} | ${median(rs.map((x) => x.cpuUs)).toFixed(1)} |`);
}
redis.disconnect();
server.stop();
