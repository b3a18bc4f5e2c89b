"""Cold paths: the first call on a key, and traffic shapes full of first calls, on one server.

Every limiter against SET PXAT, INCR+EXPIRE, the design's Lua token bucket and a GCRA script
of redis_rate's shape (benches/lua/gcra_tat.lua), with a per-client limit of 100 per hour
(so every key stays live while it is counted). Shapes, each run on an empty keyspace for each command in turn:

- first:  every call on a key never seen (keys 0..N-1), pipelined on one connection.
- zipf:   N calls over 10 million clients, Zipf (s = 1: client r with probability ~ 1/r), so
          most clients are seen once (the public-endpoint shape); the table says how many.
- return: every key written once, then expired (PEXPIRE 1 with the server's active expiry
          off, so the expired keys stay until touched: what idle expiry leaves), then called
          again: the lookup finds the key expired, deletes it and the call creates it anew.
- herd:   every key written once, FLUSHALL, then 50 clients call all keys at once (each its
          share, interleaved): every key cold at the same moment.
- live:   every key written once, then called again: its first update, for comparison.
- steady: every key written and updated once, then called again: the steady update path.

RL.THROTTLE is measured as the other limiters; RL.ALL with two keys (a token bucket and a
sliding window) against a request of two SETs. Under --callgrind, a second table splits a first
call's instructions into the module API's parts and SET's own (see PARTS).

Reported per shape and command: server time per request (usec from INFO commandstats, summed
over the request's commands: INCR and EXPIRE count as one request), bytes per live key
(used_memory after the shape minus before, over DBSIZE) and, with --callgrind, instructions per
request in the server's call() (the command's execution: keyspace, module, replication),
which a loaded machine does not blur. Bytes per live key: used_memory after the shape minus
after the flush before it, over DBSIZE (for "return", the recreated keys).

    python3 scripts/cold_paths.py                      # Redis 7.0, this build, all shapes
    python3 scripts/cold_paths.py --server "$VALKEY_SERVER" --modes callgrind --shapes first
    python3 scripts/cold_paths.py --module old.so --module target/release/libredis_rl.so
    python3 scripts/cold_paths.py --server redis-server --server "$VALKEY_SERVER" \
        --modes wall,callgrind --results benches/RESULTS.md     # what `make bench` runs

The standard library only; needs redis-server (or valkey-server), and valgrind for --callgrind.
"""

import argparse
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time

import ports
import procs
import resp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DESIGN_LUA = os.path.join(ROOT, "benches", "lua", "token_bucket.lua")
GCRA_LUA = os.path.join(ROOT, "benches", "lua", "gcra_tat.lua")
VALUE25 = "v" * 25
CLIENTS = 10_000_000
HERD_CLIENTS = 50

