"""The gateway variants make fleet compares (scripts/fleet.py): their flags, configuration
additions and the description the report gives."""

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
