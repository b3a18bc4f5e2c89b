#!/usr/bin/env python3
"""Server benchmarks for `make bench`: our RL.* commands side by side with the floor (INCR,
GET, SET PXAT), the design's Lua token bucket (EVALSHA) and redis-cell's CL.THROTTLE, all in
one server on loopback, plus bytes per limiter key; on each server of BENCH_SERVERS (Redis and
Valkey) in turn. Writes benches/RESULTS.md: the speed targets for every server side by side,
then each server's tables.

The speed targets come from paired runs, not from the tables' medians: SET PXAT, CL.THROTTLE
and the Lua script each alternate with every RL command on one server, and each ratio is taken
per pair of runs (median and min-max of the pairs), next to the ratio of instructions per call
in the server's call() under callgrind; see "the speed targets" below.

    bench.py                        everything (make bench)
    bench.py --targets              the targets section alone (make bench-targets)
    bench.py --report-only          RESULTS.md again from the last run's raw figures
    bench.py --targets-report-only  the targets section again from the last --targets run
    bench.py --leases-only          the RL.CONCURRENCY lease-cost table alone

Standard library only. Everything is tunable with environment variables (see CONFIG below).
"""

import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import ports
import procs
import resp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env(name, default, kind=str):
    value = os.environ.get(name, "")
    return kind(value) if value != "" else default


CONFIG = {
    # Seconds per measured run in the headline configuration (100k keys, pipeline 16) and in
    # the three others (hot key, pipeline 1).
    "seconds": env("BENCH_SECONDS", 5.0, float),
    "quick_seconds": env("BENCH_QUICK_SECONDS", 1.0, float),
    "reps": env("BENCH_REPS", 3, int),
    "clients": env("BENCH_CLIENTS", 50, int),
    "keys": env("BENCH_KEYS", 100_000, int),
    "memory_keys": env("BENCH_MEMORY_KEYS", 100_000, int),
    # Comma-separated names from the COMMANDS table to run only those (e.g. "SET PXAT,RL.SLIDING").
    "only": env("BENCH_ONLY", ""),
    # Scheduling, for a machine shared with other work: a nice level for the server and
    # redis-benchmark (e.g. -10, needs root), and BENCH_PIN=1 to put them on two different CPUs.
    "nice": env("BENCH_NICE", 0, int),
    "pin": env("BENCH_PIN", 0, int),
    "server": env("RL_SERVER", "redis-server"),
    # Comma-separated server binaries, each measured in turn (default: RL_SERVER alone).
    "servers": env("BENCH_SERVERS", ""),
    "cell_version": env("RL_CELL_VERSION", "0.2.2 (crates.io)"),
    "benchmark": env("RL_BENCHMARK", "redis-benchmark"),
    "module": env("RL_MODULE", os.path.join(ROOT, "target", "release", "libredis_rl.so")),
    "cell": env("RL_CELL", ""),
    # go-redis/redis_rate's GCRA script (its `script_allow_n.lua`, BSD-2-Clause; not kept in
    # this repository): measured beside the twin when a path is given (make bench REDIS_RATE=).
    "redis_rate": env("RL_REDIS_RATE", ""),
    "out": env("BENCH_OUT", os.path.join(ROOT, "benches", "RESULTS.md")),
    "raw": env("BENCH_RAW", os.path.join(ROOT, "target", "bench", "results.json")),
    # The speed targets table, from paired runs (see "the speed targets" below): the commands
    # X, each paired with SET PXAT, CL.THROTTLE and the Lua script; pairs per reference;
    # seconds per measured run, each after an unmeasured warm-up of the same command.
    # The fixed-size limiters by default (RL.LOG, RL.CONCURRENCY and "RL.ALL x4" can be added).
    "targets": env("BENCH_TARGETS", "RL.TOKENBUCKET,RL.SLIDING,RL.FIXED,RL.GCRA,RL.THROTTLE,"
                  "RL.TOKENBUCKET steady,RL.GCRA steady,RL.THROTTLE steady"),
    "pairs": env("BENCH_PAIRS", 5, int),
    "pair_seconds": env("BENCH_PAIR_SECONDS", 0.5, float),
    # Before each paired run, every key of its command written again, BENCH_REFRESH times (2
    # doubles the life of a CL.THROTTLE key, ~1 s after one call), or with 0 a warm-up run of
    # BENCH_WARMUP_SECONDS with random keys (then keys living 1-2 s are partly expired, the more
    # so the slower the machine).
    "refresh": env("BENCH_REFRESH", 1, int),
    "warmup_seconds": env("BENCH_WARMUP_SECONDS", 0.25, float),
    # Instructions per call under callgrind next to the time ratios (0: skip), calls per command.
    "callgrind": env("BENCH_CALLGRIND", 1, int),
    "cg_calls": env("BENCH_CG_CALLS", 5_000, int),
    "cg_keys": env("BENCH_CG_KEYS", 100, int),
    "targets_raw": env("BENCH_TARGETS_RAW", os.path.join(ROOT, "target", "bench", "targets.json")),
    "criterion_since": env("BENCH_CRITERION_SINCE", 0.0, float),
    "criterion_dir": env("BENCH_CRITERION_DIR", os.path.join(ROOT, "target", "criterion")),
}

VALUE25 = "v" * 25
# The Lua script takes `now` from the client; redis-benchmark cannot send a clock, so it gets
# a fixed instant (a huge capacity keeps every call allowed: the write path).
LUA_NOW = "1700000000"
# Every limiter is configured so that every call is allowed (the write path every allowed
# request pays) and keys live long: capacity 10^9, refilled 1 per second. Such a bucket drains:
# every call moves the instant it becomes idle 1 s later, so every write sets a new expiry
# (the worst case for the expiry). The "steady" variants refill 10^9 per second: a busy key
# well under its limit, whose idle instant stays about a millisecond ahead of each call (on
# Valkey 9 the store then keeps the expiry it has for up to half the TTL slack; see README,
# Expiry).
BIG = "1000000000"

# name, redis-benchmark arguments ({k} is the key), commandstats name, what must exist.
COMMANDS = [
    ("INCR", ["INCR", "{k}"], "incr", None),
    ("GET 25 B", ["GET", "{k}"], "get", None),
    ("SET 25 B PXAT", ["SET", "{k}", VALUE25, "PXAT", "{pxat}"], "set", None),
    ("EXPIRE", ["EXPIRE", "{k}", "3600"], "expire", "RL.ALL"),
    ("Lua EVALSHA", ["EVALSHA", "{sha}", "1", "{k}", BIG, "1", LUA_NOW, "1"], "evalsha", "lua"),
    ("CL.THROTTLE", ["CL.THROTTLE", "{k}", BIG, "1", "1", "1"], "cl.throttle", "CL.THROTTLE"),
    # redis_rate's GCRA: burst 10^9, 1 per second, cost 1 (always allowed, as the others).
    ("redis_rate GCRA", ["EVALSHA", "{rsha}", "1", "{k}", BIG, "1", "1", "1"], "evalsha", "redis_rate"),
    ("RL.TOKENBUCKET", ["RL.TOKENBUCKET", "{k}", BIG, "1", "1000"], "rl.tokenbucket", "RL.TOKENBUCKET"),
    ("RL.SLIDING", ["RL.SLIDING", "{k}", BIG, "60000"], "rl.sliding", "RL.SLIDING"),
    ("RL.FIXED", ["RL.FIXED", "{k}", BIG, "60000"], "rl.fixed", "RL.FIXED"),
    ("RL.GCRA", ["RL.GCRA", "{k}", "1", "1000", "BURST", BIG], "rl.gcra", "RL.GCRA"),
    ("RL.THROTTLE", ["RL.THROTTLE", "{k}", BIG, "1", "1", "1"], "rl.throttle", "RL.THROTTLE"),
    ("RL.TOKENBUCKET steady", ["RL.TOKENBUCKET", "{k}", BIG, BIG, "1000"], "rl.tokenbucket",
     "RL.TOKENBUCKET"),
    ("RL.GCRA steady", ["RL.GCRA", "{k}", BIG, "1000", "BURST", BIG], "rl.gcra", "RL.GCRA"),
    ("RL.THROTTLE steady", ["RL.THROTTLE", "{k}", BIG, BIG, "1", "1"], "rl.throttle", "RL.THROTTLE"),
    # A log keeps one entry per admitted instant, at most `limit`: 100 per minute.
    ("RL.LOG", ["RL.LOG", "{k}", "100", "60000"], "rl.log", "RL.LOG"),
    ("RL.CONCURRENCY", ["RL.CONCURRENCY", "{k}", "100", "60000", "ACQUIRE", "worker-1"],
     "rl.concurrency", "RL.CONCURRENCY"),
    # The design's four dimensions (API key, client IP, key+endpoint, global) in one call.
    ("RL.ALL x4", ["RL.ALL", "4", "{k}:key", "{k}:ip", "{k}:endpoint", "{k}:global",
                   "TOKENBUCKET", BIG, "1", "1000", "SLIDING", BIG, "60000",
                   "SLIDING", BIG, "60000", "TOKENBUCKET", BIG, "1", "1000"], "rl.all", "RL.ALL"),
]
# The Lua twin (lua/rl.lua, for servers without the module): each module command above with
# the same arguments, as `FCALL rl numkeys keys... RL.X args...` (the library), and the token
# bucket also as a script (`EVALSHA`, where FUNCTION is not allowed).
TWIN = "twin "
TWIN_SCRIPT = "twin script RL.TOKENBUCKET"
for _name, _args, _stat, _need in list(COMMANDS):
    if _name in ("RL.TOKENBUCKET", "RL.SLIDING", "RL.FIXED", "RL.GCRA", "RL.LOG", "RL.THROTTLE",
                 "RL.CONCURRENCY", "RL.TOKENBUCKET steady", "RL.GCRA steady"):
        COMMANDS.append((TWIN + _name, ["FCALL", "rl", "1", "{k}", _args[0]] + _args[2:],
                         "fcall", "twin"))
    elif _name == "RL.ALL x4":
        COMMANDS.append((TWIN + _name, ["FCALL", "rl"] + _args[1:6] + ["RL.ALL"] + _args[6:],
                         "fcall", "twin"))
    if _name == "RL.TOKENBUCKET":
        COMMANDS.append((TWIN_SCRIPT, ["EVALSHA", "{tsha}", "1", "{k}", _args[0]] + _args[2:],
                         "evalsha", "twin"))
