"""The Redis side of make fleet (scripts/fleet.py): the cluster's nodes (started, killed,
formed into a cluster), who owns a key, tiers, command statistics, gateway metrics, and a
MONITOR that counts the commands naming one key."""

import http.client
import os
import signal
import subprocess
import threading
import time

import ports
import procs
import resp

# Commands that are not the gateways' (this script's own INFO, MONITOR...).
NOT_GATEWAY = {"info", "monitor", "ping", "cluster", "command", "client", "hello", "config",
               "select", "readonly", "auth", "flushall", "hset", "debug", "replconf", "psync",
               "sync"}

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
        try:
            procs.wait_for_ping(self.proc, self.port, logpath, log_start)
        except RuntimeError:
            self.kill()
            raise

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
