#!/usr/bin/env bash
# make test-dist: the artifacts of dist/ as a user gets them.
# - SHA256SUMS matches.
# - Each artifact carries LICENSE and THIRD-PARTY-NOTICES.md as they are in the tree: both
#   tarballs, the wheel (its .dist-info/licenses) and the npm package.
# - No binary (the module, rl-gateway, the wheel's extension, the npm package's addon) needs a
#   glibc symbol version newer than 2.17 (objdump -T), so they load on RHEL 7/8, Amazon Linux 2,
#   Debian 11, Ubuntu 20.04.
# - The module tarball's install.sh into a fresh PREFIX (with a space in it), then redis-server
#   on PREFIX/etc/redis.conf started from another directory loads the module; INFO rl reports
#   the tarball's version and commit. rl-gateway --version reports them too.
# - rl-gateway from its tarball, with the tarball's gateway.toml, in front of that server: one
#   request through it is decided by the module, then it stops on SIGTERM.
# - The wheel installs into a fresh virtual environment with no cargo or rustc on PATH, and
#   scripts/dist_smoke.py runs against the installed server; meanwhile the npm package installs
#   into an empty project and is checked against the same server (scripts/dist_node_smoke.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIST=${DIST:-$root/dist}
SERVER=${RL_SERVER:-redis-server}
GLIBC_MAX=2.17
work=$(mktemp -d)
server_pid=
gateway_pid=
cleanup() {
  [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "dist smoke: $*" >&2; exit 1; }

(cd "$DIST" && sha256sum --quiet -c SHA256SUMS)
mkdir "$work/module" "$work/gateway" "$work/wheel" "$work/npm"
tar -C "$work/module" -xzf "$DIST"/libredis_rl-*-linux-x86_64.tar.gz
moddir=$(echo "$work"/module/libredis_rl-*)
read -r version _ commit < "$moddir/VERSION"
commit=${commit%)}

# The newest glibc symbol version an ELF file needs.
glibc_needed() { objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -V | tail -1; }
check_glibc() {
  local needed
  needed=$(glibc_needed "$1")
  [ -n "$needed" ] || fail "$2: no glibc symbol versions found (objdump -T $1)"
  [ "$(printf '%s\n%s\n' "$needed" "$GLIBC_MAX" | sort -V | tail -1)" = "$GLIBC_MAX" ] ||
    fail "$2 needs glibc $needed, newer than $GLIBC_MAX: $(objdump -T "$1" | grep -o "GLIBC_$needed.*" | head -3 | tr '\n' ' ')"
  echo "dist smoke: $2 needs glibc $needed at most (limit $GLIBC_MAX)"
}
# LICENSE and THIRD-PARTY-NOTICES.md of the tree, found under DIR in ARTIFACT.
check_licenses() {
  local f found
  for f in LICENSE THIRD-PARTY-NOTICES.md; do
    found=$(find "$1" -name "$f" -type f | head -1)
    [ -n "$found" ] || fail "$2 carries no $f"
    cmp -s "$found" "$root/$f" || fail "$2's $f differs from the tree's"
  done
  echo "dist smoke: $2 carries LICENSE and THIRD-PARTY-NOTICES.md"
}
check_glibc "$moddir/libredis_rl.so" "libredis_rl.so"
check_licenses "$moddir" "the module tarball"
tar -C "$work/gateway" -xzf "$DIST"/rl-gateway-*-linux-x86_64.tar.gz
gwdir=$(echo "$work"/gateway/rl-gateway-*)
gateway=$gwdir/rl-gateway
check_glibc "$gateway" "rl-gateway"
check_licenses "$gwdir" "the rl-gateway tarball"
got=$("$gateway" --version)
[ "$got" = "rl-gateway $version (commit $commit)" ] || fail "rl-gateway --version says '$got', not $version (commit $commit)"
echo "dist smoke: $got"
wheel=$(echo "$DIST"/redis_rl-*.whl)
case $wheel in *manylinux2014_x86_64*) ;; *) fail "the wheel is not tagged manylinux2014: $wheel" ;; esac
python3 -m zipfile -e "$wheel" "$work/wheel"
check_glibc "$(echo "$work"/wheel/redis_rl/_core*.so)" "the wheel's extension"
check_licenses "$(echo "$work"/wheel/redis_rl-*.dist-info)" "the wheel"
tarball=$(echo "$DIST"/redis-rl-*.tgz)
tar -C "$work/npm" -xzf "$tarball"
check_glibc "$work/npm/package/redis-rl.linux-x64-gnu.node" "the npm package's addon"
check_licenses "$work/npm/package" "the npm package"

