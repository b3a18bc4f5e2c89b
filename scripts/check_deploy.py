"""make lint: the deployment files of deploy/ hold together.

- deploy/systemd/*.service pass `systemd-analyze verify` (no running systemd needed) and
  `systemd-analyze security --offline` stays at or under an exposure of 2.0 ("OK"): the
  hardening (DynamicUser, ProtectSystem, NoNewPrivileges, an empty capability bounding set,
  a system call filter) cannot silently go. rl-gateway is not installed where this runs, so its
  units are verified with their ExecStart pointed at a stand-in executable.
- Every RL_GATEWAY_* variable the units and the Kubernetes manifests set is one rl-gateway
  reads (an `env = "..."` of gateway/src/cli.rs): a renamed flag fails here, not in production.
- deploy/kubernetes: Envoy's rate limit cluster names the rl-gateway Service and its port, that
  port leads to the container's --rls-listen port, and the filter's domain is one the
  ratelimit ConfigMap defines.
- deploy/kubernetes/Dockerfile: its entry point is where rl-gateway is copied, and
  `/bin/ratelimit` (the command Envoy Gateway starts envoyproxy/ratelimit's container with) is
  a symlink to it, so swapping envoyproxy/ratelimit's image needs no other change.

Usage: check_deploy.py (needs systemd-analyze and PyYAML)"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
K8S = ROOT / "deploy" / "kubernetes"
GATEWAY = "/usr/local/bin/rl-gateway"
MAX_EXPOSURE = "20"  # systemd-analyze's --threshold is the exposure level times ten


def systemd_units(errors: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stand_in = Path(tmp) / "rl-gateway"
        stand_in.write_text("#!/bin/sh\nexit 0\n")
        stand_in.chmod(0o755)
        for unit in UNITS:
            copy = Path(tmp) / unit.name
            copy.write_text(unit.read_text().replace(GATEWAY, str(stand_in)))
            for cmd in (["systemd-analyze", "verify", "--man=no", str(copy)],
                        ["systemd-analyze", "security", "--offline=yes", "--no-pager",
                         f"--threshold={MAX_EXPOSURE}", str(copy)]):
                got = subprocess.run(cmd, capture_output=True, text=True)
                if got.returncode != 0:
                    tail = "\n".join((got.stdout + got.stderr).strip().splitlines()[-5:])
                    errors.append(f"{unit.relative_to(ROOT)}: {' '.join(cmd[:2])} failed:\n{tail}")


def gateway_variables(errors: list) -> None:
    known = set(re.findall(r'env = "(RL_GATEWAY_[A-Z0-9_]+)"', (ROOT / "gateway/src/cli.rs").read_text()))
    for path in UNITS + sorted(K8S.glob("*.yaml")):
        for name in sorted(set(re.findall(r"\b(RL_GATEWAY_[A-Z0-9_]+)\b", path.read_text()))):
            if name not in known:
                errors.append(f"{path.relative_to(ROOT)}: rl-gateway reads no variable {name}")


def kubernetes(errors: list) -> None:
    docs = [d for p in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    by_kind: dict = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    envoy = yaml.safe_load(by_kind["ConfigMap"]["envoy-config"]["data"]["envoy.yaml"])
    clusters = {c["name"]: c for c in envoy["static_resources"]["clusters"]}
    address = clusters["rate_limit_service"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    address = address["endpoint"]["address"]["socket_address"]
    service = by_kind["Service"].get(address["address"])
    if service is None:
        errors.append(f"envoy.yaml: the rate limit cluster names Service {address['address']!r}, which is not defined")
        return
    port = next((p for p in service["spec"]["ports"] if p["port"] == address["port_value"]), None)
    if port is None:
        errors.append(f"envoy.yaml: Service {address['address']} has no port {address['port_value']}")
        return
    deployment = next(d for d in by_kind["Deployment"].values()
                      if d["spec"]["template"]["metadata"]["labels"] == service["spec"]["selector"])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    target = named.get(port["targetPort"], port["targetPort"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    listen = env.get("RL_GATEWAY_RLS_LISTEN") or ""
    if not listen.endswith(f":{target}"):
        errors.append(f"rl-gateway-rls.yaml: the Service sends port {address['port_value']} to {target}, "
                      f"but RL_GATEWAY_RLS_LISTEN is {listen!r}")
    domains = set()
    for config in by_kind["ConfigMap"].values():
        for text in (config.get("data") or {}).values():
            loaded = yaml.safe_load(text)
            if isinstance(loaded, dict) and "domain" in loaded and "descriptors" in loaded:
                domains.add(loaded["domain"])
    listeners = envoy["static_resources"]["listeners"]
    filters = [f for listener in listeners for chain in listener["filter_chains"] for hcm in chain["filters"]
               for f in hcm["typed_config"].get("http_filters", []) if f["name"] == "envoy.filters.http.ratelimit"]
    for f in filters:
        if f["typed_config"]["domain"] not in domains:
            errors.append(f"envoy.yaml: domain {f['typed_config']['domain']!r} is in no ratelimit ConfigMap "
                          f"(defined: {sorted(domains)})")
    if not filters:
        errors.append("envoy.yaml: no envoy.filters.http.ratelimit filter")


def dockerfile(errors: list) -> None:
    path = K8S / "Dockerfile"
    text = path.read_text()
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"', text, re.M)
    copied = re.search(r"^COPY rl-gateway (\S+)$", text, re.M)
    link = re.search(r"\bln -sf? (\S+) /bin/ratelimit\b", text)
    where = path.relative_to(ROOT)
    if entry is None or copied is None or entry.group(1) != copied.group(1):
        errors.append(f"{where}: the ENTRYPOINT is not where rl-gateway is copied")
    elif link is None or link.group(1) != entry.group(1):
        errors.append(f"{where}: /bin/ratelimit is not a symlink to {entry.group(1)} "
                      "(Envoy Gateway starts the rate limit container with /bin/ratelimit)")


def main() -> None:
    if shutil.which("systemd-analyze") is None:
        sys.exit("check_deploy: systemd-analyze is missing (Debian package systemd)")
    errors: list = []
    systemd_units(errors)
    gateway_variables(errors)
    kubernetes(errors)
    dockerfile(errors)
    if errors:
        sys.exit("deploy/ does not hold together:\n" + "\n".join(errors))
    print(f"deploy/: {len(UNITS)} systemd units verified and hardened, Kubernetes manifests consistent, "
          "the image's /bin/ratelimit is rl-gateway")


if __name__ == "__main__":
    main()
