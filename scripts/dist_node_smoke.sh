#!/usr/bin/env bash
# make test-dist-node: the npm tarball as a user gets it. Installs dist/redis-rl-<version>.tgz
# (and ioredis) with `npm install` into an empty project on a PATH without cargo or rustc,
# then checks it from ESM and from CommonJS against redis-server with the module: the
# prebuilt addon loads, the module decides, a limit denies. With RL_PORT, against the server
# listening there (scripts/dist_smoke.sh passes the one it installed from the tarball);
# without, against a redis-server it starts with RL_MODULE (default: make build's module).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIST=${DIST:-$root/dist}
SERVER=${RL_SERVER:-redis-server}
MODULE=${RL_MODULE:-$root/target/release/libredis_rl.so}
work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

tarball=$(ls "$DIST"/redis-rl-*.tgz | tail -1)
port=${RL_PORT:-}
if [ -z "$port" ]; then
  port=$(python3 "$root/scripts/ports.py")
  "$SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --loadmodule "$MODULE" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
fi

# The system's tools and node's own directory only: no ~/.cargo/bin.
node_dir=$(dirname "$(command -v node)")
clean_path=$node_dir:/usr/bin:/bin
if env PATH=$clean_path sh -c 'command -v cargo || command -v rustc' >/dev/null; then
  echo "cargo is on node's PATH ($node_dir): cannot check an install without Rust" >&2
  exit 1
fi
cd "$work"
env PATH=$clean_path npm init -y >/dev/null
env PATH=$clean_path npm install --no-audit --no-fund --loglevel=error "$tarball" ioredis
cat > check.mjs <<'JS'
import Redis from 'ioredis';
import { Limiter, policies } from 'redis-rl';
const redis = new Redis(Number(process.argv[2]), '127.0.0.1');
const limiter = new Limiter(redis, { engine: 'module' });
const two = policies.sliding(2, 60_000);
const seen = [];
for (let i = 0; i < 3; i++) seen.push((await limiter.check('dist:esm', two)).allowed);
redis.disconnect();
if (JSON.stringify(seen) !== '[true,true,false]') throw new Error('unexpected decisions ' + seen);
console.log('redis-rl from the tarball (ESM): module decisions', seen.join(' '));
JS
cat > check.cjs <<'JS'
const Redis = require('ioredis');
const { Limiter, policies } = require('redis-rl');
(async () => {
  const redis = new Redis(Number(process.argv[2]), '127.0.0.1');
  const d = await new Limiter(redis, { engine: 'module' }).check('dist:cjs', policies.fixed(1, 60_000));
  redis.disconnect();
  if (!d.allowed || d.source !== 'redis' || d.limit !== 1) throw new Error('unexpected decision ' + JSON.stringify(d));
  console.log('redis-rl from the tarball (CommonJS): allowed by', d.source);
})().catch((e) => { console.error(e); process.exit(1); });
JS
env PATH=$clean_path node check.mjs "$port"
env PATH=$clean_path node check.cjs "$port"
