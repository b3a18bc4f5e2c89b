"""`make bench`'s settings (CONFIG: every BENCH_* variable), the commands it measures, and
the tools every measurement uses: a server on a free loopback port, redis-benchmark, pipelined
key filling, INFO readers and what the machine and the server are."""

import datetime
import os
import platform
import re
import shutil
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


def command_totals(client, name):
    """`calls` and `usec` (totals) of a command in `INFO commandstats`."""
    stats = next((v for k, v in client.info("commandstats").items()
                  if k.lower() == "cmdstat_" + name), "")
    fields = dict(kv.split("=") for kv in stats.split(",") if "=" in kv)
    return {"calls": int(fields.get("calls", "0")), "usec": int(fields.get("usec", "0"))}


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
