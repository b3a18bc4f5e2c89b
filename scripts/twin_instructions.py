#!/usr/bin/env python3
"""Instructions per call in the server's call() under callgrind for the Lua twin's commands and
the scripts it is measured against (the load of a shared machine does not move them), each on
its own keys in one server without the module:

    python3 scripts/twin_instructions.py [SERVER] [CALLS] [ONLY]

SERVER defaults to $RL_SERVER or redis-server, CALLS to 6000, ONLY (a word such as LOG or
GCRA) keeps the twin's commands whose names contain it, beside the two scripts (over 100 keys, pipeline 16,
every call allowed: the log then holds up to 60 entries a key). Counts are exact, but the Lua
garbage collector's cycles fall in or out of a run: at 2000 calls two runs of one command
differ by up to 2-3%, at 6000 by about 1-2%. redis_rate's GCRA script is included when
$RL_REDIS_RATE names its script_allow_n.lua (it is not kept in this repository). Needs
valgrind. Uses bench.py's server, callgrind and redis-benchmark helpers.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = bench.BIG
COMMANDS = [
    ("design's token bucket", ["EVALSHA", "{sha}", "1", "{k}", B, "1", "1700000000", "1"], "evalsha"),
    ("redis_rate GCRA", ["EVALSHA", "{rsha}", "1", "{k}", B, "1", "1", "1"], "evalsha"),
    ("twin RL.TOKENBUCKET", ["FCALL", "rl", "1", "{k}", "RL.TOKENBUCKET", B, "1", "1000"], "fcall"),
    ("twin RL.TOKENBUCKET steady", ["FCALL", "rl", "1", "{k}", "RL.TOKENBUCKET", B, B, "1000"], "fcall"),
    ("twin RL.SLIDING", ["FCALL", "rl", "1", "{k}", "RL.SLIDING", B, "60000"], "fcall"),
    ("twin RL.FIXED", ["FCALL", "rl", "1", "{k}", "RL.FIXED", B, "60000"], "fcall"),
    ("twin RL.GCRA", ["FCALL", "rl", "1", "{k}", "RL.GCRA", "1", "1000", "BURST", B], "fcall"),
    ("twin RL.GCRA steady", ["FCALL", "rl", "1", "{k}", "RL.GCRA", B, "1000", "BURST", B], "fcall"),
    ("twin RL.THROTTLE", ["FCALL", "rl", "1", "{k}", "RL.THROTTLE", B, "1", "1", "1"], "fcall"),
    ("twin RL.LOG", ["FCALL", "rl", "1", "{k}", "RL.LOG", "100", "60000"], "fcall"),
    # A 1 s window: entries leave it on most calls, so the log is rewritten (fewer entries).
    ("twin RL.LOG 1s window", ["FCALL", "rl", "1", "{k}", "RL.LOG", "100", "1000"], "fcall"),
    ("twin RL.CONCURRENCY", ["FCALL", "rl", "1", "{k}", "RL.CONCURRENCY", "100", "60000", "ACQUIRE",
                             "worker-1"], "fcall"),
]


def main():
    bench.CONFIG["server"] = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("RL_SERVER", "redis-server")
    calls_n = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
    only = sys.argv[3] if len(sys.argv) > 3 else None
    out_dir = os.path.join(ROOT, "target", "bench", "twin-callgrind")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--log-file=" + out_dir + "/log",
               "--callgrind-out-file=" + out_dir + "/cg.%p"]
    server = bench.Server([], [], wrapper)
    pid = str(server.proc.pid)
    try:
        c = server.client
        with open(os.path.join(ROOT, "benches", "lua", "token_bucket.lua")) as f:
            sha = c.call("SCRIPT", "LOAD", f.read()).decode()
        rsha = None
        if os.environ.get("RL_REDIS_RATE"):
            with open(os.environ["RL_REDIS_RATE"]) as f:
                rsha = c.call("SCRIPT", "LOAD", f.read()).decode()
        with open(os.path.join(ROOT, "lua", "rl.lua")) as f:
            c.call("FUNCTION", "LOAD", "REPLACE", f.read())
        for i, (name, args, stat) in enumerate(COMMANDS):
            if "{rsha}" in args and not rsha:
                continue
            if only and name.startswith("twin") and only not in name:
                continue
            argv = [a.replace("{k}", "k%d:__rand_int__" % i).replace("{sha}", sha)
                    .replace("{rsha}", rsha or "") for a in args]
            bench.control(pid, "-i", "on")
            bench.prefill(c, argv, 100)
            calls0 = bench.command_totals(c, stat)["calls"]
            bench.control(pid, "-z")
            bench.redis_benchmark(server.port, argv, calls_n, 16, True, 100)
            bench.control(pid, "-d")
            bench.control(pid, "-i", "off")
            calls = bench.command_totals(c, stat)["calls"] - calls0
            dumps = [os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.startswith("cg.")]
            in_call, _ = bench.callgrind_dump_costs(max(dumps, key=os.path.getmtime))
            print("%-28s %8.0f instructions per call in call()  (%d calls)" % (name, in_call / max(calls, 1), calls),
                  flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
