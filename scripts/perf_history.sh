#!/usr/bin/env bash
# What did each optimisation buy? Server-side cost per call of RL.TOKENBUCKET, RL.SLIDING,
# RL.FIXED and the floor `SET key <25 B> PXAT ms` at several commits, side by side.
#
#   scripts/perf_history.sh                      # default: 3356906 77dbc74 eb388c8 828b5af HEAD
#   scripts/perf_history.sh 3356906 HEAD
#
# Per commit: `git worktree add` into /tmp/perfhist-<sha>, `cargo build --release -p redis-rl`
# (one shared target dir so the dependencies build once, the two workspace crates cleaned and
# rebuilt per commit; the .so is copied out per commit and reused by later runs), then two
# figures. Every server first gets all keys of every command (100k each, redis-cli --pipe) and
# finishes rehashing its keyspace (DEBUG HTSTATS); before each measured run the command's keys
# are written again (fresh expiry), so measured calls update existing keys. Exceptions, from
# scripts/bench_setup.py's arguments: a RL.TOKENBUCKET key (10^9 tokens, 1/s) lives about 2 s, so under
# callgrind nearly every call recreates an expired key; RL.FIXED keys all expire at the 60 s
# window boundary, which a run may or may not cross (about +9% instructions when it does).
#
# 1. Instructions per call (deterministic): redis-server under
#    `valgrind --tool=callgrind --instr-atstart=no`; the prefill runs uninstrumented, then
#    `callgrind_control -i on -z`, redis-benchmark -c 50 -P 16 -r 100000 -n PH_CALLS, and
#    `callgrind_control -d`. Reported: the inclusive instructions of the server's `call()`
#    (execution of the command: the module's handler, keyspace access, replication of the effect,
#    commandstats) divided by the calls counted in INFO commandstats, and the whole server's
#    instructions per call (also socket reads, protocol parsing, replies, event loop).
# 2. Wall time: usec_per_call from INFO commandstats (CONFIG RESETSTAT before each run) under
#    redis-benchmark -c 50 -P 16 -r 100000 -n PH_WALL_N, servers of all commits running at once
#    and measured in turn (A B C D A B C D ...), PH_REPS repetitions, median.
#
# Environment: PH_CALLS=50000 PH_WALL_N=500000 PH_REPS=3 PH_KEYS=100000
#   PH_CG_KEYS=PH_KEYS: the measured callgrind calls draw among the first PH_CG_KEYS keys only,
#     written again just before (e.g. 100: short-lived keys stay live under callgrind, so the
#     figure is the update path; `make bench-targets` measures that way)
#   PH_CALLGRIND=1 PH_WALL=1 (0 skips a phase)   PH_ONLY="SET PXAT,RL.SLIDING" (names below;
#     RL.REFUND and the realistic GCRA limits, "RL.GCRA 1000/s" etc., only this way)
#   RL_SERVER=redis-server   CARGO_TARGET_DIR (default ./target)
# Output: target/perf_history/{results.tsv,table.md}, the table also on stdout.
# Needs valgrind (callgrind_control, callgrind_annotate), redis-server, redis-cli, redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SERVER=${RL_SERVER:-redis-server}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$ROOT/target/perf_history
BUILD=$TARGET/perfhist-build
CALLS=${PH_CALLS:-50000}
WALL_N=${PH_WALL_N:-500000}
REPS=${PH_REPS:-3}
KEYS=${PH_KEYS:-100000}
CG_KEYS=${PH_CG_KEYS:-$KEYS}
mkdir -p "$OUT"

[ $# -gt 0 ] || set -- 3356906 77dbc74 eb388c8 828b5af HEAD
SHAS=()
for c in "$@"; do SHAS+=("$(git rev-parse --short=7 "$c^{commit}")"); done

BIG=1000000000
PXAT=$(( $(date +%s) * 1000 + 7 * 24 * 3600 * 1000 ))
VALUE25=vvvvvvvvvvvvvvvvvvvvvvvvv
# name | commandstats name | key prefix | arguments after the key (same as scripts/bench_setup.py)
# [| the command and arguments that write its keys, when the command itself does not]
COMMANDS=(
  "SET PXAT|set|set:|$VALUE25 PXAT $PXAT"
  "RL.TOKENBUCKET|rl.tokenbucket|tb:|$BIG 1 1000"
  "RL.SLIDING|rl.sliding|sl:|$BIG 60000"
  "RL.FIXED|rl.fixed|fx:|$BIG 60000"
  "RL.GCRA|rl.gcra|gc:|1 1000 BURST $BIG"
  "RL.THROTTLE|rl.throttle|th:|$BIG 1 1 1"
)
# Measured only when PH_ONLY names it, so the default keyspace stays the one of earlier tables.
# Emptied buckets (they live ~30 years): every measured call gives one token back and writes.
OPTIONAL=(
  "RL.REFUND|rl.refund|rf:|TOKENBUCKET $BIG 1 1000 COST 1|RL.TOKENBUCKET $BIG 1 1000 COST $BIG"
  # GCRA with realistic limits: the stored TAT (ticks of 1/limit us since the epoch) is a 9-byte
  # varint at 1000/s and a 12-byte one at 10^9/s (the draining RL.GCRA above stays below 2^56).
  "RL.GCRA 1000/s|rl.gcra|gk:|1000 1000 BURST 1000"
  "RL.GCRA 10^9/s|rl.gcra|gg:|$BIG 1000 BURST $BIG"
  "RL.THROTTLE 1000/s|rl.throttle|tk:|1000 1000 1 1"
)
if [ -n "${PH_ONLY:-}" ]; then
  kept=()
  for c in "${COMMANDS[@]}" "${OPTIONAL[@]}"; do [[ ",$PH_ONLY," == *",${c%%|*},"* ]] && kept+=("$c"); done
  COMMANDS=("${kept[@]}")
fi

PIDS=()
WORKTREES=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for w in "${WORKTREES[@]}"; do git worktree remove --force "$w" 2>/dev/null || true; done
}
trap cleanup EXIT

