"""make test-ops: every metric that deploy/grafana/redis-rl.json and deploy/prometheus/alerts.yml
query is one the gateway or the middleware records (a string literal naming it in gateway/src
or client/src), so no panel or alert watches a metric that /metrics never has. Histograms are
queried through their _bucket, _count and _sum series. The standard library only."""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy/grafana/redis-rl.json"
ALERTS = ROOT / "deploy/prometheus/alerts.yml"
METRIC = re.compile(r"\b(rl_[a-z0-9_]+)")


def recorded():
    names = set()
    for directory in ("gateway/src", "client/src"):
        for path in (ROOT / directory).rglob("*.rs"):
            names.update(re.findall(r'"(rl_[a-z0-9_]+)"', path.read_text()))
    return names


def queried():
    exprs = []
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        exprs += [(f"dashboard panel {panel['title']!r}", t["expr"]) for t in panel["targets"]]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            exprs.append((f"dashboard variable {var['name']}", var["query"]))
    for m in re.finditer(r"- alert: (\w+)\n\s+(?:#.*\n\s+)*expr: (\|\n(?:\s{10,}.*\n)+|.*\n)", ALERTS.read_text()):
        exprs.append((f"alert {m.group(1)}", m.group(2)))
    return exprs


def main():
    have = recorded()
    problems = []
    exprs = queried()
    if not exprs:
        problems.append("no expressions found")
    for where, expr in exprs:
        for name in METRIC.findall(expr):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            if name not in have and base not in have:
                problems.append(f"{where}: {name} is recorded nowhere in gateway/src or client/src")
    alerts = len(re.findall(r"- alert: ", ALERTS.read_text()))
    if alerts != sum(w.startswith("alert ") for w, _ in exprs):
        problems.append("an alert's expr was not found (check_ops.py reads `expr:` right after `- alert:`)")
    for p in problems:
        print(p)
    print(f"check_ops: {len(exprs)} expressions, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
