"""The speed targets of `make bench` and `make bench-targets`: paired runs of every RL command
with SET PXAT, CL.THROTTLE and the Lua script on one server, instructions per call under
callgrind, and the targets section of benches/RESULTS.md."""

import json
import os
import re
import shutil
import statistics
import subprocess
import time

from bench_setup import (COMMANDS, CONFIG, MEMORY, TARGET_REFS, Server, check_tools,
                         command_totals, commandstat, created_share, expand, keys_and_expired,
                         load_scripts, log, machine_info, modules_and_problems, prefill,
                         redis_benchmark, settle_keyspace)
from bench_workloads import memory

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


# ---------------------------------------------------------------- the targets section


# The speed goals: server time per call at most SET PXAT's (Redis) or 0.8x of it (Valkey), at
# least 2x faster than CL.THROTTLE and 4x than the design's Lua script; bytes per key at most
# those of `SET k <25 B> PXAT`.
TARGETS_TITLE = "## Speed targets"


def targets_section(runs):
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
    section = targets_section(runs)
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