# --- build every commit once (cached by sha) -------------------------------------------------
so_of() { echo "$TARGET/perfhist/$1/libredis_rl.so"; }
for sha in "${SHAS[@]}"; do
  [ -f "$(so_of "$sha")" ] && continue
  wt=/tmp/perfhist-$sha
  if [ ! -d "$wt" ]; then git worktree add -q --detach "$wt" "$sha"; WORKTREES+=("$wt"); fi
  echo "== building $sha" >&2
  # Worktree files are all newer-than-nothing to cargo's mtime fingerprints: without the clean,
  # a second commit would be taken as fresh and every commit would get the first one's .so.
  (cd "$wt" && CARGO_TARGET_DIR=$BUILD ${CARGO:-cargo} clean -q --release -p redis-rl -p redis-rl-core \
     && CARGO_TARGET_DIR=$BUILD ${CARGO:-cargo} build --release -q -p redis-rl)
  mkdir -p "$(dirname "$(so_of "$sha")")"
  cp "$BUILD/release/libredis_rl.so" "$(so_of "$sha")"
done

# Outside the kernel's ephemeral range (scripts/ports.py).
free_port() { python3 scripts/ports.py; }
cli() { redis-cli -h 127.0.0.1 -p "$@"; }
wait_up() { for _ in $(seq 600); do cli "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
server_args() {  # port so
  echo --port "$1" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning --logfile /dev/null \
    --enable-debug-command local --loadmodule "$2"
}
# Every key redis-benchmark -r KEYS can draw (`__rand_int__` is 12 zero-padded digits) exists.
prefill() {  # port command-spec [keys]
  IFS='|' read -r name _ prefix rest writer <<<"$2"
  [ "$name" = "SET PXAT" ] && writer="SET $rest"
  python3 - "${writer:-${name%% *} $rest}" "$prefix" "${3:-$KEYS}" <<'EOF' | cli "$1" --pipe >/dev/null
import sys
(cmd, *rest), prefix, keys = sys.argv[1].split(), sys.argv[2], int(sys.argv[3])
out = sys.stdout.buffer
for i in range(keys):
    args = [cmd, "%s%012d" % (prefix, i)] + rest
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args))
EOF
}
# All keys of every command first, then wait until the keyspace has finished rehashing: the
# measured runs only update keys, with no dict growth or incremental rehash in them.
prefill_all() {  # port
  for spec in "${COMMANDS[@]}"; do prefill "$1" "$spec"; done
  for _ in $(seq 1200); do
    cli "$1" debug htstats 0 | grep -q 'rehashing target' || return 0
    sleep 0.1
  done
  echo "!! keyspace still rehashing" >&2
}
bench() {  # port command-spec n [keys]
  IFS='|' read -r name _ prefix rest _ <<<"$2"
  local cmd=${name%% *}  # "SET PXAT", "RL.GCRA 1000/s": the command is the first word
  # shellcheck disable=SC2086
  redis-benchmark -h 127.0.0.1 -p "$1" -c 50 -P 16 -r "${4:-$KEYS}" -n "$3" -q $cmd "${prefix}__rand_int__" $rest \
    >/dev/null 2>&1
}
stat() {  # port commandstats-name field
  cli "$1" info commandstats | tr -d '\r' | sed -n "s/^cmdstat_$2:\(.*,\)\?$3=\([0-9.]*\).*/\2/Ip"
}

RESULTS=$OUT/results.tsv
: >"$RESULTS"