TWIN_SHA = {"sha": "", "rsha": ""}
NOTES = {
    "Lua EVALSHA": "the design's script verbatim; `now` is a fixed number sent by the client",
    "RL.LOG": "limit 100/min: on the hot key almost every call is denied (a read of 100 entries)",
    "RL.CONCURRENCY": "ACQUIRE of one id: a renewal on every call",
    "RL.ALL x4": "four keys (2 token buckets, 2 sliding windows) in one call",
}

# Memory: commands creating one limiter key, realistic parameters with a long TTL (so no key
# expires while they are counted). {k} is the key.
MEMORY = [
    ("INCR+EXPIRE", [["INCR", "{k}"], ["EXPIRE", "{k}", "3600"]], None),
    ("SET 25 B PXAT", [["SET", "{k}", VALUE25, "PXAT", "{pxat}"]], None),
    ("Lua hash bucket", [["EVALSHA", "{sha}", "1", "{k}", "1000", "16.666666666667",
                          "1700000000.123456", "1"]], "lua"),
    ("CL.THROTTLE", [["CL.THROTTLE", "{k}", "99", "1", "3600", "1"]], "CL.THROTTLE"),
    ("RL.TOKENBUCKET", [["RL.TOKENBUCKET", "{k}", "100", "1", "3600000"]], "RL.TOKENBUCKET"),
    ("twin RL.TOKENBUCKET", [["FCALL", "rl", "1", "{k}", "RL.TOKENBUCKET", "100", "1", "3600000"]],
     "twin"),
    ("RL.SLIDING", [["RL.SLIDING", "{k}", "100", "3600000"]], "RL.SLIDING"),
    ("RL.FIXED", [["RL.FIXED", "{k}", "100", "3600000"]], "RL.FIXED"),
    ("RL.GCRA", [["RL.GCRA", "{k}", "1", "36000", "BURST", "100"]], "RL.GCRA"),
    ("RL.THROTTLE", [["RL.THROTTLE", "{k}", "99", "1", "3600", "1"]], "RL.THROTTLE"),
    ("RL.LOG (1 entry)", [["RL.LOG", "{k}", "100", "3600000"]], "RL.LOG"),
    ("RL.CONCURRENCY (1 lease)", [["RL.CONCURRENCY", "{k}", "100", "3600000", "ACQUIRE", "worker-1"]],
     "RL.CONCURRENCY"),
]

# What the speed targets compare every RL.* command with, in the targets table.
TARGET_REFS = ("SET 25 B PXAT", "CL.THROTTLE", "Lua EVALSHA")

HOT_KEY = "rl:hot"
RANDOM_KEY = "rl:__rand_int__"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- server


def scheduled(args, cpu):
    """`args` under the configured nice level and CPU pinning."""
    prefix = []
    if CONFIG["nice"]:
        prefix += ["nice", "-n", str(CONFIG["nice"])]
    if CONFIG["pin"] and (os.cpu_count() or 1) > 1 and shutil.which("taskset"):
        prefix += ["taskset", "-c", str(cpu)]
    return prefix + args


