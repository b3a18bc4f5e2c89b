"""make bench-gateway: the gateway's speed next to nginx, side by side in one run.

Servers (the static upstream, redis-server with the module, nginx, rl-gateway) share the
CPUs of BG_SERVER_CPUS (default 0); the load (wrk, rl-loadgen rls) runs on BG_LOAD_CPUS
(default 1). Each round runs every scenario once, in turn, for BG_SECONDS with wrk's
BG_CONNECTIONS connections (fixed load: the same connections for all); the table gives the
median round and the range. Writes benches/GATEWAY.md (BG_ONLY=<part of a scenario name>
runs only those scenarios and writes nothing: for profiling; BG_GATEWAY=<path> runs another
build of rl-gateway, to compare two builds in turn). BG_SERVERS: the Redis servers to run
against, one after the other, each with its own table (space-separated paths; default
redis-server; `make bench-gateway` adds Valkey's).

Scenarios: the upstream alone; nginx proxy_pass + limit_req; rl-gateway's proxy (one
limit per client IP); nginx + auth_request to rl-gateway --auth-listen (the shipped
examples/nginx/nginx.conf); ShouldRateLimit calls to --rls-listen (rl-loadgen rls).
Limits are far above the load: every request is counted and allowed.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import ports as port_alloc  # noqa: E402
import procs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECONDS = int(os.environ.get("BG_SECONDS", "5"))
ROUNDS = int(os.environ.get("BG_ROUNDS", "3"))
CONNECTIONS = int(os.environ.get("BG_CONNECTIONS", "32"))
SERVER_CPUS = os.environ.get("BG_SERVER_CPUS", "0")
LOAD_CPUS = os.environ.get("BG_LOAD_CPUS", "1")
SERVERS = os.environ.get("BG_SERVERS", "redis-server").split()
OUT = os.environ.get("BG_OUT", os.path.join(ROOT, "benches", "GATEWAY.md"))
GATEWAY = os.environ.get("BG_GATEWAY", os.path.join(ROOT, "target", "release", "rl-gateway"))
LOADGEN = os.path.join(ROOT, "target", "release", "rl-loadgen")
MODULE = os.path.join(ROOT, "target", "release", "libredis_rl.so")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

NGINX_LIMIT_REQ = """
worker_processes 1;
pid nginx.pid;
error_log stderr error;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
    limit_req_zone $binary_remote_addr zone=per_ip:10m rate=100000000r/m;
    upstream api { server UPSTREAM_ADDR; keepalive 32; }
    server {
        listen LISTEN_ADDR;
        location / {
            limit_req zone=per_ip burst=100000 nodelay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://api;
        }
    }
}
"""

GATEWAY_TOML = 'dimensions = ["ip"]\n[ip]\nlimit = 100000000\n'
RLS_YAML = ("domain: bench\ndescriptors:\n  - key: client\n    rate_limit:\n"
            "      unit: minute\n      requests_per_unit: 1000000000\n")


def pinned(cpus, cmd):
    return ["taskset", "-c", cpus] + cmd


def wait_port(port, proc, what):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode})")
        try:
            import socket
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def nginx(workdir, name, text, listen, **addrs):
    d = os.path.join(workdir, name)
    os.makedirs(d)
    text = text.replace("LISTEN_ADDR", f"127.0.0.1:{listen}")
    for k, v in addrs.items():
        text = text.replace(k, v)
    text = text.replace("error_log stderr warn;", "error_log stderr crit;")
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(text)
    p = subprocess.Popen(pinned(SERVER_CPUS, [NGINX, "-p", d, "-c", conf, "-g", "daemon off;"]),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    wait_port(listen, p, name)
    return p


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def wrk(port, path="/api/items/1"):
    out = subprocess.run(
        pinned(LOAD_CPUS, ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{SECONDS}s", "--latency",
                           f"http://127.0.0.1:{port}{path}"]),
        capture_output=True, text=True, timeout=SECONDS + 30, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        return float(m.group(1)) * UNITS[m.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99),
            "non2xx": int(non2xx.group(1)) if non2xx else 0}


def rls_load(port):
    out = subprocess.run(
        pinned(LOAD_CPUS, [LOADGEN, "rls", "--target", f"127.0.0.1:{port}", "--domain", "bench",
                           "--concurrency", str(CONNECTIONS), "--duration-ms",
                           str(SECONDS * 1000)]),
        capture_output=True, text=True, timeout=SECONDS + 60, check=True).stdout
    r = json.loads(out)
    return {"rps": r["decisions_per_s"], "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
            "non2xx": r["errors"] + r["over_limit"]}


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids):
    """CPU time (user + system) of `pids` and of their children (nginx's workers)."""
    wanted = set(pids)
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        if pid in wanted or ppid in wanted:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    for tool in ("wrk", "taskset", *SERVERS):
        if not shutil.which(tool):
            sys.exit(f"bench-gateway: {tool} not found (make bench-gateway installs wrk)")
    sections = [run(server) for server in SERVERS]
    if not os.environ.get("BG_ONLY"):
        write(sections)


def server_version(server):
    out = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    name = "Valkey" if "valkey" in out.lower() else "Redis"
    m = re.search(r"v=([\d.]+)", out)
    return f"{name} {m.group(1) if m else '?'}"


def run(server):
    """Every scenario against `server`: (server's name and version, results, load averages)."""
    workdir = tempfile.mkdtemp(prefix="rl-bench-gw-")
    started = []
    try:
        ports = {k: port_alloc.listen_port() for k in
                 ("redis", "up", "nginx_lr", "nginx_auth", "gw", "auth", "rls", "admin",
                  "gw2", "rls2", "admin2")}
        redis = subprocess.Popen(pinned(SERVER_CPUS, [
            server, "--port", str(ports["redis"]), "--bind", "127.0.0.1",
            "--loadmodule", MODULE, "--save", "", "--appendonly", "no", "--dir", workdir]),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        started.append(redis)
        wait_port(ports["redis"], redis, server)
        up = subprocess.Popen(pinned(SERVER_CPUS, [
            LOADGEN, "upstream", "--listen", f"127.0.0.1:{ports['up']}", "--max-s", "1800"]))
        started.append(up)
        wait_port(ports["up"], up, "upstream")
        toml = os.path.join(workdir, "gateway.toml")
        with open(toml, "w") as f:
            f.write(GATEWAY_TOML)
        rls_conf = os.path.join(workdir, "rls.yaml")
        with open(rls_conf, "w") as f:
            f.write(RLS_YAML)
        gw = subprocess.Popen(pinned(SERVER_CPUS, [
            GATEWAY, "--listen", f"127.0.0.1:{ports['gw']}", "--redis",
            f"redis://127.0.0.1:{ports['redis']}/", "--config", toml, "--upstream",
            f"http://127.0.0.1:{ports['up']}", "--admin-listen", f"127.0.0.1:{ports['admin']}",
            "--auth-listen", f"127.0.0.1:{ports['auth']}", "--rls-listen",
            f"127.0.0.1:{ports['rls']}", "--rls-config", rls_conf, "--log", "error"]))
        started.append(gw)
        for k in ("gw", "auth", "rls"):
            wait_port(ports[k], gw, "rl-gateway")
        # The same with leases: the client-IP limit and the service's rules served in
        # process from batches taken ahead (nginx's limit_req decides in process too).
        gw2 = subprocess.Popen(pinned(SERVER_CPUS, [
            GATEWAY, "--listen", f"127.0.0.1:{ports['gw2']}", "--redis",
            f"redis://127.0.0.1:{ports['redis']}/", "--config", toml, "--upstream",
            f"http://127.0.0.1:{ports['up']}", "--admin-listen", f"127.0.0.1:{ports['admin2']}",
            "--hot", "ip", "--rls-listen", f"127.0.0.1:{ports['rls2']}", "--rls-config",
            rls_conf, "--rls-hot-rate", "1", "--log", "error"]))
        started.append(gw2)
        for k in ("gw2", "rls2"):
            wait_port(ports[k], gw2, "rl-gateway (leases)")
        up_addr = f"127.0.0.1:{ports['up']}"
        started.append(nginx(workdir, "nginx-limit-req", NGINX_LIMIT_REQ, ports["nginx_lr"],
                             UPSTREAM_ADDR=up_addr))
        with open(os.path.join(ROOT, "examples", "nginx", "nginx.conf")) as f:
            example = f.read()
        started.append(nginx(workdir, "nginx-auth", example, ports["nginx_auth"],
                             UPSTREAM_ADDR=up_addr, AUTH_ADDR=f"127.0.0.1:{ports['auth']}"))

        nginx_lr, nginx_auth = started[-2], started[-1]
        servers = [redis.pid, up.pid, gw.pid, gw2.pid, nginx_lr.pid, nginx_auth.pid]
        scenarios = [
            ("upstream alone", lambda: wrk(ports["up"])),
            ("nginx proxy_pass + limit_req", lambda: wrk(ports["nginx_lr"])),
            ("rl-gateway proxy", lambda: wrk(ports["gw"])),
            ("rl-gateway proxy, --hot ip (leases)", lambda: wrk(ports["gw2"])),
            ("nginx + auth_request to rl-gateway --auth-listen", lambda: wrk(ports["nginx_auth"])),
            ("ShouldRateLimit (rl-loadgen rls)", lambda: rls_load(ports["rls"])),
            ("ShouldRateLimit, --rls-hot-rate 1 (leases)", lambda: rls_load(ports["rls2"])),
        ]
        only = os.environ.get("BG_ONLY")
        if only:  # a profiling aid: only the scenarios whose name contains BG_ONLY
            scenarios = [s for s in scenarios if only in s[0]]
        load_before = loadavg()
        results = {name: [] for name, _ in scenarios}
        for r in range(ROUNDS):
            for name, run in scenarios:
                cpu = cpu_seconds(servers)
                res = run()
                # Every server's CPU time in the run (idle ones cost ~0): the cost of a
                # request whatever share of the CPU the other tenants of a busy machine took.
                res["cpu_us"] = (cpu_seconds(servers) - cpu) * 1e6 / max(res["rps"] * SECONDS, 1)
                results[name].append(res)
                print(f"{os.path.basename(server)} round {r + 1} {name}: {res['rps']:.0f}/s p50 {res['p50_ms']:.2f} ms "
                      f"p99 {res['p99_ms']:.2f} ms, servers' CPU {res['cpu_us']:.1f} us/request", flush=True)
        load_after = loadavg()
        return server_version(server), results, load_before, load_after
    finally:
        for p in reversed(started):
            procs.stop(p)
        shutil.rmtree(workdir, ignore_errors=True)


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def write(sections):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    lines = [
        "# rl-gateway next to nginx (make bench-gateway)",
        "",
        f"Commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; servers on "
        f"CPU {SERVER_CPUS} (upstream, the Redis server with the module, nginx, rl-gateway), "
        f"load on CPU {LOAD_CPUS}; wrk -t1 -c{CONNECTIONS} -d{SECONDS}s, {ROUNDS} rounds, each "
        f"round every scenario in turn; one table per Redis server, run one after the other "
        f"(a shared machine: compare the ratios within a table, not the absolute figures). The "
        f"servers' CPU per request is their CPU time (user + system, nginx's workers included) "
        f"in a run divided by its requests: the cost, whatever share of the CPU other tenants "
        f"took.",
        "",
    ]
    for version, results, load_before, load_after in sections:
        lines += section(version, results, load_before, load_after)
    with open(OUT, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def section(version, results, load_before, load_after):
    base = results["nginx proxy_pass + limit_req"]
    base_rps, base_p99 = median_of(base, "rps"), median_of(base, "p99_ms")
    lines = [
        f"## {version}",
        "",
        f"Load average {load_before} before, {load_after} after.",
        "",
        "| scenario | requests/s (median, range) | p50 ms | p99 ms | requests/s vs nginx + limit_req | p99 vs nginx + limit_req | servers' CPU per request | requests per CPU-second | non-2xx |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        rps = median_of(runs, "rps")
        p99 = median_of(runs, "p99_ms")
        lo, hi = min(r["rps"] for r in runs), max(r["rps"] for r in runs)
        lines.append(
            f"| {name} | {rps:,.0f} ({lo:,.0f}-{hi:,.0f}) | {median_of(runs, 'p50_ms'):.2f} | "
            f"{p99:.2f} | {rps / base_rps:.2f}x | {p99 / base_p99:.2f}x | "
            f"{median_of(runs, 'cpu_us'):.1f} us | {1e6 / median_of(runs, 'cpu_us'):,.0f} | "
            f"{sum(r['non2xx'] for r in runs)} |")
    gw = results["rl-gateway proxy"]
    rls = results["ShouldRateLimit (rl-loadgen rls)"]
    gw_rps, gw_p99 = median_of(gw, "rps"), median_of(gw, "p99_ms")
    rls_rps = median_of(rls, "rps")
    rls_cpu = 1e6 / median_of(rls, "cpu_us")
    gwl = results["rl-gateway proxy, --hot ip (leases)"]
    gwl_rps, gwl_p99 = median_of(gwl, "rps"), median_of(gwl, "p99_ms")
    rlsl = results["ShouldRateLimit, --rls-hot-rate 1 (leases)"]
    rlsl_rps, rlsl_cpu = median_of(rlsl, "rps"), 1e6 / median_of(rlsl, "cpu_us")
    ok = lambda b: "reached" if b else "not reached"  # noqa: E731
    lines += [
        "",
        "Goals:",
        f"- rl-gateway's proxy at least nginx + limit_req's requests/s: {gw_rps / base_rps:.2f}x, "
        f"{ok(gw_rps >= base_rps)}.",
        f"- its p99 at most 2x nginx's: {gw_p99 / base_p99:.2f}x, {ok(gw_p99 <= 2 * base_p99)}.",
        f"- the rate limit service at least 30,000 decisions/s on one core: {rls_rps:,.0f}/s, "
        f"{ok(rls_rps >= 30_000)} (the service shares CPU {SERVER_CPUS} with Redis and the "
        f"machine's other tenants); per CPU-second of rl-gateway and Redis together: "
        f"{rls_cpu:,.0f}, {ok(rls_cpu >= 30_000)}.",
        f"- with leases: the proxy {gwl_rps / base_rps:.2f}x nginx + limit_req's requests/s "
        f"({ok(gwl_rps >= base_rps)}), p99 {gwl_p99 / base_p99:.2f}x "
        f"({ok(gwl_p99 <= 2 * base_p99)}); the service {rlsl_rps:,.0f}/s "
        f"({ok(rlsl_rps >= 30_000)}), {rlsl_cpu:,.0f} per CPU-second "
        f"({ok(rlsl_cpu >= 30_000)}).",
        "",
    ]
    return lines


if __name__ == "__main__":
    main()
