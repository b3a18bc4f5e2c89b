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

Standard library only. Everything is tunable with environment variables (CONFIG in
bench_setup.py). The parts: bench_setup.py (settings, commands, the server and the tools every
measurement uses), bench_workloads.py (throughput, bytes per key, lease costs),
bench_targets.py (the speed targets) and bench_report.py (RESULTS.md); this file runs them.
"""

import json
import os
import sys
import time

import resp
from bench_report import CONFIGS, criterion_results, lease_report, runs_from_raw, write_report
# The names other scripts use through `import bench` (scripts/twin_instructions.py).
from bench_setup import (BIG, COMMANDS, CONFIG, MEMORY, Server, check_tools, command_totals,  # noqa: F401
                         expand, load_scripts, log, machine_info, modules_and_problems, prefill,
                         redis_benchmark)
from bench_targets import (callgrind_dump_costs, control, measure_targets, targets_main,  # noqa: F401
                           write_targets_section)
from bench_workloads import lease_costs, measure, memory


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


if __name__ == "__main__":
    main()
