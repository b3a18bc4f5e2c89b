#!/usr/bin/env python3
"""make fleet: a fleet of rl-gateway processes on a Redis Cluster, measured on loopback.

Starts a Redis Cluster of 3 masters with one replica each (the module loaded, AOF fsync
everysec, cluster-node-timeout 1 s so a failover takes a couple of seconds), a standalone
redis-server with the module, a small upstream (`rl-loadgen upstream`) and G `rl-gateway`
processes (default 4) in front of it, then drives them with `rl-loadgen run`: paced requests
over Zipf-ranked API keys in three tiers, Zipf-ranked client IPs (X-Forwarded-For, the
gateways trust 127.0.0.1) and three endpoints, spread uniformly over the gateways as a load
balancer would.

For each variant (gateway flags: with and without leases, static or fleet-aware fallback)
and on the cluster, phases in sequence: steady state; one key bursting at 10x; the master
that owns the global key killed (its replica takes over); all of Redis killed; recovery
(every node restarted). On the standalone server: steady state. Then `rl-loadgen analyze`
replays every request through the core's exact algorithms (the whole limit, one limiter per
key for the whole fleet) to count over- and under-admission per dimension.

Measured per phase: requests/s, answers, latency (and the latency of the same load sent
straight to the upstream), Redis calls per request (INFO commandstats of every master),
commands naming the global key (MONITOR on its owner during the steady state), the hottest
shard's share of RL calls, admitted versus the exact budget per dimension. Writes
benches/FLEET.md. Everything it started is stopped at the end, on Ctrl-C and on errors.

Python 3 standard library only (RESP through scripts/resp.py); `make fleet` builds the
release binaries first (the module, rl-gateway, rl-loadgen).
"""

import argparse
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

# Limits for the run, in 1 s windows so that a phase of a few seconds spans several windows.
# Multiples of 16, so that a fallback share (limit / fleet size) divides exactly for G <= 16.
CONFIG_TOML = """# written by scripts/fleet.py
key_prefix = "{prefix}"
failure_mode = "local"
trusted_proxies = ["127.0.0.1/32"]
dimensions = ["api_key", "ip", "endpoint", "global"]
default_tier = "free"

[tiers.free]
limit = 16
window_ms = 1000

[tiers.pro]
limit = 64
window_ms = 1000

[tiers.enterprise]
limit = 256
window_ms = 1000

[ip]
limit = 64
window_ms = 1000
algorithm = "sliding"

[endpoint]
limit = 64
window_ms = 1000
algorithm = "sliding"

[global]
limit = {global_limit}
window_ms = 1000
algorithm = "sliding"
{extra}"""

# The gateways' lease counters (/metrics), summed over the fleet per phase.
LEASE_METRICS = ["rl_lease_takes_total", "rl_lease_hits_total", "rl_lease_refunds_total",
                 "rl_lease_units_granted_total", "rl_lease_units_refunded_total",
                 "rl_lease_units_dropped_total"]

# Commands that are not the gateways' (this script's own INFO, MONITOR...).
NOT_GATEWAY = {"info", "monitor", "ping", "cluster", "command", "client", "hello", "config",
               "select", "readonly", "auth", "flushall", "hset", "debug", "replconf", "psync",
               "sync"}


def log(msg):
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now_us():
    return int(time.time() * 1_000_000)


# --------------------------------------------------------------------------- Redis


class Node:
    """One redis-server with the module, on a free loopback port and its own directory."""

    def __init__(self, binary, module, workdir, name, cluster):
        self.binary, self.module, self.cluster = binary, module, cluster
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        self.port = ports.cluster_port() if cluster else ports.listen_port()
        self.proc = None

    def start(self):
        cmd = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--loadmodule", self.module, "--dir", self.dir, "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec",
            "--logfile", os.path.join(self.dir, "redis.log"), "--protected-mode", "no",
        ]
        if self.cluster:
            cmd += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "1000"]
        logpath = os.path.join(self.dir, "redis.log")
        log_start = procs.log_size(logpath)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited "
                                   f"({self.proc.returncode}); the end of {logpath}:\n"
                                   + procs.log_tail(logpath, start=log_start))
            try:
                if resp.call(self.port, "PING", timeout=0.2) == "PONG":
                    return
            except (OSError, RuntimeError):
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING within 10 s; "
                           f"the end of {logpath}:\n" + procs.log_tail(logpath, start=log_start))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def call(self, *args, timeout=2.0):
        return resp.call(self.port, *args, timeout=timeout)


def form_cluster(nodes):
    """3 masters (the first three nodes), one replica each, by redis-cli --cluster create."""
    addrs = [f"127.0.0.1:{n.port}" for n in nodes]
    subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1",
                    "--cluster-yes"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)
    wait_cluster_ok(nodes, 30)


def wait_cluster_ok(nodes, limit_s):
    """Waits (bounded) until every live node reports cluster_state:ok and every slot has a
    live master; returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        try:
            if all(b"cluster_state:ok" in n.call("CLUSTER", "INFO") for n in nodes if n.alive()):
                return time.monotonic() - t0
        except (OSError, RuntimeError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the cluster was not ok within {limit_s} s")


def role(node):
    try:
        return node.call("ROLE", timeout=0.5)[0].decode()
    except (OSError, RuntimeError, IndexError):
        return "down"


def owner(nodes, key):
    """The live master serving `key`'s slot, by CLUSTER SLOTS."""
    live = [n for n in nodes if n.alive()]
    slot = live[0].call("CLUSTER", "KEYSLOT", key)
    for n in live:
        if role(n) != "master":
            continue
        for r in n.call("CLUSTER", "SLOTS"):
            if r[0] <= slot <= r[1]:
                port = r[2][1]
                return next(x for x in nodes if x.port == port)
    raise RuntimeError(f"no master serves slot {slot}")


