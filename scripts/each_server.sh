#!/usr/bin/env bash
# Runs a test command once per server, both at once: with RL_SERVER=redis-server (Redis 7.0)
# and with RL_SERVER set to the Valkey 9.1 binary given. The Python and Node suites mostly wait
# on their servers (a Python run spends about a tenth of its wall time on CPU), so side by side
# the two take little more than one. Every suite takes its ports from scripts/ports.py, which
# locks them against other processes, so the runs cannot collide.
# Each run's output goes to a log, printed whole when both are done; the status is the first
# failing run's, and a failing run's log is named on stderr.
# Usage: scripts/each_server.sh VALKEY_SERVER CMD [ARGS...]
set -uo pipefail
valkey=${1:?usage: scripts/each_server.sh VALKEY_SERVER CMD [ARGS...]}
shift
[ $# -gt 0 ] || { echo "each_server.sh: no command" >&2; exit 2; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
servers=(redis-server "$valkey")
pids=()
for i in "${!servers[@]}"; do
  RL_SERVER=${servers[$i]} "$@" >"$logs/$i" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!servers[@]}"; do
  wait "${pids[$i]}"; rc=$?
  echo "== $* on $("${servers[$i]}" --version)"
  cat "$logs/$i"
  if [ $rc -ne 0 ]; then
    echo "each_server.sh: failed (exit $rc) on ${servers[$i]}: $*" >&2
    [ $status -ne 0 ] || status=$rc
  fi
done
exit $status
