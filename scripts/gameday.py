#!/usr/bin/env python3
"""Game day, scripted: fault injection against rl-gateway in front of Redis with the module.

For each failure mode (open, local, closed) it starts redis-server with the module on a free
loopback port (AOF on, fsync always, so a killed server comes back with its data), rl-gateway
in front of it, and a bounded, paced HTTP load (keep-alive, a few API keys, each offered
several times its limit) on loopback only. Then it injects faults in sequence, a few seconds
each: baseline; Redis killed (-9) and restarted on the same port; Redis frozen (SIGSTOP) and
resumed (SIGCONT); Redis restarted with an empty dataset; slow responses (a Lua busy loop,
EVAL, shorter and then longer than the gateway's Redis timeout).

Per phase it prints requests sent, 2xx, 429, 5xx, client-side latency p50/p99/max,
breaker transitions and decisions by source (deltas of the gateway's /healthz counters), the
time from recovery to the breaker closing, and over-admission: admitted requests minus what
the core's exact token bucket per key (the configured limit, run by rl-replay) admits for
the same request stream.
Everything it started is stopped at the end, on Ctrl-C and on errors.

Python 3 standard library only (RESP through scripts/resp.py). `make gameday` builds the
release binaries first (the module, rl-gateway and rl-replay) and writes benches/GAMEDAY.md.
"""

import argparse
import asyncio
import http.client
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import ports
import procs
import resp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Limits for the run (TOML for rl-gateway --config): every key is on the default tier.
LIMIT = 20  # per second, token bucket, burst = LIMIT
WINDOW_MS = 1000
CONFIG_TOML = f"""# written by scripts/gameday.py
dimensions = ["api_key"]
default_tier = "free"

[tiers.free]
limit = {LIMIT}
window_ms = {WINDOW_MS}
algorithm = "token_bucket"
"""

BUSY_LUA = (
    "local t = redis.call('TIME') "
    "local start = t[1] * 1000000 + t[2] "
    "local n = 0 "
    "repeat n = n + 1 t = redis.call('TIME') "
    "until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1]) * 1000 "
    "return n"
)


def log(msg):
    print(f"[gameday {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- Redis


class RedisServer:
    def __init__(self, binary, module, workdir):
        self.binary = binary
        self.module = module
        self.workdir = workdir
        self.port = ports.listen_port()
        self.proc = None
        self.stopped = False

    def start(self, empty=False):
        if empty:
            for name in os.listdir(self.workdir):
                path = os.path.join(self.workdir, name)
                if name.startswith("appendonly") or name.endswith(".rdb"):
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        cmd = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--loadmodule", self.module, "--dir", self.workdir, "--save", "",
            "--appendonly", "yes", "--appendfsync", "always",
            "--logfile", os.path.join(self.workdir, "redis.log"),
            "--protected-mode", "no",
        ]
        logpath = os.path.join(self.workdir, "redis.log")
        log_start = procs.log_size(logpath)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.stopped = False
        try:
            procs.wait_for_ping(self.proc, self.port, logpath, log_start)
        except RuntimeError:
            self.kill()
            raise

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.stopped = False

    def stop_signal(self, sig):
        self.proc.send_signal(sig)
        self.stopped = sig == signal.SIGSTOP

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.kill()


# --------------------------------------------------------------------------- gateway


class Gateway:
    def __init__(self, binary, redis_port, mode, args, workdir):
        self.port = ports.listen_port()
        self.logpath = os.path.join(workdir, f"gateway-{mode}.log")
        cfg = os.path.join(workdir, "gameday.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG_TOML)
        cmd = [
            binary, "--listen", f"127.0.0.1:{self.port}",
            "--redis", f"redis://127.0.0.1:{redis_port}/",
            "--config", cfg, "--failure-mode", mode,
            "--timeout-ms", str(args.timeout_ms),
            "--breaker-failures", str(args.breaker_failures),
            "--breaker-open-ms", str(args.breaker_open_ms),
            "--log", "info",
        ]
        self.logfile = open(self.logpath, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.logfile, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rl-gateway on port {self.port} exited ({self.proc.returncode}); "
                                   f"the end of {self.logpath}:\n" + procs.log_tail(self.logpath))
            try:
                self.healthz()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"rl-gateway on port {self.port} did not answer /healthz within 10 s; "
                           f"the end of {self.logpath}:\n" + procs.log_tail(self.logpath))

    def healthz(self, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            c.request("GET", "/healthz")
            r = c.getresponse()
            return json.loads(r.read())
        finally:
            if conn is None:
                c.close()

    def log_lines(self):
        self.logfile.flush()
        with open(self.logpath, "rb") as f:
            return sum(1 for _ in f)

    def cleanup(self):
        procs.stop(self.proc)
        self.logfile.close()


class HealthPoller(threading.Thread):
    """Polls /healthz every `interval` s: (monotonic time, breaker state, redis up/down)."""

    def __init__(self, gw, interval=0.05):
        super().__init__(daemon=True)
        self.gw, self.interval = gw, interval
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=2)
        while not self.stop.is_set():
            try:
                h = self.gw.healthz(conn)
                self.samples.append((time.monotonic(), h["breaker"], h["redis"]))
            except (OSError, http.client.HTTPException, ValueError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=2)
            self.stop.wait(self.interval)
        conn.close()