def hset_tiers(nodes, pairs, cluster):
    """HSET rl:tiers on the node that owns it (following MOVED)."""
    args = ["HSET", "rl:tiers"] + [x for kv in pairs for x in kv]
    target = nodes[0]
    if cluster:
        target = owner(nodes, "rl:tiers")
    target.call(*args)


def commandstats(node):
    """Calls per command (lower case) of the gateways' commands, from INFO commandstats."""
    out = {}
    text = node.call("INFO", "commandstats").decode()
    for line in text.splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, _, rest = line[len("cmdstat_"):].partition(":")
        name = name.lower()
        if name.split("|")[0] in NOT_GATEWAY:
            continue
        out[name] = int(rest.split(",")[0].split("=")[1])
    return out


def metric(port, name):
    """The values of the Prometheus sample `name` on a gateway's /metrics (summed)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (OSError, http.client.HTTPException):
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and not line.startswith("#")]
    return sum(values) if values else None


class Monitor(threading.Thread):
    """MONITOR on one node: the commands it executed from the moment it starts until `stop()`
    is called (by the server's timestamps), and those naming the global key. Lines already
    sent are drained after `stop()` (the reader can lag on a busy machine), bounded in time."""

    def __init__(self, node, needle):
        super().__init__(daemon=True)
        self.node, self.needle = node, needle.encode()
        self.total = self.global_key = 0
        self.start_ts = time.time()
        self.stop_ts = None
        self.error = None

    def stop(self):
        self.stop_ts = time.time()
        self.join(20)

    def run(self):
        try:
            c = resp.Connection(self.node.port, timeout=0.5)
            c.sock.sendall(resp.encode(["MONITOR"]))
            c.reader.readline()  # +OK
            idle_since = None
            while True:
                if self.stop_ts is not None and (time.time() > self.stop_ts + 15 or (
                        idle_since is not None and time.monotonic() - idle_since > 1)):
                    break
                try:
                    line = c.reader.readline()
                except OSError:
                    idle_since = idle_since or time.monotonic()
                    continue
                if not line:
                    break
                idle_since = None
                try:
                    ts = float(line[1:line.index(b" ")])
                except ValueError:
                    continue
                if self.stop_ts is not None and ts > self.stop_ts:
                    break
                if ts < self.start_ts or b'"MONITOR"' in line or b'"INFO"' in line or b'"PING"' in line:
                    continue
                self.total += 1
                self.global_key += self.needle in line
            c.close()
        except Exception as e:  # reported by the driver
            self.error = e


# --------------------------------------------------------------------------- processes


class Proc:
    def __init__(self, cmd, logpath):
        self.logfile = open(logpath, "w")
        self.logpath = logpath
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.logfile,
                                     stderr=subprocess.STDOUT)

    def stop(self):
        procs.stop(self.proc)
        self.logfile.close()


def wait_http(port, proc, what, path="/healthz", limit_s=10):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{what} on port {port} exited ({proc.proc.returncode}); the end "
                               f"of {proc.logpath}:\n" + procs.log_tail(proc.logpath))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", path)
            c.getresponse().read()
            c.close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} on port {port} did not answer within {limit_s} s; the end of "
                       f"{proc.logpath}:\n" + procs.log_tail(proc.logpath))


def healthz(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/healthz")
        h = json.loads(c.getresponse().read())
        c.close()
        return h.get("stats", {})
    except (OSError, ValueError, http.client.HTTPException):
        return {}


def sum_stats(gateways):
    out = {}
    for g in gateways:
        for k, v in healthz(g.port).items():
            if isinstance(v, int):
                out[k] = out.get(k, 0) + v
    return out


# --------------------------------------------------------------------------- the run


class Run:
    def __init__(self, args, binaries, workdir):
        self.args, self.workdir = args, workdir
        self.redis_bin, self.module, self.gateway_bin, self.loadgen = binaries
        self.cluster = []
        self.standalone = None
        self.upstream = None
        self.gateways = []
        self.loads = []
        self.seed = 1

    # -- setup and teardown

    def start_redis(self):
        self.cluster = [Node(self.redis_bin, self.module, self.workdir, f"node{i}", True)
                        for i in range(6)]
        for n in self.cluster:
            n.start()
        form_cluster(self.cluster)
        self.standalone = Node(self.redis_bin, self.module, self.workdir, "standalone", False)
        self.standalone.start()
        pairs = [line.split() for line in subprocess.run(
            [self.loadgen, "tiers", "--keys", str(self.args.keys)], check=True,
            capture_output=True, text=True).stdout.splitlines()]
        hset_tiers(self.cluster, pairs, True)
        hset_tiers([self.standalone], pairs, False)

    def start_upstream(self):
        port = ports.listen_port()
        self.upstream = Proc([self.loadgen, "upstream", "--listen", f"127.0.0.1:{port}",
                              "--max-s", "900"], os.path.join(self.workdir, "upstream.log"))
        self.upstream.port = port
        wait_http(port, self.upstream, "the upstream", path="/")

    def start_gateways(self, variant, prefix, cluster):
        cfg = os.path.join(self.workdir, f"{prefix}.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG_TOML.format(prefix=prefix, global_limit=self.args.global_limit,
                                       extra=VARIANTS[variant].get("toml", "")))
        if cluster:
            redis = ",".join(f"redis://127.0.0.1:{n.port}/" for n in self.cluster[:3])
        else:
            redis = f"redis://127.0.0.1:{self.standalone.port}/"
        self.gateways = []
        for i in range(self.args.gateways):
            port = ports.listen_port()
            cmd = [self.gateway_bin, "--listen", f"127.0.0.1:{port}", "--redis", redis,
                   "--config", cfg, "--upstream", f"http://127.0.0.1:{self.upstream.port}",
                   "--tier-cache-ms", "600000", "--log", "warn"]
            cmd += ["--cluster"] if cluster else []
            cmd += [a.replace("{G}", str(self.args.gateways)) for a in VARIANTS[variant]["args"]]
            g = Proc(cmd, os.path.join(self.workdir, f"gw-{prefix}-{i}.log"))
            g.port = port
            self.gateways.append(g)
        for g in self.gateways:
            wait_http(g.port, g, "rl-gateway")
        return cfg

    def stop_gateways(self):
        for g in self.gateways:
            g.stop()
        self.gateways = []

    def cleanup(self):
        for p in self.loads:
            procs.stop(p, grace_s=1)
        self.stop_gateways()
        if self.upstream:
            self.upstream.stop()
        for n in self.cluster + ([self.standalone] if self.standalone else []):
            n.kill()

    # -- load

    def load(self, records, seconds, targets=None, burst_key=None, no_key=False, wait=True,
             rate=None):
        """`rl-loadgen run` for `seconds` at `rate` (default: the saturating --rate; a Popen
        when not `wait`)."""
        targets = targets or [f"127.0.0.1:{g.port}" for g in self.gateways]
        self.seed += 1
        cmd = [self.loadgen, "run", "--rate", str(rate or self.args.rate),
               "--duration-ms", str(int(seconds * 1000)), "--keys", str(self.args.keys),
               "--ips", str(self.args.ips), "--seed", str(self.seed), "--out", records]
        for t in targets:
            cmd += ["--target", t]
        if burst_key is not None:
            cmd += ["--burst-key", str(burst_key), "--burst-x", str(self.args.burst_x)]
        if no_key:
            cmd += ["--no-key"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.loads.append(p)
        if not wait:
            return p
        return finish(p, seconds)

    def masters(self):
        return [n for n in self.cluster if n.alive() and role(n) == "master"]

    def phase(self, phases, name, fn, stats_nodes=None, **extra):
        """Runs `fn()` as the phase `name`: its send interval, healthz and commandstats deltas."""
        nodes = stats_nodes() if stats_nodes else []
        s0 = {n.port: commandstats(n) for n in nodes}
        h0 = sum_stats(self.gateways)
        lease0 = {m: sum(v for v in (metric(g.port, m) for g in self.gateways) if v is not None)
                  for m in LEASE_METRICS}
        ph = {"name": name, "start_us": now_us()}
        ph.update(extra)
        fn(ph)
        ph["end_us"] = ph.get("end_us") or now_us()
        ph["fleet_size"] = [metric(g.port, "rl_fleet_size") for g in self.gateways]
        for m in LEASE_METRICS:
            vals = [metric(g.port, m) for g in self.gateways]
            ph.setdefault("lease1", {})[m] = sum(v for v in vals if v is not None)
        h1 = sum_stats(self.gateways)
        ph["healthz"] = {k: h1.get(k, 0) - h0.get(k, 0) for k in h1}
        ph["lease"] = {m.replace("rl_lease_", "").replace("_total", ""): ph["lease1"][m] - lease0[m]
                       for m in LEASE_METRICS}
        if nodes:
            try:
                s1 = {n.port: commandstats(n) for n in nodes}
                ph["shards"] = []
                for p in s0:
                    delta = {k: v - s0[p].get(k, 0) for k, v in s1[p].items() if v > s0[p].get(k, 0)}
                    ph["shards"].append({"port": p, "commands": delta,
                                         "rl": sum(v for k, v in delta.items() if k.startswith("rl.")),
                                         "all": sum(delta.values())})
            except (OSError, RuntimeError):
                pass
        phases.append(ph)
        log(f"  {name}: done")
        return ph

    # -- the phases

    def variant_cluster(self, variant, prefix):
        a = self.args
        records = os.path.join(self.workdir, f"{prefix}-cluster.rec")
        cfg = self.start_gateways(variant, prefix, True)
        phases = []
        try:
            # Connections, tier caches, fleet membership (a heartbeat a second).
            self.load(records, a.warmup_s, rate=a.steady_rate)
            gowner = owner(self.cluster, f"{prefix}:{{global}}")

            def monitored(rate, **kw):
                def run(ph):
                    mon = Monitor(gowner, "{global}")
                    mon.start()
                    self.load(records, a.phase_s, rate=rate, **kw)
                    mon.stop()
                    ph["monitor"] = {"port": gowner.port, "total": mon.total,
                                     "global": mon.global_key}
                return run

            self.phase(phases, "steady", monitored(a.steady_rate), self.masters)
            self.phase(phases, f"burst (key {a.burst_key} x{a.burst_x:g})",
                       monitored(a.steady_rate, burst_key=a.burst_key), self.masters,
                       burst_key=a.burst_key)
            self.phase(phases, "saturated", monitored(a.rate), self.masters)

            def failover(ph):
                victim = owner(self.cluster, f"{prefix}:{{global}}")
                p = self.load(records, a.failover_s, wait=False)
                time.sleep(a.kill_after_s)
                t = time.monotonic()
                victim.kill()
                new = None
                while time.monotonic() - t < a.failover_s:
                    try:
                        new = owner(self.cluster, f"{prefix}:{{global}}")
                        if new.port != victim.port:
                            break
                    except (OSError, RuntimeError, StopIteration):
                        pass
                    time.sleep(0.05)
                ph["failover_s"] = round(time.monotonic() - t, 2) if new and new.port != victim.port else None
                finish(p, a.failover_s)
                ph["end_us"] = now_us()
                victim.start()  # it rejoins as a replica of the promoted node
                wait_cluster_ok(self.cluster, 20)

            self.phase(phases, "failover (global key's master killed)", failover)

            def outage(ph):
                for n in self.cluster:
                    n.kill()
                ph["start_us"] = now_us()
                self.load(records, a.outage_s, burst_key=a.outage_burst_key)

            self.phase(phases, "all Redis killed", outage, burst_key=a.outage_burst_key)

            def recovery(ph):
                p = self.load(records, a.phase_s, wait=False)
                time.sleep(0.5)
                for n in self.cluster:
                    n.start()
                ph["cluster_ok_s"] = round(0.5 + wait_cluster_ok(self.cluster, 20), 2)
                finish(p, a.phase_s)

            self.phase(phases, "recovery (all restarted)", recovery)
        finally:
            self.stop_gateways()
        return self.analyze(cfg, records, phases)

    def variant_standalone(self, variant, prefix):
        a = self.args
        records = os.path.join(self.workdir, f"{prefix}-standalone.rec")
        cfg = self.start_gateways(variant, prefix, False)
        phases = []
        try:
            self.load(records, a.warmup_s, rate=a.steady_rate)

            def monitored(rate):
                def run(ph):
                    mon = Monitor(self.standalone, "{global}")
                    mon.start()
                    self.load(records, a.phase_s, rate=rate)
                    mon.stop()
                    ph["monitor"] = {"port": self.standalone.port, "total": mon.total,
                                     "global": mon.global_key}
                return run

            self.phase(phases, "steady (standalone)", monitored(a.steady_rate),
                       lambda: [self.standalone])
            self.phase(phases, "saturated (standalone)", monitored(a.rate),
                       lambda: [self.standalone])
        finally:
            self.stop_gateways()
        return self.analyze(cfg, records, phases)

    def direct(self):
        """The same load straight to the upstream: the latency without a gateway."""
        records = os.path.join(self.workdir, "direct.rec")
        phases = []
        self.phase(phases, "direct to upstream",
                   lambda ph: self.load(records, self.args.warmup_s + 2, rate=self.args.steady_rate,
                                        targets=[f"127.0.0.1:{self.upstream.port}"], no_key=True))
        cfg = os.path.join(self.workdir, "direct.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG_TOML.format(prefix="direct", global_limit=self.args.global_limit, extra=""))
        return self.analyze(cfg, records, phases)[0]

    def analyze(self, cfg, records, phases):
        pfile = records + ".phases.json"
        with open(pfile, "w") as f:
            json.dump([{k: ph[k] for k in ("name", "start_us", "end_us")}
                       | ({"burst_key": ph["burst_key"]} if "burst_key" in ph else {})
                       for ph in phases], f)
        out = subprocess.run([self.loadgen, "analyze", "--config", cfg, "--records", records,
                              "--phases", pfile], check=True, capture_output=True, text=True)
        report = json.loads(out.stdout)["phases"]
        for ph, r in zip(phases, report):
            r.update({k: v for k, v in ph.items() if k not in ("name", "start_us", "end_us")})
        return report


def finish(p, seconds):
    try:
        out, err = p.communicate(timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise RuntimeError("rl-loadgen did not finish in time")
    if p.returncode != 0:
        raise RuntimeError(f"rl-loadgen failed: {err.strip()}")
    return json.loads(out)


# Gateway flags per variant ({G}: the fleet size). A variant whose flags `rl-gateway --help`
# does not list is skipped.
VARIANTS = {
    "static": {
        "desc": "today's gateway: no leases, no fleet membership, static fallback "
                "(`--no-leases --no-fleet`, `--instances` left at 1)",
        "args": ["--no-leases", "--no-fleet"],
    },
    "static-g": {
        "desc": "no leases, static fallback with the right guess "
                "(`--no-leases --no-fleet --instances {G}`)",
        "args": ["--no-leases", "--no-fleet", "--instances", "{G}"],
    },
    "fleet-no-leases": {
        "desc": "fleet membership and fleet-aware fallback, no leases (`--no-leases`)",
        "args": ["--no-leases"],
    },
    "fleet": {
        "desc": "rl-gateway's defaults: leases on the global dimension (the fleet's leases "
                "capped at 10% of the limit), fleet membership, fleet-aware fallback (no flags)",
        "args": [],
    },
    "fleet-cap25": {
        "desc": "the defaults with the lease cap raised to 25% (`[leases] max_percent = 25`, "
                "see Scale below)",
        "args": [],
        "toml": "\n[leases]\nmax_percent = 25\n",
    },
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="static,fleet-no-leases,fleet,fleet-cap25",
                    help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--gateways", type=int, default=4, help="rl-gateway processes (4-16)")
    ap.add_argument("--rate", type=float, default=800,
                    help="requests/s offered in the saturated, failover, outage and recovery "
                         "phases (over the global limit)")
    ap.add_argument("--steady-rate", type=float, default=480,
                    help="requests/s offered in the warm-up, steady and burst phases (under "
                         "the global limit)")
    ap.add_argument("--keys", type=int, default=300, help="API keys (Zipf, s=1)")
    ap.add_argument("--ips", type=int, default=2000, help="client IPs (Zipf, s=0.8)")
    ap.add_argument("--global-limit", type=int, default=512, help="global limit per second")
    ap.add_argument("--burst-key", type=int, default=11, help="rank of the bursting key")
    ap.add_argument("--burst-x", type=float, default=10)
    ap.add_argument("--outage-burst-key", type=int, default=4,
                    help="rank of a key bursting (--burst-x) during the outage (free tier by default)")
    ap.add_argument("--warmup-s", type=float, default=1.5)
    ap.add_argument("--phase-s", type=float, default=6)
    ap.add_argument("--failover-s", type=float, default=8)
    ap.add_argument("--kill-after-s", type=float, default=1)
    ap.add_argument("--outage-s", type=float, default=6)
    ap.add_argument("--no-standalone", action="store_true")
    ap.add_argument("--lease-bound-ms", type=int, default=250,
                    help="the documented lease lifetime: the over-admission bound of the targets")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
    ap.add_argument("--redis-server", default=os.environ.get("RL_SERVER", "redis-server"))
    ap.add_argument("--out", default=os.path.join(ROOT, "benches", "FLEET.md"), help="'' = no file")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (logs, records); a failed run always keeps it")
    args = ap.parse_args()
    if not 1 <= args.gateways <= 16:
        sys.exit("fleet: --gateways must be between 1 and 16")

    rel = os.path.join(args.target_dir, "release")
    binaries = (shutil.which(args.redis_server) or args.redis_server,
                os.path.join(rel, "libredis_rl.so"), os.path.join(rel, "rl-gateway"),
                os.path.join(rel, "rl-loadgen"))
    for b in binaries:
        if not os.path.exists(b):
            sys.exit(f"fleet: {b} not found (cargo build --release --workspace)")
    help_text = subprocess.run([binaries[2], "--help"], capture_output=True, text=True).stdout
    variants = []
    for v in args.variants.split(","):
        if v not in VARIANTS:
            sys.exit(f"fleet: unknown variant {v!r} (known: {', '.join(VARIANTS)})")
        missing = [a for a in VARIANTS[v]["args"] if a.startswith("--") and a not in help_text]
        if missing:
            log(f"variant {v}: skipped, rl-gateway has no {' '.join(missing)}")
            continue
        variants.append(v)
    version = subprocess.run([binaries[0], "--version"], capture_output=True, text=True).stdout.strip()

    def interrupt(*_):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    workdir = tempfile.mkdtemp(prefix="rl-fleet-")
    started = time.monotonic()
    load0 = os.getloadavg()
    run = Run(args, binaries, workdir)
    results = {}
    failed = True  # until every variant ran: a failed run keeps its logs
    try:
        log(f"starting 6 cluster nodes, a standalone server and the upstream ({workdir})")
        run.start_redis()
        run.start_upstream()
        direct = run.direct()
        for i, v in enumerate(variants):
            log(f"variant {v}: cluster")
            results[(v, "cluster")] = run.variant_cluster(v, f"fv{i}")
            if not args.no_standalone:
                log(f"variant {v}: standalone")
                results[(v, "standalone")] = run.variant_standalone(v, f"fs{i}")
        failed = False
    except KeyboardInterrupt:
        log("interrupted: stopping everything started")
        run.cleanup()
        sys.exit(130)
    finally:
        run.cleanup()
        if failed:
            log(f"the run failed: its directory (server, gateway and load logs) is kept: {workdir}")
        elif args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    load1 = os.getloadavg()
    text = report(args, variants, results, direct, version, elapsed, load0, load1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        log(f"wrote {os.path.relpath(args.out, os.getcwd())}")


# --------------------------------------------------------------------------- the report


def f1(x):
    return "-" if x is None else f"{x:.1f}"


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def shard_metrics(ph):
    """(RL calls per request, all calls per request, hottest shard's share of RL calls)."""
    shards = ph.get("shards")
    answered = ph["ok"] + ph["r429"] + ph["r503"] + ph["other"]
    if not shards or not answered:
        return None, None, None
    rl = sum(s["rl"] for s in shards)
    total = sum(s["all"] for s in shards)
    hot = max(s["rl"] for s in shards) / rl if rl else None
    return rl / answered, total / answered, hot


def answered_of(ph):
    return ph["ok"] + ph["r429"] + ph["r503"] + ph["other"]


def touched(ph):
    """Share of answered requests whose handling named the global key (MONITOR)."""
    if not ph or "monitor" not in ph or not answered_of(ph):
        return None
    return ph["monitor"]["global"] / answered_of(ph)


def phases_by_name(phases):
    return {ph["name"].split(" ")[0]: ph for ph in phases}


def summary(variants, results, direct):
    """One row per variant: the numbers the issue's targets are about (also README's table)."""
    rows = [
        "| variant | global key touched per request: steady, cluster / standalone "
        "| saturated, cluster / standalone | hottest shard, steady / saturated "
        "| RL calls per request, steady (cluster / standalone) "
        "| global admitted / exact: steady, saturated | whole-Redis outage, admitted / exact: global; "
        "the bursting free key "
        "| added latency p50 / p99 ms (steady, cluster) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        c = phases_by_name(results.get((v, "cluster"), []))
        sa = phases_by_name(results.get((v, "standalone"), []))

        def rl(ph):
            x = shard_metrics(ph)[0] if ph else None
            return "-" if x is None else f"{x:.2f}"

        def hot(ph):
            return pct(shard_metrics(ph)[2]) if ph else "-"

        def ae(ph):
            if not ph:
                return "-"
            g = ph["dims"]["global"]
            return f"{g['admitted']} / {g['exact']}"

        out = c.get("all")
        outage = "-"
        if out:
            g = out["dims"]["global"]
            ratio = g["admitted"] / g["exact"] if g["exact"] else 0
            outage = f"{g['admitted']} / {g['exact']} = {ratio:.2f}x"
            b = out.get("burst")
            if b and b["exact"]:
                outage += f"; {b['admitted']} / {b['exact']} = {b['admitted'] / b['exact']:.2f}x"
        cs = c.get("steady")
        lat = (f"{cs['ok_p50_ms'] - direct['ok_p50_ms']:+.2f} / {cs['ok_p99_ms'] - direct['ok_p99_ms']:+.2f}"
               if cs else "-")
        rows.append(
            f"| {v} | {pct(touched(cs))} / {pct(touched(sa.get('steady')))} "
            f"| {pct(touched(c.get('saturated')))} / {pct(touched(sa.get('saturated')))} "
            f"| {hot(cs)} / {hot(c.get('saturated'))} | {rl(cs)} / {rl(sa.get('steady'))} "
            f"| {ae(cs)}, {ae(c.get('saturated'))} | {outage} | {lat} |")
    return rows


def by_command(ph):
    """Calls per answered request of each command, over every master, largest first."""
    answered = ph["ok"] + ph["r429"] + ph["r503"] + ph["other"]
    calls = {}
    for sh in ph.get("shards") or []:
        for k, v in sh["commands"].items():
            calls[k] = calls.get(k, 0) + v
    if not answered or not calls:
        return "-"
    top = sorted(calls.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k.upper()} {v / answered:.3f}" for k, v in top if v / answered >= 0.0005)


def fleet_sizes(ph):
    sizes = ph.get("fleet_size") or []
    if not sizes or all(x is None for x in sizes):
        return "-"
    return " ".join("-" if x is None else f"{x:g}" for x in sizes)


def targets(args, results):
    """The issue's targets, as (holds, text), per variant and backend. They are set for
    leases; the variants without them are checked too, to show where they stand."""
    out = []
    for (v, backend), phases in results.items():
        by = phases_by_name(phases)
        for name in ("steady", "saturated"):
            share = touched(by.get(name))
            if share is not None:
                out.append((share <= 0.05, f"{v}, {backend}, {name}: the global key is touched on "
                                           f"{pct(share)} of requests (target <= 5%)"))
        for name in ("steady", "saturated"):
            ph = by.get(name)
            if backend != "cluster" or not ph:
                continue
            hot = shard_metrics(ph)[2]
            if hot is not None:
                bound = 1 / 3 + 0.10
                out.append((hot <= bound, f"{v}, {name}: the hottest shard takes {pct(hot)} of RL "
                                          f"calls (target <= 1/3 + 10 points = {pct(bound)})"))
        for ph in phases:
            if ph["name"].split(" ")[0] not in ("steady", "burst", "saturated"):
                continue
            lease_bound = ph["global_per_s"] * args.lease_bound_ms / 1000
            worst = max(ph["dims"][d]["over"] for d in ("api_key", "ip", "endpoint", "global"))
            local = ph.get("healthz", {}).get("local", 0)
            out.append((worst <= lease_bound,
                        f"{v}, {backend}, {ph['name']}: over-admission at most {worst} in a dimension "
                        f"(bound: one lease lifetime of the global limit, {args.lease_bound_ms} ms "
                        f"= {lease_bound:.0f})" + (f"; {local} decisions were local (breaker open)"
                                                  if local else "")))
        for name in ("steady", "saturated"):
            ph = by.get(name)
            if not ph:
                continue
            budget = ph["global_per_s"] * ph["duration_s"]
            under = ph["dims"]["global"]["under"]
            out.append((under <= 0.10 * budget,
                        f"{v}, {backend}, {name}: global under-admission {under} = "
                        f"{pct(under / budget if budget else None)} of the global limit over the "
                        "phase (target <= 10%)"))
        outage = by.get("all")
        if outage:
            dims = {d: outage["dims"][d] for d in ("api_key", "ip", "endpoint", "global")
                    if outage["dims"][d]["binding_keys"]}
            worst = max((max(x["binding_ratio"], x["max_key_ratio"]) for x in dims.values()), default=0)
            out.append((worst <= 1.5, f"{v}: whole-Redis outage, fleet-wide admitted / exact budget "
                                      "on the keys the limit bound (all of them / the worst key): "
                        + ", ".join(f"{d} {x['binding_ratio']:.2f}x / {x['max_key_ratio']:.2f}x"
                                    for d, x in dims.items()) + " (target <= 1.5x)"))
    return out


def report(args, variants, results, direct, version, elapsed, load0, load1):
    a = args
    L = [
        "# A fleet of gateways on Redis Cluster (generated by `make fleet`)",
        "",
        f"Run: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {platform.machine()}, {os.cpu_count()} CPUs "
        f"shared with other work (load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end), "
        f"{version.split(' sha=')[0]}, {elapsed:.0f} s in all. Absolute requests/s and latencies "
        "depend on that machine; the ratios (calls per request, admitted versus the exact budget) "
        "do not.",
        "",
        f"Setup: a Redis Cluster of 3 masters with one replica each and a standalone server, the "
        f"module loaded, AOF fsync everysec, cluster-node-timeout 1 s; {a.gateways} `rl-gateway` "
        f"processes in front of a small upstream (`rl-loadgen upstream`); limits (1 s windows): "
        f"tiers free 16, pro 64, enterprise 256 per API key (token bucket), 64 per client IP, 64 per "
        f"key and endpoint, {a.global_limit} global (sliding windows). Load (`rl-loadgen run`): "
        f"paced, spread uniformly at random over the gateways; {a.keys} API keys ranked by "
        f"Zipf (s = 1; ranks 0, 10, 20... enterprise, 1-3, 11-13... pro, the rest free), "
        f"{a.ips} client IPs (Zipf, s = 0.8, in X-Forwarded-For), three endpoints (60/30/10%).",
        "",
        f"Phases ({a.phase_s:g} s each unless said): a {a.warmup_s:g} s warm-up, then **steady**: "
        f"{a.steady_rate:g} requests/s offered, under the global limit once the other "
        f"dimensions have refused their share; **burst**: the same plus key {a.burst_key} at "
        f"{a.burst_x:g}x its share; **saturated**: {a.rate:g} requests/s, over the global limit "
        f"(the rate of every later phase); **failover**: the master owning the global key killed "
        f"{a.kill_after_s:g} s into {a.failover_s:g} s (restarted after the phase, it rejoins as a "
        f"replica); **all Redis killed**: every cluster node killed for {a.outage_s:g} s, key "
        f"{a.outage_burst_key} (free tier) bursting at {a.burst_x:g}x its share meanwhile; "
        "**recovery**: every node restarted 0.5 s in. On the standalone server: steady and "
        "saturated.",
        "",
        "Scale: the design's limits are per minute; here every window is 1 s so that a phase "
        "spans several windows, and rates are what two shared cores carry. The fleet's leases "
        "are capped at `max_percent` of the limit (default 10%, split over the live fleet): at "
        "the design's 100000/min global that is 10000 units, far more than the 200 ms of demand "
        f"a lease is sized to, so the cap never binds; at this run's {a.global_limit}/s it is "
        f"{a.global_limit // 10} units, {a.global_limit // 10 // a.gateways} per gateway, below "
        f"200 ms of one gateway's steady demand ({a.steady_rate / a.gateways * 0.2:.0f} units). "
        "**fleet** runs the defaults as they are; **fleet-cap25** raises the cap to 25% so that "
        "leases are sized by demand, as at the design's scale.",
        "",
        "Variants: " + "; ".join(f"**{v}**: {VARIANTS[v]['desc']}" for v in variants) + ".",
        "",
        "## Summary",
        "",
        *summary(variants, results, direct),
        "",
        "## Requests and latency",
        "",
        f"Direct to the upstream (no gateway), {direct['offered']} requests: p50 "
        f"{direct['ok_p50_ms']:.2f} ms, p99 {direct['ok_p99_ms']:.2f} ms. *added p50/p99*: the "
        "gateway's 2xx latency minus that.",
        "",
        "| variant | backend | phase | offered/s | answered/s | 2xx/s | 429 (api_key/ip/endpoint/global) "
        "| errors + not sent | 2xx p50 ms | 2xx p99 ms | added p50/p99 ms | local decisions "
        "| fleet size seen at the end |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|---|",
    ]
    for (v, backend), phases in results.items():
        for ph in phases:
            d = ph["duration_s"] or 1
            answered = ph["ok"] + ph["r429"] + ph["r503"] + ph["other"]
            rb = ph["refused_by"]
            L.append(
                f"| {v} | {backend} | {ph['name']} | {ph['offered'] / d:.0f} | {answered / d:.0f} "
                f"| {ph['ok'] / d:.0f} | {ph['r429']} ({rb['api_key']}/{rb['ip']}/{rb['endpoint']}/{rb['global']}) "
                f"| {ph['errors']} + {ph['not_sent']} | {ph['ok_p50_ms']:.2f} | {ph['ok_p99_ms']:.2f} "
                f"| {ph['ok_p50_ms'] - direct['ok_p50_ms']:+.2f} / {ph['ok_p99_ms'] - direct['ok_p99_ms']:+.2f} "
                f"| {ph.get('healthz', {}).get('local', '-')} | {fleet_sizes(ph)} |")
    L += [
        "",
        "## Redis calls (steady state)",
        "",
        "Per answered request: RL.* calls and every gateway command (INFO commandstats of every "
        "master, the phase's delta), commands naming the global key (MONITOR on its owner for the "
        "whole phase), and the hottest master's share of all RL calls (ideal: 1/3 = 33%).",
        "",
        "| variant | backend | RL calls/request | all calls/request | global key/request | hottest shard "
        "| per request, by command | fleet size seen by each gateway |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for (v, backend), phases in results.items():
        for ph in phases:
            if "monitor" not in ph and not ph["name"].startswith("burst"):
                continue
            rl, total, hot = shard_metrics(ph)
            answered = ph["ok"] + ph["r429"] + ph["r503"] + ph["other"]
            g = ph.get("monitor", {}).get("global")
            L.append(f"| {v} | {backend} ({ph['name']}) | {'-' if rl is None else f'{rl:.2f}'} "
                     f"| {'-' if total is None else f'{total:.2f}'} "
                     f"| {'-' if g is None or not answered else f'{g / answered:.3f}'} "
                     f"| {pct(hot) if backend == 'cluster' else '-'} | {by_command(ph)} "
                     f"| {fleet_sizes(ph)} |")
    lease_rows = []
    for (v, backend), phases in results.items():
        for ph in phases:
            le = ph.get("lease") or {}
            if not le.get("takes") and not le.get("hits"):
                continue
            answered = ph["ok"] + ph["r429"] + ph["r503"] + ph["other"]
            lease_rows.append(
                f"| {v} | {backend} | {ph['name']} | {le['takes']:.0f} ({le['takes'] / max(answered, 1):.3f}/request) "
                f"| {le['units_granted'] / max(le['takes'], 1):.1f} | {le['hits']:.0f} "
                f"| {le['refunds']:.0f} | {le['units_refunded']:.0f} | {le['units_dropped']:.0f} |")
    if lease_rows:
        L += [
            "",
            "## Leases",
            "",
            "The gateways' lease counters (`/metrics`, summed over the fleet, the phase's delta): "
            "batches taken from Redis (`COST n UPTO`), units per batch, requests served from a "
            "lease without a call, refunds sent and units given back, unspent units dropped "
            "(a refund that failed).",
            "",
            "| variant | backend | phase | takes | units per take | served from a lease "
            "| refunds | units refunded | units dropped |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|",
            *lease_rows,
        ]
    L += [
        "",
        "## Admitted versus the exact budget",
        "",
        "Method (`rl-loadgen analyze`): every request is replayed, in send order at its send time "
        "(Unix time, so window edges fall where the server's do), through the core's own "
        "algorithms (the code the module runs), one limiter per key at the whole configured "
        "limit, as if one Redis had decided for the whole fleet and admitted whenever the limit "
        "allowed. For a dimension, the requests that reached it are those the fleet admitted "
        "and those it refused naming that dimension (a request refused by another dimension "
        "took nothing from it). *exact*: how many of them the reference admits, the "
        "dimension's budget for that traffic. Per key, *over* = admitted - exact and *under* = "
        "exact - admitted when positive, summed over the keys (counts, not request-by-request "
        "verdicts: which of two requests a millisecond apart gets a saturated limiter's last "
        "unit depends on when the server decided). State carries from phase to phase. "
        "*binding keys ratio*: on the keys where the reference refused something, admitted / "
        "exact (1.00 = exactly the limit; G gateways each falling back on the whole limit can "
        "reach G if the traffic offers it). Global under-admission is also given as a share of "
        "the global limit over the phase (limit/s x phase seconds). Which dimension a refusal "
        "names is the gateway's choice: once the global key is in a gateway's deny cache, its "
        "refusals name the global dimension without asking Redis about the others, so the "
        "per-key dimensions are reached mostly by admitted requests.",
        "",
        "| variant | backend | phase | admitted | api_key exact / over / under | ip | endpoint "
        "| global exact / over / under | global under, % of limit | binding keys ratio (api_key / ip / endpoint / global) |",
        "|---|---|---|---:|---|---|---|---|---:|---|",
    ]
    for (v, backend), phases in results.items():
        for ph in phases:
            dm = ph["dims"]

            def eou(d):
                x = dm[d]
                return f"{x['exact']} / {x['over']} / {x['under']}"

            g = dm["global"]
            budget = ph["global_per_s"] * ph["duration_s"]
            ratios = " / ".join(f"{dm[d]['binding_ratio']:.2f}" if dm[d]["binding_keys"] else "-"
                                for d in ("api_key", "ip", "endpoint", "global"))
            L.append(f"| {v} | {backend} | {ph['name']} | {ph['ok']} | {eou('api_key')} | {eou('ip')} "
                     f"| {eou('endpoint')} | {eou('global')} | {pct(g['under'] / budget if budget else None)} "
                     f"| {ratios} |")
    L += ["", "The bursting keys (the API-key dimension: sent, admitted, exact budget):", ""]
    for (v, backend), phases in results.items():
        for ph in phases:
            if ph.get("burst"):
                b = ph["burst"]
                L.append(f"- {v}, {backend}, {ph['name']}: key {b['key']} ({b['tier']}) sent "
                         f"{b['sent']}, admitted {b['admitted']}, exact {b['exact']}.")
    L += ["", "## Targets", ""]
    L += [f"- {'PASS' if ok else '**FAIL**'} {text}" for ok, text in targets(args, results)]
    L += ["", "## Failover and recovery", ""]
    for (v, backend), phases in results.items():
        for ph in phases:
            if "failover_s" in ph:
                L.append(f"- {v}: the global key's master was killed {a.kill_after_s:g} s into "
                         f"the phase; its replica served the slot {f1(ph['failover_s'])} s later.")
            if "cluster_ok_s" in ph:
                L.append(f"- {v}: after the restart of every node the cluster was ok "
                         f"{f1(ph['cluster_ok_s'])} s into the recovery phase.")
    L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    main()
