// `make bench-node`: Express 5 apps (bench/express-app.mjs) on one server ($RL_SERVER, the
// module loaded): redis-rl's middleware (with its default headers, and with the draft's two
// alone: `legacy_headers = false`, as the express-rate-limit app), express-rate-limit + rate-limit-redis,
// rate-limiter-flexible's RateLimiterRedis, the raw command by hand with ioredis.call (the
// floor of any Node package), the same raw command plus the middleware's response headers set
// by hand (a second reference: how much of the gap is the headers) and Express alone; one
// limit and four. Each round runs wrk against every app in turn (rounds interleaved, so the
// machine's drift reaches every app alike; each round starts one app further on) and reads
// requests/s and p99 from wrk, the Redis command time per request from INFO commandstats
// deltas, and the app's CPU time per request from its process.cpuUsage(). Prints the medians
// of the rounds as a markdown table, with each app's requests/s against the raw app's of the
// same round (the median of those ratios).
//
// VARIANTS=...,redis-rl-other OTHER_DIST=<dist/esm/index.js of another build> [OTHER_LABEL=...]
// adds that build's middleware, to compare two builds in the same rounds.
//
// Bounded: ROUNDS rounds (default 5) of ROUND_SECONDS (default 4) per app, 32 connections, one wrk
// thread; loopback only. The server and the apps share CPU 0, wrk runs on CPU 1 (taskset),
// as measured before the package existed.
import { fork, execFileSync, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import IORedis from 'ioredis';
import { startServer } from '../test/harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const ROUNDS = Math.min(Number(process.env.ROUNDS || 5), 20);
const SECONDS = Math.min(Number(process.env.ROUND_SECONDS || 4), 30);
const CONNECTIONS = 32;
const VARIANTS = (process.env.VARIANTS || 'redis-rl,redis-rl-draft,express-rate-limit,rate-limiter-flexible,raw,raw-headers,express').split(',');
const LIMITS = (process.env.LIMITS || '1,4').split(',');
const LABELS = { 'redis-rl-draft': 'redis-rl, legacy_headers = false', 'raw-headers': 'raw + the same headers by hand (reference)', 'redis-rl-other': `redis-rl (${process.env.OTHER_LABEL ?? process.env.OTHER_DIST})` };

function pin(pid, cpu) {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', String(cpu), String(pid)], { stdio: 'ignore' });
  } catch {
    // no taskset, or one core: unpinned
  }
}

const server = await startServer();
pin(server.proc.pid, 0);
const info = new IORedis(server.port, '127.0.0.1');
const serverInfo = await info.info('server');
const version = (serverInfo.match(/valkey_version:(\S+)/) ?? serverInfo.match(/redis_version:(\S+)/))?.[1];
const flavour = serverInfo.includes('valkey_version') ? 'Valkey' : 'Redis';

function startApp(variant, limits) {
  const child = fork(join(here, 'express-app.mjs'), [variant, limits, String(server.port)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  pin(child.pid, 0);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${variant}: no port within 10 s`)), 10_000);
    child.once('message', (m) => {
      clearTimeout(timer);
      resolve({ variant, limits, child, port: m.port });
    });
    child.once('exit', (code) => reject(new Error(`${variant} exited (${code})`)));
  });
}

function cpuOf(app) {
  return new Promise((resolve) => {
    app.child.once('message', (m) => resolve(m.cpu.user + m.cpu.system));
    app.child.send('cpu');
  });
}

/** Redis's command time in microseconds so far, INFO itself left out. */
async function commandUsec() {
  const text = await info.info('commandstats');
  let usec = 0;
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=\d+,usec=(\d+)/gm)) if (m[1] !== 'info') usec += Number(m[2]);
  return usec;
}

function wrk(port, seconds) {
  return new Promise((resolve, reject) => {
    const args = ['-c', '1', 'wrk', '-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--timeout', '2s', '--latency', `http://127.0.0.1:${port}/`];
    const p = spawn('taskset', args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('error', reject);
    p.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`wrk exited ${code}: ${out}`));
      const requests = Number(out.match(/(\d+) requests in/)?.[1]);
      const rps = Number(out.match(/Requests\/sec:\s+([\d.]+)/)?.[1]);
      const p99 = out.match(/^\s+99%\s+([\d.]+)(us|ms|s)/m);
      const scale = { us: 0.001, ms: 1, s: 1000 };
      const non2xx = Number(out.match(/Non-2xx or 3xx responses: (\d+)/)?.[1] ?? 0);
      const errors = out.match(/Socket errors: (.*)/)?.[1];
      resolve({ requests, rps, p99Ms: p99 ? Number(p99[1]) * scale[p99[2]] : NaN, non2xx, errors });
    });
  });
}

async function measure(app, seconds) {
  const usec0 = await commandUsec();
  const cpu0 = await cpuOf(app);
  const w = await wrk(app.port, seconds);
  const cpu1 = await cpuOf(app);
  const usec1 = await commandUsec();
  if (w.non2xx > 0 || w.errors) throw new Error(`${app.variant}: ${w.non2xx} non-2xx, errors ${w.errors}`);
  return { rps: w.rps, p99Ms: w.p99Ms, redisUs: (usec1 - usec0) / w.requests, cpuUs: (cpu1 - cpu0) / w.requests };
}

const apps = [];
try {
  for (const limits of LIMITS) for (const variant of VARIANTS) apps.push(await startApp(variant, limits));
  for (const app of apps) await measure(app, 1); // warm up (JIT, connections)
  const results = new Map(apps.map((a) => [a, []]));
  for (let r = 0; r < ROUNDS; r++) {
    // Each round starts one app further on: no app always runs first, or right after the same one.
    for (let i = 0; i < apps.length; i++) {
      const app = apps[(r + i) % apps.length];
      results.get(app).push(await measure(app, SECONDS));
    }
    process.stderr.write(`round ${r + 1}/${ROUNDS} done\n`);
  }
  const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`${flavour} ${version}, module loaded; wrk -t1 -c${CONNECTIONS}, ${ROUNDS} rounds of ${SECONDS} s per app, interleaved; medians.\n`);
  for (const limits of LIMITS) {
    console.log(`${limits === '1' ? 'One limit' : 'Four limits'}:\n`);
    // Against the raw app of the same round (the goal's floor), the median of the rounds'
    // ratios: a drift of the machine across a run reaches both sides of each ratio alike.
    const raw = apps.find((a) => a.limits === limits && a.variant === 'raw');
    console.log('| app | requests/s | vs raw, same round (median) | p99 (ms) | Redis command time per request (us) | Node CPU per request (us) |');
    console.log('|---|---:|---:|---:|---:|---:|');
    for (const app of apps.filter((a) => a.limits === limits)) {
      const rs = results.get(app);
      const m = (f) => median(rs.map(f));
      const vsRaw = raw === undefined ? '' : `${(100 * (median(rs.map((x, r) => x.rps / results.get(raw)[r].rps)) - 1)).toFixed(1)}%`;
      console.log(`| ${LABELS[app.variant] ?? app.variant} | ${Math.round(m((x) => x.rps))} | ${vsRaw} | ${m((x) => x.p99Ms).toFixed(2)} | ${m((x) => x.redisUs).toFixed(1)} | ${m((x) => x.cpuUs).toFixed(1)} |`);
    }
    console.log('');
  }
} finally {
  for (const app of apps) app.child.kill('SIGKILL');
  info.disconnect();
  server.stop();
}
