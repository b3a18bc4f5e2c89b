"""The report of make fleet (scripts/fleet.py): benches/FLEET.md from the measured phases,
with the targets each variant is held to (over-admission, calls per request, shard share)."""

import os
import platform
import time

from fleet_variants import VARIANTS

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