# install.sh PREFIX, then redis-server from elsewhere on PREFIX/etc/redis.conf.
prefix="$work/opt/redis rl"
"$moddir/install.sh" "$prefix" >/dev/null
grep -qx "loadmodule \"$prefix/lib/libredis_rl.so\"" "$prefix/etc/redis.conf" ||
  fail "install.sh's redis.conf does not load $prefix/lib/libredis_rl.so by absolute path"
grep -qF "ExecStart=/usr/bin/redis-server \"$prefix/etc/redis.conf\"" "$prefix/share/redis-rl/redis-rl.service" ||
  fail "install.sh's systemd unit does not start $prefix/etc/redis.conf"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify --man=no "$prefix/share/redis-rl/redis-rl.service" ||
    fail "install.sh's systemd unit does not pass systemd-analyze verify"
fi
mkdir "$work/elsewhere"
port=$(python3 "$root/scripts/ports.py")
(cd "$work/elsewhere" && exec "$SERVER" "$prefix/etc/redis.conf" --port "$port" --bind 127.0.0.1 --daemonize no >"$work/server.log" 2>&1) &
server_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$port" MODULE LIST | grep -q '^rl$' || { cat "$work/server.log"; fail "the installed module did not load"; }
info=$(redis-cli -p "$port" INFO rl | tr -d '\r')
grep -qx "rl_version:$version" <<<"$info" || fail "INFO rl does not report rl_version:$version"
grep -qx "rl_git_commit:$commit" <<<"$info" || fail "INFO rl does not report rl_git_commit:$commit"
echo "dist smoke: install.sh PREFIX works from another directory; INFO rl: $version, commit $commit"

# The npm package, installed from the registry's side (npm install: network), meanwhile.
RL_PORT=$port DIST=$DIST bash "$root/scripts/dist_node_smoke.sh" >"$work/node.log" 2>&1 &
node_pid=$!

# rl-gateway with the tarball's gateway.toml in front of the installed server.
gport=$(python3 "$root/scripts/ports.py")
"$gateway" --listen "127.0.0.1:$gport" --redis "redis://127.0.0.1:$port/" --config "$gwdir/gateway.toml" --no-watch \
  >"$work/gateway.log" 2>&1 &
gateway_pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$gport/healthz" && break; sleep 0.1; done
answer=$(curl -s -D - -H 'X-API-Key: dist-smoke' "http://127.0.0.1:$gport/dist/smoke" | tr -d '\r') ||
  { cat "$work/gateway.log"; fail "rl-gateway did not answer on port $gport"; }
grep -q '^HTTP/1.1 200' <<<"$answer" || fail "rl-gateway answered: $answer"
grep -qx 'x-ratelimit-remaining: 99' <<<"$answer" || fail "rl-gateway's answer does not show 99 of 100 left: $answer"
[ "$(redis-cli -p "$port" EXISTS 'rl:{global}')" = 1 ] || fail "rl-gateway's request wrote no limiter key to the module"
kill "$gateway_pid"
wait "$gateway_pid" || fail "rl-gateway exited with status $? on SIGTERM: $(tail -3 "$work/gateway.log")"
gateway_pid=
echo "dist smoke: rl-gateway from its tarball served a request decided by the module, and stopped"

# A PATH with the system's tools only: no ~/.cargo/bin.
clean_path=/usr/local/bin:/usr/bin:/bin
if env PATH=$clean_path sh -c 'command -v cargo || command -v rustc' >/dev/null; then
  clean_path=/usr/bin:/bin
fi
python=$(command -v python3)
env PATH=$clean_path "$python" -m venv "$work/venv"
env PATH="$work/venv/bin:$clean_path" "$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
(cd "$work" && env PATH="$work/venv/bin:$clean_path" "$work/venv/bin/python" "$root/scripts/dist_smoke.py" "$port")
wait "$node_pid" || { cat "$work/node.log"; fail "the npm package's check failed"; }
cat "$work/node.log"