# name -> the commands of one request for key {k} ({pxat}: now + 60 s; {design}, {gcra}: the
# scripts' SHA1), and the commandstats names whose time the request costs.
COMMANDS = {
    "SET 25 B PXAT": ([["SET", "{k}", VALUE25, "PXAT", "{pxat}"]], ["set"]),
    "INCR+EXPIRE": ([["INCR", "{k}"], ["EXPIRE", "{k}", "3600"]], ["incr", "expire"]),
    "design's Lua": ([["EVALSHA", "{design}", "1", "{k}", "100", "0.0277778", "{now}", "1"]],
                     ["evalsha"]),
    "GCRA script": ([["EVALSHA", "{gcra}", "1", "{k}", "100", "100", "3600", "1"]], ["evalsha"]),
    "RL.TOKENBUCKET": ([["RL.TOKENBUCKET", "{k}", "100", "100", "3600000"]], ["rl.tokenbucket"]),
    "RL.SLIDING": ([["RL.SLIDING", "{k}", "100", "3600000"]], ["rl.sliding"]),
    "RL.FIXED": ([["RL.FIXED", "{k}", "100", "3600000"]], ["rl.fixed"]),
    "RL.GCRA": ([["RL.GCRA", "{k}", "100", "3600000", "BURST", "100"]], ["rl.gcra"]),
    "RL.THROTTLE": ([["RL.THROTTLE", "{k}", "99", "100", "3600", "1"]], ["rl.throttle"]),
    # RL.ALL's keys: two dimensions in one call against two SETs (one request each).
    "2 x SET 25 B PXAT": ([["SET", "{k}:a", VALUE25, "PXAT", "{pxat}"],
                           ["SET", "{k}:b", VALUE25, "PXAT", "{pxat}"]], ["set"]),
    "RL.ALL x2": ([["RL.ALL", "2", "{k}:a", "{k}:b", "TOKENBUCKET", "100", "100", "3600000",
                    "SLIDING", "100", "3600000"]], ["rl.all"]),
}
# The keys of a request, where they are not just {k} (the "return" shape expires them all).
KEYS = {"2 x SET 25 B PXAT": ["{k}:a", "{k}:b"], "RL.ALL x2": ["{k}:a", "{k}:b"]}
# The row each command's ratio is taken against (SET 25 B PXAT unless named here).
REFERENCE = {"RL.ALL x2": "2 x SET 25 B PXAT"}
# Where a request's instructions in call() go (callgrind's inclusive costs per request):
# part -> (the module API functions, without their RM_/VM_ prefix; SET's own functions). SET's
# are read among the callees of setGenericCommand, setCommand and call, so that a function
# the module's path also reaches (setKey, through RedisModule_StringTruncate) is not counted
# twice. What is left is dispatch, the arguments and the command's own work.
PARTS = [
    ("reply", ("ReplyWithArray", "ReplyWithLongLong"), ("addReply",)),
    ("open, close", ("OpenKey", "CloseKey", "KeyType", "ValueLength"),
     ("lookupKeyWrite", "lookupKey")),
    ("create", ("StringTruncate", "StringDMA", "StringSet"), ("setKey",)),
    ("expiry", ("SetAbsExpire", "GetAbsExpire"), ("setExpire",)),
    ("events", ("NotifyKeyspaceEvent", "SignalModifiedKey"), ("notifyKeyspaceEvent",)),
    ("propagation", ("ReplicateVerbatim", "Replicate"),
     ("rewriteClientCommandVector", "freeClientOriginalArgv", "alsoPropagate")),
]
SET_CALLERS = ("setGenericCommand", "setCommand", "call")
SHAPES = ("first", "zipf", "return", "herd", "live", "steady")


def log(msg):
    print(f"[cold {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Server:
    """The server under test (optionally under callgrind), on a port from ports.py."""

    def __init__(self, binary, module, callgrind, workdir):
        self.port = ports.listen_port()
        self.log = os.path.join(workdir, f"server-{self.port}.log")
        self.out = os.path.join(workdir, f"callgrind.{self.port}")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--enable-debug-command", "local", "--loadmodule", module]
        if callgrind:
            args = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={self.out}"] + args
        self.callgrind = callgrind
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + (120 if callgrind else 10)
        while True:
            try:
                if resp.call(self.port, "PING", timeout=5) == "PONG":
                    break
            except (OSError, resp.ReplyError, ConnectionError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                procs.stop(self.proc)
                raise RuntimeError(f"{binary} on port {self.port} did not start; the end of "
                                   f"{self.log}:\n" + procs.log_tail(self.log))
            time.sleep(0.1)
        self.conn = resp.Connection(self.port)

    def call(self, *args):
        return self.conn.call(*args)

    def stats(self):
        """commandstats name -> (calls, usec)."""
        out = {}
        for name, value in self.conn.info("commandstats").items():
            f = dict(kv.split("=") for kv in value.split(","))
            out[name.removeprefix("cmdstat_").lower()] = (int(f["calls"]), int(f["usec"]))
        return out

    def instructions(self, measured):
        """Runs `measured()` under instrumentation; the instructions of the server's call(),
        and of each of PARTS in it."""
        pid = str(self.proc.pid)
        for f in os.listdir(os.path.dirname(self.out)):
            if f.startswith(os.path.basename(self.out)):
                os.remove(os.path.join(os.path.dirname(self.out), f))
        subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-z", pid], capture_output=True, check=True)
        measured()
        subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=True)
        dumps = sorted((f for f in os.listdir(os.path.dirname(self.out))
                        if f.startswith(os.path.basename(self.out))),
                       key=lambda f: os.path.getmtime(os.path.join(os.path.dirname(self.out), f)))
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=calling",
                               "--threshold=100",
                               os.path.join(os.path.dirname(self.out), dumps[-1])],
                              capture_output=True, text=True).stdout
        return call_tree_costs(text)

    def stop(self):
        self.conn.close()
        procs.stop(self.proc, grace_s=30)


