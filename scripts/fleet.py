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
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import ports
import procs
from fleet_redis import Monitor, Node, commandstats, form_cluster, hset_tiers, metric, owner, role, wait_cluster_ok
from fleet_report import report
from fleet_variants import VARIANTS

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



def log(msg):
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now_us():
    return int(time.time() * 1_000_000)


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


if __name__ == "__main__":
    main()
