"""SVG charts of the measurement reports, for the book (docs/src/charts/). `make bench`,
`make bench-gateway` and `make fleet` run it after writing their report; by hand:
`python3 scripts/charts.py [bench] [gateway] [fleet]` (default: every report present).

- bench: benches/RESULTS.md's targets table -> bench-server-time.svg (server time per call of
  every RL command, SET PXAT, CL.THROTTLE and the Lua script, per server) and
  bench-vs-set.svg (the paired median ratio to SET PXAT's time).
- gateway: benches/GATEWAY.md's throughput tables -> gateway-throughput.svg and
  gateway-latency.svg (one bar per gateway mode).
- fleet: benches/FLEET.md's "Admitted versus the exact budget" table -> fleet-admitted.svg
  (global admissions over the exact budget, per phase and variant, on the cluster).

Reads the Markdown tables the scripts write (by their header cells), so a chart always shows
the report next to it. The standard library only (scripts/svgchart.py)."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from svgchart import bar_chart  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs/src/charts"


def tables(path):
    """Every Markdown table of `path` as (header cells, rows of cells)."""
    found, current = [], None
    for line in path.read_text().splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = (cells, [])
                found.append(current)
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                current[1].append(cells)
        else:
            current = None
    return found


def table_with(path, *headers):
    for head, rows in tables(path):
        if all(any(h in cell for cell in head) for h in headers):
            return head, rows
    raise SystemExit(f"charts: no table with {headers} in {path}")


def number(text):
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?", text or "")
    return float(m.group(0).replace(",", "")) if m else None


def column(head, *words):
    for i, cell in enumerate(head):
        if all(w in cell for w in words):
            return i
    raise SystemExit(f"charts: no column {words} in {head}")


def write(name, svg):
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(svg)
    print(f"charts: wrote {(OUT / name).relative_to(ROOT)}")


def bench():
    path = ROOT / "benches/RESULTS.md"
    head, rows = table_with(path, "usec/call", "vs SET PXAT: time")
    c_server, c_cmd = column(head, "server"), column(head, "command")
    c_us, c_ratio = column(head, "usec/call"), column(head, "vs SET PXAT: time")
    servers = list(dict.fromkeys(r[c_server] for r in rows))
    commands = list(dict.fromkeys(r[c_cmd] for r in rows))
    cell = {(r[c_server], r[c_cmd]): r for r in rows}
    us = [[number(cell[(s, c)][c_us]) if (s, c) in cell else None for c in commands] for s in servers]
    write("bench-server-time.svg", bar_chart(
        "Server time per call (µs, usec_per_call)", commands, servers, us, unit=" µs",
        subtitle="100,000 random keys, 50 clients, pipeline 16; make bench (benches/RESULTS.md)"))
    limiters = [c for c in commands if c.startswith("RL.")]
    ratios = [[number(cell[(s, c)][c_ratio]) if (s, c) in cell else None for c in limiters]
              for s in servers]
    write("bench-vs-set.svg", bar_chart(
        "Server time relative to SET PXAT (median of paired runs)", limiters, servers, ratios,
        unit="x", reference=1.0, reference_label="SET key value PXAT",
        subtitle="below 1: less server time per call than a plain SET with expiry"))


def gateway():
    path = ROOT / "benches/GATEWAY.md"
    if not path.exists():
        print("charts: no benches/GATEWAY.md (make bench-gateway writes it)")
        return
    for head, rows in tables(path):
        lowered = [h.lower() for h in head]
        rate = next((i for i, h in enumerate(lowered) if "req/s" in h or "requests/s" in h), None)
        if rate is None or not rows:
            continue
        names = [" ".join(r[0:1]) for r in rows]
        write("gateway-throughput.svg", bar_chart(
            "Requests per second by mode", names, [head[rate]], [[number(r[rate]) for r in rows]],
            subtitle="rl-gateway next to nginx on the same CPUs; make bench-gateway (benches/GATEWAY.md)"))
        lat = [i for i, h in enumerate(lowered) if re.fullmatch(r"p\d\d ms", h)]
        if lat:
            write("gateway-latency.svg", bar_chart(
                "Latency by mode (ms)", names, [head[i] for i in lat],
                [[number(r[i]) for r in rows] for i in lat], unit=" ms",
                subtitle="make bench-gateway (benches/GATEWAY.md)"))
        return
    print("charts: no throughput table (a req/s column) in benches/GATEWAY.md")


def fleet():
    path = ROOT / "benches/FLEET.md"
    head, rows = table_with(path, "phase", "admitted", "global exact / over / under")
    c_var, c_backend, c_phase = column(head, "variant"), column(head, "backend"), column(head, "phase")
    c_global = column(head, "global exact / over / under")
    rows = [r for r in rows if r[c_backend] == "cluster"]
    variants = list(dict.fromkeys(r[c_var] for r in rows))
    phases = list(dict.fromkeys(r[c_phase] for r in rows))
    ratio = {}
    for r in rows:
        exact, over, under = (float(x) for x in r[c_global].split("/"))
        ratio[(r[c_var], r[c_phase])] = (exact + over - under) / exact if exact else None
    values = [[ratio.get((v, p)) for p in phases] for v in variants]
    write("fleet-admitted.svg", bar_chart(
        "Global admissions over the exact budget, per phase", phases, variants, values,
        unit="x", reference=1.0, reference_label="exact budget",
        subtitle="4 gateways on a 3-master cluster; make fleet (benches/FLEET.md)"))


def main():
    wanted = sys.argv[1:] or ["bench", "gateway", "fleet"]
    for name in wanted:
        {"bench": bench, "gateway": gateway, "fleet": fleet}[name]()


if __name__ == "__main__":
    main()
