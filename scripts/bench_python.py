"""The Python package's benchmark: builds of the package side by side, in the same run.

    python3 scripts/bench_python.py --python .venv/bin/python [--python /tmp/base/.venv/bin/python]

Starts one server with the module (``RL_SERVER``, default ``redis-server``; the module from
``target/release``, or ``RL_MODULE``), then for each interpreter given (each with its own
``redis_rl`` installed) runs the same workloads, rounds interleaved so both see the same
machine, and prints per workload the median of the rounds: calls per second and the
interpreter's CPU time per call (user + system), and with two interpreters the ratios of the
first to the second (calls/s first/second, CPU second/first: above 1, the first is faster,
cheaper). Workloads:

- ``cost check``: the package's own cost of one ``SyncLimiter.check`` without Redis (a
  client that answers at once with a reply of the module's shape); the same for a four-key
  ``check_all``;
- ``sync check``, ``sync check_all 4``: ``SyncLimiter`` against the server, one call at a time;
- ``async check x32``: ``Limiter.check`` with 32 calls in flight.

Bounded: ``ROUNDS`` (5) rounds of ``N`` (4000) calls per workload and interpreter. The
numbers of a shared machine move between runs; compare figures of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r'''
import asyncio, json, os, sys, time
import redis, redis.asyncio as aioredis
from redis_rl import Limiter, Policy, SyncLimiter

port, n, workload = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
policy = Policy.sliding(10**9, 60_000)
ONE = [1, 10**9, 10**9 - 1, 0, 60000]
ALL = [1, 0, [[10**9, 10**9 - 1, 0, 60000]] * 4]

class Canned:
    """A client that answers at once: the package's own cost."""
    def __init__(self, reply):
        self.reply = reply
    def execute_command(self, *args):
        return self.reply

def items(i):
    return [(f"b:{{t{i & 1023}}}:{k}", policy) for k in range(4)]

def run():
    if workload == "cost check":
        lim = SyncLimiter(Canned(ONE), deny_cache=0)
        return lambda: [lim.check(f"b:{i & 1023}", policy) for i in range(n)]
    if workload == "cost check_all 4":
        lim = SyncLimiter(Canned(ALL), deny_cache=0)
        return lambda: [lim.check_all(items(i)) for i in range(n)]
    if workload == "sync check":
        lim = SyncLimiter(redis.Redis(port=port), deny_cache=0, timeout=5.0)
        return lambda: [lim.check(f"b:{i & 1023}", policy) for i in range(n)]
    if workload == "sync check_all 4":
        lim = SyncLimiter(redis.Redis(port=port), deny_cache=0, timeout=5.0)
        return lambda: [lim.check_all(items(i)) for i in range(n)]
    if workload == "async check x32":
        async def main():
            lim = Limiter(aioredis.Redis(port=port, max_connections=32), deny_cache=0, timeout=5.0)
            async def worker(w):
                for i in range(w, n, 32):
                    await lim.check(f"b:{i & 1023}", policy)
            await asyncio.gather(*(worker(w) for w in range(32)))
            await lim.aclose()
        return lambda: asyncio.run(main())
    raise SystemExit(f"unknown workload {workload}")

body = run()
body()  # warm up: connections, the twin choice, caches
t0, c0 = time.perf_counter(), time.process_time()
body()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"rate": n / wall, "cpu_us": cpu / n * 1e6}))
'''

WORKLOADS = ["cost check", "cost check_all 4", "sync check", "sync check_all 4", "async check x32"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(workdir: str) -> "tuple[subprocess.Popen[bytes], int]":
    binary = os.environ.get("RL_SERVER", "redis-server")
    module = os.environ.get("RL_MODULE", os.path.join(ROOT, "target", "release", "libredis_rl.so"))
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir, "--loadmodule", module], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{binary} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", required=True, help="an interpreter with redis_rl installed")
    args = parser.parse_args()
    args.python = [os.path.abspath(p) if os.sep in p else p for p in args.python]
    n = int(os.environ.get("N", "4000"))
    rounds = int(os.environ.get("ROUNDS", "5"))
    workdir = tempfile.mkdtemp(prefix="rl-bench-py-")
    proc, port = start_server(workdir)
    results: Dict[str, Dict[str, List[Dict[str, Any]]]] = {w: {p: [] for p in args.python} for w in WORKLOADS}
    try:
        for _ in range(rounds):
            for workload in WORKLOADS:
                for python in args.python:
                    out = subprocess.run([python, "-c", WORKER, str(port), str(n), workload], check=True,
                                         capture_output=True, text=True, timeout=600, cwd=workdir)
                    results[workload][python].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    names = args.python
    head = " | ".join(f"{p}: calls/s, CPU us/call" for p in names)
    print(f"| workload | {head} |" + (" ratio calls/s, CPU |" if len(names) == 2 else ""))
    print("|---" * (1 + len(names) + (len(names) == 2)) + "|")
    for workload in WORKLOADS:
        cells, medians = [], []
        for p in names:
            rate = statistics.median(r["rate"] for r in results[workload][p])
            cpu = statistics.median(r["cpu_us"] for r in results[workload][p])
            medians.append((rate, cpu))
            cells.append(f"{rate:,.0f}, {cpu:.1f}")
        ratio = ""
        if len(names) == 2:
            (r0, c0), (r1, c1) = medians
            ratio = f" {r0 / r1:.2f}x, {c1 / c0:.2f}x |"
        print(f"| {workload} | " + " | ".join(cells) + " |" + ratio)
    print(f"\n{rounds} rounds of {n} calls per workload and interpreter, medians; "
          f"server: {os.environ.get('RL_SERVER', 'redis-server')} with the module, {sys.platform}.", file=sys.stderr)


if __name__ == "__main__":
    main()