# --------------------------------------------------------------------------- HTTP load


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length, chunked = 0, False
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status


async def worker(port, key_index, key, rate, load, records, req_timeout):
    """One keep-alive connection sending `rate` requests per second (paced, no catch-up burst)."""
    reader = writer = None
    interval = 1.0 / rate
    next_t = time.monotonic()
    n = 0
    while True:
        now = time.monotonic()
        if now >= load.stop_at:
            break
        if next_t > now:
            await asyncio.sleep(next_t - now)
        next_t = max(next_t + interval, time.monotonic() - interval)
        n += 1
        req = (f"GET /api/items/{n % 1000} HTTP/1.1\r\nHost: gameday\r\n"
               f"X-API-Key: {key}\r\n\r\n").encode()
        t0 = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port), req_timeout)
            writer.write(req)
            status = await asyncio.wait_for(read_response(reader), req_timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
            status = 0
            if writer is not None:
                writer.close()
            reader = writer = None
        records.append((t0, time.monotonic() - t0, key_index, status))
    if writer is not None:
        writer.close()


class Load(threading.Thread):
    """The load, in its own thread and event loop, until `finish()` (or `max_s` seconds)."""

    def __init__(self, port, keys, conns_per_key, rate_per_conn, max_s, req_timeout):
        super().__init__(daemon=True)
        self.args = (port, keys, conns_per_key, rate_per_conn, req_timeout)
        self.stop_at = time.monotonic() + max_s
        self.records = []

    def finish(self):
        self.stop_at = time.monotonic()
        self.join()

    def run(self):
        asyncio.run(self.main())

    async def main(self):
        port, keys, conns, rate, req_timeout = self.args
        await asyncio.gather(*[
            worker(port, i, k, rate, self, self.records, req_timeout)
            for i, k in enumerate(keys) for _ in range(conns)
        ])


# --------------------------------------------------------------------------- analysis


def reference_admits(records, replay):
    """For each record index: would the token bucket of the configured limit (burst LIMIT,
    LIMIT per WINDOW_MS), one per key, admit it? Requests in send order, decided by the core's
    own code: `replay` is rl-replay (testkit/src/bin/replay.rs), which runs the module's exact
    integer token bucket on the trace."""
    order = sorted(range(len(records)), key=lambda i: records[i][0])
    trace = "".join(f"{records[i][2]} {round(records[i][0] * 1e6)} 1\n" for i in order)
    out = subprocess.run([replay, str(LIMIT), str(LIMIT), str(WINDOW_MS)], input=trace,
                         capture_output=True, text=True, check=True).stdout.split()
    if len(out) != len(order):
        raise RuntimeError(f"rl-replay decided {len(out)} of {len(order)} requests")
    admit = [False] * len(records)
    for i, decision in zip(order, out):
        admit[i] = decision == "1"
    return admit


def pct(sorted_vals, p):
    if not sorted_vals:
        return 0.0
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[i]


def summarize(phases, records, replay, samples):
    admit = reference_admits(records, replay)
    rows = []
    for ph in phases:
        idx = [i for i, r in enumerate(records) if ph["start"] <= r[0] < ph["end"]]
        lat = sorted(records[i][1] * 1000 for i in idx)
        st = [records[i][3] for i in idx]
        ok = sum(1 for s in st if 200 <= s < 300)
        allowed = sum(1 for i in idx if admit[i])
        d = {k: ph["h1"]["stats"][k] - ph["h0"]["stats"][k] for k in ph["h0"]["stats"]}
        close_ms = None
        if ph.get("recovered") is not None and d["breaker_opened"] > 0:
            after = [s for s in samples if s[0] >= ph["recovered"] and s[1] == "closed"]
            if after:
                close_ms = (after[0][0] - ph["recovered"]) * 1000
        rows.append({
            "phase": ph["name"], "sent": len(idx), "ok": ok,
            "r429": sum(1 for s in st if s == 429),
            "r5xx": sum(1 for s in st if 500 <= s < 600),
            "err": sum(1 for s in st if s == 0),
            "p50": pct(lat, 50), "p99": pct(lat, 99), "max": lat[-1] if lat else 0.0,
            "opened": d["breaker_opened"], "closed": d["breaker_closed"],
            "local": d["local"], "fail_open": d["fail_open"], "fail_closed": d["fail_closed"],
            "deny_cache": d["deny_cache"], "redis_errors": d["redis_errors"],
            "allowed": allowed, "over": ok - allowed, "close_ms": close_ms,
            "log_lines": ph["log1"] - ph["log0"], "outage_ms": ph.get("outage_ms"),
        })
    return rows


HEADER = ("| phase | outage ms | sent | 2xx | 429 | 5xx | conn err | p50 ms | p99 ms | max ms "
          "| breaker open/close | close after recovery ms | local | fail-open | fail-closed "
          "| deny cache | limit allows | over-admitted | log lines |")


def table(rows):
    out = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    for r in rows:
        out.append(
            f"| {r['phase']} | {r['outage_ms'] if r['outage_ms'] is not None else '-'} "
            f"| {r['sent']} | {r['ok']} | {r['r429']} | {r['r5xx']} | {r['err']} "
            f"| {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} "
            f"| {r['opened']}/{r['closed']} "
            f"| {'-' if r['close_ms'] is None else round(r['close_ms'])} "
            f"| {r['local']} | {r['fail_open']} | {r['fail_closed']} | {r['deny_cache']} "
            f"| {r['allowed']} | {r['over']:+d} | {r['log_lines']} |")
    return "\n".join(out)


# --------------------------------------------------------------------------- the run


class Busy(threading.Thread):
    """Back-to-back EVAL busy loops of `busy_ms`, `gap_ms` apart, until stopped."""

    def __init__(self, port, busy_ms, gap_ms):
        super().__init__(daemon=True)
        self.port, self.busy_ms, self.gap_ms = port, busy_ms, gap_ms
        self.stop = threading.Event()
        self.calls = 0
        self.error = None

    def run(self):
        try:
            c = resp.Connection(self.port, timeout=10)
            sha = c.call("SCRIPT", "LOAD", BUSY_LUA)
            while not self.stop.is_set():
                c.call("EVALSHA", sha, 0, self.busy_ms)
                self.calls += 1
                self.stop.wait(self.gap_ms / 1000.0)
            c.close()
        except Exception as e:  # reported by the driver
            self.error = e


def run_mode(mode, args, binaries, workdir):
    redis_bin, module, gateway_bin, replay_bin = binaries
    rdir = os.path.join(workdir, f"redis-{mode}")
    os.makedirs(rdir)
    redis = RedisServer(redis_bin, module, rdir)
    gw = poller = load = None
    try:
        redis.start()
        gw = Gateway(gateway_bin, redis.port, mode, args, workdir)
        poller = HealthPoller(gw)
        poller.start()
        keys = [f"gameday-key-{i}" for i in range(args.keys)]
        p = args.phase_s
        load = Load(gw.port, keys, args.conns, args.rate, 300, max(2.0, 20 * args.timeout_ms / 1000))
        phases = []

        def begin(name):
            ph = {"name": name, "start": time.monotonic(), "h0": gw.healthz(), "log0": gw.log_lines()}
            phases.append(ph)
            return ph

        def end(ph):
            ph["end"] = time.monotonic()
            ph["h1"] = gw.healthz()
            ph["log1"] = gw.log_lines()

        # Warm-up: the gateway's first Redis call connects; start once it has answered.
        deadline = time.monotonic() + 10
        while gw.healthz()["stats"]["redis_calls"] == 0 and time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=2)
            conn.request("GET", "/api/items/0", headers={"X-API-Key": "gameday-warmup"})
            conn.getresponse().read()
            conn.close()
        load.start()
        time.sleep(1.0)  # connections up, buckets drained to the steady state

        ph = begin("baseline")
        time.sleep(p)
        end(ph)

        def outage(name, fault, recover, settle=args.recover_s):
            """A phase: `fault()`, then `recover()`; the outage lasts from the fault to the
            end of the recovery, then `settle` seconds of traffic follow."""
            ph = begin(name)
            t = time.monotonic()
            fault()
            recover()
            ph["recovered"] = time.monotonic()
            ph["outage_ms"] = round((ph["recovered"] - t) * 1000)
            time.sleep(settle)
            end(ph)

        def then_wait(action):
            def run():
                action()
                time.sleep(p)
            return run

        outage("kill -9, restart (AOF kept)", then_wait(redis.kill), redis.start)
        outage("SIGSTOP, SIGCONT", then_wait(lambda: redis.stop_signal(signal.SIGSTOP)),
               lambda: redis.stop_signal(signal.SIGCONT))
        outage("restart, empty dataset", redis.kill, lambda: redis.start(empty=True),
               settle=args.recover_s + 0.5)

        for busy_ms in (args.timeout_ms * 2 // 5, args.timeout_ms * 2):
            busy = Busy(redis.port, busy_ms, args.slow_gap_ms)

            def done(busy=busy):
                busy.stop.set()
                busy.join()
                if busy.error:
                    raise RuntimeError(f"busy loop: {busy.error}")

            outage(f"slow: EVAL busy {busy_ms} ms", then_wait(busy.start), done)

        load.finish()
        poller.stop.set()
        poller.join()
        if args.keep:
            with open(os.path.join(workdir, f"trace-{mode}.json"), "w") as f:
                json.dump({"phases": [{k: ph[k] for k in ("name", "start", "end")} | {"recovered": ph.get("recovered")} for ph in phases],
                           "health": poller.samples, "requests": load.records}, f)
        return summarize(phases, load.records, replay_bin, poller.samples)
    finally:
        if load:
            load.stop_at = 0
        if poller:
            poller.stop.set()
        if gw:
            gw.cleanup()
        redis.cleanup()


def checks(mode, rows, args):
    """The issue's expectations, as (ok, text)."""
    out = []
    outage = [r for r in rows if r["phase"] != "baseline" and not r["phase"].startswith(
        f"slow: EVAL busy {args.timeout_ms * 2 // 5} ")]
    if mode in ("open", "local"):
        n5 = sum(r["r5xx"] + r["err"] for r in rows)
        out.append((n5 == 0, f"{mode}: no 5xx and no connection errors (got {n5})"))
    else:
        n5 = sum(r["r5xx"] for r in outage)
        out.append((n5 > 0, f"{mode}: outages answered 503 ({n5})"))
    for r in outage:
        # A restart of a few ms may be over before N calls fail: the breaker need not open.
        if not r["phase"].startswith("restart, empty"):
            out.append((r["opened"] >= 1, f"{mode}: breaker opened during '{r['phase']}' ({r['opened']}x)"))
        elif r["opened"] == 0:
            continue
        c = r["close_ms"]
        bound = args.breaker_open_ms + 300
        out.append((c is not None and c <= bound,
                    f"{mode}: breaker closed {'never' if c is None else f'{c:.0f} ms'} after recovery "
                    f"in '{r['phase']}' (bound: breaker-open-ms + 300 = {bound} ms)"))
    bound = 2 * args.timeout_ms + 50
    worst = max(r["p99"] for r in rows)
    out.append((worst <= bound, f"{mode}: p99 {worst:.1f} ms <= 2 x timeout + 50 = {bound} ms "
                                f"(a tier lookup and a check can each wait one timeout)"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="open,local,closed", help="failure modes, comma-separated")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
    ap.add_argument("--redis-server", default=os.environ.get("RL_SERVER", "redis-server"))
    ap.add_argument("--timeout-ms", type=int, default=50, help="gateway --timeout-ms")
    ap.add_argument("--breaker-failures", type=int, default=5)
    ap.add_argument("--breaker-open-ms", type=int, default=1000)
    ap.add_argument("--keys", type=int, default=4, help="API keys (each its own limit)")
    ap.add_argument("--conns", type=int, default=2, help="keep-alive connections per key")
    ap.add_argument("--rate", type=float, default=50, help="requests/s per connection")
    ap.add_argument("--phase-s", type=float, default=2.0, help="seconds of each fault")
    ap.add_argument("--recover-s", type=float, default=2.5, help="seconds after each recovery")
    ap.add_argument("--slow-gap-ms", type=int, default=5, help="pause between busy scripts")
    ap.add_argument("--out", default=os.path.join(ROOT, "benches", "GAMEDAY.md"), help="'' = no file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when an expectation fails")
    args = ap.parse_args()

    rel = os.path.join(args.target_dir, "release")
    binaries = (shutil.which(args.redis_server) or args.redis_server,
                os.path.join(rel, "libredis_rl.so"), os.path.join(rel, "rl-gateway"),
                os.path.join(rel, "rl-replay"))
    for b in binaries:
        if not os.path.exists(b):
            sys.exit(f"gameday: {b} not found "
                     "(cargo build --release -p redis-rl -p rl-gateway -p redis-rl-testkit)")
    version = subprocess.run([binaries[0], "--version"], capture_output=True, text=True).stdout.strip()

    # Ctrl-C and SIGTERM unwind through the finally blocks that stop every process.
    # (SIGINT explicitly: a shell starts background jobs with it ignored.)
    def interrupt(*_):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    workdir = tempfile.mkdtemp(prefix="rl-gameday-")
    results, all_checks = [], []
    started = time.monotonic()
    try:
        for mode in args.modes.split(","):
            log(f"mode {mode}: starting ({workdir})")
            rows = run_mode(mode, args, binaries, workdir)
            print(f"\n### failure mode `{mode}`\n\n{table(rows)}\n", flush=True)
            c = checks(mode, rows, args)
            for ok, text in c:
                print(f"{'PASS' if ok else 'FAIL'}  {text}", flush=True)
            results.append((mode, rows, c))
            all_checks += c
    except KeyboardInterrupt:
        log("interrupted: everything started has been stopped")
        sys.exit(130)
    finally:
        if args.keep:
            log(f"kept {workdir} (gateway and redis logs)")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started

    if args.out:
        write_report(args, results, version, elapsed)
        log(f"wrote {os.path.relpath(args.out, os.getcwd())}")
    failed = [t for ok, t in all_checks if not ok]
    log(f"{len(all_checks) - len(failed)}/{len(all_checks)} expectations met in {elapsed:.0f} s")
    if failed and args.strict:
        sys.exit(1)


def write_report(args, results, version, elapsed):
    rate = args.keys * args.conns * args.rate
    lines = [
        "# Game day: fault injection against rl-gateway (generated by `make gameday`)",
        "",
        f"Run: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared), {version.split(' sha=')[0]}, {elapsed:.0f} s in all.",
        "",
        f"Setup: redis-server with the module on loopback (AOF, fsync always), rl-gateway "
        f"`--timeout-ms {args.timeout_ms} --breaker-failures {args.breaker_failures} "
        f"--breaker-open-ms {args.breaker_open_ms}`, config: API-key dimension only, every key on "
        f"the default tier, token bucket {LIMIT} per {WINDOW_MS} ms (burst {LIMIT}). Load: "
        f"{args.keys} API keys x {args.conns} keep-alive connections x {args.rate:g} req/s paced "
        f"= {rate:g} req/s offered ({args.conns * args.rate / LIMIT:g}x each key's limit), Python "
        f"asyncio client on loopback. Each fault lasts {args.phase_s:g} s, then "
        f"{args.recover_s:g} s of recovery belong to the same phase.",
        "",
        "Phases: **baseline**; **kill -9, restart (AOF kept)**: SIGKILL, restart on the same port "
        f"{args.phase_s:g} s later; **SIGSTOP, SIGCONT**: frozen for {args.phase_s:g} s; **restart, "
        "empty dataset**: SIGKILL, AOF deleted, restarted at once; **slow: EVAL busy N ms**: "
        f"back-to-back Lua busy loops of N ms ({args.slow_gap_ms} ms apart) for {args.phase_s:g} s, "
        "first shorter than the gateway's Redis timeout, then twice it.",
        "",
        "Columns: *outage ms*: fault start to recovery (Redis answering PING again, or the last "
        "busy script done). Latencies are measured by the load client (request written to "
        "response read). *breaker open/close*, *local*, *fail-open*, *fail-closed*, *deny cache*: "
        "deltas of the gateway's `/healthz` counters over the phase (decisions by source). "
        "*close after recovery*: from recovery to the first `/healthz` poll (every 50 ms) showing "
        "the breaker closed. *limit allows*: what the core's exact token bucket per key (the "
        "module's own code, run by `rl-replay`) admits for the same requests (send times, one "
        "bucket over the whole run); *over-admitted* = "
        "2xx - limit allows (negative: fewer admitted than the limit allows; ±2 is clock jitter "
        "between client and server). *log lines*: gateway log lines written during the phase.",
        "",
    ]
    for mode, rows, c in results:
        lines += [f"## failure mode `{mode}`", "", table(rows), ""]
        lines += [f"- {'PASS' if ok else '**FAIL**'} {t}" for ok, t in c]
        lines.append("")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
