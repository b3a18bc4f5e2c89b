"""The throughput runs, the bytes per key and the RL.CONCURRENCY lease costs of `make bench`."""

import shutil
import statistics
import tempfile
import time

from bench_setup import (CONFIG, HOT_KEY, RANDOM_KEY, Server, command_totals, commandstat, expand,
                         log, populate_strings, redis_benchmark)


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


# ---------------------------------------------------------------- report


# Lease tables of N leases: per-call server time and bytes appended to the AOF (the same
# commands the replication stream carries) for a renewal, an acquire of a new id and its
# release, with ids of 36 bytes (a UUID) and of 256.
# The largest row holds 9,999 leases so that an acquire of a new id fits the limit of 10,000.
LEASE_SIZES = [(100, 36), (1000, 36), (9999, 36), (9999, 256)]


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
