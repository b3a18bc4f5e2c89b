// Real servers for the tests: $RL_SERVER (default redis-server), with the module
// ($RL_MODULE, default the workspace's target/release/libredis_rl.so) or without it (the Lua
// twin decides), or as a one-node cluster holding every slot; on loopback ports from
// scripts/ports.py (outside the ephemeral range, as every suite of the repository), stopped
// when the test process ends.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import net from 'node:net';

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = join(here, '..', '..');
export const SERVER = process.env.RL_SERVER || 'redis-server';
export const MODULE = process.env.RL_MODULE || join(ROOT, 'target', 'release', 'libredis_rl.so');

const running = new Set();
process.on('exit', () => {
  for (const s of running) s.proc.kill('SIGKILL');
});

function port(cluster) {
  const args = [join(ROOT, 'scripts', 'ports.py')];
  if (cluster) args.push('--cluster');
  return Number(execFileSync('python3', args, { encoding: 'utf8' }).trim());
}

/** One raw command over a fresh connection (RESP2), for setting servers up. */
export function raw(p, ...words) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(p, '127.0.0.1');
    let buf = '';
    sock.on('error', reject);
    sock.on('connect', () => {
      sock.write(`*${words.length}\r\n` + words.map((w) => `$${Buffer.byteLength(String(w))}\r\n${w}\r\n`).join(''));
    });
    sock.on('data', (d) => {
      buf += d.toString();
      if (buf.endsWith('\r\n')) {
        sock.end();
        resolve(buf);
      }
    });
  });
}

async function waitFor(check, what) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`server did not come up: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts a server: `{ module: false }` without the module (the twin decides),
 * `{ cluster: true }` as a one-node cluster. Returns `{ port, stop() }`.
 */
export async function startServer({ module = true, cluster = false } = {}) {
  if (module && !existsSync(MODULE)) throw new Error(`module not built: ${MODULE} (cargo build --release)`);
  const dir = mkdtempSync(join(tmpdir(), 'rl-node-'));
  const p = port(cluster);
  const args = ['--port', String(p), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir];
  if (module) args.push('--loadmodule', MODULE);
  // An announced address: a lone node otherwise lists itself with an empty host in CLUSTER
  // SLOTS, which ioredis's cluster client skips.
  if (cluster) args.push('--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-announce-ip', '127.0.0.1');
  const proc = spawn(SERVER, args, { stdio: 'ignore' });
  const server = {
    port: p,
    proc,
    url: `redis://127.0.0.1:${p}`,
    stop() {
      running.delete(server);
      proc.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
  running.add(server);
  await waitFor(async () => (await raw(p, 'PING')).startsWith('+PONG'), `${SERVER} on ${p}`);
  if (cluster) {
    await raw(p, 'CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    await waitFor(async () => (await raw(p, 'CLUSTER', 'INFO')).includes('cluster_state:ok'), 'cluster_state:ok');
  }
  return server;
}

/**
 * Limiter options for every test not about timeouts or failure modes: the library's default
 * timeout (50 ms) is a production figure that a loaded test machine exceeds (the suites run on
 * both servers at once), and a call past it is decided by the failure mode instead of by
 * Redis. Spread it into a limiter's options or pass it as a middleware's `limiterOptions`.
 */
export const PATIENT = { timeoutMs: 5_000 };

let counter = 0;
/** A key prefix of its own for each test. */
export function prefix() {
  counter += 1;
  return `t${process.pid}-${counter}:`;
}

/** Polls `read()` (bounded: 5 s) until it gives `want`; the last value read. */
export async function until(read, want) {
  const deadline = Date.now() + 5000;
  let got = await read();
  while (got !== want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    got = await read();
  }
  return got;
}

/**
 * Runs `calls(attempt)` inside one window of `windowMs` of the clock and gives its result.
 * redis-rl's fixed windows are aligned to multiples of their length since the epoch, on the
 * server's clock (CLOCK_REALTIME, the same machine's as `Date.now()`), so calls meant to share
 * a window must not straddle its turn. An attempt starts in a fresh window when the current
 * one ends within a second; one that a loaded machine stretched across a turn anyway is thrown
 * away and run again (`attempt` counts from 0: use fresh keys per attempt), at most `attempts`
 * times, so the outcome checked never depends on where the calls fell.
 */
export async function withinOneWindow(windowMs, calls, attempts = 5) {
  for (let attempt = 0; attempt < attempts; attempt++) {
    const left = windowMs - (Date.now() % windowMs);
    if (left <= 1000) await new Promise((r) => setTimeout(r, left + 5));
    const start = Date.now();
    const result = await calls(attempt);
    if (Math.floor(Date.now() / windowMs) === Math.floor(start / windowMs)) return result;
  }
  throw new Error(`every one of ${attempts} attempts straddled the turn of a ${windowMs} ms window: the machine is too loaded`);
}