# --- 1. instructions per call under callgrind ------------------------------------------------
if [ "${PH_CALLGRIND:-1}" != 0 ]; then
  for sha in "${SHAS[@]}"; do
    port=$(free_port)
    rm -f "$OUT"/callgrind."$sha".*
    # shellcheck disable=SC2046
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/callgrind.$sha.%p" \
      "$SERVER" $(server_args "$port" "$(so_of "$sha")") 2>"$OUT/valgrind.$sha.log" &
    vg=$!
    PIDS+=("$vg")
    wait_up "$port" || { echo "!! server under valgrind did not start ($sha)" >&2; exit 1; }
    prefill_all "$port"
    for spec in "${COMMANDS[@]}"; do
      IFS='|' read -r name stat_name _ _ <<<"$spec"
      # With few keys, instrumentation goes on before they are written again, so that the slow
      # callgrind_control does not stand between the write and the measured calls (a token
      # bucket key lives ~2 s); the counters are zeroed after it either way.
      [ "$CG_KEYS" != "$KEYS" ] && callgrind_control -i on "$vg" >/dev/null 2>&1
      prefill "$port" "$spec" "$CG_KEYS"
      cli "$port" config resetstat >/dev/null
      [ "$CG_KEYS" = "$KEYS" ] && callgrind_control -i on "$vg" >/dev/null 2>&1
      callgrind_control -z "$vg" >/dev/null 2>&1
      bench "$port" "$spec" "$CALLS" "$CG_KEYS"
      callgrind_control -d "$vg" >/dev/null 2>&1
      callgrind_control -i off "$vg" >/dev/null 2>&1
      calls=$(stat "$port" "$stat_name" calls)
      dump=$(ls -t "$OUT"/callgrind."$sha".* | head -n 1)
      read -r in_call total < <(callgrind_annotate --inclusive=yes --threshold=100 "$dump" 2>/dev/null |
        python3 -c '
import re, sys
total = in_call = None
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+)\s+(\(.*?\)\s+)?(PROGRAM TOTALS|\S*:call\s+\[)", line)
    if m:
        n = int(m.group(1).replace(",", ""))
        if m.group(3) == "PROGRAM TOTALS": total = n
        elif in_call is None: in_call = n
print(in_call or 0, total or 0)')
      printf 'instr\t%s\t%s\t%s\t%s\t%s\n' "$sha" "$name" "$calls" "$in_call" "$total" >>"$RESULTS"
      echo "   $sha $name: $calls calls, $(( in_call / calls )) instr/call in call(), $(( total / calls )) in the server" >&2
    done
    kill "$vg" 2>/dev/null || true
    wait "$vg" 2>/dev/null || true
  done
fi

# --- 2. usec_per_call, commits interleaved ---------------------------------------------------
if [ "${PH_WALL:-1}" != 0 ]; then
  declare -A PORT
  for sha in "${SHAS[@]}"; do
    port=$(free_port)
    # shellcheck disable=SC2046
    "$SERVER" $(server_args "$port" "$(so_of "$sha")") &
    PIDS+=("$!")
    PORT[$sha]=$port
    wait_up "$port"
    prefill_all "$port"
  done
  for rep in $(seq "$REPS"); do
    for sha in "${SHAS[@]}"; do
      for spec in "${COMMANDS[@]}"; do
        IFS='|' read -r name stat_name _ _ <<<"$spec"
        prefill "${PORT[$sha]}" "$spec"
        cli "${PORT[$sha]}" config resetstat >/dev/null
        bench "${PORT[$sha]}" "$spec" "$WALL_N"
        usec=$(stat "${PORT[$sha]}" "$stat_name" usec_per_call)
        printf 'usec\t%s\t%s\t%s\t%s\n' "$sha" "$name" "$rep" "$usec" >>"$RESULTS"
        echo "   rep $rep $sha $name: $usec usec/call" >&2
      done
    done
  done
fi

# --- table -------------------------------------------------------------------------------------
python3 - "$RESULTS" "${SHAS[@]}" <<'EOF' | tee "$OUT/table.md"
import statistics, subprocess, sys
path, shas = sys.argv[1], sys.argv[2:]
instr, usec = {}, {}
for line in open(path):
    f = line.rstrip("\n").split("\t")
    if f[0] == "instr" and int(f[3]) > 0:
        instr[(f[1], f[2])] = (int(f[4]) / int(f[3]), int(f[5]) / int(f[3]))
    elif f[0] == "usec":
        usec.setdefault((f[1], f[2]), []).append(float(f[4]))
names = []
for key in list(instr) + list(usec):
    if key[1] not in names:
        names.append(key[1])
def pct(new, old):
    return "" if old is None or new is None else "%+.1f%%" % (100.0 * (new - old) / old)
print("| commit | command | instr/call in call() | server instr/call | usec/call (median) | instr vs previous | usec vs previous |")
print("|---|---|---:|---:|---:|---:|---:|")
for name in names:
    prev_i = prev_u = None
    for sha in shas:
        i = instr.get((sha, name))
        u = statistics.median(usec[(sha, name)]) if (sha, name) in usec else None
        subject = subprocess.run(["git", "log", "-1", "--format=%s", sha], capture_output=True, text=True).stdout.strip()
        print("| %s %s | %s | %s | %s | %s | %s | %s |" % (
            sha, subject[:40], name,
            "%.0f" % i[0] if i else "", "%.0f" % i[1] if i else "",
            "%.2f" % u if u is not None else "",
            pct(i[0] if i else None, prev_i), pct(u, prev_u)))
        prev_i, prev_u = (i[0] if i else None), u
EOF