class Server:
    """A server on a free loopback port. `wrapper` runs it under another program (valgrind),
    which then gets more time to start."""

    def __init__(self, modules, extra=(), wrapper=()):
        self.port = ports.listen_port()
        args = list(wrapper) + [
            CONFIG["server"], "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--protected-mode", "yes",
            "--loglevel", "warning", "--logfile", ""] + list(extra)
        for m in modules:
            args += ["--loadmodule", m]
        # The server's (and valgrind's) output, for the error when it does not start.
        self.log = tempfile.NamedTemporaryFile(prefix="rl-bench-server-", suffix=".log")
        self.proc = subprocess.Popen(scheduled(args, 0), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + (120 if wrapper else 10)
        while True:
            try:
                self.client = resp.Connection(self.port)
                if self.client.call("PING") == "PONG":
                    break
            except (OSError, resp.ReplyError):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                procs.stop(self.proc)
                tail = procs.log_tail(self.log.name)
                self.log.close()
                raise RuntimeError(f"{CONFIG['server']} on port {self.port} did not start; the end "
                                   "of its output:\n" + tail)
            time.sleep(0.05)

    def stop(self):
        procs.stop(self.proc)
        self.log.close()


# ---------------------------------------------------------------- throughput


def expand(args, key, sha, pxat):
    return [a.replace("{k}", key).replace("{sha}", sha).replace("{pxat}", pxat)
            .replace("{tsha}", TWIN_SHA["sha"]).replace("{rsha}", TWIN_SHA["rsha"]) for a in args]


def redis_benchmark(port, args, n, pipeline, random_keys, keys=None):
    """Requests per second of `n` calls; `random_keys`: __rand_int__ drawn among CONFIG["keys"]
    (or `keys`) numbers."""
    cmd = [CONFIG["benchmark"], "-h", "127.0.0.1", "-p", str(port), "-c", str(CONFIG["clients"]),
           "-n", str(n), "-P", str(pipeline), "--csv"]
    if random_keys:
        cmd += ["-r", str(keys or CONFIG["keys"])]
    out = subprocess.run(scheduled(cmd + args, 1), capture_output=True, text=True, timeout=600)
    rows = [line for line in out.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    if out.returncode != 0 or not rows:
        raise RuntimeError("redis-benchmark failed: %s %s" % (out.stdout[-500:], out.stderr[-500:]))
    return float(rows[-1].split('","')[1])


def populate_strings(client, random_keys):
    """GET and EXPIRE need existing keys: every key redis-benchmark can draw, 25-byte values."""
    if random_keys:
        keys = ["rl:%012d" % i for i in range(CONFIG["keys"])]
    else:
        keys = [HOT_KEY]
    client.pipeline([["SET", k, VALUE25] for k in keys])


def commandstat(client, name):
    # Module commands keep the case they were registered with (cmdstat_RL.TOKENBUCKET).
    stats = next((v for k, v in client.info("commandstats").items()
                  if k.lower() == "cmdstat_" + name), "")
    fields = dict(kv.split("=") for kv in stats.split(",") if "=" in kv)
    return float(fields.get("usec_per_call", "nan")), int(fields.get("failed_calls", "0")) + int(
        fields.get("rejected_calls", "0"))


def measure(server, name, args, stat, random_keys, pipeline, seconds, sha, pxat):
    client = server.client
    # SYNC everywhere: Valkey frees a flushed keyspace in a background thread by default
    # (lazyfree-lazy-user-flush yes), which would compete with the next runs for the CPUs and
    # shrink used_memory during a memory count.
    client.call("FLUSHALL", "SYNC")
    if name in ("GET 25 B", "EXPIRE"):
        populate_strings(client, random_keys)
    key = RANDOM_KEY if random_keys else HOT_KEY
    argv = expand(args, key, sha, pxat)
    # Calibration, which is also the warm-up that creates the keys.
    n0 = 20_000 * (4 if pipeline > 1 else 1)
    t = time.time()
    rps0 = redis_benchmark(server.port, argv, n0, pipeline, random_keys)
    runs = []
    for _ in range(CONFIG["reps"]):
        # Sized from the previous run, so a noisy calibration does not stretch every run.
        n = max(n0 // 4, int((runs[-1]["rps"] if runs else rps0) * seconds))
        client.call("CONFIG", "RESETSTAT")
        rps = redis_benchmark(server.port, argv, n, pipeline, random_keys)
        usec, failed = commandstat(client, stat)
        runs.append({"rps": rps, "usec": usec, "failed": failed, "requests": n})
    log("  %-16s %-8s P%-2d %10.0f req/s  %6.2f usec/call  (%d runs, %.0f s)" % (
        name, "100k" if random_keys else "hot", pipeline, statistics.median(r["rps"] for r in runs),
        statistics.median(r["usec"] for r in runs), CONFIG["reps"], time.time() - t))
    return runs


# ---------------------------------------------------------------- memory


def memory(server, commands, sha, pxat):
    client = server.client
    client.call("FLUSHALL", "SYNC")
    time.sleep(0.2)
    n = CONFIG["memory_keys"]
    before = int(client.info("memory")["used_memory"])
    batch = []
    for i in range(n):
        key = "rl:%012d" % i
        for c in commands:
            batch.append(expand(c, key, sha, pxat))
    errors = client.pipeline(batch)
    after = int(client.info("memory")["used_memory"])
    keys = client.call("DBSIZE")
    one = client.call("MEMORY", "USAGE", "rl:%012d" % 0)
    kind = client.call("TYPE", "rl:%012d" % 0)
    value = client.call("STRLEN", "rl:%012d" % 0) if kind == "string" else None
    return {"per_key": (after - before) / max(keys, 1), "keys": keys, "usage": one,
            "errors": errors, "type": kind, "strlen": value}


# ---------------------------------------------------------------- the speed targets: paired runs
#
# A ratio of two medians measured minutes apart moves with the machine's load: on 2 shared
# cores, one run put RL.* at 0.55-0.90x SET PXAT's server time and two quiet reruns at
# 0.95-1.25x. So the targets table pairs runs instead: on one server, a run of the reference
# (SET PXAT, CL.THROTTLE or the Lua script) and a run of the command X right after it (the order
# alternates from pair to pair), each after all its keys are written again (so every measured
# call updates a live key) and a CONFIG RESETSTAT; the ratio is taken per
# pair, from usec_per_call, and the table gives the median of the pairs and their spread.
# Next to it, the ratio of instructions per call in the server's call() under callgrind
# (perf_history.sh's method), which does not depend on the load at all.


def keyed(args, tag):
    """A command's arguments with its own keys: `tag` + 12 random digits, as long as `rl:`'s."""
    return [a.replace("{k}", tag + "__rand_int__") for a in args]


def target_commands(present):
    """(name, arguments, commandstats name) of the references and of every X measured."""
    wanted = list(TARGET_REFS) + [n.strip() for n in CONFIG["targets"].split(",") if n.strip()]
    table = {name: (args, stat, need) for name, args, stat, need in COMMANDS}
    out = []
    for i, name in enumerate(wanted):
        if name not in table:
            raise SystemExit("BENCH_TARGETS: unknown command %r (names: %s)" % (name, ", ".join(table)))
        args, stat, need = table[name]
        if need and need not in present:
            continue
        out.append((name, keyed(args, "%02d:" % i), stat))
    return out


def keys_and_expired(client):
    """Keys in db 0 and keys expired since the last CONFIG RESETSTAT, read at one instant."""
    text = client.call("INFO", "stats", "keyspace").decode()
    expired = re.search(r"^expired_keys:(\d+)", text, re.M)
    keys = re.search(r"^db0:keys=(\d+)", text, re.M)
    return (int(keys.group(1)) if keys else 0), (int(expired.group(1)) if expired else 0)


def created_share(before, after, calls):
    """The share of `calls` that created a key (found none, or an expired one): keys added plus
    keys that expired meanwhile (lazily on access, or by the server's active expiry). Nothing
    else deletes keys here, and only the measured command creates them."""
    return ((after[0] - before[0]) + (after[1] - before[1])) / calls if calls else 0.0


def prefill(client, args, keys, batch=2000, replies=True):
    """One call per key that redis-benchmark -r `keys` can draw (every key exists before the
    measured runs); returns the number of error replies. The command is encoded once: keys
    differ only in their 12 digits. `replies=False` (CLIENT REPLY OFF) writes the keys again
    about 3x faster, counting no errors."""
    hole = "\0" * 12
    template = resp.encode([a.replace("__rand_int__", hole) for a in args])
    errors = 0
    if not replies:
        client.sock.sendall(resp.encode(["CLIENT", "REPLY", "OFF"]))
    for start in range(0, keys, batch):
        end = min(start + batch, keys)
        client.sock.sendall(b"".join(template.replace(hole.encode(), b"%012d" % i)
                                     for i in range(start, end)))
        if replies:
            errors += sum(isinstance(resp.read(client.reader), resp.ReplyError) for _ in range(end - start))
    if not replies:
        client.call("CLIENT", "REPLY", "ON")  # its OK comes after every call above is done
    return errors


def settle_keyspace(client, deadline_s=60):
    """Waits until the keyspace has finished rehashing after a prefill (DEBUG HTSTATS: Redis
    shows a rehashing target, Valkey a rehashing index >= 0), so no measured call pays for it."""
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        text = client.call("DEBUG", "HTSTATS", "0").decode()
        if "rehashing target" not in text and not re.search(r"rehashing index: \d", text):
            return True
        time.sleep(0.1)
    return False


def prepare_keys(server, commands, sha, pxat, problems):
    """Every key of every command, then a settled keyspace."""
    t = time.time()
    client = server.client
    client.call("FLUSHALL", "SYNC")
    for name, args, _ in commands:
        errors = prefill(client, expand(args, "", sha, pxat), CONFIG["keys"])
        if errors:
            problems.append("%s: %d errors while filling its keys" % (name, errors))
    if not settle_keyspace(client):
        problems.append("the keyspace was still rehashing after 60 s of waiting")
    log("  %d keys of each of %d commands filled in %.0f s" % (CONFIG["keys"], len(commands), time.time() - t))


def paired_runs(server, commands, sha, pxat, problems):
    """For each X, CONFIG["pairs"] rounds of (SET, X), (CL.THROTTLE, X), (Lua, X): two runs in
    a row on the same server each, the reference first in even rounds and X first in odd ones.
    100k random keys, pipeline 16, as in the headline table. Before every run, each key of its
    command is written again (one pipelined call per key) and CONFIG RESETSTAT: every measured
    call updates a live key, as SET PXAT's always do. Without it (BENCH_REFRESH=0: a short
    warm-up run instead), a token bucket, GCRA, throttle or CL.THROTTLE key (1-2 s of life with
    these arguments) idles during the other command's run and is often expired: 38-54% of
    RL.TOKENBUCKET's calls recreated their key in such runs against 16-30% in back-to-back
    runs at the same load, and the share grows as the machine slows down. Each command's pairs
    start from a flushed keyspace holding only its keys and the references'."""
    client = server.client
    by_name = {name: (expand(args, "", sha, pxat), stat) for name, args, stat in commands}
    prepare_keys(server, commands, sha, pxat, problems)
    rps = {}
    for name, (argv, _) in by_name.items():  # calibration: sizes the runs
        rps[name] = redis_benchmark(server.port, argv, 50_000, 16, True)

    def run(name):
        argv, stat = by_name[name]
        for _ in range(CONFIG["refresh"]):
            prefill(client, argv, CONFIG["keys"], replies=False)
        if not CONFIG["refresh"]:
            redis_benchmark(server.port, argv, max(1000, int(rps[name] * CONFIG["warmup_seconds"])), 16, True)
        client.call("CONFIG", "RESETSTAT")
        before = keys_and_expired(client)
        n = max(10_000, int(rps[name] * CONFIG["pair_seconds"]))
        rps[name] = redis_benchmark(server.port, argv, n, 16, True)
        usec, failed = commandstat(client, stat)
        created = created_share(before, keys_and_expired(client), command_totals(client, stat)["calls"])
        if failed:
            problems.append("%s: %d failed calls in a paired run" % (name, failed))
        return usec, created

    refs = [r for r in TARGET_REFS if r in by_name]
    pairs = []
    for x in [name for name in by_name if name not in TARGET_REFS]:
        t = time.time()
        # Only this phase's keys: the previous command's short-lived keys (a token bucket's
        # live 2 s) would otherwise expire by the 100k during this phase's first runs, the
        # server deleting them and shrinking its tables meanwhile (measured: RL.SLIDING after
        # RL.TOKENBUCKET 1.05-1.12x SET's time, on its own 0.96x).
        prepare_keys(server, [c for c in commands if c[0] in refs or c[0] == x], sha, pxat, problems)
        for i in range(CONFIG["pairs"]):
            for ref in refs:
                if i % 2 == 0:
                    ref_usec, ref_created = run(ref)
                    x_usec, x_created = run(x)
                else:
                    x_usec, x_created = run(x)
                    ref_usec, ref_created = run(ref)
                pairs.append({"x": x, "ref": ref, "x_usec": x_usec, "ref_usec": ref_usec,
                              "x_created": x_created, "ref_created": ref_created})
        log("  %-16s %s  (%d pairs, %.0f s)" % (x, "  ".join(
            "%s %s" % (label, pair_ratios(pairs, x, ref, higher)[0])
            for ref, label, higher in zip(TARGET_REFS, ("vs SET", "CL is", "Lua is"), (False, True, True))
            if ref in refs), CONFIG["pairs"] * len(refs), time.time() - t))
    return pairs


def pair_ratios(pairs, x, ref, theirs_over_ours):
    """The median ratio of the pairs of `x` with `ref` (as text) and the ratios themselves:
    ours / theirs (vs SET PXAT) or theirs / ours (how much slower CL.THROTTLE and Lua are)."""
    ratios = [(p["ref_usec"] / p["x_usec"]) if theirs_over_ours else (p["x_usec"] / p["ref_usec"])
              for p in pairs if p["x"] == x and p["ref"] == ref
              and p["x_usec"] > 0 and p["ref_usec"] > 0]  # nan (no commandstats) fails both
    return ("%.2fx" % statistics.median(ratios) if ratios else "-"), ratios


def callgrind_dump_costs(dump):
    """Inclusive instructions of the server's call() and of the whole program in a dump. A
    nested call() (a script's redis.call, a module's RedisModule_Call) is not counted twice:
    callgrind charges a recursive function's inclusive cost to its outermost invocation."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
                         capture_output=True, text=True).stdout
    total = in_call = None
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(\(.*?\)\s+)?(PROGRAM TOTALS|\S*:call\s+\[)", line)
        if m:
            n = int(m.group(1).replace(",", ""))
            if m.group(3) == "PROGRAM TOTALS":
                total = n
            elif in_call is None:
                in_call = n
    return in_call or 0, total or 0


def instructions(modules, commands, problems):
    """Instructions per call in call() of every command, perf_history.sh's method: the server
    under `valgrind --tool=callgrind --instr-atstart=no`; every key of every command filled
    (BENCH_KEYS each, as in the timed runs) and the keyspace settled, uninstrumented; then per
    command `callgrind_control -i on`, its keys written again, `callgrind_control -z`,
    BENCH_CG_CALLS calls by redis-benchmark -c 50 -P 16, `callgrind_control -d`, and the dump's
    inclusive cost of call() divided by the calls counted meanwhile in INFO commandstats. The measured calls draw their keys among the first BENCH_CG_KEYS (100),
    written again just before: under callgrind a call is ~50x slower, so over 100k keys a token
    bucket, GCRA, throttle or CL.THROTTLE key (1-2 s of life with these arguments) would be
    expired at every call and the figure would be the path that recreates a key, while the
    timed runs update live keys (the table gives both shares). RL.FIXED is measured at least 20 s
    before its 60 s window ends (all its keys expire then). The dumps stay in
    target/bench/callgrind/ for callgrind_annotate."""
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        problems.append("valgrind not found: no instruction counts (apt-get install valgrind)")
        return {}
    out_dir = os.path.join(os.path.dirname(CONFIG["targets_raw"]), "callgrind")
    os.makedirs(out_dir, exist_ok=True)
    tag = os.path.basename(CONFIG["server"])
    for f in os.listdir(out_dir):
        if f.startswith(tag + "."):
            os.remove(os.path.join(out_dir, f))
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               "--log-file=" + os.path.join(out_dir, tag + ".valgrind.log"),
               "--callgrind-out-file=" + os.path.join(out_dir, tag + ".%p")]
    server = Server(modules, ["--enable-debug-command", "local"], wrapper)
    pid = str(server.proc.pid)
    counts = {}
    try:
        client = server.client
        sha, _ = load_scripts(client, [])
        pxat = str(int(time.time() * 1000) + 24 * 3600 * 1000)
        prepare_keys(server, commands, sha, pxat, problems)
        for name, args, stat in commands:
            t = time.time()
            argv = expand(args, "", sha, pxat)
            if stat == "rl.fixed" and 60 - time.time() % 60 < 20:
                time.sleep(60 - time.time() % 60 + 0.5)
            # Instrumentation first: the keys are written again right before the counters are
            # zeroed, not before a slow `callgrind_control -i on` (a CL.THROTTLE key lives 1 s).
            control(pid, "-i", "on")
            prefill(client, argv, CONFIG["cg_keys"])
            before, calls0 = keys_and_expired(client), command_totals(client, stat)["calls"]
            control(pid, "-z")
            redis_benchmark(server.port, argv, CONFIG["cg_calls"], 16, True, CONFIG["cg_keys"])
            control(pid, "-d")
            control(pid, "-i", "off")
            calls = command_totals(client, stat)["calls"] - calls0
            created = created_share(before, keys_and_expired(client), calls)
            dumps = [os.path.join(out_dir, f) for f in os.listdir(out_dir)
                     if f.startswith("%s.%s." % (tag, pid))]
            in_call, total = callgrind_dump_costs(max(dumps, key=os.path.getmtime)) if dumps else (0, 0)
            if not calls or not in_call:
                problems.append("%s: no callgrind figure (%d calls)" % (name, calls))
                continue
            counts[name] = {"call": in_call / calls, "server": total / calls, "calls": calls,
                            "created": created}
            log("  %-16s %7.0f instr/call in call(), %7.0f in the server, %3.0f%% created a key "
                "(%d calls, %.0f s)" % (name, in_call / calls, total / calls, 100 * created, calls,
                                        time.time() - t))
    finally:
        server.stop()
    return counts


def control(pid, *args):
    """`callgrind_control ARGS PID` (a dump can take a while on a slow machine)."""
    subprocess.run(["callgrind_control"] + list(args) + [pid], capture_output=True, timeout=300)


def machine_cpu_s():
    """Busy CPU seconds of the whole machine so far (/proc/stat: user, nice, system and steal;
    interrupt time is left out, as loopback traffic of our own is counted there)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, _irq, _softirq, steal = [
            int(v) for v in f.readline().split()[1:9]]
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    """CPU seconds of this script and of its finished children (servers, redis-benchmark)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def process_cpu_s(pid):
    """CPU seconds a running process has used (/proc/<pid>/stat: utime + stime)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Busy:
    """How busy the machine was with other work during a measurement: the load average at the
    start and at the end, and the CPU that processes other than this script, its finished
    children and the running server `pid` used (in cores, on average)."""

    def __init__(self, pid):
        self.pid = pid
        self.t0, self.cpu0 = time.time(), machine_cpu_s()
        self.own0 = own_cpu_s() + process_cpu_s(pid)
        self.load0 = os.getloadavg()

    def summary(self):
        seconds = max(time.time() - self.t0, 1e-3)
        own = own_cpu_s() + process_cpu_s(self.pid) - self.own0
        others = (machine_cpu_s() - self.cpu0 - own) / seconds
        s = {"seconds": seconds, "load_start": "%.2f %.2f %.2f" % self.load0,
             "load_end": "%.2f %.2f %.2f" % os.getloadavg(), "others_cores": max(others, 0.0)}
        s["busy"] = busy_warning(s)
        return s


def busy_warning(s):
    """A warning when other work used the CPUs during the measurement, else ''. The load
    average alone would also count this script's own build just before (make builds first)."""
    if s["others_cores"] <= 0.2:
        return ""
    return ("the machine was busy (other processes used %.2f of the %d cores on average; load "
            "average %s at the start): time ratios are less reliable than on a quiet machine; "
            "the instruction ratios do not depend on it" % (
                s["others_cores"], os.cpu_count() or 0, s["load_start"].split()[0]))


def measure_targets(server, modules, sha, pxat, present, problems):
    """The paired runs and (unless BENCH_CALLGRIND=0) the instruction counts on CONFIG["server"]."""
    commands = target_commands(present)
    if all(name in TARGET_REFS for name, _, _ in commands):
        problems.append("no command to pair with the references (BENCH_TARGETS, BENCH_ONLY)")
        return None
    log("== the speed targets: paired runs (%d pairs per reference, %g s per run)" % (
        CONFIG["pairs"], CONFIG["pair_seconds"]))
    busy = Busy(server.proc.pid)
    pairs = paired_runs(server, commands, sha, pxat, problems)
    activity = busy.summary()
    instr = {}
    if CONFIG["callgrind"]:
        log("== the speed targets: instructions per call under callgrind (%d calls each)" % CONFIG["cg_calls"])
        instr = instructions(modules, commands, problems)
    return {"pairs": pairs, "instr": instr, "activity": activity,
            "settings": {"pairs": CONFIG["pairs"], "seconds": CONFIG["pair_seconds"],
                         "warmup": 0 if CONFIG["refresh"] else CONFIG["warmup_seconds"],
                         "refresh": CONFIG["refresh"],
                         "keys": CONFIG["keys"],
                         "clients": CONFIG["clients"],
                         "cg_calls": CONFIG["cg_calls"] if CONFIG["callgrind"] else 0,
                         "cg_keys": CONFIG["cg_keys"]}}


# ---------------------------------------------------------------- report


# Lease tables of N leases: per-call server time and bytes appended to the AOF (the same
# commands the replication stream carries) for a renewal, an acquire of a new id and its
# release, with ids of 36 bytes (a UUID) and of 256.
# The largest row holds 9,999 leases so that an acquire of a new id fits the limit of 10,000.
LEASE_SIZES = [(100, 36), (1000, 36), (9999, 36), (9999, 256)]


def command_totals(client, name):
    """`calls` and `usec` (totals) of a command in `INFO commandstats`."""
    stats = next((v for k, v in client.info("commandstats").items()
                  if k.lower() == "cmdstat_" + name), "")
    fields = dict(kv.split("=") for kv in stats.split(",") if "=" in kv)
    return {"calls": int(fields.get("calls", "0")), "usec": int(fields.get("usec", "0"))}


def lease_costs(modules, calls=2000):
    """The lease-cost rows, on a server of their own that appends to an AOF in a temporary
    directory (`dir` cannot be changed at run time), with no automatic rewrite (it would
    shrink the file during a measurement). Mind the disk with an older module (format
    version 1 rewrites the whole value on every call): its 256-byte row appends about 27 GB."""
    tmp = tempfile.mkdtemp(prefix="rl-bench-aof-")
    server = Server(modules, ["--dir", tmp, "--appendonly", "yes",
                              "--auto-aof-rewrite-percentage", "0"])
    try:
        return lease_rows(server, calls)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def lease_rows(server, calls):
    client = server.client
    deadline = time.time() + 60
    while time.time() < deadline:
        p = client.info("persistence")
        if p.get("aof_rewrite_in_progress") == "0" and p.get("aof_rewrite_scheduled") == "0":
            break
        time.sleep(0.05)
    out = []
    for n, id_len in LEASE_SIZES:
        key = "rl:leases:%d:%d" % (n, id_len)
        def ident(i, id_len=id_len):
            return ("%08d" % i).ljust(id_len, "x")

        def acquire(i, key=key):
            return ["RL.CONCURRENCY", key, "10000", "3600000", "ACQUIRE", ident(i)]

        client.pipeline([acquire(i) for i in range(n)])
        row = {"leases": n, "id_bytes": id_len,
               "strlen": client.call("STRLEN", key),
               "memory": client.call("MEMORY", "USAGE", key, "SAMPLES", "0")}
        cases = [
            ("renew", [acquire((i * 7919) % n) for i in range(calls)]),
            ("acquire+release", [c for i in range(calls // 2)
                                 for c in (acquire(n + i),
                                           ["RL.CONCURRENCY", key, "RELEASE", ident(n + i)])]),
        ]
        for case, commands in cases:
            before = command_totals(client, "rl.concurrency")
            aof0 = int(client.info("persistence").get("aof_current_size", 0))
            errors = client.pipeline(commands, batch=200)
            aof1 = int(client.info("persistence").get("aof_current_size", 0))
            after = command_totals(client, "rl.concurrency")
            done = after["calls"] - before["calls"]
            row[case] = {"usec": (after["usec"] - before["usec"]) / max(done, 1),
                         "aof_bytes": (aof1 - aof0) / max(len(commands), 1),
                         "errors": errors}
        client.call("DEL", key)
        out.append(row)
        log("  %5d leases of %3d-byte ids: renew %.1f us, %.0f B; acquire/release %.1f us, %.0f B"
            % (n, id_len, row["renew"]["usec"], row["renew"]["aof_bytes"],
               row["acquire+release"]["usec"], row["acquire+release"]["aof_bytes"]))
    return out


def lease_report(leases):
    if not leases:
        return []
    lines = ["## RL.CONCURRENCY: cost per call by lease count", "",
             "A key filled with N leases, then 2,000 calls pipelined: renewals of held ids, and "
             "acquires of new ids each followed by its release. Server time is `usec_per_call` "
             "from `INFO commandstats`; bytes are what the calls appended to the AOF, the same "
             "commands the replication stream carries (`SETRANGE` + `PEXPIREAT` in MULTI/EXEC).",
             "",
             "| leases | id bytes | STRLEN | MEMORY USAGE | renew usec | renew bytes | acquire/release usec | acquire/release bytes |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in leases:
        lines.append("| %d | %d | %d | %d | %.1f | %.0f | %.1f | %.0f |" % (
            r["leases"], r["id_bytes"], r["strlen"], r["memory"], r["renew"]["usec"],
            r["renew"]["aof_bytes"], r["acquire+release"]["usec"], r["acquire+release"]["aof_bytes"]))
    return lines + [""]


def machine_info(server):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else cpu
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"MemTotal:\s*(\d+)", f.read()).group(1))
            mem = "%.0f GiB" % (kb / 1024 / 1024)
    except (OSError, AttributeError):
        pass
    info = server.client.info("server")
    info.update(server.client.info("memory"))
    if "valkey_version" in info:
        name = "Valkey %s (%s)" % (info["valkey_version"], info.get("mem_allocator", "?"))
    else:
        name = "Redis %s (%s)" % (info.get("redis_version", "?"), info.get("mem_allocator", "?"))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "core/src"],
                           capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": "%s, %d cores, %s" % (cpu, os.cpu_count() or 0, mem),
        "os": "%s %s" % (platform.system(), platform.release()),
        "server": name,
        "commit": commit + (" + uncommitted changes in src/ or core/src" if dirty else ""),
        "load": "%.2f %.2f %.2f" % load,
        "scheduling": "nice %d, %s" % (CONFIG["nice"], "server and redis-benchmark pinned to CPUs 0 and 1"
                                        if CONFIG["pin"] else "not pinned"),
    }


def fmt_rps(x):
    return "%.0f" % x if x < 1000 else "{:,.0f}".format(x).replace(",", " ")


def spread(values):
    m = statistics.median(values)
    return "±%.0f%%" % (50 * (max(values) - min(values)) / m) if m else "-"


def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "-"


CONFIGS = [(True, 16), (True, 1), (False, 16), (False, 1)]


def config_name(random_keys, pipeline):
    return "%s, pipeline %d" % ("%d random keys" % CONFIG["keys"] if random_keys else "one hot key",
                                pipeline)


def report(results, mem, criterion, info, present, problems, leases=None):
    c = CONFIG
    med = {name: {cfg: statistics.median(r["rps"] for r in runs) for cfg, runs in per.items()}
           for name, per in results.items()}
    usec = {name: {cfg: statistics.median(r["usec"] for r in runs) for cfg, runs in per.items()}
            for name, per in results.items()}
    lines = ["# Benchmark results", "",
             "Generated by `make bench` (`scripts/bench.sh`); do not edit by hand.", "",
             "| | |", "|---|---|",
             "| date | %s |" % info["date"], "| machine | %s |" % info["cpu"],
             "| OS | %s |" % info["os"], "| server | %s |" % info["server"],
             "| redis-cell | %s |" % ("%s, same server" % c["cell_version"] if "CL.THROTTLE" in present
                                     else "not loaded"),
             "| redis-rl | commit %s, release build |" % info["commit"],
             "| load average at the end | %s (2 cores shared with other work: client throughput is noisy, "
             "`usec_per_call` less so) |" % info["load"],
             "| scheduling | %s |" % info.get("scheduling", "default"),
             "| runs | redis-benchmark, %d clients, %d repetitions per figure (median, ± half the "
             "min-max spread); %g s per run with %d random keys and pipeline 16, %g s in the "
             "other configurations |" % (c["clients"], c["reps"], c["seconds"], c["keys"],
                                          c["quick_seconds"]),
             ""]
    head = ("SET 25 B PXAT", "CL.THROTTLE", "Lua EVALSHA")
    lines += targets(med, usec, mem, head)
    lines += ["## Headline: %s" % config_name(True, 16), "",
              "Ratios are throughput over the other command's throughput in the same run (higher "
              "is better for us); `usec_per_call` is the server-side time from `INFO commandstats`.",
              ""]
    for random_keys, pipeline in CONFIGS:
        cfg = (random_keys, pipeline)
        if cfg != (True, 16):
            lines += ["## %s" % config_name(random_keys, pipeline), ""]
        lines += ["| command | req/s | spread | usec_per_call | vs SET PXAT | vs CL.THROTTLE | vs Lua | notes |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for name, *_ in COMMANDS:
            if name not in results or cfg not in results[name]:
                continue
            runs = results[name][cfg]
            rps = med[name][cfg]
            ratios = [ratio(rps, med.get(h, {}).get(cfg)) for h in head]
            failed = sum(r["failed"] for r in runs)
            note = NOTES.get(name, "")
            if failed:
                note = ("%d failed calls! " % failed) + note
            lines.append("| %s | %s | %s | %.2f | %s | %s | %s | %s |" % (
                name, fmt_rps(rps), spread([r["rps"] for r in runs]), usec[name][cfg],
                *ratios, note))
        lines.append("")
        if "RL.ALL x4" in med and cfg in med["RL.ALL x4"]:
            lines += all_comparison(med, usec, cfg)
    lines += twin_comparison(med, usec)
    if mem:
        base = mem.get("INCR+EXPIRE", {}).get("per_key")
        lines += ["## Memory per limiter key", "",
                  "`used_memory` delta over %d keys created on an empty server, divided by `DBSIZE` "
                  "(includes the key's share of the keyspace and expires dictionaries), and "
                  "`MEMORY USAGE` of one key. Key names are 15 bytes (`rl:` + 12 digits)."
                  % c["memory_keys"], "",
                  "| limiter | bytes/key | vs INCR+EXPIRE | MEMORY USAGE | stored as |",
                  "|---|---:|---:|---:|---|"]
        for name, m in mem.items():
            stored = m["type"] if m["strlen"] is None else "%s of %d bytes" % (m["type"], m["strlen"])
            flag = "" if m["keys"] == c["memory_keys"] and not m["errors"] else \
                " (%d keys, %d errors)" % (m["keys"], m["errors"])
            lines.append("| %s | %.0f | %s | %s | %s%s |" % (
                name, m["per_key"], ratio(m["per_key"], base), m["usage"], stored, flag))
        lines.append("")
    lines += lease_report(leases)
    if criterion:
        lines += ["## Core decisions (criterion)", "",
                  "`cargo bench` of the pure algorithms (and of the client's local fallback, if "
                  "benched): median time per decision, no Redis involved.", "",
                  "| benchmark | ns per decision |", "|---|---:|"]
        for name, ns in criterion:
            lines.append("| %s | %.1f |" % (name, ns))
        lines.append("")
    lines += ["## How the figures were made", "",
              "- One `redis-server` (Debian's, no persistence) on a free loopback port with "
              "`libredis_rl.so` and redis-cell's `libredis_cell.so` loaded; the Lua script "
              "(`benches/lua/token_bucket.lua`, the design's verbatim) loaded with `SCRIPT LOAD`.",
              "- Every limiter is configured so that every call is allowed (the write path): "
              "capacity 10^9 refilled 1 per second (`RL.TOKENBUCKET k %s 1 1000`, "
              "`CL.THROTTLE k %s 1 1 1`, `RL.SLIDING k %s 60000`, the Lua script with capacity "
              "10^9, rate 1, `now` = %s fixed)." % (BIG, BIG, BIG, LUA_NOW),
              "- `FLUSHALL` before each command and configuration, then a calibration run (also the "
              "warm-up creating the keys) sizes the measured runs; `CONFIG RESETSTAT` before each run.",
              "- `GET` and `EXPIRE` run on keys pre-filled with 25-byte strings.",
              "- Environment: `BENCH_SECONDS`, `BENCH_QUICK_SECONDS`, `BENCH_REPS`, `BENCH_CLIENTS`, "
              "`BENCH_KEYS`, `BENCH_MEMORY_KEYS`, `BENCH_ONLY` (see `scripts/bench.py`).", ""]
    if problems:
        lines += ["## Problems during this run", ""] + ["- " + p for p in problems] + [""]
    return lines


def targets(med, usec, mem, head):
    """The throughput targets at 100k keys, pipeline 16: each as client throughput and server time."""
    cfg = (True, 16)
    goals = (1.0, 2.0, 4.0)
    base = mem.get("INCR+EXPIRE", {}).get("per_key") if mem else None
    out = ["## Targets (%s)" % config_name(True, 16), "",
           "Each ratio twice: client throughput (ours / theirs) and server time (`usec_per_call` "
           "theirs / ours). Goals: at least 1.0x SET PXAT, 2x CL.THROTTLE and 4x the Lua script; "
           "at most 1.1x the bytes per key of INCR+EXPIRE.", "",
           "| command | vs SET PXAT | vs CL.THROTTLE | vs Lua | bytes/key vs INCR+EXPIRE |",
           "|---|---|---|---|---|"]

    def verdict(x, goal, higher=True):
        ok = x >= goal if higher else x <= goal
        return "%.2fx%s" % (x, "" if ok else " (goal %gx)" % goal)

    for name, *_ in COMMANDS:
        if not name.startswith("RL.") or name == "RL.ALL x4" or cfg not in med.get(name, {}):
            continue
        cells = []
        for h, goal in zip(head, goals):
            theirs_rps, theirs_u = med.get(h, {}).get(cfg), usec.get(h, {}).get(cfg)
            if not theirs_rps:
                cells.append("-")
                continue
            cells.append("%s / %s" % (verdict(med[name][cfg] / theirs_rps, goal),
                                      verdict(theirs_u / usec[name][cfg], goal)))
        m = next((v for k, v in (mem or {}).items() if k.split(" (")[0] == name), None)
        cells.append(verdict(m["per_key"] / base, 1.1, higher=False) if m and base else "-")
        out.append("| %s | %s |" % (name, " | ".join(cells)))
    return out + [""]


def twin_comparison(med, usec):
    """Each algorithm as the module's command, as the Lua twin and the scripts users pick
    instead: the design's token bucket and redis_rate's GCRA (the twin's targets)."""
    rows = []
    for cfg in CONFIGS:
        for name in ("RL.TOKENBUCKET", "RL.TOKENBUCKET steady", "RL.SLIDING", "RL.FIXED", "RL.GCRA",
                     "RL.GCRA steady", "RL.THROTTLE", "RL.LOG", "RL.CONCURRENCY", "RL.ALL x4"):
            twin = TWIN + name
            if cfg not in med.get(name, {}) or cfg not in med.get(twin, {}):
                continue
            lua = usec.get("Lua EVALSHA", {}).get(cfg)
            gcra = usec.get("redis_rate GCRA", {}).get(cfg)
            script = usec.get(TWIN_SCRIPT, {}).get(cfg) if name == "RL.TOKENBUCKET" else None
            rows.append("| %s | %s | %s / %.2f | %s / %.2f | %s | %s | %s | %s |" % (
                config_name(*cfg), name, fmt_rps(med[name][cfg]), usec[name][cfg],
                fmt_rps(med[twin][cfg]), usec[twin][cfg],
                "%.2fx" % (usec[twin][cfg] / usec[name][cfg]) if usec[name][cfg] else "-",
                "%.2f" % script if script else "-",
                "%.2f (%.2fx)" % (lua, usec[twin][cfg] / lua) if lua else "-",
                "%.2f (%.2fx)" % (gcra, usec[twin][cfg] / gcra) if gcra else "-"))
    if not rows:
        return []
    return ["## Without the module: the Lua twin", "",
            "The same calls through `lua/rl.lua` (`FCALL`: the function library; server clock, "
            "values the module reads), next to the module's command; for the token bucket also the same file as "
            "a script (`EVALSHA`) and the design's Lua script (`now` sent by the client, float "
            "math) and redis_rate's GCRA script (when `REDIS_RATE=` names it; server clock, float math): the "
            "twin's targets are at most 1.0x of both. Cells: req/s / server usec_per_call.", "",
            "| configuration | command | module | twin (FCALL) | twin usec / module usec | "
            "twin as script usec | design's Lua usec (twin / it) | redis_rate GCRA usec (twin / it) |",
            "|---|---|---:|---:|---:|---:|---:|---:|"] + rows + [""]


def all_comparison(med, usec, cfg):
    """RL.ALL vs four single calls vs the design's loop, the last two derived from single runs."""
    def seq(parts):
        total_s = sum(k / med[n][cfg] for n, k in parts if cfg in med.get(n, {}))
        total_u = sum(k * usec[n][cfg] for n, k in parts if cfg in usec.get(n, {}))
        return (1 / total_s if total_s else 0), total_u
    all_rps, all_u = med["RL.ALL x4"][cfg], usec["RL.ALL x4"][cfg]
    singles = seq([("RL.TOKENBUCKET", 2), ("RL.SLIDING", 2)])
    loop = seq([("GET 25 B", 8), ("INCR", 4), ("EXPIRE", 4)])
    return ["Four dimensions per request (requests/s; the last two rows are derived from the single-"
            "command runs above: 1 / sum of 1/req/s, usec summed):", "",
            "| four dimensions as | requests/s | usec per request (server) | RL.ALL is |",
            "|---|---:|---:|---:|",
            "| one RL.ALL | %s | %.2f | |" % (fmt_rps(all_rps), all_u),
            "| 4 single RL calls (2 TOKENBUCKET + 2 SLIDING) | %s | %.2f | %s |" % (
                fmt_rps(singles[0]), singles[1], ratio(all_rps, singles[0])),
            "| the design's loop (GET, GET, INCR, EXPIRE per dimension) | %s | %.2f | %s |" % (
                fmt_rps(loop[0]), loop[1], ratio(all_rps, loop[0])), ""]


def criterion_results():
    """Median ns per decision of every criterion benchmark run since this bench started."""
    out = []
    base = CONFIG["criterion_dir"]
    if not os.path.isdir(base):
        return out
    for dirpath, _, files in os.walk(base):
        if "estimates.json" in files and os.path.basename(dirpath) == "new":
            path = os.path.join(dirpath, "estimates.json")
            if os.path.getmtime(path) < CONFIG["criterion_since"]:
                continue
            with open(path) as f:
                ns = json.load(f)["median"]["point_estimate"]
            name = os.path.relpath(os.path.dirname(dirpath), base)
            out.append((name, ns))
    return sorted(out)


# ---------------------------------------------------------------- main


# The speed goals: server time per call at most SET PXAT's (Redis) or 0.8x of it (Valkey), at
# least 2x faster than CL.THROTTLE and 4x than the design's Lua script; bytes per key at most
# those of `SET k <25 B> PXAT`.
TARGETS_TITLE = "## Speed targets"


def issue15_targets(runs):
    """The targets table: per server and command, the paired time ratios (median of the pairs,
    min-max) and the instruction ratios, with the goal next to every figure that misses it."""
    keys = next((r["targets"]["settings"]["keys"] for r in runs if r.get("targets")), CONFIG["keys"])
    out = ["%s (%d random keys, pipeline 16, server time per call)" % (TARGETS_TITLE, keys), "",
           "Goals: at most 1.0x SET PXAT's server time on Redis and 0.8x on Valkey; CL.THROTTLE and "
           "the Lua script at least 2x and 4x our time; bytes per key at most SET 25 B PXAT's. Each "
           "ratio twice: **time** from paired runs on one server (a run of the reference and a run "
           "of the command right after it or before it, alternately; before each run every key of "
           "its command written again and `CONFIG RESETSTAT`; `usec_per_call` of each run; the "
           "median ratio of the pairs and, in brackets, their min-max: noisy on a shared machine) "
           "and **instr** from instructions per call in the "
           "server's `call()` under callgrind (exact, the same on any machine; a time ratio also "
           "includes cache misses and the like, which instruction counts do not see). A figure "
           "that misses its goal says so. usec/call is the median of the command's paired runs, "
           "instr/call its instructions per call in `call()`. *New key*: the share of calls that "
           "created their key (none, or an expired one) rather than updating a live one, median of "
           "the timed runs / under callgrind: near 0% when every call updates a live key, as "
           "intended (a token bucket, GCRA, throttle or CL.THROTTLE key lives 1-2 s with these "
           "arguments, and all RL.FIXED keys expire at the end of each minute).", "",
           "| server | command | usec/call | instr/call | vs SET PXAT: time | instr | CL.THROTTLE is: time "
           "| instr | Lua script is: time | instr | bytes/key | vs SET bytes | new key |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []

    def verdict(x, goal, higher):
        ok = x >= goal if higher else x <= goal
        return "%.2fx%s" % (x, "" if ok else " (goal %s%gx)" % (">= " if higher else "<= ", goal))

    for run in runs:
        server = run["info"]["server"].split(" (")[0]
        t = run.get("targets")
        if not t:
            out.append("| %s | no paired runs in this run | | | | | | | | | | | |" % server)
            continue
        pairs, instr, mem = t["pairs"], t["instr"], run.get("memory", {})
        set_goal = 0.8 if server.startswith("Valkey") else 1.0
        set_b = mem.get("SET 25 B PXAT", {}).get("per_key")
        usec, created = {}, {}
        for p in pairs:
            for side in ("x", "ref"):
                usec.setdefault(p[side], []).append(p[side + "_usec"])
                created.setdefault(p[side], []).append(p.get(side + "_created", float("nan")))
        ins = {name: v["call"] for name, v in instr.items()}

        def new_key(name):
            timed = statistics.median(created[name])
            cg = instr.get(name, {}).get("created")
            return "%s / %s" % ("%.0f%%" % (100 * timed) if timed == timed else "-",
                                "%.0f%%" % (100 * cg) if cg is not None else "-")

        def time_cell(x, ref, goal, higher):
            ratios = pair_ratios(pairs, x, ref, higher)[1]
            if not ratios:
                return "-"
            return "%s (%.2f-%.2f)" % (verdict(statistics.median(ratios), goal, higher), min(ratios), max(ratios))

        def instr_cell(x, ref, goal, higher):
            if x not in ins or ref not in ins:
                return "-"
            return verdict(ins[ref] / ins[x] if higher else ins[x] / ins[ref], goal, higher)

        for x in [n for n in usec if n not in TARGET_REFS]:
            m = next((v for k, v in mem.items() if k.split(" (")[0] == x), None)
            out.append("| %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                server, x, statistics.median(usec[x]), "%.0f" % ins[x] if x in ins else "-",
                time_cell(x, "SET 25 B PXAT", set_goal, False), instr_cell(x, "SET 25 B PXAT", set_goal, False),
                time_cell(x, "CL.THROTTLE", 2.0, True), instr_cell(x, "CL.THROTTLE", 2.0, True),
                time_cell(x, "Lua EVALSHA", 4.0, True), instr_cell(x, "Lua EVALSHA", 4.0, True),
                "%.0f" % m["per_key"] if m else "-",
                verdict(m["per_key"] / set_b, 1.0, False) if m and set_b else "-", new_key(x)))
        for ref, label in zip(TARGET_REFS, ("SET 25 B PXAT (floor)", "CL.THROTTLE", "Lua script")):
            if ref in usec:
                b = set_b if ref == "SET 25 B PXAT" else None
                out.append("| %s | %s | %.2f | %s | | | | | | | %s | | %s |" % (
                    server, label, statistics.median(usec[ref]),
                    "%.0f" % ins[ref] if ref in ins else "-", "%.0f" % b if b else "", new_key(ref)))
        a, cfg = t["activity"], t["settings"]
        notes.append("- %s, %s, commit %s: %d pair(s) per reference and command, %g s per run after %s, "
                     "%d random keys of each command (all in one "
                     "server), pipeline 16, %d clients, %s; callgrind: %s. Paired runs took %.0f s; load "
                     "average %s at their start, %s at their end; other processes used %.2f cores "
                     "meanwhile.%s" % (
                         server, run["info"]["date"], run["info"]["commit"], cfg["pairs"], cfg["seconds"],
                         "a %g s warm-up" % cfg["warmup"] if cfg["warmup"]
                         else "all its keys written again (%dx)" % cfg.get("refresh", 1),
                         cfg["keys"], cfg["clients"], run["info"].get("scheduling", "not pinned"),
                         "%d calls per command over %d of its keys" % (cfg["cg_calls"], cfg.get("cg_keys", cfg["keys"]))
                         if cfg["cg_calls"] else "skipped",
                         a["seconds"], a["load_start"], a["load_end"], a["others_cores"],
                         " **Warning: %s.**" % a["busy"] if a["busy"] else ""))
    out += [""] + notes
    out += ["", "Under callgrind a call is about 50x slower: its measured calls draw from fewer keys "
            "(written again just before) so that short-lived limiter keys are live, as in the "
            "timed runs. `make bench-targets` rewrites this section alone; `make bench` the whole "
            "file.", ""]
    return out


def write_report(runs, criterion):
    lines = ["# Benchmark results", "",
             "Generated by `make bench` (`scripts/bench.sh`); do not edit by hand. One section per "
             "server, measured one after the other in the same run.", ""]
    if any(run.get("targets") for run in runs):
        lines += issue15_targets(runs)
    else:
        # BENCH_PAIRS=0: the targets were not measured; keep the section of the last run.
        lines += kept_sections(CONFIG["out"], (TARGETS_TITLE,))
    for run in runs:
        body = report(run["results"], run["memory"], None, run["info"], set(run["present"]),
                      run["problems"], run.get("leases"))
        lines += ["# " + run["info"]["server"], ""]
        for line in body[4:]:  # the title and its note are above, once
            lines.append("#" + line if line.startswith("## ") else line)
    if criterion:
        lines += ["# Core decisions (criterion)", "",
                  "`cargo bench` of the pure algorithms (and of the client's local fallback, if "
                  "benched): median time per decision, no Redis involved.", "",
                  "| benchmark | ns per decision |", "|---|---:|"]
        for name, ns in criterion:
            lines.append("| %s | %.1f |" % (name, ns))
        lines.append("")
    lines += kept_sections(CONFIG["out"])
    with open(CONFIG["out"], "w") as f:
        f.write("\n".join(lines))
    return lines


# Top-level sections of RESULTS.md that other scripts write and `make bench` keeps as they are.
KEPT_TITLES = ("# Cache misses per call",  # scripts/cache_misses.sh (make cache-misses)
               "# Cold paths and traffic shapes")  # scripts/cold_paths.py (make bench-shapes)


def kept_sections(path, titles=KEPT_TITLES):
    """The lines of the sections of the current file whose titles start with one of `titles`
    (each up to the next top-level heading), to be written again in the new report."""
    try:
        with open(path) as f:
            old = f.read().split("\n")
    except FileNotFoundError:
        return []
    kept = []
    for i, line in enumerate(old):
        if line.startswith(titles):
            end = next((j for j in range(i + 1, len(old)) if old[j].startswith("# ")), len(old))
            kept += old[i:end]
    return kept


def runs_from_raw(raw):
    """The runs of a raw results file (one server per run; older files hold one run)."""
    runs = []
    for r in raw.get("runs", [raw]):
        results = {}
        for name, random_keys, pipeline, per in r["results"]:
            results.setdefault(name, {})[(random_keys, pipeline)] = per
        runs.append(dict(r, results=results))
    return runs


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--report-only":
        # Re-renders RESULTS.md from the raw figures of the last run (no server needed).
        with open(CONFIG["raw"]) as f:
            raw = json.load(f)
        write_report(runs_from_raw(raw), criterion_results())
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--targets":
        targets_main()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--targets-report-only":
        # Re-renders the targets section from the raw figures of the last --targets run.
        with open(CONFIG["targets_raw"]) as f:
            print("\n".join(write_targets_section(json.load(f)["runs"])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--leases-only":
        # Only the lease-cost table (RL_MODULE picks the module: compare two builds).
        print("\n".join(lease_report(lease_costs([CONFIG["module"]]))))
        return
    servers = [s.strip() for s in CONFIG["servers"].split(",") if s.strip()] or [CONFIG["server"]]
    runs = []
    for server in servers:
        CONFIG["server"] = server
        log("== server %s" % server)
        runs.append(run_server())
    raw = {"runs": [dict(r, results=[[n, k, p, per] for n, by in r["results"].items()
                                     for (k, p), per in by.items()]) for r in runs]}
    os.makedirs(os.path.dirname(CONFIG["raw"]), exist_ok=True)
    with open(CONFIG["raw"], "w") as f:
        json.dump(raw, f, indent=1)
    lines = write_report(runs, criterion_results())
    print("\n".join(lines))


def run_server():
    """Every measurement on CONFIG["server"]: throughput, memory, lease costs."""
    check_tools()
    modules, problems = modules_and_problems()
    server = Server(modules, ["--enable-debug-command", "local"])
    try:
        client = server.client
        sha, present = load_scripts(client, problems)
        pxat = str(int(time.time() * 1000) + 24 * 3600 * 1000)
        only = {s.strip() for s in CONFIG["only"].split(",") if s.strip()}
        results = {}
        log("== throughput (%s)" % ", ".join(sorted(present)))
        for name, args, stat, need in COMMANDS:
            if need and need not in present:
                continue
            if only and name not in only:
                continue
            # Does one call work at all?
            try:
                client.call(*expand(args, "rl:check", sha, pxat))
            except resp.ReplyError as e:
                problems.append("%s: skipped, it replies `%s`" % (name, e))
                log("  %s skipped: %s" % (name, e))
                continue
            results[name] = {}
            for random_keys, pipeline in CONFIGS:
                seconds = CONFIG["seconds"] if (random_keys, pipeline) == (True, 16) else CONFIG["quick_seconds"]
                results[name][(random_keys, pipeline)] = measure(
                    server, name, args, stat, random_keys, pipeline, seconds, sha, pxat)
        targets = None
        if CONFIG["pairs"] > 0:
            if only:
                CONFIG["targets"] = ",".join(n for n in CONFIG["targets"].split(",") if n.strip() in only)
            targets = measure_targets(server, modules, sha, pxat, present, problems)
        log("== memory")
        mem = {}
        for name, commands, need in MEMORY:
            if need and need not in present:
                continue
            if only and name not in only:
                continue
            mem[name] = memory(server, commands, sha, pxat)
            log("  %-24s %6.1f bytes/key, MEMORY USAGE %s" % (name, mem[name]["per_key"], mem[name]["usage"]))
        leases = []
        if "RL.CONCURRENCY" in present and (not only or "RL.CONCURRENCY" in only):
            log("== lease costs")
            leases = lease_costs(modules)
        info = machine_info(server)
    finally:
        server.stop()
    return {"info": info, "present": sorted(present), "problems": problems, "memory": mem,
            "leases": leases, "results": results, "targets": targets}


def load_scripts(client, problems):
    """Loads the design's Lua script and the Lua twin; returns the script's sha and what the
    server offers (`lua`, `twin`, and every module command the COMMANDS table needs)."""
    with open(os.path.join(ROOT, "benches", "lua", "token_bucket.lua")) as f:
        sha = client.call("SCRIPT", "LOAD", f.read()).decode()
    present = {"lua"}
    with open(os.path.join(ROOT, "lua", "rl.lua")) as f:
        library = f.read()
    try:
        client.call("FUNCTION", "LOAD", "REPLACE", library)
        script = "#!lua\n" + library.split("\n", 1)[1]
        TWIN_SHA["sha"] = client.call("SCRIPT", "LOAD", script).decode()
        present.add("twin")
    except resp.ReplyError as e:
        problems.append("the Lua twin did not load: %s" % e)
    if CONFIG["redis_rate"]:
        with open(CONFIG["redis_rate"]) as f:
            TWIN_SHA["rsha"] = client.call("SCRIPT", "LOAD", f.read()).decode()
        present.add("redis_rate")
    for _, _, _, need in COMMANDS:
        if need and need not in ("lua", "twin", "redis_rate"):
            info = client.call("COMMAND", "INFO", need)
            if info and info[0] is not None:
                present.add(need)
    return sha, present


def check_tools():
    for tool in (CONFIG["server"], CONFIG["benchmark"]):
        if not shutil.which(tool) and not os.path.exists(tool):
            raise SystemExit("%s not found (make deps installs redis-server and redis-tools)" % tool)
    if not os.path.exists(CONFIG["module"]):
        raise SystemExit("%s not found: run cargo build --release first" % CONFIG["module"])


def modules_and_problems():
    """The modules to load (redis-rl, and redis-cell when built) and the problems so far."""
    modules, problems = [CONFIG["module"]], []
    if CONFIG["cell"] and os.path.exists(CONFIG["cell"]):
        modules.append(CONFIG["cell"])
    else:
        problems.append("redis-cell was not built: CL.THROTTLE is missing from this run")
    return modules, problems


def run_targets_server():
    """`--targets`: the speed targets alone on CONFIG["server"]: paired runs, instruction
    counts and bytes per key of SET PXAT and of each command measured."""
    check_tools()
    modules, problems = modules_and_problems()
    server = Server(modules, ["--enable-debug-command", "local"])
    try:
        sha, present = load_scripts(server.client, problems)
        pxat = str(int(time.time() * 1000) + 24 * 3600 * 1000)
        targets = measure_targets(server, modules, sha, pxat, present, problems)
        log("== memory")
        mem = {}
        measured = {p["x"] for p in (targets or {}).get("pairs", [])} | {"SET 25 B PXAT"}
        for name, commands, need in MEMORY:
            if name.split(" (")[0] in measured and (not need or need in present):
                mem[name] = memory(server, commands, sha, pxat)
                log("  %-24s %6.1f bytes/key" % (name, mem[name]["per_key"]))
        info = machine_info(server)
    finally:
        server.stop()
    return {"info": info, "problems": problems, "memory": mem, "targets": targets}


def write_targets_section(runs):
    """Replaces the targets section of RESULTS.md (up to the next top-level heading) with a new
    one, leaving the rest of the file as the last `make bench` wrote it."""
    section = issue15_targets(runs)
    problems = ["- %s: %s" % (r["info"]["server"].split(" (")[0], p) for r in runs for p in r["problems"]]
    if problems:
        section += ["Problems during this run:", ""] + problems + [""]
    try:
        with open(CONFIG["out"]) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        lines = ["# Benchmark results", ""]
    start = next((i for i, line in enumerate(lines) if line.startswith(TARGETS_TITLE)), None)
    if start is None:
        start = end = min(len(lines), 4)
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("# ")), len(lines))
    lines[start:end] = section
    with open(CONFIG["out"], "w") as f:
        f.write("\n".join(lines))
    return section


def targets_main():
    """`bench.py --targets`: the targets section alone, on every server of BENCH_SERVERS."""
    servers = [s.strip() for s in CONFIG["servers"].split(",") if s.strip()] or [CONFIG["server"]]
    t0, load0 = time.time(), os.getloadavg()
    log("== load average at the start: %.2f %.2f %.2f" % load0)
    runs = []
    for server in servers:
        CONFIG["server"] = server
        log("== server %s" % server)
        runs.append(run_targets_server())
    os.makedirs(os.path.dirname(CONFIG["targets_raw"]), exist_ok=True)
    with open(CONFIG["targets_raw"], "w") as f:
        json.dump({"runs": runs}, f, indent=1)
    print("\n".join(write_targets_section(runs)))
    print("load average at the start %.2f %.2f %.2f, at the end %.2f %.2f %.2f; %.0f s in all" % (
        load0 + os.getloadavg() + (time.time() - t0,)))
    for r in runs:
        if r["targets"] and r["targets"]["activity"]["busy"]:
            print("WARNING (%s): %s" % (r["info"]["server"], r["targets"]["activity"]["busy"]))


if __name__ == "__main__":
    main()