def call_tree_costs(text):
    """From `callgrind_annotate --inclusive=yes --tree=calling`: the inclusive cost of call()
    and of each of PARTS (a dict, with "call")."""
    own, callees, caller = {}, {}, None
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(\(.*?\)\s+)?([*>])\s+\S*?:([^\s']+)\S*\s+(\(\d[\d,]*x\)\s+)?\[", line)
        if not m:
            continue
        cost, name = int(m.group(1).replace(",", "")), m.group(4)
        if m.group(3) == "*":
            caller = name
            own.setdefault(name, cost)
        elif caller:
            callees.setdefault(caller, {}).setdefault(name, cost)
    out = {"call": own.get("call", 0)}
    for part, api, server in PARTS:
        module = sum(own.get(prefix + f, 0) for f in api for prefix in ("RM_", "VM_"))
        if module:
            out[part] = module
            continue
        # SET: among the callees of its own functions; the first of `server` found (e.g.
        # lookupKeyWrite on Redis 7.0, lookupKey on Valkey 9.1, which inlines the former).
        found = {}
        for c in SET_CALLERS:
            for f, cost in callees.get(c, {}).items():
                if f in server and f not in found:
                    found[f] = cost
        if part == "open, close":
            found = dict(list(found.items())[:1])
        out[part] = sum(found.values())
    out["the rest"] = out["call"] - sum(out[p] for p, _, _ in PARTS)
    return out


def expand(commands, key, subst):
    return [[a.replace("{k}", key).format(**subst) if "{" in a else a for a in c]
            for c in commands]


def key_of(i):
    return f"cl:{i:010d}"


def requests(shape, n, seed):
    """The key indexes of the measured requests, and of the keys to write first (if any)."""
    if shape == "zipf":
        rng = random.Random(seed)
        # s = 1: log-uniform ranks, P(rank ~ r) ~ 1/r, over CLIENTS clients.
        return [min(CLIENTS - 1, int(CLIENTS ** rng.random()) - 1) for _ in range(n)], []
    if shape in ("return", "herd", "live", "steady"):
        return list(range(n)), list(range(n))
    return list(range(n)), []


def run_shape(server, shape, name, n, subst, callgrind):
    commands, stat_names = COMMANDS[name]
    order, prewrite = requests(shape, n, seed=7)
    # SYNC: a lazy flush would still be freeing memory while the baseline is read.
    server.call("FLUSHALL", "SYNC")
    before = int(server.conn.info("memory")["used_memory"])
    if prewrite:
        server.conn.pipeline([c for i in prewrite for c in expand(commands, key_of(i), subst)])
        if shape == "steady":
            server.conn.pipeline([c for i in prewrite for c in expand(commands, key_of(i), subst)])
        if shape == "return":
            server.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
            server.conn.pipeline([["PEXPIRE", k.replace("{k}", key_of(i)), "1"]
                                  for i in prewrite for k in KEYS.get(name, ["{k}"])])
            time.sleep(0.05)
        elif shape == "herd":
            server.call("FLUSHALL", "SYNC")
    server.call("CONFIG", "RESETSTAT")
    batches = [c for i in order for c in expand(commands, key_of(i), subst)]

    def measured():
        if shape == "herd":
            herd(server.port, batches, len(commands))
        else:
            server.conn.pipeline(batches, batch=1000)

    parts = server.instructions(measured) if callgrind else None
    instructions = parts["call"] if parts else None
    if not callgrind:
        measured()
    stats = server.stats()
    usec = sum(stats.get(s, (0, 0))[1] for s in stat_names)
    live = server.call("DBSIZE")
    after = int(server.conn.info("memory")["used_memory"])
    if shape == "return":
        server.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")
    return {"usec": usec / len(order), "bytes": (after - before) / live if live else 0,
            "instr": instructions / len(order) if instructions else None,
            "parts": {k: v / len(order) for k, v in parts.items()} if parts else None,
            "distinct": len(set(order)), "requests": len(order), "live": live}


def herd(port, commands, per_request):
    """`commands` from HERD_CLIENTS connections at once: request r goes to client r % 50,
    each client pipelines 20 requests, all clients send before any reply is read."""
    conns = [resp.Connection(port) for _ in range(HERD_CLIENTS)]
    reqs = [commands[i:i + per_request] for i in range(0, len(commands), per_request)]
    shares = [reqs[c::HERD_CLIENTS] for c in range(HERD_CLIENTS)]
    try:
        for start in range(0, max(len(s) for s in shares), 20):
            for conn, share in zip(conns, shares):
                chunk = [c for r in share[start:start + 20] for c in r]
                if chunk:
                    conn.sock.sendall(b"".join(resp.encode(c) for c in chunk))
            for conn, share in zip(conns, shares):
                for _ in range(sum(len(r) for r in share[start:start + 20])):
                    resp.read(conn.reader)
    finally:
        for c in conns:
            c.close()


def measure(binary, modules, callgrind, shapes, names, calls, reps):
    """The rows of one server in one mode (wall time, or instructions under callgrind)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="rl-cold-") as workdir:
        servers = [Server(binary, m, callgrind, workdir) for m in modules]
        try:
            subst = {"pxat": str(int(time.time() * 1000) + 3_600_000),
                     "now": str(int(time.time()))}
            for s in servers:
                for name, path in (("design", DESIGN_LUA), ("gcra", GCRA_LUA)):
                    with open(path) as f:
                        subst[name] = s.call("SCRIPT", "LOAD", f.read()).decode()
            for shape in shapes:
                for name in names:
                    # The module's builds alternate within a row; the other commands run on
                    # the first server only (they do not depend on the module).
                    targets = servers if name.startswith("RL.") else servers[:1]
                    for mi, server in enumerate(targets):
                        runs = [run_shape(server, shape, name, calls, subst, callgrind)
                                for _ in range(1 if callgrind else reps)]
                        runs.sort(key=lambda r: r["usec"])
                        r = dict(runs[len(runs) // 2], shape=shape, name=name,
                                 module=os.path.basename(modules[mi]) if len(targets) > 1 else "")
                        rows.append(r)
                        log(f"{shape} {name} {r['module']}: {r['usec']:.2f} us/request, "
                            f"{r['bytes']:.0f} B/key"
                            + (f", {r['instr']:.0f} instr/request" if r["instr"] else ""))
        finally:
            for s in servers:
                s.stop()
    return rows


SECTION = "# Cold paths and traffic shapes"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append",
                    help="server binary, repeatable (default: $RL_SERVER or redis-server)")
    ap.add_argument("--module", action="append",
                    help="module build(s) to compare (default: target/release/libredis_rl.so)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--calls", type=int, default=20000, help="requests per shape and command")
    ap.add_argument("--reps", type=int, default=3, help="runs per row (median; 1 under callgrind)")
    ap.add_argument("--modes", default="wall",
                    help="wall (usec_per_call), callgrind (instructions), or both: wall,callgrind")
    ap.add_argument("--results", default="",
                    help=f"replace the section '{SECTION}' of this markdown file with the tables")
    args = ap.parse_args()
    binaries = args.server or [os.environ.get("RL_SERVER", "redis-server")]
    modules = args.module or [os.path.join(ROOT, "target", "release", "libredis_rl.so")]
    shapes, names = args.shapes.split(","), args.commands.split(",")
    parts = []
    for binary in binaries:
        version = subprocess.run([binary, "--version"], capture_output=True,
                                 text=True).stdout.split(" sha=")[0]
        for mode in args.modes.split(","):
            load0 = os.getloadavg()[0]
            rows = measure(binary, modules, mode == "callgrind", shapes, names, args.calls,
                           args.reps)
            parts.append(table(rows, version, args, mode == "callgrind", load0,
                               os.getloadavg()[0]))
            print(parts[-1], flush=True)
    if args.results:
        command = shlex.join(["python3", "scripts/cold_paths.py"] + [
            os.path.basename(a) if a.startswith("/") else a for a in sys.argv[1:]])
        write_section(args.results, [SECTION, "", f"Written by `{command}` "
                                     f"(`make bench` runs it; see the script's header for the "
                                     f"shapes and settings).", ""] + parts)


def write_section(path, lines):
    """Replaces the top-level section `lines[0]` of `path` (up to the next `# ` heading), or
    appends it."""
    try:
        with open(path) as f:
            old = f.read().rstrip("\n").split("\n")
    except FileNotFoundError:
        old = []
    start = next((i for i, line in enumerate(old) if line == lines[0]), None)
    if start is None:
        new = old + [""] + lines
    else:
        end = next((j for j in range(start + 1, len(old)) if old[j].startswith("# ")), len(old))
        new = old[:start] + lines + old[end:]
    with open(path, "w") as f:
        f.write("\n".join(new).rstrip("\n") + "\n")


def table(rows, version, args, cg, load0, load1):
    lines = [f"## {version}: " + ("instructions per request in call(), callgrind" if cg
                                   else f"server time per request, median of {args.reps} runs"),
             "", f"{args.calls} requests per row; load average {load0:.1f} at the start, "
             f"{load1:.1f} at the end (a 2-core machine shared with other work: "
             + ("instruction counts do not depend on it" if cg else "wall figures are noisy; "
                "prefer the callgrind table") + "). RL.ALL x2's ratio is against two SETs.", ""]
    unit = "instr/request" if cg else "us/request"
    lines += [f"| shape | command | {unit} | vs SET PXAT | bytes/live key | live keys / requests |",
              "|---|---|---:|---:|---:|---:|"]
    value = {id(r): r["instr"] if cg else r["usec"] for r in rows}
    base = {(r["shape"], r["name"]): value[id(r)] for r in rows if not r["name"].startswith("RL.")}
    for r in rows:
        ref = base.get((r["shape"], REFERENCE.get(r["name"], "SET 25 B PXAT")))
        label = r["name"] + (f" ({r['module']})" if r["module"] else "")
        shown = f"{value[id(r)]:.0f}" if cg else f"{value[id(r)]:.2f}"
        ratio = f"{value[id(r)] / ref:.2f}x" if ref else ""
        lines.append(f"| {r['shape']} | {label} | {shown} | {ratio} | {r['bytes']:.0f} | "
                     f"{r['live']} / {r['requests']} |")
    if cg:
        lines += breakdown(rows)
    return "\n".join(lines) + "\n"


def breakdown(rows):
    """Where a first call's instructions in call() go, per request: the module API's parts
    against SET's own (see PARTS)."""
    shown = [r for r in rows if r["shape"] == "first" and r["parts"]
             and (r["name"].startswith("RL.") or "SET" in r["name"])]
    if not shown:
        return []
    names = [p for p, _, _ in PARTS] + ["the rest"]
    out = ["", "Where a first call's instructions go (per request, inclusive costs in `call()`): "
           "the module API's functions (reply: `ReplyWithArray` + `ReplyWithLongLong`; open, "
           "close: `OpenKey`, `KeyType`, `CloseKey`; create: `StringTruncate` + `StringDMA`; "
           "expiry: `SetAbsExpire`; events: `NotifyKeyspaceEvent` + `SignalModifiedKey`; "
           "propagation: `ReplicateVerbatim`) against SET's own (`addReply`, `lookupKeyWrite`, "
           "`setKey`, `setExpire`, `notifyKeyspaceEvent`, the argument rewrite for "
           "propagation); the rest is dispatch, the arguments and the command's own work.", "",
           "| command | call() | " + " | ".join(names) + " |",
           "|---|" + "---:|" * (len(names) + 1)]
    for r in shown:
        label = r["name"] + (f" ({r['module']})" if r["module"] else "")
        out.append(f"| {label} | {r['parts']['call']:.0f} | "
                   + " | ".join(f"{r['parts'][n]:.0f}" for n in names) + " |")
    return out


if __name__ == "__main__":
    main()
